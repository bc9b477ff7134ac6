"""Preemption on two hosts: SIGTERM reaches the processes at different steps, and all of them stop at one step.

Each case runs two CPU processes joined by `jax.distributed` (tests/train/multihost_run.py):
process 0 sends itself SIGTERM after step 3 and process 1 after step 5, as a
maintenance event or a launcher signalling each worker on its own would. Both
must save and stop after the same step (a collective save at different steps
hangs), exit cleanly within the timeout, and the resumed run must end with the
parameters and losses of an uninterrupted two-host run, bit for bit.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.train.test_sharding import REPO, _TWO_DEVICES, _run_pair, _two_processes_can_join

NUM_STEPS = 30


def _pair(workdir, env: dict, **variables: str) -> list[dict]:
    """Both processes' JSON lines (process 0 first) after they both exit with status 0."""
    done = _run_pair(["-m", "tests.train.multihost_run", str(workdir)],
                     {**env, **_TWO_DEVICES, "MULTIHOST_NUM_STEPS": str(NUM_STEPS), **variables}, timeout=240)
    runs = []
    for process, (code, out, err) in enumerate(done):
        assert code == 0, f"process {process}: {err[-3000:]}"
        run = json.loads(out.strip().splitlines()[-1])
        assert run["process"] == process and run["processes"] == 2
        run["losses"] = {int(step): loss for step, loss in run["losses"].items()}
        runs.append(run)
    return runs


@pytest.fixture(scope="module")
def two_host_env(compilation_cache):
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": compilation_cache, "PYTHONPATH": str(REPO)}
    env.pop("MULTIHOST_SIGTERM_AFTER", None)
    why_not = _two_processes_can_join(env)
    if why_not:
        pytest.skip(f"JAX cannot run two processes over localhost on this machine: {why_not}")
    return env


@pytest.fixture(scope="module")
def uninterrupted(two_host_env, tmp_path_factory):
    runs = _pair(tmp_path_factory.mktemp("uninterrupted"), two_host_env)
    assert runs[0]["final_step"] == NUM_STEPS and runs[0]["params_sha256"] == runs[1]["params_sha256"]
    return runs[0]


def _preempt_and_resume(workdir, env: dict, uninterrupted: dict) -> int:
    """SIGTERM after step 3 on process 0 and after 5 on process 1; resume; checks; the step both stopped at."""
    first = _pair(workdir, env, MULTIHOST_SIGTERM_AFTER="3,5")
    assert [run["stop_reason"] for run in first] == ["sigterm", "sigterm"]
    stopped = first[0]["final_step"]
    assert first[1]["final_step"] == stopped and 3 <= stopped < NUM_STEPS
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [stopped]  # one checkpoint, written by both hosts at the agreed step
    for run in first:
        assert sorted(run["losses"]) == list(range(1, stopped + 1))

    second = _pair(workdir, env)
    for run in second:
        assert run["start_step"] == stopped and run["final_step"] == NUM_STEPS and run["stop_reason"] is None
        assert sorted(run["losses"]) == list(range(stopped + 1, NUM_STEPS + 1))
        for step, loss in run["losses"].items():
            assert loss == uninterrupted["losses"][step], step  # the same two-host program: bit-identical
        assert run["params_sha256"] == uninterrupted["params_sha256"]
    return stopped


def test_sigterm_at_different_steps_stops_both_hosts_at_the_first_signal_by_the_collective_flag(
        tmp_path, two_host_env, uninterrupted):
    """Without JAX's preemption service the hosts combine their flags after every step: step 3 exactly."""
    env = {**two_host_env, "JAX_ENABLE_PREEMPTION_SERVICE": "false"}
    assert _preempt_and_resume(tmp_path, env, uninterrupted) == 3


def test_sigterm_at_different_steps_stops_both_hosts_at_jax_preemption_sync_point(
        tmp_path, two_host_env, uninterrupted):
    """With JAX's preemption service (the default): the service picks the step, a little after the first notice."""
    env = {**two_host_env, "JAX_ENABLE_PREEMPTION_SERVICE": "true"}
    _preempt_and_resume(tmp_path, env, uninterrupted)
