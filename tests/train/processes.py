"""Trainer tests on several simulated devices or several processes: starting them (tests/train/conftest.py shares
their runs).

    EIGHT_DEVICES, TWO_DEVICES      XLA_FLAGS for a subprocess of 8 / 2 simulated CPU devices (set before JAX starts)
    run_pair(args, env, timeout)    `python ARGS PORT I` for I = 0, 1 at once, joined over a fresh localhost port
    two_processes_can_join(env)     None, or why two JAX processes cannot join over localhost here
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
EIGHT_DEVICES = {"XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=8")}
TWO_DEVICES = {"XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=2")}

_PROBE = """
import sys
import jax
jax.distributed.initialize(coordinator_address="localhost:" + sys.argv[-2], num_processes=2,
                           process_id=int(sys.argv[-1]), initialization_timeout=60)
assert jax.device_count() == 2 * jax.local_device_count()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_pair(args: list[str], env: dict, timeout: float) -> list[tuple[int, str, str]]:
    """`python ARGS PORT I` for I = 0, 1 at once (a fresh localhost port): (returncode, stdout, stderr) each.

    Raises `subprocess.TimeoutExpired` when they do not finish in `timeout` seconds.
    """
    port = str(_free_port())
    processes = [subprocess.Popen([sys.executable, *args, port, str(i)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outputs = [p.communicate(timeout=timeout) for p in processes]
    finally:
        for p in processes:
            p.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


def two_processes_can_join(env: dict) -> str | None:
    """None if two JAX processes can join over localhost here; else why not (the sandbox, not tgjax)."""
    try:
        done = run_pair(["-c", _PROBE], {**env, **TWO_DEVICES}, timeout=120)
    except subprocess.TimeoutExpired:
        return "two processes did not join within 120 s"
    failed = [err for code, _, err in done if code != 0]
    return failed[0].strip().splitlines()[-1] if failed else None
