"""Logical axes -> mesh axes; the same losses on 1 device, on a 4 x 2 data x model mesh, and over two processes."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES
from tgjax.train.sharding import logical_to_spec, make_mesh

REPO = Path(__file__).resolve().parents[2]


def test_default_rules_split_heads_mlp_and_vocab_over_model():
    rules = DEFAULT_LOGICAL_AXIS_RULES
    assert logical_to_spec(("embed", "heads", "kv"), rules) == P(None, "model", None)  # q, k, v
    assert logical_to_spec(("heads", "kv", "embed"), rules) == P("model", None, None)  # attention output
    assert logical_to_spec(("embed", "mlp"), rules) == P(None, "model")
    assert logical_to_spec(("mlp", "embed"), rules) == P("model", None)
    assert logical_to_spec(("vocab", "embed"), rules) == P("model", None)
    assert logical_to_spec(("embed",), rules) == P(None)
    assert logical_to_spec(None, rules) == P()


def test_a_mesh_axis_is_used_once_per_parameter():
    rules = (("mlp", "model"), ("heads", "model"), ("embed", "data"), ("kv", None))
    assert logical_to_spec(("mlp", "heads"), rules) == P("model", None)
    # A later rule for the same name is the fallback when the first one's axis is taken.
    rules = (("mlp", "model"), ("heads", "model"), ("heads", "data"))
    assert logical_to_spec(("mlp", "heads"), rules) == P("model", "data")


def test_mesh_sizes():
    mesh = make_mesh(-1, 1)
    assert mesh.axis_names == ("data", "model") and mesh.devices.size >= 1
    with pytest.raises(ValueError, match="at most one of mesh.data and mesh.model may be -1"):
        make_mesh(-1, -1)
    with pytest.raises(ValueError, match=r"data=3 x model=1 = 3, but there are"):
        make_mesh(3, 1)


def test_4x2_mesh_gives_the_losses_of_one_device(tmp_path, compilation_cache):
    """Eight simulated CPU devices (a subprocess: XLA_FLAGS must be set before JAX starts)."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_COMPILATION_CACHE_DIR": compilation_cache, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.train.multidevice_run", str(tmp_path), "1x1", "4x2"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    one, sharded = runs["1x1"], runs["4x2"]
    assert sharded["devices"] == 8
    assert len(one["losses"]) == len(sharded["losses"]) == 5
    np.testing.assert_allclose(sharded["losses"], one["losses"], rtol=1e-4)
    assert one["losses"][-1] < one["losses"][0]  # it trains
    # The parameters really are split over "model" and the memory rows over "data".
    assert sharded["specs"]["w_in"] == "P(None, 'model')"
    assert sharded["specs"]["query"] == "P(None, 'model', None)"
    assert sharded["specs"]["w_in_mu"] == "P(None, 'model')"  # Adam's moment follows its parameter
    assert sharded["specs"]["memory"] == "P(None, 'data')"


@pytest.mark.slow  # ~4 min under load (compiling scan + remat twice); the specs are also unit-tested in
# tests/models/test_accelerator_knobs.py
def test_4x2_mesh_shards_scanned_layers_as_the_list(tmp_path, compilation_cache):
    """model.scan_layers + model.remat: the stacked `[K, ...]` parameters (and their Adam moments) are split over
    "model" on the same axes as the list's, the stacked axis replicated; the losses are the one-device ones."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_COMPILATION_CACHE_DIR": compilation_cache, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.train.multidevice_run", str(tmp_path), "1x1:scan", "4x2:scan"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    one, sharded = runs["1x1:scan"], runs["4x2:scan"]
    np.testing.assert_allclose(sharded["losses"], one["losses"], rtol=1e-4)
    assert one["losses"][-1] < one["losses"][0]
    assert sharded["specs"]["w_in"] == "P(None, None, 'model')"
    assert sharded["specs"]["query"] == "P(None, None, 'model', None)"
    assert sharded["specs"]["w_in_mu"] == "P(None, None, 'model')"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


_PROBE = """
import sys
import jax
jax.distributed.initialize(coordinator_address="localhost:" + sys.argv[-2], num_processes=2,
                           process_id=int(sys.argv[-1]), initialization_timeout=60)
assert jax.device_count() == 2 * jax.local_device_count()
"""


_TWO_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def _run_pair(args: list[str], env: dict, timeout: float) -> list[tuple[int, str, str]]:
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


def _two_processes_can_join(env: dict) -> str | None:
    """None if two JAX processes can join over localhost here; else why not (the sandbox, not tgjax)."""
    try:
        done = _run_pair(["-c", _PROBE], {**env, **_TWO_DEVICES}, timeout=120)
    except subprocess.TimeoutExpired:
        return "two processes did not join within 120 s"
    failed = [err for code, _, err in done if code != 0]
    return failed[0].strip().splitlines()[-1] if failed else None


def _run_two_hosts(workdir: Path, env: dict, *extra: str) -> dict:
    """Both processes of a two-host run (tests/train/multihost_run.py); process 0's JSON line."""
    done = _run_pair(["-m", "tests.train.multihost_run", str(workdir), *extra], {**env, **_TWO_DEVICES}, timeout=300)
    for code, _, err in done:
        assert code == 0, err[-3000:]
    run = json.loads(done[0][1].strip().splitlines()[-1])
    assert run["processes"] == 2 and run["devices"] == 4
    run["losses"] = {int(step): loss for step, loss in run["losses"].items()}
    return run


def test_two_processes_over_jax_distributed_give_the_losses_of_one_device(tmp_path, compilation_cache):
    """Multi-host on one machine: two processes, `jax.distributed.initialize` over localhost, 2 CPU devices each.

    Each process reads only its half of every batch (the pipeline's host
    sharding), `global_batch` assembles global arrays, and the 2 x 2 mesh spans
    both processes; the losses must be those of one device reading whole
    batches. Then a two-host run stopped after step 3 and resumed: both hosts
    restore their shards of the checkpoint and their data position, and steps
    4-5 give the same losses again.
    """
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": compilation_cache, "PYTHONPATH": str(REPO)}
    why_not = _two_processes_can_join(env)
    if why_not:
        pytest.skip(f"JAX cannot run two processes over localhost on this machine: {why_not}")
    single = subprocess.run([sys.executable, "-m", "tests.train.multidevice_run", str(tmp_path / "one"), "1x1"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    one = dict(enumerate(json.loads(single.stdout.strip().splitlines()[-1])["1x1"]["losses"], start=1))

    run = _run_two_hosts(tmp_path / "two", env)
    assert sorted(run["losses"]) == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([run["losses"][s] for s in range(1, 6)], [one[s] for s in range(1, 6)], rtol=1e-4)
    assert (tmp_path / "two" / "checkpoints" / "5").is_dir()  # both hosts wrote one checkpoint

    first = _run_two_hosts(tmp_path / "resumed", env, "3")
    second = _run_two_hosts(tmp_path / "resumed", env)
    assert sorted(first["losses"]) == [1, 2, 3]
    assert second["start_step"] == 3 and sorted(second["losses"]) == [4, 5]
    for step in (4, 5):
        assert second["losses"][step] == run["losses"][step], step  # the same two-host program: bit-identical
