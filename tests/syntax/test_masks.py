"""TG/TXL tensors: the paper's Figure 2 by hand, and the fast rules against the slow oracle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

from .masks_oracle import oracle_tg_chunks, oracle_txl_chunks

# Figure 2 of Sartran et al. (2022): (S (NP the blue bird) (VP sings)), before duplication.
FIG2_TYPES = [tt.BOS, tt.OPENING_NT, tt.OPENING_NT, tt.TERMINAL, tt.TERMINAL, tt.TERMINAL,
              tt.CLOSING_NT, tt.OPENING_NT, tt.TERMINAL, tt.CLOSING_NT, tt.CLOSING_NT]
# After duplication (14 positions): <s> (S (NP the blue bird NP) NP) (VP sings VP) VP) S) S)
FIG2_DEPTH = [0, 1, 2, 3, 3, 3, 2, 2, 2, 3, 2, 2, 1, 1]
# Worked by hand from Algorithm 1: the positions each position attends to.
FIG2_ATTENDS = {
    0: {0}, 1: {0, 1}, 2: {0, 1, 2}, 3: {0, 1, 2, 3}, 4: {0, 1, 2, 3, 4}, 5: {0, 1, 2, 3, 4, 5},
    6: {2, 3, 4, 5, 6},          # COMPOSE NP: (NP and its words
    7: {0, 1, 6, 7},             # STACK: <s> (S NP) and itself (a CNT2 is never pushed)
    8: {0, 1, 6, 8}, 9: {0, 1, 6, 8, 9},
    10: {8, 9, 10},              # COMPOSE VP
    11: {0, 1, 6, 10, 11},
    12: {1, 6, 10, 12},          # COMPOSE S: (S NP) VP)
    13: {0, 12, 13},
}


def fig2_sequence():
    ids = np.arange(10, 10 + len(FIG2_TYPES))
    types = np.array(FIG2_TYPES)
    labels = np.append(ids[1:], 0)
    label_types = np.append(types[1:], tt.PAD)
    return ids, types, labels, label_types


def test_figure2_single_chunk_every_entry():
    ids, types, labels, label_types = fig2_sequence()
    T, M = 16, 16
    (chunk,) = masks.TGMasking(T, M).chunks(ids, types, labels, label_types)
    expected_mask = np.zeros((T, T), int)
    expected_rel = np.zeros((T, M + T), int)
    for i, attended in FIG2_ATTENDS.items():
        for j in attended:
            expected_mask[i, j] = 1
            expected_rel[i, M + j] = FIG2_DEPTH[i] - FIG2_DEPTH[j]
    np.testing.assert_array_equal(chunk.attn_mask, expected_mask)
    np.testing.assert_array_equal(chunk.attn_relpos, expected_rel)
    np.testing.assert_array_equal(chunk.depth[:14], FIG2_DEPTH)
    assert chunk.attn_relpos[6, M + 3] == -1  # children are one level below under COMPOSE
    np.testing.assert_array_equal(chunk.memory_attn_mask, 0)
    np.testing.assert_array_equal(chunk.memory_padding_mask, 0)
    np.testing.assert_array_equal(chunk.memory_pos, -1)
    np.testing.assert_array_equal(chunk.attn_indicator, 0)
    assert chunk.beginning_of_seq == 1 and chunk.end_of_seq == 1
    # Types and labels after duplication: CNT1 predicts nothing, CNT2 carries the label.
    np.testing.assert_array_equal(chunk.inputs_ttypes[:14], [1, 2, 2, 3, 3, 3, 4, 14, 2, 3, 4, 14, 4, 14])
    np.testing.assert_array_equal(chunk.inputs[:14], [10, 11, 12, 13, 14, 15, 16, 16, 17, 18, 19, 19, 20, 20])
    np.testing.assert_array_equal(chunk.labels[:14], [11, 12, 13, 14, 15, 16, 0, 17, 18, 19, 0, 20, 0, 0])
    np.testing.assert_array_equal(chunk.labels_ttypes[:14], [2, 2, 3, 3, 3, 4, 0, 2, 3, 4, 0, 4, 0, 0])
    # Next memory: the stack after S) S) is [<s>, S)1], newest in the last slot.
    np.testing.assert_array_equal(chunk.mem_src_seq[-2:], [0, 12])
    np.testing.assert_array_equal(chunk.mem_src_seq[:-2], -1)
    assert chunk.mem_from_seq[12, M - 1] == 1 and chunk.mem_from_seq.sum() == 2


def test_figure2_distinct_compose_indicator():
    (chunk,) = masks.TGMasking(16, 16, distinct_compose=True).chunks(*fig2_sequence())
    np.testing.assert_array_equal(np.flatnonzero(chunk.attn_indicator), [6, 10, 12])


def test_figure2_two_segments_smart_memory_by_hand():
    # T = 7: segment 0 ends at NP)1 with stack [<s>, (S, NP)1] -> memory slots 1..3.
    T, M = 7, 4
    c0, c1 = masks.TGMasking(T, M).chunks(*fig2_sequence())
    np.testing.assert_array_equal(c0.mem_src_seq, [-1, 0, 1, 6])
    np.testing.assert_array_equal(c0.mem_src_mem, -1)
    np.testing.assert_array_equal(c1.memory_pos, [-1, 0, 1, 6])
    np.testing.assert_array_equal(c1.memory_padding_mask, [0, 1, 1, 1])
    # Segment 1 holds positions 7..13; row x is position 7 + x.
    for x in range(T):
        i = 7 + x
        mem_seen = {int(p) for p, a in zip(c1.memory_pos, c1.memory_attn_mask[x]) if a}
        seq_seen = {7 + int(j) for j in np.flatnonzero(c1.attn_mask[x])}
        assert mem_seen | seq_seen == FIG2_ATTENDS[i], i
        for slot, p in enumerate(c1.memory_pos):
            if c1.memory_attn_mask[x, slot]:
                assert c1.attn_relpos[x, slot] == FIG2_DEPTH[i] - FIG2_DEPTH[p]
    # After S) S): stack [<s>, S)1]: <s> comes from memory slot 1, S)1 from segment index 5.
    np.testing.assert_array_equal(c1.mem_src_mem, [-1, -1, 1, -1])
    np.testing.assert_array_equal(c1.mem_src_seq, [-1, -1, -1, 5])


def test_figure2_memory_too_small_drops_bottom_and_counts():
    rule = masks.TGMasking(7, 2)
    c0, c1 = rule.chunks(*fig2_sequence())
    np.testing.assert_array_equal(c1.memory_pos, [1, 6])  # <s> pushed out of the bottom
    assert rule.stats.dropped_stack_entries == 1
    assert rule.stats.sequences_with_dropped_entries == 1
    # S)2 (row 6 of segment 1) would see <s>, but it is gone: only S)1 and itself.
    assert c1.memory_attn_mask[6].sum() == 0
    np.testing.assert_array_equal(np.flatnonzero(c1.attn_mask[6]), [5, 6])


# -----------------------------------------------------------------------------
# Random well-formed sequences for the property tests.


@st.composite
def tg_sequences(draw, max_len=40):
    """Random action sequences (BOS first, non-empty constituents, maybe unfinished)."""
    types = [tt.BOS]
    open_children = []  # children count of each open constituent
    target = draw(st.integers(1, max_len))
    while len(types) < target:
        choices = [tt.OPENING_NT, tt.TERMINAL]
        if open_children and open_children[-1] > 0:
            choices += [tt.CLOSING_NT] * 2
        t = draw(st.sampled_from(choices))
        if t == tt.TERMINAL and draw(st.integers(0, 9)) == 0:
            t = tt.PLACEHOLDER
        types.append(t)
        if t == tt.CLOSING_NT:
            open_children.pop()
            if open_children:
                open_children[-1] += 1
        else:
            if open_children:
                open_children[-1] += 1
            if t == tt.OPENING_NT:
                open_children.append(0)
    if draw(st.booleans()):  # finish the sequence
        for n in reversed(open_children):
            if n == 0:
                types.append(tt.TERMINAL)
            types.append(tt.CLOSING_NT)
    types = np.array(types)
    ids = np.arange(100, 100 + len(types))
    num_pad = draw(st.integers(0, 3))
    ids = np.append(ids, np.zeros(num_pad, int))
    types = np.append(types, np.zeros(num_pad, int))
    labels = np.append(ids[1:], 0)
    label_types = np.append(types[1:], tt.PAD)
    return ids, types, labels, label_types


def assert_chunks_equal(fast, slow):
    assert len(fast) == len(slow)
    for k, (f, s) in enumerate(zip(fast, slow)):
        for name, expected in s.items():
            np.testing.assert_array_equal(getattr(f, name), expected, err_msg=f"chunk {k}, {name}")
        # The index form of the memory update is the one-hot form.
        np.testing.assert_array_equal(masks.one_hot_selection(f.mem_src_seq, f.inputs.shape[0]), f.mem_from_seq)
        np.testing.assert_array_equal(masks.one_hot_selection(f.mem_src_mem, f.memory_pos.shape[0]), f.mem_from_mem)


@settings(max_examples=300, deadline=None)
@given(seq=tg_sequences(), T=st.integers(1, 12), M=st.integers(1, 12), smart=st.booleans(),
       distinct=st.booleans(), transparency=st.integers(-1, 3), linear=st.booleans())
def test_tg_fast_equals_oracle(seq, T, M, smart, distinct, transparency, linear):
    rule = masks.TGMasking(T, M, smart_memory=smart, distinct_compose=distinct,
                           transparency_depth=transparency, linear_relpos=linear)
    fast = rule.chunks(*seq)
    slow, dropped = oracle_tg_chunks(*seq, T, M, smart_memory=smart, distinct_compose=distinct,
                                     transparency_depth=transparency, linear_relpos=linear)
    assert_chunks_equal(fast, slow)
    if smart:
        assert rule.stats.dropped_stack_entries == dropped


@settings(max_examples=200, deadline=None)
@given(seq=tg_sequences(), T=st.integers(1, 12), M=st.integers(1, 12), smart=st.booleans(),
       distinct=st.booleans(), linear=st.booleans())
def test_tg_compact_expands_to_dense(seq, T, M, smart, distinct, linear):
    rule = masks.TGMasking(T, M, smart_memory=smart, distinct_compose=distinct, linear_relpos=linear)
    dense = rule.chunks(*seq)
    compact = rule.compact_chunks(*seq)
    assert len(dense) == len(compact)
    for d, c in zip(dense, compact):
        for name, a, b in zip(masks.Chunk._fields, masks.expand(c), d):
            np.testing.assert_array_equal(a, b, err_msg=name)
    # Batched expansion equals the per-chunk one.
    batched = masks.expand(masks.stack_batch(compact))
    np.testing.assert_array_equal(batched.attn_mask, np.stack([d.attn_mask for d in dense]))
    np.testing.assert_array_equal(batched.attn_relpos, np.stack([d.attn_relpos for d in dense]))


@settings(max_examples=150, deadline=None)
@given(seq=tg_sequences(), T=st.integers(1, 12), M=st.integers(1, 12))
def test_txl_fast_equals_oracle(seq, T, M):
    rule = masks.TXLMasking(T, M)
    assert_chunks_equal(rule.chunks(*seq), oracle_txl_chunks(*seq, T, M))


def distinct_ids(sequences):
    """The sequences with their (non-padding) ids shifted by 1000 per sequence, so a mix-up shows."""
    out = []
    for i, (ids, types, labels, label_types) in enumerate(sequences):
        shift = lambda a: np.where(a != 0, a + 1000 * i, 0)  # noqa: E731
        out.append((shift(ids), types, shift(labels), label_types))
    return out


def assert_many_equals_each_alone(make_rule, sequences, *, compact: bool):
    """`chunks_many` (and `compact_chunks_many`) of all sequences == each sequence's `chunks`, in order."""
    alone_rule, many_rule = make_rule(), make_rule()
    alone = [alone_rule.chunks(*seq) for seq in sequences]
    dense, seq_index = many_rule.chunks_many(sequences)
    np.testing.assert_array_equal(seq_index, np.repeat(np.arange(len(sequences)), [len(a) for a in alone]))
    flat = [chunk for chunks in alone for chunk in chunks]
    for name in masks.Chunk._fields:
        np.testing.assert_array_equal(getattr(dense, name), np.stack([getattr(c, name) for c in flat]), err_msg=name)
    assert many_rule.stats == alone_rule.stats  # dropped stack entries etc. counted per sequence, the same
    if compact:
        compact_alone = [c for seq in sequences for c in make_rule().compact_chunks(*seq)]
        compact_many, compact_index = make_rule().compact_chunks_many(sequences)
        np.testing.assert_array_equal(compact_index, seq_index)
        for name in masks.CompactChunk._fields:
            alone = np.stack([getattr(c, name) for c in compact_alone])
            np.testing.assert_array_equal(getattr(compact_many, name), alone, err_msg=name)


