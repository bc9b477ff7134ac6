"""tgjax.models.udgn: the forward pass (tied output, one mask for all layers, padding never read)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.models.udgn import UDGN, UDGNConfig
from tgjax.nn.dgn import dependency_mask

CONFIG = UDGNConfig(vocab_size=13, d_model=8, num_layers=2, num_channels=2, channel_size=4, parser_hidden=6,
                    parser_layers=1, dropout=0.1, attention_dropout=0.1, parser_dropout=0.1)  # 1: compiles faster
TOKENS = jnp.array([[3, 4, 5, 6, 7], [8, 9, 2, 0, 0]])
VALID = jnp.array([[True] * 5, [True] * 3 + [False] * 2])


def test_forward_is_the_layers_composed_by_hand():
    model = UDGN(CONFIG, rngs=nnx.Rngs(0))
    model.output_bias[...] = jnp.arange(13, dtype=jnp.float32) / 10  # so a missing bias shows
    forward = nnx.jit(lambda m, t, v: m(t, v, deterministic=True))
    out = forward(model, TOKENS, VALID)
    assert out.logits.shape == (2, 5, 13) and np.all(np.isfinite(np.asarray(out.logits)))
    # By hand: parser -> mask -> embedding -> each layer with the same mask -> LayerNorm -> tied output.

    @nnx.jit
    def by_hand(model):
        A = dependency_mask(model.parser(TOKENS, VALID, deterministic=True))
        x = model.embedding[...][TOKENS]
        for layer in model.layers:
            x = layer(x, A, VALID, deterministic=True)
        return A, model.norm(x)

    A, h = by_hand(model)
    h = np.asarray(h, np.float64)
    want = h @ np.asarray(model.embedding[...], np.float64).T + np.arange(13) / 10
    np.testing.assert_allclose(np.asarray(out.logits), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.mask), np.asarray(A), atol=1e-6)


def test_padding_content_does_not_change_real_positions():
    model = UDGN(CONFIG, rngs=nnx.Rngs(1))
    forward = nnx.jit(lambda m, t: m(t, VALID, deterministic=True))
    a = np.asarray(forward(model, TOKENS).logits)
    b = np.asarray(forward(model, TOKENS.at[1, 3:].set(jnp.array([11, 12]))).logits)
    np.testing.assert_allclose(a[1, :3], b[1, :3], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)


def test_sentences_of_length_zero_and_one_give_finite_outputs():
    """A one-word sentence has no edge (A = 0: only the 1e-6 floor); an all-padding row stays finite."""
    model = UDGN(CONFIG, rngs=nnx.Rngs(3))
    tokens = jnp.array([[5, 0, 0], [0, 0, 0]])
    valid = jnp.array([[True, False, False], [False, False, False]])
    out = nnx.jit(lambda m: m(tokens, valid, deterministic=True))(model)
    for array in out:
        assert np.all(np.isfinite(np.asarray(array)))
    assert np.asarray(out.head_probs)[0, 0, 0] == 1.0  # its only possible head is itself
    assert np.asarray(out.mask)[0, 0, 0] == 0.0  # entries with padding are never read (keys masked)


def test_detach_parser_stops_the_mlm_gradient_at_the_parser():
    def parser_grad(detach):
        model = UDGN(dataclasses_replace(CONFIG, detach_parser=detach), rngs=nnx.Rngs(2))
        grads = nnx.jit(nnx.grad(lambda m: jnp.sum(m(TOKENS, VALID, deterministic=True).logits ** 2)))(model)
        return np.abs(np.asarray(grads["parser"]["w_f"][...])).sum()

    assert parser_grad(False) > 0
    assert parser_grad(True) == 0


def dataclasses_replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)
