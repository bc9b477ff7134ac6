"""count_parameters on a hand-counted module, built and abstract (the 252M TG model: test_transformer_lm)."""

import jax.numpy as jnp
from flax import nnx

from tgjax.models import count_parameters


class TwoLayers(nnx.Module):
    """Linear(3 -> 4) + LayerNorm(4) + BatchNorm(4): 12 + 4 weights/biases, 4 + 4 scale/bias, 4 + 4 BN params;
    BatchNorm's running mean and variance (8 numbers) are statistics, not parameters."""

    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.norm = nnx.LayerNorm(4, rngs=rngs)
        self.batch_norm = nnx.BatchNorm(4, rngs=rngs)
        self.counter = nnx.Variable(jnp.zeros((5,)))


def test_counts_parameters_only_by_hand():
    assert count_parameters(TwoLayers(nnx.Rngs(0))) == 12 + 4 + 4 + 4 + 4 + 4


def test_a_constructor_is_built_abstractly_and_counts_the_same():
    assert count_parameters(lambda: TwoLayers(nnx.Rngs(0))) == 32
