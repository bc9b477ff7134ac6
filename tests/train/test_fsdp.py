"""`mesh.fsdp`: parameters and optimiser state split over "data" too, with the losses of the replicated run.

Eight simulated CPU devices in a subprocess (tests/train/multidevice_run.py; the run of tests/train/conftest.py's
`eight_device_runs`, shared with test_sharding.py). Oracle: the same mesh without
fsdp (data-parallel, parameters replicated over "data"): the losses must agree to 1e-5, and each device's
bytes of parameters and Adam state must drop to about 1/data of that run's (measured from the arrays' shards;
"about": a bias already split over "model", or of a size "data" does not divide, and the step counts stay
replicated over "data").
"""

import types

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.train.conftest import run_on_eight_devices
from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES, apply_overrides, default_config
from tgjax.train.sharding import config_rules, logical_to_spec, make_mesh, place_free_dimension


def test_fsdp_puts_embed_on_data_ahead_of_the_configured_rules():
    rules = config_rules(apply_overrides(default_config(), ["mesh.fsdp=true"]))
    assert rules[2:] == DEFAULT_LOGICAL_AXIS_RULES
    assert logical_to_spec(("embed", "mlp"), rules) == P("data", "model")
    assert logical_to_spec(("heads", "kv", "embed"), rules) == P("model", None, "data")
    assert logical_to_spec(("vocab", "embed"), rules) == P("model", "data")
    assert config_rules(default_config()) == DEFAULT_LOGICAL_AXIS_RULES


def test_fsdp_places_a_parameter_without_embed_by_its_largest_free_dimension():
    rules = config_rules(apply_overrides(default_config(), ["mesh.fsdp=true"]))
    mesh = make_mesh(1, 1, jax.devices()[:1])
    data4 = types.SimpleNamespace(shape={"data": 4, "model": 2})  # what place_free_dimension reads of a mesh
    assert place_free_dimension(P("model", None), ("mlp", None), (128, 144), data4, rules) == P("model", "data")
    assert place_free_dimension(P(None, None), (None, None), (144, 128), data4, rules) == P("data", None)
    assert place_free_dimension(P(None, None), (None, None), (6, 10), data4, rules) == P(None, None)  # 4 divides none
    assert place_free_dimension(P(None, None), ("layers", None), (8, 3), data4, rules) == P(None, None)
    assert place_free_dimension(P("data", None), ("embed", None), (8, 8), data4, rules) == P("data", None)
    assert place_free_dimension(P(None, None), (None, None), (8, 8), mesh, rules) == P(None, None)  # data = 1
    data8 = types.SimpleNamespace(shape={"data": 8, "model": 1})
    assert place_free_dimension(P("model"), ("vocab",), (96,), data8, rules) == P("data")  # model of size 1: whole


# 4 x 2 (fsdp beside a model split) in CI, from the shared eight-device run; 8 x 1 (fsdp alone, its 8-way split)
# with -m slow: a run of its own.
@pytest.mark.parametrize("layout, data", [("4x2", 4), pytest.param("8x1", 8, marks=pytest.mark.slow)])
def test_fsdp_holds_one_data_th_of_the_state_per_device_with_the_same_losses(request, tmp_path, compilation_cache,
                                                                             layout, data):
    runs = (request.getfixturevalue("eight_device_runs") if layout == "4x2"
            else run_on_eight_devices(tmp_path, [layout, f"{layout}:fsdp"], compilation_cache))
    replicated, sharded = runs[layout], runs[f"{layout}:fsdp"]
    assert sharded["devices"] == 8 and len(sharded["losses"]) == 5
    np.testing.assert_allclose(sharded["losses"], replicated["losses"], rtol=1e-5, atol=1e-5)
    ratio = sharded["device_bytes"] / replicated["device_bytes"]
    assert 1 / data <= ratio < 1.1 / data, (ratio, sharded["device_bytes"], replicated["device_bytes"])
    # "embed" is on "data", the rules' model axes as before; Adam's moment follows its parameter.
    assert sharded["specs"]["w_in"] == "P('data', 'model')"
    assert sharded["specs"]["w_in_mu"] == sharded["specs"]["w_in"]
    assert sharded["specs"]["memory"] == "P(None, 'data')"
