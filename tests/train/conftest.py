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

from tests.train.processes import EIGHT_DEVICES, REPO, two_processes_can_join

# tests/train/multidevice_run.py's layouts that test_sharding.py and test_fsdp.py compare: one device; the 4 x 2
# data x model mesh; fsdp on 8 x 1 with its replicated run (fsdp on 4 x 2: `run_on_eight_devices`, with -m slow).
EIGHT_DEVICE_LAYOUTS = ("1x1", "4x2", "8x1", "8x1:fsdp")


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