@settings(max_examples=150, deadline=None)
@given(sequences=st.lists(tg_sequences(max_len=30), min_size=1, max_size=6), T=st.integers(1, 10),
       M=st.integers(1, 10), smart=st.booleans(), distinct=st.booleans(), transparency=st.integers(-1, 3),
       linear=st.booleans())
def test_tg_many_sequences_equal_each_alone(sequences, T, M, smart, distinct, transparency, linear):
    make = lambda: masks.TGMasking(T, M, smart_memory=smart, distinct_compose=distinct,  # noqa: E731
                                   transparency_depth=transparency, linear_relpos=linear)
    assert_many_equals_each_alone(make, distinct_ids(sequences), compact=transparency < 0)


@settings(max_examples=100, deadline=None)
@given(sequences=st.lists(tg_sequences(max_len=30), min_size=1, max_size=6), T=st.integers(1, 10),
       M=st.integers(1, 10))
def test_txl_many_sequences_equal_each_alone(sequences, T, M):
    assert_many_equals_each_alone(lambda: masks.TXLMasking(T, M), distinct_ids(sequences), compact=True)


def test_txl_relpos_and_memory_by_hand():
    # 5 tokens, T = M = 2: segments [0 1] [2 3] [4 pad]; memory = previous segment.
    ids = np.array([1, 7, 8, 9, 6])
    types = np.array([tt.BOS, 3, 3, 3, 3])
    labels = np.append(ids[1:], 0)
    ltypes = np.append(types[1:], 0)
    chunks = masks.TXLMasking(2, 2).chunks(ids, types, labels, ltypes)
    assert len(chunks) == 3
    c = chunks[2]
    np.testing.assert_array_equal(c.memory_pos, [2, 3])
    np.testing.assert_array_equal(c.memory_padding_mask, [1, 1])
    np.testing.assert_array_equal(c.attn_relpos[0], [2, 1, 0, 0])  # position 4 to 2, 3, 4
    np.testing.assert_array_equal(c.attn_mask, [[1, 0], [1, 1]])
    assert chunks[0].beginning_of_seq == 1 and chunks[2].end_of_seq == 1


