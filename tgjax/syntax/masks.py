"""TG and TXL attention tensors per segment: masks, relative positions, memory updates.

Host side, NumPy only. The contract with the device is `Chunk` (dense, the
authors' release layout) or `CompactChunk` (per-query and per-key vectors from
which `expand` rebuilds every dense field by broadcasting comparisons).

How the STACK/COMPOSE rules of Sartran et al. (2022, Algorithm 1) become
interval tests: after the closing non-terminals are duplicated, every
position j is pushed at most once (at j, unless it is a CNT2 or padding) and
popped at most once, by the CNT1 that composes the constituent j belongs to
(for an opening NT: its own constituent). With `push[j]` and `pop[j]` known,

    STACK row i:    A[i, j] = (push[j] <= i < pop[j]) or j == i
    COMPOSE row i:  A[i, j] = (pop[j] == i) or j == i

and the relative position is depth(i) - depth(j) where A is 1 (0 elsewhere).
`pop` is found for all positions at once with one sorted search: the CNT1
that pops j is the first CNT1 after j whose depth is the depth of j's owner.
The memory of segment tau + 1 (Appendix A, Figure 8) is the stack after the
last non-pad token of segment tau, newest in slot M - 1; entries pushed out
of the bottom (stack deeper than M) are dropped for good and counted.

Conventions (the authors' release): BOS at position 0 is the root at depth 0;
both copies of a closing NT sit at the depth of their opening NT; a CNT2 is
never pushed but attends to itself; padding attends nowhere. Memory columns
come first in `attn_relpos` (`[T, M + T]`).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from tgjax.syntax import token_types as tt

# "Never": a time after every position (pop of an entry that is never popped,
# push of an entry that is never pushed).
NEVER = np.iinfo(np.int32).max

MASK_DTYPE = np.int8
RELPOS_DTYPE = np.int16


class Chunk(NamedTuple):
    """One segment of T positions with a memory of M slots (dense form).

    Shapes: `inputs`, `inputs_ttypes`, `labels`, `labels_ttypes`, `attn_indicator`,
    `depth` `[T]`; `attn_mask` `[T, T]`; `attn_relpos` `[T, M + T]` (memory
    columns first); `memory_attn_mask` `[T, M]`; `memory_padding_mask`,
    `memory_pos` `[M]` (sequence position held by each memory slot, -1 if
    none); `beginning_of_seq`, `end_of_seq` scalars; `mem_from_seq` `[T, M]`
    and `mem_from_mem` `[M, M]` one-hot selections (source, destination) that
    build the next memory: `next_mem = mem_from_seq.T @ h + mem_from_mem.T @ mem`;
    `mem_src_seq`, `mem_src_mem` `[M]`: the same selections as indices, the
    source of each next-memory slot in the segment / current memory, or -1.
    """

    inputs: np.ndarray
    inputs_ttypes: np.ndarray
    labels: np.ndarray
    labels_ttypes: np.ndarray
    attn_mask: np.ndarray
    attn_relpos: np.ndarray
    attn_indicator: np.ndarray
    memory_attn_mask: np.ndarray
    memory_padding_mask: np.ndarray
    memory_pos: np.ndarray
    depth: np.ndarray
    beginning_of_seq: np.ndarray
    end_of_seq: np.ndarray
    mem_from_seq: np.ndarray
    mem_from_mem: np.ndarray
    mem_src_seq: np.ndarray
    mem_src_mem: np.ndarray


class CompactChunk(NamedTuple):
    """One segment as per-query/per-key vectors; `expand` rebuilds the dense `Chunk`.

    Segment vectors `[T]`: `inputs`, `inputs_ttypes`, `labels`, `labels_ttypes`,
    `position` (sequence position of each slot of the segment), `depth`,
    `push_time` (position at which it is pushed, `NEVER` if never),
    `pop_time` (position of the CNT1 that pops it, `NEVER` if never).
    Memory vectors `[M]`: `memory_pos` (-1 if empty), `memory_padding_mask`,
    `memory_depth`, `memory_push_time`, `memory_pop_time`, and the next-memory
    sources `mem_src_seq`, `mem_src_mem`. Scalars: `beginning_of_seq`,
    `end_of_seq`, and the rule's static flags `causal` (TXL: every earlier
    position is visible), `linear_relpos` (relative position i - j instead of
    a depth difference), `distinct_compose` (COMPOSE rows use their own
    attention weights: `attn_indicator`).
    """

    inputs: np.ndarray
    inputs_ttypes: np.ndarray
    labels: np.ndarray
    labels_ttypes: np.ndarray
    position: np.ndarray
    depth: np.ndarray
    push_time: np.ndarray
    pop_time: np.ndarray
    memory_pos: np.ndarray
    memory_padding_mask: np.ndarray
    memory_depth: np.ndarray
    memory_push_time: np.ndarray
    memory_pop_time: np.ndarray
    mem_src_seq: np.ndarray
    mem_src_mem: np.ndarray
    beginning_of_seq: np.ndarray
    end_of_seq: np.ndarray
    causal: np.ndarray
    linear_relpos: np.ndarray
    distinct_compose: np.ndarray


@dataclasses.dataclass
class MaskingStats:
    """What the rules did that a user should know about: nothing is dropped silently."""

    sequences: int = 0
    chunks: int = 0
    input_tokens: int = 0
    # Stack entries pushed out of the bottom of a full memory (stack deeper than M).
    dropped_stack_entries: int = 0
    sequences_with_dropped_entries: int = 0


# -----------------------------------------------------------------------------
# The rebuild, shared by host (NumPy reference) and device (jax.numpy).


def attention_from_vectors(
    q_pos: Any,
    q_ttypes: Any,
    q_depth: Any,
    k_pos: Any,
    k_depth: Any,
    k_push: Any,
    k_pop: Any,
    *,
    causal: bool,
    linear_relpos: bool,
    q_open: Any = None,
    k_transparent: Any = None,
    xp: ModuleType = np,
) -> tuple[Any, Any]:
    """Mask and relative positions between queries `[..., Q]` and keys `[..., K]`.

    Works with NumPy or `jax.numpy` (`xp`), with any leading batch dimensions.
    Positions, push and pop times are sequence positions (-1: empty memory
    slot). With transparency, `q_open` is the position of each CNT1's opening
    NT and `k_transparent` marks keys whose owner is transparent: never
    popped, seen by the COMPOSE of every constituent that contains them.
    Returns `(mask [..., Q, K] bool, relpos [..., Q, K] int)`, relpos 0 where
    the mask is 0.
    """
    qp = q_pos[..., :, None]
    kp = k_pos[..., None, :]
    if causal:
        # TXL: every earlier position that exists (memory slots before the
        # sequence start hold position -1), padding queries included, as in
        # the authors' release.
        mask = (kp <= qp) & (kp >= 0)
    else:
        qt = q_ttypes[..., :, None]
        stack_rule = (k_push[..., None, :] <= qp) & (qp < k_pop[..., None, :])
        compose_rule = k_pop[..., None, :] == qp
        if k_transparent is not None:
            inside = (q_open[..., :, None] <= kp) & (kp <= qp)
            compose_rule = compose_rule | (k_transparent[..., None, :] & inside)
        mask = (qt != tt.PAD) & (
            (kp == qp) | xp.where(qt == tt.CNT1, compose_rule, stack_rule)
        )
    if linear_relpos:
        rel = qp - kp
    else:
        rel = q_depth[..., :, None] - k_depth[..., None, :]
    return mask, xp.where(mask, rel, 0)


def one_hot_selection(src: Any, num_sources: int, xp: ModuleType = np) -> Any:
    """`[..., M]` source indices (-1 = none) to a `[..., num_sources, M]` one-hot matrix."""
    return (src[..., None, :] == xp.arange(num_sources)[:, None]).astype(MASK_DTYPE)


def expand(compact: CompactChunk, xp: ModuleType = np) -> Chunk:
    """Rebuild the dense `Chunk` from a `CompactChunk` (NumPy reference of the device rebuild).

    Leading batch dimensions are allowed on every field (flags must be equal
    across the batch). The flags are read from the arrays, so this is for
    concrete inputs; inside `jax.jit`, call `expand_with_flags` with the
    model's static flags.
    """
    return expand_with_flags(
        compact,
        causal=bool(np.asarray(compact.causal).flat[0]),
        linear_relpos=bool(np.asarray(compact.linear_relpos).flat[0]),
        distinct_compose=bool(np.asarray(compact.distinct_compose).flat[0]),
        xp=xp,
    )


def expand_with_flags(
    compact: CompactChunk, *, causal: bool, linear_relpos: bool, distinct_compose: bool, xp: ModuleType = np
) -> Chunk:
    """`expand` with the rule's flags given statically: traceable with `xp=jax.numpy`."""
    kwargs = dict(causal=causal, linear_relpos=linear_relpos, xp=xp)
    q = (compact.position, compact.inputs_ttypes, compact.depth)
    seq_mask, seq_rel = attention_from_vectors(
        *q, compact.position, compact.depth, compact.push_time, compact.pop_time, **kwargs
    )
    mem_mask, mem_rel = attention_from_vectors(
        *q,
        compact.memory_pos,
        compact.memory_depth,
        compact.memory_push_time,
        compact.memory_pop_time,
        **kwargs,
    )
    seq_len = compact.inputs.shape[-1]
    mem_len = compact.memory_pos.shape[-1]
    if distinct_compose:
        indicator = (compact.inputs_ttypes == tt.CNT1).astype(MASK_DTYPE)
    else:
        indicator = xp.zeros_like(compact.inputs_ttypes, dtype=MASK_DTYPE)
    return Chunk(
        inputs=compact.inputs,
        inputs_ttypes=compact.inputs_ttypes,
        labels=compact.labels,
        labels_ttypes=compact.labels_ttypes,
        attn_mask=seq_mask.astype(MASK_DTYPE),
        attn_relpos=xp.concatenate([mem_rel, seq_rel], axis=-1).astype(RELPOS_DTYPE),
        attn_indicator=indicator,
        memory_attn_mask=mem_mask.astype(MASK_DTYPE),
        memory_padding_mask=compact.memory_padding_mask,
        memory_pos=compact.memory_pos,
        depth=compact.depth,
        beginning_of_seq=compact.beginning_of_seq,
        end_of_seq=compact.end_of_seq,
        mem_from_seq=one_hot_selection(compact.mem_src_seq, seq_len, xp),
        mem_from_mem=one_hot_selection(compact.mem_src_mem, mem_len, xp),
        mem_src_seq=compact.mem_src_seq,
        mem_src_mem=compact.mem_src_mem,
    )


