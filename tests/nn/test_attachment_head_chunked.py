"""The attachment head's depth-chunked scores (`depth_chunk=C`, the default) against the table path and Fig. 8.

The chunked path moves MLP_c's second layer onto the query and visits the
depth values C at a time under `jax.checkpoint` (for the head's memory: the table path
keeps `[B, T, D, key_dim]` for the backward pass). Checked here: the same
logits and gradients as the table path (`depth_chunk=None`) and as the
float64 per-pair oracle of test_attachment_head.py, for random shapes,
parameters (biases away from 0), tapes (entries beyond the table included)
and switches; dropout masks that do not depend on C; and the memory.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nn.randomise import randomise_params
from tests.nn.test_attachment_head import D_MODEL, EMBED, oracle_logits
from tgjax.nn.attachment_head import AttachmentHead


def make(num_depths, key_dim, depth_chunk, seed=0, dropout=0.0, **switches):
    head = AttachmentHead(D_MODEL, EMBED, num_depths=num_depths, depth_dim=3, key_dim=key_dim, dropout=dropout,
                          depth_chunk=depth_chunk, rngs=nnx.Rngs(seed), **switches)
    randomise_params(head, seed + 1, 0.5)  # b_1, b_2 away from 0: the q · b_2 term must be there
    return head


def value_and_grads(head, hidden, nxt, tape, weights, deterministic=True):
    """Logits and the gradients of Σ w · tanh(logits) over the parameters and both inputs.

    Compiled as one program (half the CPU time of running it op by op, each example having shapes of its own),
    one per head config and shapes (`_value_and_grads`' cache: heads of one config share it).
    """
    graphdef, params, rest = nnx.split(head, nnx.Param, ...)
    return _value_and_grads(graphdef, params, rest, hidden, nxt, tape, weights, deterministic)


@functools.partial(jax.jit, static_argnums=(0, 7))
def _value_and_grads(graphdef, params, rest, hidden, nxt, tape, weights, deterministic):
    def loss(params, rest, hidden, nxt, tape):
        logits = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))(
            hidden, nxt, tape, deterministic=deterministic)
        return jnp.sum(weights * jnp.tanh(logits)), logits

    (_, logits), grads = jax.value_and_grad(loss, argnums=(0, 2, 3), has_aux=True)(params, rest, hidden, nxt, tape)
    return logits, grads


# Every branch of the chunked scan at one shape (B = 2, T = 5, key_dim = 7): chunks that leave padding (5 = 2 + 2
# + 1), one chunk past the table (6 > 5: one step), chunks of one depth value (the default); each switch both ways.
# The first two cases share their table head (one compiled program). Random shapes with -m slow.
@pytest.mark.parametrize("num_depths, chunk, self_key_input, relative_positions, scaled, seed", [
    (5, 2, "projection", True, True, 1), (5, 6, "projection", True, True, 2), (4, 1, "query", False, False, 3)])
def test_chunked_path_equals_the_direct_formula(num_depths, chunk, self_key_input, relative_positions, scaled,
                                                seed):
    """In float64, so that 1e-5 measures the formula, not float32's rounding of a reordered sum."""
    check_chunked_path(2, 5, num_depths, 7, chunk, self_key_input, relative_positions, scaled, seed)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)  # each example compiles forward + backward twice, in float64
@given(B=st.integers(1, 2), T=st.integers(1, 6), num_depths=st.integers(1, 5), key_dim=st.sampled_from([4, 7, 12]),
       chunk=st.integers(1, 6), self_key_input=st.sampled_from(["projection", "query"]),
       relative_positions=st.booleans(), scaled=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_chunked_path_equals_the_direct_formula_at_random_shapes(B, T, num_depths, key_dim, chunk, self_key_input,
                                                                 relative_positions, scaled, seed):
    check_chunked_path(B, T, num_depths, key_dim, chunk, self_key_input, relative_positions, scaled, seed)


def check_chunked_path(B, T, num_depths, key_dim, chunk, self_key_input, relative_positions, scaled, seed):
    switches = dict(self_key_input=self_key_input, relative_positions=relative_positions, scaled=scaled)
    rng = np.random.default_rng(seed)
    with jax.enable_x64(True):
        chunked = make(num_depths, key_dim, chunk, seed, **switches)
        table = make(num_depths, key_dim, None, seed, **switches)
        assert chunked.query_proj[...].dtype == jnp.float64
        hidden = jnp.asarray(rng.normal(size=(B, T, D_MODEL)))
        nxt = jnp.asarray(rng.normal(size=(B, T, EMBED)))
        tape = jnp.asarray(rng.integers(0, num_depths + 3, size=(B, T, T)), jnp.int32)  # beyond the table: clipped
        weights = jnp.asarray(rng.normal(size=(B, T, T + 1)))
        got, got_grads = value_and_grads(chunked, hidden, nxt, tape, weights)
        want, want_grads = value_and_grads(table, hidden, nxt, tape, weights)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    # And Fig. 8 pair by pair (the causal slots, where the oracle defines them).
    oracle = oracle_logits(chunked, np.asarray(hidden), np.asarray(nxt), np.asarray(tape))
    defined = ~np.isnan(oracle)
    np.testing.assert_allclose(np.asarray(got)[defined], oracle[defined], rtol=1e-5, atol=1e-5)


@functools.partial(nnx.jit, static_argnames="deterministic")
def forward(head, hidden, nxt, tape, deterministic=True):
    """The head's logits as one compiled program (op by op, each operation compiles a program of its own); its
    dropout stream advances as in an eager call."""
    return head(hidden, nxt, tape, deterministic=deterministic)


def dropout_inputs(B=2, T=5, seed=3):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(size=(B, T, D_MODEL)), jnp.float32),
            jnp.asarray(rng.normal(size=(B, T, EMBED)), jnp.float32),
            jnp.asarray(rng.integers(0, 6, size=(B, T, T)), jnp.int32))