def test_compact_refuses_transparency():
    with pytest.raises(NotImplementedError, match="transparency"):
        masks.TGMasking(8, 8, transparency_depth=1).compact_chunks(*fig2_sequence())


@pytest.mark.parametrize("T,M", [(0, 4), (4, 0), (-1, 4)])
def test_bad_lengths(T, M):
    with pytest.raises(ValueError, match="must be positive"):
        masks.TGMasking(T, M)
    with pytest.raises(ValueError, match="must be positive"):
        masks.TXLMasking(T, M)


def test_bad_sequences_are_clear_errors():
    rule = masks.TGMasking(8, 8)
    ids, types, labels, ltypes = fig2_sequence()
    bad = types.copy()
    bad[3] = 9
    with pytest.raises(ValueError, match="sequence 0, position 3: unknown token type 9"):
        rule.chunks(ids, bad, labels, ltypes)
    unbalanced = np.array([tt.BOS, tt.TERMINAL, tt.CLOSING_NT])
    with pytest.raises(ValueError, match="closes nothing"):
        rule.chunks(np.array([1, 5, 6]), unbalanced, np.array([5, 6, 0]), np.array([3, 4, 0]))
    no_bos = types.copy()
    no_bos[0] = tt.OPENING_NT
    with pytest.raises(ValueError, match="expected BOS"):
        rule.chunks(ids, no_bos, labels, ltypes)
    with pytest.raises(ValueError, match="empty"):
        rule.chunks(np.array([], int), np.array([], int), np.array([], int), np.array([], int))
    gap = types.copy()
    gap[4] = tt.PAD
    with pytest.raises(ValueError, match="sequence 0, position 5: a token after padding"):
        rule.chunks(ids, gap, labels, ltypes)


