"""TG / TXL language models: parameter count, device rebuild, memory, mask-respecting outputs, registry."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tgjax.models import (
    MODEL_NAMES,
    build_model,
    count_parameters,
    model_config,
    model_spec,
    sequence_loss,
    transformer_lm,
)
from tgjax.models.transformer_lm import attention_inputs
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

from ..syntax.test_masks import fig2_sequence

SMALL = dict(d_model=32, num_layers=2, num_heads=4, ffw_hidden_size=64, embedding_dropout=0.0,
             core_dropout=0.0, final_dropout=0.0)

# The model's forward pass as one compiled program (op by op, each new shape compiles every op anew).
forward = nnx.jit(lambda model, batch, memory: model(batch, memory))
# The loss as one compiled program too.
loss_of = jax.jit(sequence_loss)


def as_batch(compact, rows=None):
    """A `CompactChunk` with a leading axis -> the dict of device arrays the model reads."""
    fields = compact._asdict()
    if rows is not None:
        fields = {k: v[rows] for k, v in fields.items()}
    return {k: jnp.asarray(v) for k, v in fields.items()}


def rule_for(name, config):
    fields = model_spec(name).pipeline_fields(config)
    if fields["rule"] == "tg":
        return masks.TGMasking(config.sequence_length, config.memory_length, smart_memory=fields["smart_memory"],
                               distinct_compose=fields["distinct_compose"], linear_relpos=fields["linear_relpos"])
    return masks.TXLMasking(config.sequence_length, config.memory_length)


def random_sequence(rng, num_words, vocab_size):
    """A random right-branching-and-flat action sequence (BOS, ONT/T/CNT) with ids < vocab_size."""
    types, open_count = [tt.BOS], 0
    while num_words > 0 or open_count:
        choice = rng.integers(3)
        if choice == 0 and num_words > 0:
            types.append(tt.OPENING_NT)
            open_count += 1
        elif choice == 1 and num_words > 0:
            types.append(tt.TERMINAL)
            num_words -= 1
        elif open_count and types[-1] != tt.OPENING_NT:
            types.append(tt.CLOSING_NT)
            open_count -= 1
    types = np.array(types)
    ids = rng.integers(4, vocab_size, len(types))
    ids[0] = 1
    return ids, types, np.append(ids[1:], 0), np.append(types[1:], tt.PAD)


def test_paper_size_has_252m_parameters():
    model = nnx.eval_shape(lambda: build_model("tg", 32768, rngs=nnx.Rngs(0), d_model=1024, num_layers=16,
                                               num_heads=8, ffw_hidden_size=4096))
    assert count_parameters(model) == 251_887_616


@pytest.mark.parametrize("name", ["tg", "tg_txl_memory", "tg_distinct_mha", "txl_cc"])
def test_rebuild_on_device_equals_host_dense(name):
    config = model_config(name, 50, sequence_length=8, memory_length=6, **SMALL)
    rule = rule_for(name, config)
    rng = np.random.default_rng(1)
    sequences = [random_sequence(rng, n, 50) for n in (3, 7, 12)]
    compact, _ = rule.compact_chunks_many(sequences)
    dense, _ = rule.chunks_many(sequences)
    rebuilt = jax.jit(lambda b: attention_inputs(config, b))(as_batch(compact))
    expected_mask = np.concatenate([dense.memory_attn_mask, dense.attn_mask], -1).astype(bool)
    np.testing.assert_array_equal(np.asarray(rebuilt["mask"]), expected_mask)
    np.testing.assert_array_equal(np.asarray(rebuilt["relpos"]), dense.attn_relpos)


def reachable(mask: np.ndarray, layers: int) -> np.ndarray:
    """`[T, T]` bool: which inputs can reach which outputs through `layers` attention layers."""
    step = mask.astype(bool) | np.eye(len(mask), dtype=bool)
    reach = np.eye(len(mask), dtype=bool)
    for _ in range(layers):
        reach = (step.astype(int) @ reach.astype(int)) > 0
    return reach


@pytest.mark.parametrize("num_layers", [1, 2])
def test_figure2_outputs_only_change_where_the_mask_lets_them_see(num_layers):
    config = model_config("tg", 40, sequence_length=16, memory_length=16, **{**SMALL, "num_layers": num_layers})
    model = build_model("tg", 40, rngs=nnx.Rngs(0), sequence_length=16, memory_length=16,
                        **{**SMALL, "num_layers": num_layers})
    rule = rule_for("tg", config)
    (compact,) = rule.compact_chunks(*fig2_sequence())
    (dense,) = rule.chunks(*fig2_sequence())
    batch = as_batch(masks.stack_batch([compact]))
    memory = model.init_memory(1)
    logits, _ = forward(model, batch, memory)
    perturbed_position = 3  # "the"
    inputs = np.array(batch["inputs"])  # edited and compared in NumPy: no eager program per operation
    inputs[0, perturbed_position] = 39
    logits2, _ = forward(model, dict(batch, inputs=jnp.asarray(inputs)), memory)
    delta = np.abs(np.asarray(logits2) - np.asarray(logits)).max(-1)[0, :14]
    sees = reachable(dense.attn_mask[:14, :14], num_layers)[:, perturbed_position]
    assert sees.sum() < 14 and sees[3:7].all()
    np.testing.assert_array_equal(delta[~sees], 0.0)
    assert (delta[sees] > 1e-6).all()


@pytest.mark.parametrize("name", ["tg", "txl_cc", "tg_txl_memory"])
def test_segments_with_memory_equal_one_long_segment(name):
    """Reading a sequence in segments with memory gives the logits of reading it at once."""
    rng = np.random.default_rng(7)
    seq = random_sequence(rng, 9, 60)
    n = len(seq[0]) + int(np.count_nonzero(seq[1] == tt.CLOSING_NT)) * (name != "txl_cc")
    T = 8
    long_config = dict(sequence_length=64, memory_length=64, **SMALL)
    short_config = dict(sequence_length=T, memory_length=64, **SMALL)
    long_model = build_model(name, 60, rngs=nnx.Rngs(3), **long_config)
    short_model = build_model(name, 60, rngs=nnx.Rngs(3), **short_config)
    (whole,) = rule_for(name, long_model.config).compact_chunks(*seq)
    long_logits, _ = forward(long_model, as_batch(masks.stack_batch([whole])), long_model.init_memory(1))
    segments = rule_for(name, short_model.config).compact_chunks(*seq)
    assert len(segments) == -(-n // T) >= 3
    memory = short_model.init_memory(1)
    pieces = []
    for segment in segments:
        logits, memory = forward(short_model, as_batch(masks.stack_batch([segment])), memory)
        pieces.append(np.asarray(logits)[0])
    np.testing.assert_allclose(np.concatenate(pieces)[:n], np.asarray(long_logits)[0, :n], atol=2e-5, rtol=2e-5)


def one_segment_equivalent(chunks: list, T: int, L: int) -> tuple[np.ndarray, np.ndarray]:
    """`[L, L]` mask and relative positions over the whole sequence: what each query of each segment saw.

    A query of segment k sees the keys of its own segment as `attn_mask` says, and through memory slot s
    the sequence position `memory_pos[s]` as `memory_attn_mask[:, s]` says (dense host chunks, `[T, ...]`).
    """
    mask, relpos = np.zeros((L, L), bool), np.zeros((L, L), np.int32)
    M = chunks[0].memory_pos.shape[0]
    for k, chunk in enumerate(chunks):
        rows = slice(k * T, (k + 1) * T)
        mask[rows, rows] = chunk.attn_mask
        relpos[rows, rows] = chunk.attn_relpos[:, M:]
        for slot, position in enumerate(chunk.memory_pos):
            if position >= 0:
                sees = chunk.memory_attn_mask[:, slot].astype(bool)
                mask[rows, position] |= sees
                relpos[rows, position] = np.where(sees, chunk.attn_relpos[:, slot], relpos[rows, position])
    return mask, relpos


# Each model with one of the two memory shapes in CI (M < T, M > T); every pairing with -m slow.
@pytest.mark.parametrize("name, T, M", [
    ("tg", 8, 3), ("tg", 4, 6), ("txl_cc", 4, 6), ("tg_txl_memory", 8, 3),
    pytest.param("txl_cc", 8, 3, marks=pytest.mark.slow), pytest.param("tg_txl_memory", 4, 6, marks=pytest.mark.slow)])
def test_short_memory_segments_equal_one_segment_with_the_equivalent_mask(name, T, M, monkeypatch):
    """Memory shorter than the sequence (M < T * segments): the recurrence equals one segment whose mask lets
    each query see exactly the keys it saw through memory (same logits and loss). With M < T the memory comes
    from the last segment only; with T < M it also keeps slots of the memory before (`mem_src_mem`)."""
    L = 64
    rng = np.random.default_rng(11)
    seq = random_sequence(rng, 11, 60)
    n = len(seq[0]) + int(np.count_nonzero(seq[1] == tt.CLOSING_NT)) * (name != "txl_cc")
    short_model = build_model(name, 60, rngs=nnx.Rngs(3), sequence_length=T, memory_length=M, **SMALL)
    long_model = build_model(name, 60, rngs=nnx.Rngs(3), sequence_length=L, memory_length=M, **SMALL)
    short_rule, long_rule = rule_for(name, short_model.config), rule_for(name, long_model.config)
    segments = short_rule.compact_chunks(*seq)
    assert len(segments) == -(-n // T) >= 4

    # The recurrence: segment after segment, memory carried.
    memory, pieces, short_loss = short_model.init_memory(1), [], 0.0
    for segment in segments:
        batch = as_batch(masks.stack_batch([segment]))
        logits, memory = forward(short_model, batch, memory)
        pieces.append(np.asarray(logits)[0])
        short_loss += float(loss_of(logits, batch)[0])

    # The same pattern as one segment: the dense host chunks, re-expressed over sequence positions.
    mask, relpos = one_segment_equivalent(short_rule.chunks(*seq), T, L)
    (whole,) = long_rule.chunks(*seq)
    i, j = np.arange(L)[:n, None], np.arange(L)[None, :n]
    segment_start = i // T * T
    if name == "tg":  # the stack rule, less what fell out of a full memory
        assert short_rule.stats.dropped_stack_entries > 0
        assert not (mask[:n, :n] & ~whole.attn_mask[:n, :n].astype(bool)).any()
        assert (whole.attn_mask[:n, :n].astype(bool) & ~mask[:n, :n]).any()
    else:  # the last M positions before the segment, and the rule's mask
        window = (j >= segment_start - M) & (j <= i if name == "txl_cc" else whole.attn_mask[:n, :n].astype(bool))
        np.testing.assert_array_equal(mask[:n, :n], window)
    seen = mask[:n, :n]
    np.testing.assert_array_equal(relpos[:n, :n][seen], whole.attn_relpos[:n, M:M + n][seen])
    mask[np.arange(n, L), np.arange(n, L)] = True  # padding queries: anything, not compared

    def fixed_attention(config, batch):
        no_memory = np.zeros((L, M), np.int32)
        return {"mask": jnp.asarray(np.concatenate([no_memory.astype(bool), mask], -1)[None]),
                "relpos": jnp.asarray(np.concatenate([no_memory, relpos], -1)[None])}

    monkeypatch.setattr(transformer_lm, "attention_inputs", fixed_attention)
    (long_segment,) = long_rule.compact_chunks(*seq)
    long_batch = as_batch(masks.stack_batch([long_segment]))
    # A compiled program of its own: traced under the patch (`forward`'s cache would not see it).
    long_logits, _ = nnx.jit(lambda model, batch, memory: model(batch, memory))(long_model, long_batch,
                                                                                long_model.init_memory(1))
    np.testing.assert_allclose(np.concatenate(pieces)[:n], np.asarray(long_logits)[0, :n], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(short_loss, float(loss_of(long_logits, long_batch)[0]), rtol=1e-4)


def test_loss_counts_prediction_events_only():
    config = model_config("tg", 40, sequence_length=16, memory_length=16, **SMALL)
    (compact,) = rule_for("tg", config).compact_chunks(*fig2_sequence())
    batch = as_batch(masks.stack_batch([compact]))
    logits = jnp.zeros((1, 16, 40))
    total, events = loss_of(logits, batch)
    assert int(events) == 10  # the 10 original actions; none at CNT1, none after S)
    np.testing.assert_allclose(float(total), 10 * np.log(40), rtol=1e-6)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_registered_model_runs_and_learns_a_repeated_batch(name):
    """A few Adam steps on one batch (first segments, empty memory) lower its loss: the gradients point downhill.

    One layer (each model's own attention rule is in every layer; the stacking of layers and their memories is
    checked by the segment tests above and tests/models/test_accelerator_knobs.py): half the compilation.
    """
    sizes = {**SMALL, "num_layers": 1}
    config = model_config(name, 30, sequence_length=8, memory_length=8, **sizes)
    model = build_model(name, 30, rngs=nnx.Rngs(0), sequence_length=8, memory_length=8, **sizes)
    rng = np.random.default_rng(0)
    sequences = [random_sequence(rng, 4, 30) for _ in range(3)]
    if model_spec(name).pipeline["rule"] == "txl_terminals":
        sequences = [tuple(a[np.isin(s[1], [tt.BOS, tt.TERMINAL])] for a in s) for s in sequences]
    compact, _ = rule_for(name, config).compact_chunks_many(sequences)
    batch = as_batch(compact)
    memory = model.init_memory(batch["inputs"].shape[0])
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adam(1e-2)

    def loss_fn(params):
        logits, _ = nnx.merge(graphdef, params, rest)(batch, memory)
        total, events = sequence_loss(logits, batch)
        return total / events

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, grads

    opt_state = optimizer.init(params)
    losses = []
    for i in range(6):
        params, opt_state, loss, grads = step(params, opt_state)
        losses.append(float(loss))
        if i == 0:
            norms = [float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)]
            assert all(np.isfinite(norms)) and max(norms) > 0
    assert np.isfinite(losses).all()
    assert losses[0] > np.log(30) - 1  # a fresh model: about uniform over the 30 ids, or worse
    assert (np.diff(losses) < 0).all() and losses[-1] < losses[0] / 2, losses  # measured: ~4.8 -> ~1.75


def test_bad_model_configs():
    with pytest.raises(ValueError, match="unknown model 'tgx'"):
        model_spec("tgx")
    with pytest.raises(ValueError, match=r"unknown model config key\(s\) \['layers'\]"):
        model_config("tg", 10, layers=3)
    with pytest.raises(ValueError, match="num_unrestricted_layers=5"):
        model_config("tg", 10, num_layers=2, num_unrestricted_layers=5)