# -----------------------------------------------------------------------------
# Many sequences at once: flat arrays with per-sequence offsets, so that the
# NumPy call count does not grow with the number of sequences.


def _check_lengths(seq_len: int, mem_len: int) -> None:
    if int(seq_len) <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if int(mem_len) <= 0:
        raise ValueError(f"mem_len must be positive, got {mem_len}")
    if seq_len + mem_len > np.iinfo(RELPOS_DTYPE).max:
        raise ValueError(f"seq_len + mem_len = {seq_len + mem_len} is too large for int16 positions")


_FIELDS = ("inputs", "inputs_ttypes", "labels", "labels_ttypes")


class _Flat(NamedTuple):
    """A batch of S sequences laid end to end."""

    fields: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # each [N]
    lengths: np.ndarray  # [S]
    starts: np.ndarray  # [S]
    seq_of: np.ndarray  # [N] sequence of each position
    local: np.ndarray  # [N] position within its sequence


def _locate(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    starts = np.cumsum(lengths) - lengths
    seq_of = np.repeat(np.arange(len(lengths)), lengths)
    local = np.arange(int(lengths.sum())) - starts[seq_of]
    return starts, seq_of, local


def _flatten(sequences) -> _Flat:
    sequences = list(sequences)
    if not sequences:
        raise ValueError("expected at least one sequence, got none")
    lengths = np.array([len(s[0]) for s in sequences], np.int64)
    for k in range(1, 4):
        other = np.array([len(s[k]) for s in sequences], np.int64)
        bad = np.flatnonzero(other != lengths)
        if bad.size:
            b = int(bad[0])
            raise ValueError(f"sequence {b}: {_FIELDS[k]} has length {other[b]} but inputs has {lengths[b]}")
    if (lengths == 0).any():
        raise ValueError(f"sequence {int(np.argmax(lengths == 0))}: empty sequence")
    fields = tuple(np.concatenate([np.asarray(s[k]) for s in sequences]) for k in range(4))
    for name, a in zip(_FIELDS, fields):
        if a.ndim != 1 or len(a) != lengths.sum():
            raise ValueError(f"{name}: expected 1-D arrays")
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name}: expected integers, got {a.dtype}")
    return _Flat(fields, lengths, *_locate(lengths))


