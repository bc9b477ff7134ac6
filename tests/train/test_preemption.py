"""Preemption on two hosts: SIGTERM reaches the processes at different steps, and all of them stop at one step.

Two CPU processes joined by `jax.distributed` (tests/train/multihost_run.py):
process 0 sends itself SIGTERM after step 3 and process 1 after step 5, as a
maintenance event or a launcher signalling each worker on its own would. Both
must save and stop after the same step (a collective save at different steps
hangs), exit cleanly within the timeout, and the resumed run must end with the
parameters and losses of an uninterrupted two-host run, bit for bit.
"""

import pytest

from tests.train.conftest import TWO_HOST_STEPS, run_on_two_hosts


def _check_uninterrupted(reference: list[dict], num_steps: int) -> dict:
    for run in reference:
        assert run["final_step"] == num_steps and run["stop_reason"] is None
    assert reference[0]["params_sha256"] == reference[1]["params_sha256"]  # both hosts gathered the same
    return reference[0]


def _check_preempted(preempted: list[dict], workdir, num_steps: int) -> int:
    """Both hosts stopped by SIGTERM after the same step, with one checkpoint of it; that step."""
    assert [run["stop_reason"] for run in preempted] == ["sigterm", "sigterm"]
    stopped = preempted[0]["final_step"]
    assert preempted[1]["final_step"] == stopped and 3 <= stopped < num_steps
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert [step for step in saved if step < num_steps] == [stopped]  # by both hosts, at the agreed step
    for run in preempted:
        assert sorted(run["losses"]) == list(range(1, stopped + 1))
    return stopped


def _check_resumed(resumed: list[dict], stopped: int, uninterrupted: dict, num_steps: int) -> None:
    for run in resumed:
        assert run["start_step"] == stopped and run["final_step"] == num_steps and run["stop_reason"] is None
        assert sorted(run["losses"]) == list(range(stopped + 1, num_steps + 1))
        for step, loss in run["losses"].items():
            assert loss == uninterrupted["losses"][step], step  # the same two-host program: bit-identical
        assert run["params_sha256"] == uninterrupted["params_sha256"]


def test_sigterm_at_different_steps_stops_both_hosts_after_the_first_signal_by_the_collective_flag(two_host_runs):
    """Without JAX's preemption service the hosts combine their flags every K steps
    (checkpointing.preemption_check_steps=2 here): signalled after steps 3 and 5, both stop after step 4,
    the first check after the first signal.

    One pair of processes does the three runs (uninterrupted, preempted, resumed) to start JAX once
    (tests/train/conftest.py's `two_host_runs`, which test_sharding.py reads too).
    """
    workdir, (reference, preempted, resumed) = two_host_runs
    uninterrupted = _check_uninterrupted(reference, TWO_HOST_STEPS)
    assert _check_preempted(preempted, workdir / "run", TWO_HOST_STEPS) == 4
    _check_resumed(resumed, 4, uninterrupted, TWO_HOST_STEPS)


@pytest.mark.slow
def test_sigterm_at_different_steps_stops_both_hosts_at_jax_preemption_sync_point(tmp_path, two_host_env):
    """With JAX's preemption service (the default on pods): the service picks the step after the first notice.

    The notice reaches the service within about a second, so the stop step varies; the resume is in fresh
    processes (the service agrees on one preemption per process lifetime).
    """
    env = {**two_host_env, "JAX_ENABLE_PREEMPTION_SERVICE": "true"}
    num_steps = 30
    reference, preempted = run_on_two_hosts(tmp_path, env, num_steps, "uninterrupted:;run:3,5")
    uninterrupted = _check_uninterrupted(reference, num_steps)
    stopped = _check_preempted(preempted, tmp_path / "run", num_steps)
    [resumed] = run_on_two_hosts(tmp_path, env, num_steps, "run:")
    _check_resumed(resumed, stopped, uninterrupted, num_steps)
