"""Pushdown-LM forward on a small model: shapes, causality, the tape from node spans, the loss by hand, learning."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tgjax.data import dyck
from tgjax.data import pushdown as pd
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig, pushdown_loss
from tgjax.nn.attachment_head import slot_legality

BRACKETINGS = [((0, 1), (2, 3)), (0, (1, 2)), (((0, 1), 2), (3, 4))]

# The forward pass, and the loss with its gradients, as compiled programs (one per model config and batch
# shape; op by op, every op of a new shape compiles anew). The dropout streams advance as in eager calls.
forward = nnx.jit(lambda model, batch: model(batch))
loss_of = jax.jit(pushdown_loss, static_argnums=2)
legal_slots = jax.jit(slot_legality)


@nnx.jit(static_argnames="deterministic")
def value_and_grads(model, batch, deterministic=True):
    def loss_fn(model):
        return pushdown_loss(model(batch, deterministic=deterministic), batch, model.config)[0]

    return nnx.value_and_grad(loss_fn)(model)


def text_batch(seq_len=8, dense=False):
    rng = np.random.default_rng(0)
    sentences = [pd.encode_bracketing(rng.integers(3, 20, size=pd.stt.num_leaves(b)), b, bos_id=1, eos_id=2,
                                      name=f"s{i}") for i, b in enumerate(BRACKETINGS)]
    batch, _ = pd.make_batch(sentences, seq_len, num_depths=4, dense=dense)
    return {k: jnp.asarray(v) for k, v in batch.items()}


def small(**kwargs):
    kwargs = dict(dict(num_depths=4), **kwargs)
    config = PushdownLMConfig(vocab_size=20, d_model=16, num_layers=2, num_heads=2, ffw_hidden_size=32,
                              sequence_length=8, max_relative_position=16, embedding_dropout=0.0,
                              dropout=0.0, **kwargs)
    return config, PushdownLM(config, rngs=nnx.Rngs(0))


def test_forward_shapes_and_dense_tape_agree():
    config, model = small()
    batch = text_batch()
    out = forward(model, batch)
    assert out["lm_logits"].shape == (3, 8, 20) and out["attach_logits"].shape == (3, 8, 9)
    dense = forward(model, text_batch(dense=True))
    np.testing.assert_allclose(np.asarray(out["lm_logits"]), np.asarray(dense["lm_logits"]), rtol=1e-5, atol=1e-5)
    loss, metrics = loss_of(out, batch, config)
    assert np.isfinite(float(loss)) and int(metrics["clipped_depths"]) == 0
    # The loss by hand (NumPy, float64): mean −log p(target) over real positions, plus the attachment term over
    # legal slots.
    lm_logits = np.asarray(out["lm_logits"], np.float64)
    top = lm_logits.max(-1, keepdims=True)
    lm = lm_logits - top - np.log(np.exp(lm_logits - top).sum(-1, keepdims=True))
    w = np.asarray(batch["weights"])
    picked = np.take_along_axis(lm, np.asarray(batch["targets"])[..., None], -1)[..., 0]
    np.testing.assert_allclose(float(metrics["lm_loss"]), -(picked * w).sum() / w.sum(), rtol=1e-5)
    logits = np.asarray(out["attach_logits"], np.float64)
    legal = np.asarray(legal_slots(batch["attach"]))
    total = 0.0
    for b, i in zip(*np.nonzero(np.asarray(batch["attach_weights"]))):
        row = logits[b, i][legal[b, i]]
        total -= logits[b, i, batch["attach_targets"][b, i]] - np.log(np.exp(row - row.max()).sum()) - row.max()
    np.testing.assert_allclose(float(metrics["attach_loss"]), total / np.asarray(batch["attach_weights"]).sum(),
                               rtol=1e-5)


def test_causal_in_tokens_and_tape():
    """Position i sees tokens <= i (and the head token i + 1), tape rows <= i: later changes leave it alone."""
    _, model = small()
    batch = text_batch(dense=True)
    numpy_forward = lambda batch: {k: np.asarray(v) for k, v in forward(model, batch).items()}  # noqa: E731
    base = numpy_forward(batch)  # outputs sliced in NumPy: no eager program per slice
    i = 2
    changed = {k: np.array(v) for k, v in batch.items()}  # edited in NumPy: no eager program per edit
    changed["inputs"][:, i + 1:] = 7
    changed["targets"][:, i + 1:] = 7
    changed["tape"][:, i + 1:, :] = 3
    out = numpy_forward({k: jnp.asarray(v) for k, v in changed.items()})
    np.testing.assert_allclose(np.asarray(out["lm_logits"][:, : i + 1]), np.asarray(base["lm_logits"][:, : i + 1]),
                               rtol=1e-5, atol=1e-5)
    causal = np.tril(np.ones((i + 1, i + 2), bool), k=1)  # slot c exists at row r iff c <= r + 1
    np.testing.assert_allclose(np.asarray(out["attach_logits"][:, : i + 1, : i + 2])[:, causal],
                               np.asarray(base["attach_logits"][:, : i + 1, : i + 2])[:, causal], rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.asarray(out["lm_logits"][:, i + 1]), np.asarray(base["lm_logits"][:, i + 1]))
    # The head at row i reads the embedding of the gold next token (targets[i]); the LM row i does not.
    targets = np.array(batch["targets"])
    targets[:, i] = 11
    nudged = dict(batch, targets=jnp.asarray(targets))
    out = numpy_forward(nudged)
    np.testing.assert_allclose(np.asarray(out["lm_logits"]), np.asarray(base["lm_logits"]), rtol=1e-6, atol=1e-6)
    assert not np.allclose(np.asarray(out["attach_logits"][:, i, : i + 2]),
                           np.asarray(base["attach_logits"][:, i, : i + 2]))
    np.testing.assert_allclose(np.asarray(out["attach_logits"][:, :i]), np.asarray(base["attach_logits"][:, :i]))


def test_clipped_depths_and_partial_pushdown_layers():
    config, model = small(num_depths=2)  # the (((0 1) 2) (3 4)) sentence reaches depth 3 (plus <s>/<eos> nodes)
    batch = text_batch()
    out = forward(model, batch)
    tape = np.asarray(pd.tape_from_nodes(np.asarray(batch["node_start"])[2], np.asarray(batch["node_end"])[2], 8))
    w = np.asarray(batch["weights"])[2] > 0
    want = int((np.tril(tape) >= 2)[np.ix_(w, w)].sum())
    assert want > 0 and int(out["clipped_depths"]) >= want
    _, eq6 = small(depth_space="model")
    assert eq6.layers[0].attention.depth_embedding.shape == (4, 16)
    config, partial = small(pushdown_layers=(1,))
    assert partial.layers[0].attention.depth_embedding is None
    assert partial.layers[1].attention.depth_embedding is not None
    with pytest.raises(ValueError, match="pushdown_layers"):
        PushdownLMConfig(vocab_size=5, num_layers=2, pushdown_layers=(2,))
    with pytest.raises(ValueError, match="binary_tape"):
        PushdownLMConfig(vocab_size=5, binary_tape=True)


def test_dyck_batch_learns():
    """A few Adam steps on two Dyck strings lower the loss (the model and loss wire up end to end)."""
    rows = dyck.encode_for_pushdown([["(a", "(b", "b)", "a)"], ["(c", "c)", "(a", "a)"]], dyck.dyck_vocabulary(3))
    batch, _ = pd.make_batch(rows, 6, binary_tape=True)
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    config = PushdownLMConfig(vocab_size=9, d_model=16, num_layers=1, num_heads=2, ffw_hidden_size=32,
                              sequence_length=6, num_depths=2, binary_tape=True, max_relative_position=8,
                              embedding_dropout=0.0, dropout=0.0)
    model = PushdownLM(config, rngs=nnx.Rngs(1))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state):
        def loss_fn(p):
            return pushdown_loss(nnx.merge(graphdef, p, rest)(batch), batch, config)[0]
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = optimizer.update(grads, state)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(30):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]


# Without dropout with -m slow: the dropout case (the recomputed pass must draw the first pass's masks) is the
# stronger check.
@pytest.mark.parametrize("deterministic", [pytest.param(True, marks=pytest.mark.slow), False])
def test_remat_gives_the_same_loss_and_gradients(deterministic):
    """`remat` recomputes each layer in the backward pass: the same numbers, dropout masks included."""
    def loss_and_grads(remat):
        config = PushdownLMConfig(vocab_size=20, d_model=16, num_layers=2, num_heads=2, ffw_hidden_size=32,
                                  sequence_length=8, max_relative_position=16, num_depths=4, embedding_dropout=0.2,
                                  dropout=0.3, remat=remat)
        model = PushdownLM(config, rngs=nnx.Rngs(params=0, dropout=7))
        loss, grads = value_and_grads(model, text_batch(), deterministic)
        return float(loss), jax.tree.leaves(nnx.to_pure_dict(grads))

    loss, grads = loss_and_grads(False)
    remat_loss, remat_grads = loss_and_grads(True)
    assert remat_loss == pytest.approx(loss, rel=1e-6)
    assert len(grads) == len(remat_grads) > 0
    for plain, recomputed in zip(grads, remat_grads):
        np.testing.assert_allclose(np.asarray(recomputed), np.asarray(plain), rtol=1e-5, atol=1e-6)


# Without remat and without dropout, and with both, in CI; the two mixed cases with -m slow.
@pytest.mark.parametrize("deterministic, remat", [
    (True, False), (False, True),
    pytest.param(True, True, marks=pytest.mark.slow), pytest.param(False, False, marks=pytest.mark.slow)])
def test_scanned_layers_give_the_loops_loss_gradients_and_dropout(deterministic, remat):
    """`scan_layers` runs the same layers as one lax.scan: the loop's numbers, each layer's dropout stream too."""
    def run(scan_layers):
        config = PushdownLMConfig(vocab_size=20, d_model=16, num_layers=2, num_heads=2, ffw_hidden_size=32,
                                  sequence_length=8, max_relative_position=16, num_depths=4, embedding_dropout=0.2,
                                  dropout=0.3, remat=remat, scan_layers=scan_layers)
        model = PushdownLM(config, rngs=nnx.Rngs(params=0, dropout=7))
        loss, grads = value_and_grads(model, text_batch(), deterministic)
        counts = [int(layer.dropout.rngs.count[...]) for layer in model.layers]
        return float(loss), jax.tree.leaves(nnx.to_pure_dict(grads)), counts

    loss, grads, counts = run(False)
    scanned_loss, scanned_grads, scanned_counts = run(True)
    assert scanned_loss == pytest.approx(loss, rel=1e-6)
    for plain, scanned in zip(grads, scanned_grads, strict=True):
        np.testing.assert_allclose(np.asarray(scanned), np.asarray(plain), rtol=1e-5, atol=1e-6)
    assert scanned_counts == counts and (counts[0] > 0) != deterministic  # each stream advanced as the loop's


def test_scanned_layers_need_identical_layers():
    with pytest.raises(ValueError, match="scan_layers needs identical layers"):
        small(pushdown_layers=(1,), scan_layers=True)
    small(pushdown_layers=(0, 1), scan_layers=True)  # every layer pushdown: fine


# Chunks of 1 (the default) in CI; of 3 (4 = 3 + 1: padded) too with -m slow (a program of its own; the head's
# padded chunks against its table path are checked in CI by tests/nn/test_attachment_head_chunked.py).
@pytest.mark.parametrize("chunks", [(1,), pytest.param((1, 3), marks=pytest.mark.slow)])
def test_head_depth_chunk_gives_the_table_heads_loss_and_gradients(chunks):
    """`head_depth_chunk` (for the head's memory) changes how the head scores, not what: the table path's
    (None) loss and gradients for chunks of 1 (the default) and 3 of the 4 depth values. One layer under the
    head: the head is what the chunk changes."""
    def loss_and_grads(chunk):
        config = PushdownLMConfig(vocab_size=20, d_model=16, num_layers=1, num_heads=2, ffw_hidden_size=32,
                                  sequence_length=8, max_relative_position=16, num_depths=4, dropout=0.0,
                                  embedding_dropout=0.0, head_depth_chunk=chunk)
        model = PushdownLM(config, rngs=nnx.Rngs(0))
        assert model.head.depth_chunk == chunk
        loss, grads = value_and_grads(model, text_batch())
        return float(loss), jax.tree.leaves(nnx.to_pure_dict(grads))

    assert PushdownLMConfig(vocab_size=20).head_depth_chunk == 1
    table_loss, table_grads = loss_and_grads(None)
    for chunk in chunks:
        loss, grads = loss_and_grads(chunk)
        assert loss == pytest.approx(table_loss, rel=1e-6)
        for got, want in zip(grads, table_grads, strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
