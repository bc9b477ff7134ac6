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
    xp: ModuleType = np,
) -> tuple[Any, Any]:
    """Mask and relative positions between queries `[..., Q]` and keys `[..., K]`.

    Works with NumPy or `jax.numpy` (`xp`), with any leading batch dimensions.
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
    across the batch).
    """
    causal = bool(np.asarray(compact.causal).flat[0])
    linear_relpos = bool(np.asarray(compact.linear_relpos).flat[0])
    distinct_compose = bool(np.asarray(compact.distinct_compose).flat[0])
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
# Per-sequence quantities from the token types, vectorised.


@dataclasses.dataclass
class _Lifetimes:
    """Per position of the (duplicated, padded) sequence `[n]`."""

    depth: np.ndarray
    push: np.ndarray  # position if pushed, NEVER otherwise
    pop: np.ndarray  # position of the popping CNT1, NEVER if never popped
    # Only with transparency: entries whose owner is transparent (never popped,
    # attended by the COMPOSE of every enclosing constituent), and, for each
    # CNT1, the position of its opening NT.
    transparent_owner: np.ndarray | None
    open_pos: np.ndarray | None


def _validate_tg(ttypes: np.ndarray) -> int:
    """Checks a duplicated TG sequence; returns its length without trailing padding."""
    n = len(ttypes)
    tt.check_types(ttypes, allow_cnt2=True, where="TG sequence")
    is_pad = ttypes == tt.PAD
    if is_pad.all():
        raise ValueError("TG sequence: empty (all padding)")
    num_real = n - int(np.argmax(~is_pad[::-1]))  # without trailing padding
    if is_pad[:num_real].any():
        pos = int(np.argmax(is_pad[:num_real]))
        raise ValueError(f"TG sequence: padding at position {pos} before the end (at {num_real - 1})")
    if ttypes[0] != tt.BOS:
        raise ValueError(
            f"TG sequence: position 0 has type {tt.NAMES.get(int(ttypes[0]), ttypes[0])}, "
            "expected BOS (the root of the stack)"
        )
    later_bos = np.flatnonzero(ttypes[1:] == tt.BOS)
    if later_bos.size:
        raise ValueError(f"TG sequence: BOS at position {int(later_bos[0]) + 1}; only position 0 may be BOS")
    return num_real


def _lifetimes(ttypes: np.ndarray, transparency_depth: int) -> _Lifetimes:
    n = len(ttypes)
    positions = np.arange(n, dtype=np.int64)
    is_ont = ttypes == tt.OPENING_NT
    is_cnt1 = ttypes == tt.CNT1
    is_pad = ttypes == tt.PAD
    # Open constituents before i, counting a CNT1 as closed at its own position.
    open_count = np.cumsum(is_ont) - is_ont - np.cumsum(is_cnt1)
    if (open_count[is_cnt1] < 0).any():
        pos = int(np.flatnonzero(is_cnt1 & (open_count < 0))[0])
        raise ValueError(f"TG sequence: closing non-terminal at position {pos} closes nothing")
    depth = open_count + 1
    depth[0] = 0
    depth[is_pad] = 0

    pushed = ~is_pad & (ttypes != tt.CNT2)
    push = np.where(pushed, positions, NEVER)
    # The constituent that composes j: its own for an opening NT, else its parent's.
    owner_depth = np.where(is_ont, depth, depth - 1)
    # First CNT1 after j at the owner's depth, by one sorted search over
    # (depth, position) keys.
    stride = n + 1
    cnt1_keys = np.sort(depth[is_cnt1] * stride + positions[is_cnt1])
    query_keys = owner_depth * stride + positions
    hit = np.searchsorted(cnt1_keys, query_keys, side="right")
    found = hit < cnt1_keys.size
    hit_key = cnt1_keys[np.minimum(hit, max(cnt1_keys.size - 1, 0))] if cnt1_keys.size else query_keys
    found &= (hit_key // stride) == owner_depth
    poppable = pushed & (positions > 0) & found
    pop = np.where(poppable, hit_key % stride, NEVER)

    transparent_owner = open_pos = None
    if transparency_depth >= 0:
        transparent_owner = pushed & (positions > 0) & (owner_depth <= transparency_depth)
        pop = np.where(transparent_owner, NEVER, pop)
        ont_keys = np.sort(depth[is_ont] * stride + positions[is_ont])
        last = np.searchsorted(ont_keys, depth * stride + positions, side="left") - 1
        open_pos = np.where(is_cnt1 & (last >= 0), ont_keys[np.maximum(last, 0)] % stride, -1) if ont_keys.size else np.full(n, -1)
    return _Lifetimes(depth, push, pop, transparent_owner, open_pos)


# -----------------------------------------------------------------------------
# Masking rules.


def _check_lengths(seq_len: int, mem_len: int) -> None:
    if int(seq_len) <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    if int(mem_len) <= 0:
        raise ValueError(f"mem_len must be positive, got {mem_len}")
    if seq_len + mem_len > np.iinfo(RELPOS_DTYPE).max:
        raise ValueError(f"seq_len + mem_len = {seq_len + mem_len} is too large for int16 positions")


def _as_int_arrays(*arrays):
    out = [np.asarray(a) for a in arrays]
    n = len(out[0])
    for name, a in zip(("inputs", "inputs_ttypes", "labels", "labels_ttypes"), out):
        if a.ndim != 1 or len(a) != n:
            raise ValueError(f"{name}: expected a 1-D array of length {n}, got shape {a.shape}")
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name}: expected integers, got {a.dtype}")
    if n == 0:
        raise ValueError("empty sequence")
    return out