def test_dropout_masks_do_not_depend_on_the_chunk_size():
    """One key per call, one mask per depth value drawn from it: C = 1 and 3 (4 = 3 + 1: padded) give the same
    logits and gradients."""
    hidden, nxt, tape = dropout_inputs()
    weights = jnp.ones((2, 5, 6))
    results = [value_and_grads(make(4, 12, chunk, dropout=0.5), hidden, nxt, tape, weights, deterministic=False)
               for chunk in (1, 3)]
    for logits, grads in results[1:]:
        np.testing.assert_allclose(np.asarray(logits), np.asarray(results[0][0]), rtol=1e-5, atol=1e-5)
        for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(results[0][1]), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    deterministic = forward(make(4, 12, 1, dropout=0.5), hidden, nxt, tape)
    assert not np.allclose(np.asarray(results[0][0]), np.asarray(deterministic))
    # and a deterministic call drops nothing: it is the head without dropout (the same parameters)
    np.testing.assert_array_equal(np.asarray(deterministic), np.asarray(forward(make(4, 12, 1), hidden, nxt, tape)))


def test_dropout_is_mlp_c_hidden_dropout_with_per_depth_masks():
    """By hand: MLP_c's hidden layer for every (j, e), masked by bernoulli(fold_in(key, e)) / keep, then q · k~."""
    hidden, nxt, tape = dropout_inputs()
    num_depths, kd, rate = 4, 12, 0.5
    head = make(num_depths, kd, 2, dropout=rate)
    twin = nnx.clone(head)  # the same dropout streams, to replay the draws
    got = np.asarray(forward(head, hidden, nxt, tape, deterministic=False))
    projected_q = hidden @ twin.query_proj[...]
    query = twin.query_mlp(jnp.concatenate([projected_q, nxt], -1), False)
    mlp = twin.key_depth_mlp
    key = mlp.dropout.rngs()
    pre = ((hidden @ twin.key_proj[...]) @ mlp.w1[...][:kd])[:, :, None] + (
        twin.depth_embedding[...] @ mlp.w1[...][kd:] + mlp.b1[...])  # [B, T, D, kd]
    masks = jnp.stack([jax.random.bernoulli(jax.random.fold_in(key, e), 1 - rate, pre.shape[:2] + (kd,))
                       for e in range(num_depths)], axis=2)
    depth_keys = jnp.where(masks, jax.nn.relu(pre) / (1 - rate), 0.0) @ mlp.w2[...] + mlp.b2[...]
    by_depth = jnp.einsum("bik,bjek->bije", query, depth_keys)
    want = jnp.take_along_axis(by_depth, jnp.clip(tape, 0, num_depths - 1)[..., None], axis=-1)[..., 0]
    T = tape.shape[1]
    token_slots = ~np.eye(T, dtype=bool, k=1)  # slot i + 1 of row i is the shift score
    np.testing.assert_allclose(got[:, :, :T][:, token_slots], (np.asarray(want) / np.sqrt(kd))[:, token_slots],
                               rtol=1e-5, atol=1e-5)


def compiled_temporaries(num_depths, depth_chunk, B=2, T=32, key_dim=32):
    head = AttachmentHead(16, 16, num_depths=num_depths, depth_dim=8, key_dim=key_dim, depth_chunk=depth_chunk,
                          rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(head, nnx.Param, ...)

    def loss(params, hidden, nxt, tape):
        return jnp.sum(jnp.tanh(nnx.merge(graphdef, params, rest)(hidden, nxt, tape)))

    def spec(shape, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(
        params, spec((B, T, 16)), spec((B, T, 16)), spec((B, T, T), jnp.int32)).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_the_backward_pass_does_not_keep_a_depth_axis():
    """Compiled forward + backward: the chunked head's temporaries are a fraction of the table's, and barely grow
    with the depth table (the table's grow with it: `[B, T, D, key_dim]` kept for the backward pass)."""
    table = compiled_temporaries(20, None)
    chunked, chunked_deeper = compiled_temporaries(20, 1), compiled_temporaries(40, 1)
    assert chunked < table / 3, (chunked, table)
    assert chunked_deeper < 1.25 * chunked, (chunked, chunked_deeper)


def test_depth_chunk_must_be_positive():
    with pytest.raises(ValueError, match="depth_chunk"):
        make(4, 12, 0)
