"""Logical axes -> mesh axes, and the same losses on 1 device and on a 4 x 2 data x model mesh."""

import json
import os
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
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
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
    assert sharded["specs"]["memory"] == "P(None, 'data')"