class _MemoryLayout(NamedTuple):
    """Per chunk `[C, M]`: position held by each memory slot, validity, next-memory sources."""

    memory_pos: np.ndarray
    memory_padding_mask: np.ndarray
    mem_src_seq: np.ndarray
    mem_src_mem: np.ndarray


class TGMasking:
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

    `chunks(inputs, inputs_ttypes, labels, labels_ttypes)` takes a sequence
    before duplication (closing NTs of type 4, BOS first, labels = inputs
    shifted left with 0 appended) and returns the dense `Chunk`s;
    `compact_chunks(...)` the same segments as `CompactChunk`s.
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

    # --- the per-sequence work shared by the dense and compact forms

    def _prepare(self, inputs, inputs_ttypes, labels, labels_ttypes):
        inputs, inputs_ttypes, labels, labels_ttypes = _as_int_arrays(inputs, inputs_ttypes, labels, labels_ttypes)
        tt.check_types(inputs_ttypes, allow_cnt2=False, where="inputs_ttypes")
        x, xt, y, yt = tt.duplicate_closing_nts(inputs, inputs_ttypes, labels, labels_ttypes)
        num_real = _validate_tg(xt)
        T = self.seq_len
        # Chunks stop at the first one that is all padding (token id 0).
        nonzero = np.flatnonzero(x[:num_real] != 0)
        num_chunks = -(-(int(nonzero[-1]) + 1) // T) if nonzero.size else 0
        if num_chunks == 0:
            raise ValueError("TG sequence: every input token id is 0 (padding)")
        total = num_chunks * T
        pad = total - len(x)
        if pad > 0:
            x, xt, y, yt = (np.concatenate([a, np.zeros(pad, a.dtype)]) for a in (x, xt, y, yt))
        else:
            x, xt, y, yt = x[:total], xt[:total], y[:total], yt[:total]
        life = _lifetimes(xt, self.transparency_depth)
        memory = self._memory_layout(x, life, num_chunks)
        self.stats.sequences += 1
        self.stats.chunks += num_chunks
        self.stats.input_tokens += int(np.count_nonzero(inputs_ttypes))
        return x, xt, y, yt, life, memory, num_chunks

    def _memory_layout(self, x: np.ndarray, life: _Lifetimes, num_chunks: int) -> _MemoryLayout:
        T, M = self.seq_len, self.mem_len
        memory_pos = np.full((num_chunks + 1, M), -1, np.int32)
        src_seq = np.full((num_chunks, M), -1, np.int32)
        src_mem = np.full((num_chunks, M), -1, np.int32)
        slots = np.arange(M)
        if not self.smart_memory:
            # Shifted memory: after chunk c, slot s holds position (c + 1) T - M + s.
            for c in range(num_chunks):
                start = c * T
                p = start + T - M + slots
                in_chunk = p >= start
                in_chunk_real = in_chunk & (x[np.clip(p, 0, len(x) - 1)] > 0)
                from_mem = ~in_chunk & (p >= 0)
                old_slot = np.clip(slots + T, 0, M - 1)
                from_mem &= (slots + T < M) & (memory_pos[c, old_slot] >= 0)
                src_seq[c] = np.where(in_chunk_real, p - start, -1)
                src_mem[c] = np.where(from_mem, slots + T, -1)
                memory_pos[c + 1] = np.where(in_chunk_real | from_mem, p, -1)
        else:
            nonpad = np.flatnonzero(x > 0)
            dropped = np.zeros(len(x), bool)
            num_dropped = 0
            for c in range(num_chunks):
                start, end = c * T, (c + 1) * T
                last = int(nonpad[np.searchsorted(nonpad, end) - 1])
                upto = slice(0, last + 1)
                on_stack = (life.push[upto] <= last) & (last < life.pop[upto]) & ~dropped[upto]
                stack = np.flatnonzero(on_stack)  # bottom to top, all available
                kept = stack[-M:]
                lost = stack[: max(len(stack) - M, 0)]
                dropped[lost] = True
                num_dropped += len(lost)
                dest = slice(M - len(kept), M)
                memory_pos[c + 1, dest] = kept
                in_chunk = kept >= start
                src_seq[c, dest] = np.where(in_chunk, kept - start, -1)
                # Older entries come from the current memory, where they sit in
                # position order, right-aligned.
                old = memory_pos[c]
                old_slot = np.searchsorted(old, kept, side="left") if len(kept) else kept
                src_mem[c, dest] = np.where(in_chunk, -1, old_slot)
            if num_dropped:
                self.stats.dropped_stack_entries += num_dropped
                self.stats.sequences_with_dropped_entries += 1
        current = memory_pos[:num_chunks]
        return _MemoryLayout(current, (current >= 0).astype(MASK_DTYPE), src_seq, src_mem)

    # --- public API

    def chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[Chunk]:
        """Dense chunks of one sequence (see the class docstring)."""
        x, xt, y, yt, life, memory, num_chunks = self._prepare(inputs, inputs_ttypes, labels, labels_ttypes)
        T, M = self.seq_len, self.mem_len
        C = num_chunks
        positions = np.arange(C * T, dtype=np.int32).reshape(C, T)
        q_types = xt.reshape(C, T)
        q_depth = life.depth.reshape(C, T)
        mem_pos = memory.memory_pos
        mem_index = np.maximum(mem_pos, 0)
        has = mem_pos >= 0
        mem_depth = np.where(has, life.depth[mem_index], 0)
        mem_push = np.where(has, life.push[mem_index], NEVER)
        mem_pop = np.where(has, life.pop[mem_index], NEVER)
        attn_mask, seq_rel = attention_from_vectors(
            positions, q_types, q_depth, positions, q_depth, life.push.reshape(C, T), life.pop.reshape(C, T),
            causal=False, linear_relpos=self.linear_relpos,
        )
        mem_mask, mem_rel = attention_from_vectors(
            positions, q_types, q_depth, mem_pos, mem_depth, mem_push, mem_pop,
            causal=False, linear_relpos=self.linear_relpos,
        )
        if self.transparency_depth >= 0:
            # COMPOSE rows also see never-popped entries of transparent owners
            # inside the constituent: open_pos[i] <= j <= i.
            is_compose = (q_types == tt.CNT1)[..., :, None]
            lo = life.open_pos.reshape(C, T)[..., :, None]
            hi = positions[..., :, None]
            seq_extra = is_compose & life.transparent_owner.reshape(C, T)[..., None, :]
            seq_extra &= (lo <= positions[..., None, :]) & (positions[..., None, :] <= hi)
            mem_extra = is_compose & np.where(has, life.transparent_owner[mem_index], False)[..., None, :]
            mem_extra &= (lo <= mem_pos[..., None, :]) & (mem_pos[..., None, :] <= hi)
            rel = (lambda kp, kd: (positions[..., :, None] - kp[..., None, :]) if self.linear_relpos
                   else (q_depth[..., :, None] - kd[..., None, :]))
            attn_mask = attn_mask | seq_extra
            mem_mask = mem_mask | mem_extra
            seq_rel = np.where(attn_mask, rel(positions, q_depth), 0)
            mem_rel = np.where(mem_mask, rel(mem_pos, mem_depth), 0)
        attn_relpos = np.concatenate([mem_rel, seq_rel], axis=-1).astype(RELPOS_DTYPE)
        indicator = (q_types == tt.CNT1) if self.distinct_compose else np.zeros_like(q_types, bool)
        mem_from_seq = one_hot_selection(memory.mem_src_seq, T)
        mem_from_mem = one_hot_selection(memory.mem_src_mem, M)
        return [
            Chunk(
                inputs=x[c * T:(c + 1) * T],
                inputs_ttypes=xt[c * T:(c + 1) * T],
                labels=y[c * T:(c + 1) * T],
                labels_ttypes=yt[c * T:(c + 1) * T],
                attn_mask=attn_mask[c].astype(MASK_DTYPE),
                attn_relpos=attn_relpos[c],
                attn_indicator=indicator[c].astype(MASK_DTYPE),
                memory_attn_mask=mem_mask[c].astype(MASK_DTYPE),
                memory_padding_mask=memory.memory_padding_mask[c],
                memory_pos=mem_pos[c],
                depth=q_depth[c].astype(RELPOS_DTYPE),
                beginning_of_seq=np.asarray(int(c == 0), MASK_DTYPE),
                end_of_seq=np.asarray(int(c == C - 1), MASK_DTYPE),
                mem_from_seq=mem_from_seq[c],
                mem_from_mem=mem_from_mem[c],
                mem_src_seq=memory.mem_src_seq[c],
                mem_src_mem=memory.mem_src_mem[c],
            )
            for c in range(C)
        ]

    def compact_chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[CompactChunk]:
        """Compact chunks of one sequence; `expand(c)` equals the matching dense chunk."""
        if self.transparency_depth >= 0:
            raise NotImplementedError(
                "the compact form does not cover transparency; use .chunks() (dense) with transparency_depth"
            )
        x, xt, y, yt, life, memory, num_chunks = self._prepare(inputs, inputs_ttypes, labels, labels_ttypes)
        T = self.seq_len
        C = num_chunks
        mem_pos = memory.memory_pos
        mem_index = np.maximum(mem_pos, 0)
        has = mem_pos >= 0
        depth = life.depth.astype(RELPOS_DTYPE)
        push = life.push.astype(np.int32)
        pop = life.pop.astype(np.int32)
        mem_depth = np.where(has, depth[mem_index], 0).astype(RELPOS_DTYPE)
        mem_push = np.where(has, push[mem_index], NEVER).astype(np.int32)
        mem_pop = np.where(has, pop[mem_index], NEVER).astype(np.int32)
        flags = dict(
            causal=np.asarray(0, MASK_DTYPE),
            linear_relpos=np.asarray(int(self.linear_relpos), MASK_DTYPE),
            distinct_compose=np.asarray(int(self.distinct_compose), MASK_DTYPE),
        )
        out = []
        for c in range(C):
            seg = slice(c * T, (c + 1) * T)
            out.append(
                CompactChunk(
                    inputs=x[seg], inputs_ttypes=xt[seg], labels=y[seg], labels_ttypes=yt[seg],
                    position=np.arange(c * T, (c + 1) * T, dtype=np.int32),
                    depth=depth[seg], push_time=push[seg], pop_time=pop[seg],
                    memory_pos=mem_pos[c], memory_padding_mask=memory.memory_padding_mask[c],
                    memory_depth=mem_depth[c], memory_push_time=mem_push[c], memory_pop_time=mem_pop[c],
                    mem_src_seq=memory.mem_src_seq[c], mem_src_mem=memory.mem_src_mem[c],
                    beginning_of_seq=np.asarray(int(c == 0), MASK_DTYPE),
                    end_of_seq=np.asarray(int(c == C - 1), MASK_DTYPE),
                    **flags,
                )
            )
        return out


class TXLMasking:
    """The Transformer-XL baseline: causal mask, relative position i - j, shifted memory.

    For Choe–Charniak action sequences (TXL (CC)) and for terminals only (TXL
    (terminals)) alike: nothing is duplicated. The memory of segment tau + 1
    holds the last M positions before it.
    """

    def __init__(self, seq_len: int, mem_len: int):
        _check_lengths(seq_len, mem_len)
        self.seq_len = int(seq_len)
        self.mem_len = int(mem_len)
        self.stats = MaskingStats()

    def __repr__(self) -> str:
        return f"TXLMasking(seq_len={self.seq_len}, mem_len={self.mem_len})"

    def compact_chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[CompactChunk]:
        x, xt, y, yt = _as_int_arrays(inputs, inputs_ttypes, labels, labels_ttypes)
        tt.check_types(xt, allow_cnt2=True, where="inputs_ttypes")
        T, M = self.seq_len, self.mem_len
        nonzero = np.flatnonzero(x != 0)
        if not nonzero.size:
            raise ValueError("TXL sequence: every input token id is 0 (padding)")
        C = -(-(int(nonzero[-1]) + 1) // T)
        total = C * T
        pad = total - len(x)
        if pad > 0:
            x, xt, y, yt = (np.concatenate([a, np.zeros(pad, a.dtype)]) for a in (x, xt, y, yt))
        else:
            x, xt, y, yt = x[:total], xt[:total], y[:total], yt[:total]
        self.stats.sequences += 1
        self.stats.chunks += C
        self.stats.input_tokens += int(np.count_nonzero(inputs_ttypes))
        slots = np.arange(M, dtype=np.int32)
        zeros_t = np.zeros(T, RELPOS_DTYPE)
        never_t = np.full(T, NEVER, np.int32)
        out = []
        for c in range(C):
            start = c * T
            seg = slice(start, start + T)
            mem_pos = start - M + slots
            has = mem_pos >= 0
            mem_pos = np.where(has, mem_pos, -1).astype(np.int32)
            nxt = start + T - M + slots
            src_seq = np.where(nxt >= start, nxt - start, -1).astype(np.int32)
            src_mem = np.where((nxt < start) & (nxt >= 0), slots + T, -1).astype(np.int32)
            out.append(
                CompactChunk(
                    inputs=x[seg], inputs_ttypes=xt[seg], labels=y[seg], labels_ttypes=yt[seg],
                    position=np.arange(start, start + T, dtype=np.int32),
                    depth=zeros_t, push_time=np.arange(start, start + T, dtype=np.int32), pop_time=never_t,
                    memory_pos=mem_pos,
                    memory_padding_mask=(has & (x[np.maximum(mem_pos, 0)] > 0)).astype(MASK_DTYPE),
                    memory_depth=np.zeros(M, RELPOS_DTYPE),
                    memory_push_time=np.where(has, mem_pos, NEVER).astype(np.int32),
                    memory_pop_time=np.full(M, NEVER, np.int32),
                    mem_src_seq=src_seq, mem_src_mem=src_mem,
                    beginning_of_seq=np.asarray(int(c == 0), MASK_DTYPE),
                    end_of_seq=np.asarray(int(c == C - 1), MASK_DTYPE),
                    causal=np.asarray(1, MASK_DTYPE),
                    linear_relpos=np.asarray(1, MASK_DTYPE),
                    distinct_compose=np.asarray(0, MASK_DTYPE),
                )
            )
        return out

    def chunks(self, inputs, inputs_ttypes, labels, labels_ttypes) -> list[Chunk]:
        """Dense chunks; for TXL these are the compact ones expanded (the rule is that simple)."""
        return [expand(c) for c in self.compact_chunks(inputs, inputs_ttypes, labels, labels_ttypes)]


def stack_batch(chunks: list) -> Any:
    """Stack a list of `Chunk`s (or `CompactChunk`s) into one with a leading batch axis."""
    cls = type(chunks[0])
    return cls(*(np.stack(field) for field in zip(*chunks)))
