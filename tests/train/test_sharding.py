"""Logical axes -> mesh axes; the same losses on 1 device, on a 4 x 2 data x model mesh, and over two processes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.train.conftest import TWO_HOST_STEPS
from tests.train.processes import EIGHT_DEVICES, REPO
from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES
from tgjax.train.sharding import logical_to_spec, make_mesh


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


def test_4x2_mesh_gives_the_losses_of_one_device(eight_device_runs):
    """Eight simulated CPU devices (a subprocess, tests/train/conftest.py's, shared with test_fsdp.py)."""
    one, sharded = eight_device_runs["1x1"], eight_device_runs["4x2"]
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
    env = {**os.environ, **EIGHT_DEVICES, **compilation_cache, "PYTHONPATH": str(REPO)}
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


def test_two_processes_over_jax_distributed_give_the_losses_of_one_device(two_host_runs, eight_device_runs):
    """Multi-host on one machine: two processes, `jax.distributed.initialize` over localhost, 2 CPU devices each.

    Each process reads only its half of every batch (the pipeline's host
    sharding), `global_batch` assembles global arrays, and the 2 x 2 mesh spans
    both processes; the losses must be those of one device reading whole
    batches (tests/train/conftest.py's "1x1" run, 5 steps). Then a two-host run
    stopped (after step 4, by SIGTERM) and resumed: both hosts restore their
    shards of the checkpoint and their data position, and the steps after give
    the same losses again. The runs are tests/train/conftest.py's `two_host_runs`
    (test_preemption.py checks how they stopped).
    """
    one = eight_device_runs["1x1"]["losses"]
    workdir, (uninterrupted, stopped, resumed) = two_host_runs
    for run in uninterrupted + stopped + resumed:
        assert run["processes"] == 2 and run["devices"] == 4
    run = uninterrupted[0]
    assert sorted(run["losses"]) == list(range(1, TWO_HOST_STEPS + 1))
    np.testing.assert_allclose([run["losses"][s] for s in range(1, len(one) + 1)], one, rtol=1e-4)
    assert (workdir / "uninterrupted" / "checkpoints" / str(TWO_HOST_STEPS)).is_dir()  # both hosts wrote one

    stop = stopped[0]["final_step"]
    assert sorted(stopped[0]["losses"]) == list(range(1, stop + 1)) and stop < TWO_HOST_STEPS
    second = resumed[0]
    assert second["start_step"] == stop and sorted(second["losses"]) == list(range(stop + 1, TWO_HOST_STEPS + 1))
    for step in second["losses"]:
        assert second["losses"][step] == run["losses"][step], step  # the same two-host program: bit-identical
