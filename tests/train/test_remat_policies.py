"""`model.remat` names a rematerialisation policy (`tgjax.nn.remat`); the old booleans still load.

Oracle: the run without remat ("none"). A policy changes what the backward pass keeps and recomputes, not a
number: the second step's loss, which the first step's gradients decide, is the same for every policy.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from tgjax.models import model_config
from tgjax.models import transformer_lm as tlm
from tgjax.nn.remat import REMAT_POLICIES
from tgjax.train.config import ConfigError, load_config, merge_into_defaults
from tgjax.train.loop import train
from tgjax.train.tasks import make_task

from .helpers import small_config

# One layer (rematerialised like every layer), two steps, no validation: each policy's run compiles its own step.
TWO_STEPS = ("model.num_layers=1", "training.num_steps=2", "evaluation.interval_steps=0", "data.valid_path=",
             "checkpointing.interval_steps=100")


@pytest.fixture(scope="module")
def no_remat_losses(tmp_path_factory) -> dict[int, float]:
    return train(small_config(*TWO_STEPS, "model.remat=none"), tmp_path_factory.mktemp("none"), quiet=True).losses


# In CI the whole-layer policy and one that saves some dots; the rest (each only another name for jax's own
# policy, all of which `test_each_layer_is_rematerialised_with_the_named_policy` sees applied) with -m slow.
IN_CI = ("full", "dots_saveable")


@pytest.mark.parametrize("name", [name if name in IN_CI else pytest.param(name, marks=pytest.mark.slow)
                                  for name in REMAT_POLICIES if name != "none"])
def test_every_policy_trains_to_the_losses_of_no_remat(tmp_path, no_remat_losses, name):
    losses = train(small_config(*TWO_STEPS, f"model.remat={name}"), tmp_path, quiet=True).losses
    assert losses[1] == no_remat_losses[1]  # the forward pass is the same program
    assert losses[2] == pytest.approx(no_remat_losses[2], rel=1e-6, abs=1e-6)


def _remat_policies_in_forward(remat) -> list:
    """The policy of every rematerialised region in the jaxpr of the TG model's forward pass."""
    from tests.models.test_accelerator_knobs import VOCAB, batch_for
    from tests.models.test_transformer_lm import SMALL

    config = model_config("tg", VOCAB, **SMALL, remat=remat)
    # Abstract parameters (nnx.eval_shape): the jaxpr depends on their shapes only, and nothing is initialised.
    graphdef, state = nnx.split(nnx.eval_shape(lambda: tlm.TransformerLM(config, rngs=nnx.Rngs(0))))
    memory = np.zeros((config.num_layers, 3, config.memory_length, config.d_model), np.float32)
    forward = lambda state, batch: nnx.merge(graphdef, state)(batch, memory, deterministic=True)[0]
    closed = jax.make_jaxpr(forward)(state, batch_for("tg", config))

    def equations(jaxpr):
        for equation in jaxpr.eqns:
            yield equation
            for value in equation.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    yield from equations(inner)

    return [e.params["policy"] for e in equations(closed.jaxpr) if e.primitive.name.startswith("remat")]


@pytest.mark.parametrize("remat", [*REMAT_POLICIES, True, False])
def test_each_layer_is_rematerialised_with_the_named_policy(remat):
    name = {True: "full", False: "none"}.get(remat, remat)
    expected = [] if name == "none" else [REMAT_POLICIES[name]] * 2  # two layers
    assert _remat_policies_in_forward(remat) == expected


def test_the_old_booleans_load_as_full_and_none():
    assert merge_into_defaults({"model": {"remat": True}}).model.remat == "full"
    assert merge_into_defaults({"model": {"remat": False}}).model.remat == "none"
    assert small_config("model.remat=true").model.remat == "full"
    assert small_config("model.remat=false").model.remat == "none"
    assert load_config("configs/pushdown_tiny.py", ["model.remat=true"]).model.remat == "full"


@pytest.mark.parametrize("config", ["tiny", "pushdown_tiny"])
def test_an_unknown_policy_is_refused_in_one_line_listing_the_names(config):
    loaded = load_config(config, ["model.remat=dots"])
    with pytest.raises(ConfigError) as caught:
        make_task(loaded).validate_config(loaded)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("model.remat='dots': unknown remat policy; expected one of ")
    assert all(name in message for name in REMAT_POLICIES)