def test_device_rebuild_under_jit_equals_host_dense():
    """The same rebuild, traced with jax.numpy inside jit, gives the host's dense chunks."""
    jax = pytest.importorskip("jax")
    import functools

    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    sequences = [fig2_sequence()]
    for _ in range(6):  # random right-branching-ish sentences of different lengths
        n = int(rng.integers(2, 9))
        types = [tt.BOS] + [tt.OPENING_NT, tt.TERMINAL] * n + [tt.CLOSING_NT] * n
        ids = np.arange(5, 5 + len(types))
        sequences.append((ids, np.array(types), np.append(ids[1:], 0), np.append(types[1:], 0)))
    for rule in (masks.TGMasking(8, 6), masks.TGMasking(8, 6, smart_memory=False, distinct_compose=True),
                 masks.TXLMasking(8, 6)):
        compact, _ = rule.compact_chunks_many(sequences)
        dense, _ = rule.chunks_many(sequences)
        flags = dict(causal=bool(compact.causal[0]), linear_relpos=bool(compact.linear_relpos[0]),
                     distinct_compose=bool(compact.distinct_compose[0]))
        rebuild = jax.jit(functools.partial(masks.expand_with_flags, xp=jnp, **flags))
        on_device = rebuild(masks.CompactChunk(*(jnp.asarray(f) for f in compact)))
        for name, a, b in zip(masks.Chunk._fields, on_device, dense):
            np.testing.assert_array_equal(np.asarray(a), b, err_msg=f"{rule!r}: {name}")