def _fail(what: str, flat_seq_of: np.ndarray, flat_local: np.ndarray, bad: np.ndarray) -> None:
    """Raises a ValueError for the first flagged position, naming sequence and position."""
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"sequence {int(flat_seq_of[k])}, position {int(flat_local[k])}: {what}")


def _check_types(flat: _Flat, allow_cnt2: bool) -> None:
    types = flat.fields[1]
    allowed = [t for t in tt.VALID_TYPES if allow_cnt2 or t != tt.CNT2]
    bad = ~np.isin(types, allowed)
    if bad.any():
        k = int(np.argmax(bad))
        _fail(f"unknown token type {int(types[k])}; expected one of {allowed}", flat.seq_of, flat.local, bad)


class _Layout(NamedTuple):
    """Sequences padded to whole segments, laid end to end: P positions, G segments."""

    fields: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # each [P]
    num_chunks: np.ndarray  # [S]
    seq_start: np.ndarray  # [S] first position of each sequence
    seq_of: np.ndarray  # [P]
    local: np.ndarray  # [P]
    chunk_seq: np.ndarray  # [G] sequence of each segment
    chunk_local: np.ndarray  # [G] index of the segment within its sequence
    last_real: np.ndarray  # [S] last position (within the sequence) with a non-zero id


def _segment_counts(inputs: np.ndarray, starts: np.ndarray, local: np.ndarray, seq_len: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The one definition of a sequence's segments: they stop at its last non-zero input id.

    Args:
      inputs: `[N]` ids of sequences laid end to end (after any duplication).
      starts: `[S]` first position of each sequence; local: `[N]` position within it.
    Returns:
      `last_real [S]` (last position with a non-zero id) and `num_segments [S]`
      (trailing padding takes no segment of its own).
    """
    last_real = np.maximum.reduceat(np.where(inputs != 0, local, -1), starts)
    if (last_real < 0).any():
        raise ValueError(f"sequence {int(np.argmax(last_real < 0))}: every input token id is 0 (padding)")
    return last_real, last_real // seq_len + 1


def _segment_layout(fields, lengths, starts, seq_of, local, seq_len) -> _Layout:
    """Pads every sequence to whole segments; segments stop at the last non-zero id."""
    last_real, num_chunks = _segment_counts(fields[0], starts, local, seq_len)
    padded = num_chunks * seq_len
    p_start, p_seq_of, p_local = _locate(padded)
    keep = local < padded[seq_of]
    dest = p_start[seq_of[keep]] + local[keep]
    out = []
    for a in fields:
        b = np.zeros(int(padded.sum()), a.dtype)
        b[dest] = a[keep]
        out.append(b)
    chunk_first, chunk_seq, chunk_local = _locate(num_chunks)
    return _Layout(tuple(out), num_chunks, p_start, p_seq_of, p_local, chunk_seq, chunk_local, last_real)


class _Segments(NamedTuple):
    """Every segment of a batch as vectors: a batched `CompactChunk` and what dense needs besides."""

    compact: CompactChunk  # fields [G, T], [G, M] or [G]
    seq_index: np.ndarray  # [G] input sequence of each segment
    q_open: np.ndarray | None  # [G, T] transparency only: opening NT of each CNT1
    transparent: np.ndarray | None  # [G, T] keys whose owner is transparent
    memory_transparent: np.ndarray | None  # [G, M]


def _gather_memory(values: np.ndarray, seq_start: np.ndarray, chunk_seq: np.ndarray, memory_pos: np.ndarray, empty):
    """Per memory slot `[G, M]`, the value of the sequence position it holds (`empty` if none)."""
    index = seq_start[chunk_seq][:, None] + np.maximum(memory_pos, 0)
    return np.where(memory_pos >= 0, values[index], empty)


def _one_hot_scatter(src: np.ndarray, num_sources: int) -> np.ndarray:
    """`[G, M]` source indices (-1: none) to one-hot `[G, num_sources, M]`, by scattering."""
    G, M = src.shape
    out = np.zeros((G, num_sources, M), MASK_DTYPE)
    g, slot = np.nonzero(src >= 0)
    out[g, src[g, slot], slot] = 1
    return out


class _Rule:
    """What TG and TXL share: batching, dense expansion, per-sequence splitting."""

    seq_len: int
    mem_len: int
    stats: MaskingStats

    def _segments(self, sequences) -> _Segments:
        raise NotImplementedError

    def _positions(self, sequences) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The sequences as the rule lays them out: (fields `4 x [N]`, lengths, starts `[S]`, seq_of, local `[N]`)."""
        raise NotImplementedError

    def num_segments(self, sequences) -> np.ndarray:
        """`[S]` how many segments each sequence takes: the count `chunks_many` makes, for batchers.

        Segments stop at a sequence's last non-zero input id, so trailing
        padding takes none (closing NTs count twice under TG).
        """
        fields, _, starts, _, local = self._positions(sequences)
        return _segment_counts(fields[0], starts, local, self.seq_len)[1]

    def compact_chunks_many(self, sequences) -> tuple[CompactChunk, np.ndarray]:
        """All segments of many sequences: a `CompactChunk` with a leading axis G, and `seq_index [G]`."""
        segs = self._segments(sequences)
        if segs.transparent is not None:
            raise NotImplementedError(
                "the compact form does not cover transparency; use .chunks() (dense) with transparency_depth"
            )
        return segs.compact, segs.seq_index

    def chunks_many(self, sequences) -> tuple[Chunk, np.ndarray]:
        """All segments of many sequences: a `Chunk` with a leading axis G, and `seq_index [G]`."""
        segs = self._segments(sequences)
        return _dense(segs), segs.seq_index

    def chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[Chunk]:
        """Dense chunks of one sequence."""
        batch, _ = self.chunks_many([(inputs, inputs_ttypes, labels, labels_ttypes)])
        return _unbatch(batch)

    def compact_chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[CompactChunk]:
        """Compact chunks of one sequence; `expand(c)` equals the matching dense chunk."""
        batch, _ = self.compact_chunks_many([(inputs, inputs_ttypes, labels, labels_ttypes)])
        return _unbatch(batch)


def _unbatch(batch):
    cls = type(batch)
    return [cls(*(field[g] for field in batch)) for g in range(batch.inputs.shape[0])]


def _dense(segs: _Segments) -> Chunk:
    """Dense chunks from segment vectors, computing only the rows that are not padding."""
    c = segs.compact
    G, T = c.inputs.shape
    M = c.memory_pos.shape[1]
    causal = bool(c.causal[0])
    linear_relpos = bool(c.linear_relpos[0])
    attn_mask = np.zeros((G, T, T), MASK_DTYPE)
    memory_attn_mask = np.zeros((G, T, M), MASK_DTYPE)
    attn_relpos = np.zeros((G, T, M + T), RELPOS_DTYPE)
    if causal:
        width = np.full(G, T)  # TXL: padding queries attend too
    else:
        active = (c.inputs_ttypes != tt.PAD).sum(axis=1)  # padding is trailing
        width = np.minimum(-(-active // 32) * 32, T)
    has_memory = (c.memory_pos >= 0).any(axis=1)
    transparency = segs.transparent is not None
    for w in np.unique(width):
        w = int(w)
        group = np.flatnonzero(width == w)
        block = max(1, (1 << 21) // (w * (w + M)))  # bound temporaries to a few MB
        for b in range(0, len(group), block):
            idx = group[b:b + block]
            q = (c.position[idx, :w], c.inputs_ttypes[idx, :w], c.depth[idx, :w])
            q_open = segs.q_open[idx, :w] if transparency else None
            mask, rel = attention_from_vectors(
                *q, c.position[idx, :w], c.depth[idx, :w], c.push_time[idx, :w], c.pop_time[idx, :w],
                causal=causal, linear_relpos=linear_relpos, q_open=q_open,
                k_transparent=segs.transparent[idx, :w] if transparency else None,
            )
            attn_mask[idx, :w, :w] = mask
            attn_relpos[idx, :w, M:M + w] = rel
            sub = has_memory[idx]
            if sub.any():
                idx_m = idx[sub]
                mask, rel = attention_from_vectors(
                    *(v[sub] for v in q), c.memory_pos[idx_m], c.memory_depth[idx_m],
                    c.memory_push_time[idx_m], c.memory_pop_time[idx_m],
                    causal=causal, linear_relpos=linear_relpos,
                    q_open=q_open[sub] if transparency else None,
                    k_transparent=segs.memory_transparent[idx_m] if transparency else None,
                )
                memory_attn_mask[idx_m, :w, :] = mask
                attn_relpos[idx_m, :w, :M] = rel
    if bool(c.distinct_compose[0]):
        indicator = (c.inputs_ttypes == tt.CNT1).astype(MASK_DTYPE)
    else:
        indicator = np.zeros((G, T), MASK_DTYPE)
    return Chunk(
        inputs=c.inputs,
        inputs_ttypes=c.inputs_ttypes,
        labels=c.labels,
        labels_ttypes=c.labels_ttypes,
        attn_mask=attn_mask,
        attn_relpos=attn_relpos,
        attn_indicator=indicator,
        memory_attn_mask=memory_attn_mask,
        memory_padding_mask=c.memory_padding_mask,
        memory_pos=c.memory_pos,
        depth=c.depth,
        beginning_of_seq=c.beginning_of_seq,
        end_of_seq=c.end_of_seq,
        mem_from_seq=_one_hot_scatter(c.mem_src_seq, T),
        mem_from_mem=_one_hot_scatter(c.mem_src_mem, M),
        mem_src_seq=c.mem_src_seq,
        mem_src_mem=c.mem_src_mem,
    )


def _flags(G: int, causal: bool, linear_relpos: bool, distinct_compose: bool) -> dict:
    return dict(
        causal=np.full(G, causal, MASK_DTYPE),
        linear_relpos=np.full(G, linear_relpos, MASK_DTYPE),
        distinct_compose=np.full(G, distinct_compose, MASK_DTYPE),
    )


def _boundaries(layout: _Layout) -> tuple[np.ndarray, np.ndarray]:
    first = layout.chunk_local == 0
    last = layout.chunk_local == layout.num_chunks[layout.chunk_seq] - 1
    return first.astype(MASK_DTYPE), last.astype(MASK_DTYPE)


class TGMasking(_Rule):
    """Transformer Grammar STACK/COMPOSE rules, per segment of `seq_len` with `mem_len` memory.

    Args:
      seq_len: T, positions per segment.
      mem_len: M, memory slots (M != T allowed).
      smart_memory: the paper's default: the next memory holds the stack
        (Figure 8). Otherwise the "TXL memory" variant: the previous M positions.
      distinct_compose: COMPOSE rows use separate attention weights
        (`attn_indicator` is 1 at every CNT1).
      transparency_depth: opening NTs at depth <= this are transparent: they
        compose but do not pop their children (-1: none). Dense chunks only.
      linear_relpos: relative position i - j instead of depth(i) - depth(j)
        (the "TXL memory + linear rel. pos." variant).

    `chunks(inputs, inputs_ttypes, labels, labels_ttypes)` takes one sequence
    before duplication (closing NTs of type 4, BOS first, labels = inputs
    shifted left with 0 appended, padding only at the end) and returns its
    dense `Chunk`s; `compact_chunks(...)` the same segments as
    `CompactChunk`s. `chunks_many` / `compact_chunks_many` take a list of such
    4-tuples and return every segment batched, which is much faster.
    `stats` counts sequences, segments and stack entries dropped from a full
    memory.
    """

    def __init__(
        self,
        seq_len: int,
        mem_len: int,
        smart_memory: bool = True,
        distinct_compose: bool = False,
        transparency_depth: int = -1,
        linear_relpos: bool = False,
    ):
        _check_lengths(seq_len, mem_len)
        self.seq_len = int(seq_len)
        self.mem_len = int(mem_len)
        self.smart_memory = bool(smart_memory)
        self.distinct_compose = bool(distinct_compose)
        self.transparency_depth = int(transparency_depth)
        self.linear_relpos = bool(linear_relpos)
        self.stats = MaskingStats()

    def __repr__(self) -> str:
        return (
            f"TGMasking(seq_len={self.seq_len}, mem_len={self.mem_len}, smart_memory={self.smart_memory}, "
            f"distinct_compose={self.distinct_compose}, transparency_depth={self.transparency_depth}, "
            f"linear_relpos={self.linear_relpos})"
        )

    def _positions(self, sequences):
        """After duplicating closing NTs (CNT1, CNT2), validated as TG action sequences."""
        flat = _flatten(sequences)
        _check_types(flat, allow_cnt2=False)
        fields = tt.duplicate_closing_nts(*flat.fields)
        num_closing = np.add.reduceat((flat.fields[1] == tt.CLOSING_NT).astype(np.int64), flat.starts)
        lengths = flat.lengths + num_closing
        starts, seq_of, local = _locate(lengths)
        _validate_tg(fields[1], starts, seq_of, local)
        return fields, lengths, starts, seq_of, local

    def _segments(self, sequences) -> _Segments:
        T, M = self.seq_len, self.mem_len
        fields, lengths, starts, seq_of, local = self._positions(sequences)
        layout = _segment_layout(fields, lengths, starts, seq_of, local, T)
        life = _lifetimes(layout, self.transparency_depth)
        if self.smart_memory:
            memory_pos, src_seq, src_mem = self._smart_memory(layout, life)
        else:
            memory_pos, src_seq, src_mem = _shifted_memory(layout, T, M)

        G = len(layout.chunk_seq)
        seg = lambda a: a.reshape(G, T)
        mem = lambda values, empty: _gather_memory(values, layout.seq_start, layout.chunk_seq, memory_pos, empty)
        first, last = _boundaries(layout)
        x, xt, y, yt = layout.fields
        compact = CompactChunk(
            inputs=seg(x), inputs_ttypes=seg(xt), labels=seg(y), labels_ttypes=seg(yt),
            position=seg(layout.local.astype(np.int32)),
            depth=seg(life.depth), push_time=seg(life.push), pop_time=seg(life.pop),
            memory_pos=memory_pos, memory_padding_mask=(memory_pos >= 0).astype(MASK_DTYPE),
            memory_depth=mem(life.depth, 0).astype(RELPOS_DTYPE),
            memory_push_time=mem(life.push, NEVER).astype(np.int32),
            memory_pop_time=mem(life.pop, NEVER).astype(np.int32),
            mem_src_seq=src_seq, mem_src_mem=src_mem,
            beginning_of_seq=first, end_of_seq=last,
            **_flags(G, False, self.linear_relpos, self.distinct_compose),
        )
        self.stats.sequences += len(lengths)
        self.stats.chunks += G
        # Input tokens before duplication: a CNT2 is the second copy of a closing NT.
        self.stats.input_tokens += int(np.count_nonzero(fields[1]) - np.count_nonzero(fields[1] == tt.CNT2))
        if life.transparent is None:
            return _Segments(compact, layout.chunk_seq, None, None, None)
        return _Segments(compact, layout.chunk_seq, seg(life.open_pos), seg(life.transparent),
                         mem(life.transparent, False))

    def _smart_memory(self, layout: _Layout, life: _Lifetimes):
        """The stack after each segment, newest in slot M - 1 (Figure 8), for every segment at once.

        Position j is in the memory after segment c iff it is on the stack at
        the end of c and has been among the top M at the end of every segment
        since it was pushed. When no stack is ever deeper than M, that is
        every (j, c) with c from j's segment to the last segment ending
        before pop[j]; sequences that overflow go through an exact
        segment-by-segment pass that drops and counts.
        """
        T, M = self.seq_len, self.mem_len
        G = len(layout.chunk_seq)
        chunk_first = np.cumsum(layout.num_chunks) - layout.num_chunks
        chunk_start = layout.seq_start[layout.chunk_seq] + layout.chunk_local * T  # global
        # Stack snapshot: after the last position with a non-zero id in the segment.
        snap = chunk_start + T - 1
        is_last = layout.chunk_local == layout.num_chunks[layout.chunk_seq] - 1
        snap[is_last] = layout.seq_start[layout.chunk_seq[is_last]] + layout.last_real[layout.chunk_seq[is_last]]

        pushed = np.flatnonzero(life.push != NEVER)  # global positions
        seq = layout.seq_of[pushed]
        chunk_of = chunk_first[seq] + layout.local[pushed] // T
        pop_global = np.where(life.pop[pushed] == NEVER, np.iinfo(np.int64).max,
                              layout.seq_start[seq] + life.pop[pushed])
        last_chunk = np.minimum(np.searchsorted(snap, pop_global, side="left") - 1,
                                chunk_first[seq] + layout.num_chunks[seq] - 1)
        count = np.maximum(last_chunk - chunk_of + 1, 0)
        # Entries (j, c), ordered by j then c.
        first_entry = np.cumsum(count) - count
        entry_j = np.repeat(pushed, count)
        entry_first = np.repeat(first_entry, count)
        entry_c = np.repeat(chunk_of, count) + np.arange(len(entry_j)) - entry_first
        depth_at_end = np.bincount(entry_c, minlength=G)

        memory_pos = np.full((G, M), -1, np.int32)
        src_seq = np.full((G, M), -1, np.int32)
        src_mem = np.full((G, M), -1, np.int32)
        overflow_seqs = np.unique(layout.chunk_seq[depth_at_end > M])
        if overflow_seqs.size:
            keep = ~np.isin(layout.chunk_seq[entry_c], overflow_seqs)
            entry_j, entry_c = entry_j[keep], entry_c[keep]
            is_first = (np.arange(len(keep)) == entry_first)[keep]
        else:
            is_first = np.arange(len(entry_j)) == entry_first
        # Rank from the top of the stack at the end of segment c.
        order = np.lexsort((entry_j, entry_c))
        sorted_c = entry_c[order]
        group_start = np.searchsorted(sorted_c, sorted_c, side="left")
        rank = depth_at_end[sorted_c] - 1 - (np.arange(len(order)) - group_start)
        slot = np.empty(len(order), np.int64)
        slot[order] = M - 1 - rank
        src_seq[entry_c[is_first], slot[is_first]] = entry_j[is_first] - chunk_start[entry_c[is_first]]
        later = np.flatnonzero(~is_first)
        src_mem[entry_c[later], slot[later]] = slot[later - 1]
        has_next = ~is_last[entry_c]
        memory_pos[entry_c[has_next] + 1, slot[has_next]] = layout.local[entry_j[has_next]]
        for s in overflow_seqs:
            self._smart_memory_one(layout, life, int(s), int(chunk_first[s]), snap, memory_pos, src_seq, src_mem)
        return memory_pos, src_seq, src_mem

    def _smart_memory_one(self, layout, life, s, chunk_first, snap, memory_pos, src_seq, src_mem):
        """Figure 8 segment by segment for one sequence whose stack outgrows the memory."""
        T, M = self.seq_len, self.mem_len
        base = int(layout.seq_start[s])
        n = int(layout.num_chunks[s]) * T
        push = life.push[base:base + n]
        pop = life.pop[base:base + n]
        dropped = np.zeros(n, bool)
        num_dropped = 0
        current = np.full(M, -1, np.int64)
        for c in range(int(layout.num_chunks[s])):
            g = chunk_first + c
            last = int(snap[g]) - base
            upto = slice(0, last + 1)
            stack = np.flatnonzero((push[upto] <= last) & (last < pop[upto]) & ~dropped[upto])
            kept, lost = stack[-M:], stack[: max(len(stack) - M, 0)]
            dropped[lost] = True
            num_dropped += len(lost)
            dest = slice(M - len(kept), M)
            in_chunk = kept >= c * T
            src_seq[g, dest] = np.where(in_chunk, kept - c * T, -1)
            src_mem[g, dest] = np.where(in_chunk, -1, np.searchsorted(current, kept))
            current = np.full(M, -1, np.int64)
            current[dest] = kept
            if c + 1 < int(layout.num_chunks[s]):
                memory_pos[g + 1] = current
        self.stats.dropped_stack_entries += num_dropped
        self.stats.sequences_with_dropped_entries += int(num_dropped > 0)


def _validate_tg(types: np.ndarray, starts: np.ndarray, seq_of: np.ndarray, local: np.ndarray) -> None:
    """BOS first and only first; padding only at the end."""
    first = types[starts]
    if (first != tt.BOS).any():
        s = int(np.argmax(first != tt.BOS))
        name = tt.NAMES.get(int(first[s]), str(first[s]))
        raise ValueError(f"sequence {s}, position 0: type {name}, expected BOS (the root of the stack)")
    _fail("BOS after position 0; only position 0 may be BOS", seq_of, local, (types == tt.BOS) & (local > 0))
    is_pad = types == tt.PAD
    first_pad = np.minimum.reduceat(np.where(is_pad, local, np.iinfo(np.int64).max), starts)
    _fail("a token after padding; padding may only come at the end", seq_of, local,
          ~is_pad & (local > first_pad[seq_of]))


class _Lifetimes(NamedTuple):
    """Per position of the layout `[P]`; times are positions within the sequence."""

    depth: np.ndarray
    push: np.ndarray  # position if pushed, NEVER otherwise
    pop: np.ndarray  # position of the popping CNT1, NEVER if never popped
    transparent: np.ndarray | None  # owner transparent: never popped (transparency only)
    open_pos: np.ndarray | None  # for each CNT1, its opening NT (transparency only)


def _lifetimes(layout: _Layout, transparency_depth: int) -> _Lifetimes:
    types = layout.fields[1]
    seq, local = layout.seq_of, layout.local
    P = len(types)
    gpos = np.arange(P, dtype=np.int64)
    is_ont = types == tt.OPENING_NT
    is_cnt1 = types == tt.CNT1
    is_pad = types == tt.PAD
    # Constituents open before i (a CNT1 counts as closed at its own position),
    # counted within each sequence.
    opened = np.cumsum(is_ont) - is_ont
    closed = np.cumsum(is_cnt1)
    open_count = (opened - opened[layout.seq_start][seq]) - (closed - (closed - is_cnt1)[layout.seq_start][seq])
    _fail("closing non-terminal closes nothing", seq, local, is_cnt1 & (open_count < 0))
    depth = open_count + 1
    depth[(local == 0) | is_pad] = 0
    pushed = ~is_pad & (types != tt.CNT2)
    push = np.where(pushed, local, NEVER).astype(np.int32)
    # The constituent whose COMPOSE pops j: its own for an opening NT, its
    # parent's otherwise; that CNT1 is the first one after j at the owner's
    # depth. One sorted search over (sequence, depth, position) keys.
    owner_depth = np.where(is_ont, depth, np.maximum(depth - 1, 0))
    levels = int(depth.max()) + 1
    group = seq.astype(np.int64) * levels
    cnt1_keys = np.sort((group + depth)[is_cnt1] * P + gpos[is_cnt1])
    query = (group + owner_depth) * P + gpos
    hit = np.searchsorted(cnt1_keys, query, side="right")
    if cnt1_keys.size:
        hit_key = cnt1_keys[np.minimum(hit, cnt1_keys.size - 1)]
        found = (hit < cnt1_keys.size) & (hit_key // P == group + owner_depth)
    else:
        hit_key, found = query, np.zeros(P, bool)
    poppable = pushed & (local > 0) & found
    pop = np.where(poppable, hit_key % P - layout.seq_start[seq], NEVER)
    transparent = open_pos = None
    if transparency_depth >= 0:
        transparent = pushed & (local > 0) & (owner_depth <= transparency_depth)
        pop = np.where(transparent, NEVER, pop)
        ont_keys = np.sort((group + depth)[is_ont] * P + gpos[is_ont])
        before = np.searchsorted(ont_keys, (group + depth) * P + gpos, side="left") - 1
        if ont_keys.size:
            ont_key = ont_keys[np.maximum(before, 0)]
            ok = is_cnt1 & (before >= 0) & (ont_key // P == group + depth)
            open_pos = np.where(ok, ont_key % P - layout.seq_start[seq], -1).astype(np.int32)
        else:
            open_pos = np.full(P, -1, np.int32)
    return _Lifetimes(depth.astype(RELPOS_DTYPE), push, pop.astype(np.int32), transparent, open_pos)


def _shifted_memory(layout: _Layout, T: int, M: int):
    """The "TXL memory": segment c's memory holds the M positions before it (when they exist)."""
    slots = np.arange(M)
    start = (layout.chunk_local * T)[:, None]  # within the sequence
    base = layout.seq_start[layout.chunk_seq][:, None]
    x = layout.fields[0]
    held = start - M + slots
    valid = (held >= 0) & (x[base + np.maximum(held, 0)] != 0)
    memory_pos = np.where(valid, held, -1).astype(np.int32)
    nxt = start + T - M + slots
    in_chunk = nxt >= start
    src_seq = np.where(in_chunk & (x[base + np.maximum(nxt, 0)] != 0), nxt - start, -1).astype(np.int32)
    from_memory = ~in_chunk & (slots + T < M)
    from_memory &= valid[:, np.minimum(slots + T, M - 1)]
    src_mem = np.where(from_memory, slots + T, -1).astype(np.int32)
    return memory_pos, src_seq, src_mem


class TXLMasking(_Rule):
    """The Transformer-XL baseline: causal mask, relative position i - j, shifted memory.

    For Choe–Charniak action sequences (TXL (CC)) and for terminals only (TXL
    (terminals)) alike: nothing is duplicated. The memory of segment tau + 1
    holds the last M positions before it. As in the authors' release, padding
    queries attend causally too, and memory slots are marked valid by
    `memory_padding_mask`.
    """

    def __init__(self, seq_len: int, mem_len: int):
        _check_lengths(seq_len, mem_len)
        self.seq_len = int(seq_len)
        self.mem_len = int(mem_len)
        self.stats = MaskingStats()

    def __repr__(self) -> str:
        return f"TXLMasking(seq_len={self.seq_len}, mem_len={self.mem_len})"

    def _positions(self, sequences):
        """As given (a TXL rule reads CNT2 tokens like any other)."""
        flat = _flatten(sequences)
        _check_types(flat, allow_cnt2=True)
        return flat.fields, flat.lengths, flat.starts, flat.seq_of, flat.local

    def _segments(self, sequences) -> _Segments:
        T, M = self.seq_len, self.mem_len
        fields, lengths, starts, seq_of, local = self._positions(sequences)
        layout = _segment_layout(fields, lengths, starts, seq_of, local, T)
        G = len(layout.chunk_seq)
        slots = np.arange(M)
        start = (layout.chunk_local * T)[:, None]
        base = layout.seq_start[layout.chunk_seq][:, None]
        held = start - M + slots
        exists = held >= 0
        memory_pos = np.where(exists, held, -1).astype(np.int32)
        x = layout.fields[0]
        nxt = start + T - M + slots
        position = layout.local.astype(np.int32).reshape(G, T)
        first, last = _boundaries(layout)
        compact = CompactChunk(
            inputs=x.reshape(G, T), inputs_ttypes=layout.fields[1].reshape(G, T),
            labels=layout.fields[2].reshape(G, T), labels_ttypes=layout.fields[3].reshape(G, T),
            position=position, depth=np.zeros((G, T), RELPOS_DTYPE),
            push_time=position, pop_time=np.full((G, T), NEVER, np.int32),
            memory_pos=memory_pos,
            memory_padding_mask=(exists & (x[base + np.maximum(held, 0)] != 0)).astype(MASK_DTYPE),
            memory_depth=np.zeros((G, M), RELPOS_DTYPE),
            memory_push_time=np.where(exists, held, NEVER).astype(np.int32),
            memory_pop_time=np.full((G, M), NEVER, np.int32),
            mem_src_seq=np.where(nxt >= start, nxt - start, -1).astype(np.int32),
            mem_src_mem=np.where((nxt < start) & (nxt >= 0), slots + T, -1).astype(np.int32),
            beginning_of_seq=first, end_of_seq=last,
            **_flags(G, True, True, False),
        )
        self.stats.sequences += len(lengths)
        self.stats.chunks += G
        self.stats.input_tokens += int(np.count_nonzero(fields[1]))
        return _Segments(compact, layout.chunk_seq, None, None, None)


def stack_batch(chunks: list) -> Any:
    """Stack a list of `Chunk`s (or `CompactChunk`s) into one with a leading batch axis."""
    cls = type(chunks[0])
    return cls(*(np.stack(field) for field in zip(*chunks)))
