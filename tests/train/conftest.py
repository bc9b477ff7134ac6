"""What the trainer tests on several devices and processes share (one run each per session and xdist worker; the
modules that use them are one xdist group, tests/conftest.py's XDIST_GROUPS).

JAX's persistent compilation cache, which these subprocesses are given as `JAX_COMPILATION_CACHE_DIR`, is
tests/conftest.py's `compilation_cache`.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.train.processes import EIGHT_DEVICES, REPO, TWO_DEVICES, run_pair, two_processes_can_join

# tests/train/multidevice_run.py's layouts that test_sharding.py and test_fsdp.py compare: one device; the 4 x 2
# data x model mesh, replicated over "data" and with fsdp (fsdp on 8 x 1: `run_on_eight_devices`, with -m slow).
EIGHT_DEVICE_LAYOUTS = ("1x1", "4x2", "4x2:fsdp")

# tests/train/multihost_run.py's runs that test_sharding.py and test_preemption.py read, one after another in one
# pair of processes (`two_host_runs`): uninterrupted; process 0 sent SIGTERM after step 3 and process 1 after step 5
# (their flags combined every 2 steps, without JAX's preemption service); the resume of that run.
TWO_HOST_STEPS = 6
TWO_HOST_RUNS = "uninterrupted:;run:3,5;run:"


def run_on_eight_devices(workdir, layouts, compilation_cache: dict) -> dict:
    """`layouts` trained for 5 steps in one subprocess of eight simulated CPU devices (XLA_FLAGS must be set before
    JAX starts): layout -> {"losses", "specs", "device_bytes", "devices"}."""
    env = {**os.environ, **EIGHT_DEVICES, **compilation_cache, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.train.multidevice_run", str(workdir), *layouts],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def eight_device_runs(tmp_path_factory, compilation_cache) -> dict:
    """EIGHT_DEVICE_LAYOUTS, once per session (`run_on_eight_devices`)."""
    return run_on_eight_devices(tmp_path_factory.mktemp("eight_devices"), EIGHT_DEVICE_LAYOUTS, compilation_cache)


@pytest.fixture(scope="session")
def two_host_env(compilation_cache) -> dict:
    """The environment of two-process runs (tests/train/multihost_run.py); skips when two JAX processes cannot join
    over localhost on this machine."""
    env = {**os.environ, **compilation_cache, "PYTHONPATH": str(REPO)}
    why_not = two_processes_can_join(env)
    if why_not:
        pytest.skip(f"JAX cannot run two processes over localhost on this machine: {why_not}")
    return env


def run_on_two_hosts(workdir, env: dict, num_steps: int, runs: str, check_every: int = 1) -> list[list[dict]]:
    """One pair of processes (tests/train/multihost_run.py) doing `runs` (MULTIHOST_RUNS) of `num_steps` steps,
    combining SIGTERM flags every `check_every` steps (checkpointing.preemption_check_steps); per run, both
    processes' results (process 0 first), each checked to come from its own process of two."""
    done = run_pair(["-m", "tests.train.multihost_run", str(workdir)],
                    {**env, **TWO_DEVICES, "MULTIHOST_NUM_STEPS": str(num_steps), "MULTIHOST_RUNS": runs,
                     "MULTIHOST_PREEMPTION_CHECK_STEPS": str(check_every)},
                    timeout=300)
    per_process = []
    for process, (code, out, err) in enumerate(done):
        assert code == 0, f"process {process}: {err[-3000:]}"
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(lines) == len(runs.split(";"))
        for line in lines:
            assert line["process"] == process and line["processes"] == 2
            line["losses"] = {int(step): loss for step, loss in line["losses"].items()}
        per_process.append(lines)
    return [list(pair) for pair in zip(*per_process)]


@pytest.fixture(scope="session")
def two_host_runs(tmp_path_factory, two_host_env) -> tuple:
    """(workdir, TWO_HOST_RUNS' results: `run_on_two_hosts`), once per session; the runs are in WORKDIR/uninterrupted
    and WORKDIR/run."""
    workdir = tmp_path_factory.mktemp("two_hosts")
    env = {**two_host_env, "JAX_ENABLE_PREEMPTION_SERVICE": "false"}
    return workdir, run_on_two_hosts(workdir, env, TWO_HOST_STEPS, TWO_HOST_RUNS, check_every=2)
