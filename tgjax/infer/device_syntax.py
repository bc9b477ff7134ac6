"""Per-hypothesis Choe–Charniak syntax state on the device: allowed actions, successors, and what attention needs.

The device beam engine (`tgjax.infer.device_beam`) keeps every hypothesis as
a few small fixed-size arrays and never runs a host masking rule inside the
search. This module is that state and its rules, in `jax.numpy`, for ONE
hypothesis (the engine `vmap`s it over `[batch, capacity]`):

`TreeState` — the parse, shared by every ensemble member:
  labels `[D]`, non_empty `[D]`: the open constituents (innermost at
  `depth - 1`), whether each has a child yet; `depth`: how many are open
  (the root included); `opens`: opening non-terminals in a row at the end.

`LayoutState` — one model's layout of the prefix (TG duplicates each closing
non-terminal into CNT1 + CNT2, TXL (CC) does not), with `C` = capacity slots:
  length: layout positions whose layer inputs are in the cache (position 0
    is BOS);
  pending_ids / pending_types `[Q]`, num_pending: the positions of the last
    action, chosen but not yet run through the model (the engine runs them
    together with the next word's pieces, as `PrefixScorer` does);
  key_depth, key_push, key_pop `[C]`: per layout position, its depth, the
    position it is pushed at (NEVER: a CNT2, or not written yet) and the
    position of the CNT1 that popped it (NEVER: still live, or never
    pushed), i.e. the compact form of `tgjax.syntax.masks.TGMasking`, known
    as of the hypothesis's last action. Pops are written when the closing
    action is taken, so a query at time i sees exactly the keys with
    `push <= i < pop` (STACK) or `pop == i` (COMPOSE at a CNT1), as the
    host rule's whole-sequence layout gives for i;
  open_pos `[D]`: the layout position of each open constituent's ONT (TG:
    a CNT1 at position p pops every live key at or after it);
  mem_pos `[C]`, mem_len: the memory map, the layout position whose keys
    and values memory slot j of the hypothesis's cache holds (j < mem_len).
    By default every cached position, in order (mem_pos[j] = j). With
    `stack_only` (a TG model whose every head and layer uses the
    STACK/COMPOSE rule) only the positions a later query can still attend
    to: the stack. A later query at i attends to keys with push <= i < pop
    (STACK) or pop == i (COMPOSE), so a popped key (pop already run) or a
    never-pushed CNT2 is never read again; when the model has run the
    pending positions (`commit`), the keys the pending CNT1 popped are
    dropped (they are the top of the stack: the kept ones stay a prefix)
    and the pushed pending ones appended. The memory then holds about the
    stack's depth of slots (a dozen) instead of every position so far
    (hundreds), and the mask rebuilt from the slots' own position, depth,
    push and pop is the same row restricted to the keys it can be true on.

The TG rule restated for one step (Sartran et al. 2022, Algorithm 1; the
host reference is `masks._lifetimes`): an ONT or a word piece at p is
pushed at p with depth = open constituents before it + 1; a closing action
at p is CNT1 (pushed, depth = its ONT's) then CNT2 at p + 1 (never pushed,
same depth); the CNT1 pops every live key from its ONT on. TXL (CC): one
position per action, depth 0, pushed at its position, never popped (the
causal rule reads positions only).

`model_fields` turns a state into what `TransformerLM` reads for one step
(`tgjax.models.transformer_lm.attention_inputs`): a window of `S` new
positions (the pending ones, then the next word's pieces but the last, then
padding) and the `C` memory slots (cached positions; empty ones get
position -1), so the model's own `attention_from_vectors` rebuilds the
STACK/COMPOSE (or causal) rows and relative positions on device.

Action codes are `ChoeCharniakFamily`'s: l < L open label l, L close the
innermost constituent, L + 1 the next word. Records of what was taken use
`CCState.actions`' codes (l, L + label for a close, 2L for a word).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

NEVER = int(masks.NEVER)


class TreeState(NamedTuple):
    """The parse of one hypothesis (see the module docstring); `[D]` = max open constituents."""

    labels: jnp.ndarray  # [D] int32
    non_empty: jnp.ndarray  # [D] bool
    depth: jnp.ndarray  # int32
    opens: jnp.ndarray  # int32


class LayoutState(NamedTuple):
    """One model's layout of a hypothesis's prefix (see the module docstring); `[C]` capacity, `[Q]` pending width."""

    length: jnp.ndarray  # int32
    pending_ids: jnp.ndarray  # [Q] int32
    pending_types: jnp.ndarray  # [Q] int32
    num_pending: jnp.ndarray  # int32
    key_depth: jnp.ndarray  # [C] int32
    key_push: jnp.ndarray  # [C] int32
    key_pop: jnp.ndarray  # [C] int32
    open_pos: jnp.ndarray  # [D] int32
    mem_pos: jnp.ndarray  # [C] int32
    mem_len: jnp.ndarray  # int32


class Caps(NamedTuple):
    """Static sizes and rules of a search (hashable: a jit static argument).

    Attributes:
      num_labels: L.
      max_open_nts, max_consecutive_opens: the well-formedness caps (as `BeamConfig`).
      capacity: C, layout positions a hypothesis may use.
      max_pieces: the most pieces of one word in the batch (1 for a word dictionary).
      stack_slots: the memory slots of a `stack_only` layout (its stack; 0: the capacity).
    """

    num_labels: int
    max_open_nts: int
    max_consecutive_opens: int
    capacity: int
    max_pieces: int
    stack_slots: int = 0

    def memory_slots(self, stack_only: bool) -> int:
        """The memory slots a layout's cache holds: every position, or with `stack_only` the stack's."""
        return min(self.stack_slots or self.capacity, self.capacity) if stack_only else self.capacity

    @property
    def pending_width(self) -> int:
        """Q: the most positions one action takes (a TG close: 2; a word: its pieces)."""
        return max(2, self.max_pieces)

    @property
    def window(self) -> int:
        """S: new positions per model call: the pending ones and the next word's pieces but its last."""
        return self.pending_width + self.max_pieces - 1


def initial_tree(caps: Caps) -> TreeState:
    D = caps.max_open_nts
    return TreeState(jnp.zeros(D, jnp.int32), jnp.zeros(D, bool), jnp.int32(0), jnp.int32(0))


def initial_layout(caps: Caps, bos_id: int) -> LayoutState:
    """Nothing cached; BOS (position 0, depth 0, pushed at 0, never popped) pending."""
    Q, C, D = caps.pending_width, caps.capacity, caps.max_open_nts
    pending_ids = jnp.zeros(Q, jnp.int32).at[0].set(bos_id)
    pending_types = jnp.full(Q, tt.PAD, jnp.int32).at[0].set(tt.BOS)
    return LayoutState(jnp.int32(0), pending_ids, pending_types, jnp.int32(1), jnp.zeros(C, jnp.int32),
                       jnp.full(C, NEVER, jnp.int32).at[0].set(0), jnp.full(C, NEVER, jnp.int32),
                       jnp.zeros(D, jnp.int32), jnp.arange(C, dtype=jnp.int32), jnp.int32(0))


def close_width(tg: bool) -> int:
    """Layout positions of one closing non-terminal: 2 for TG (CNT1, CNT2), 1 for TXL."""
    return 2 if tg else 1


def allowed(tree: TreeState, caps: Caps, finishing) -> jnp.ndarray:
    """`[L + 2]` bool: the actions `ChoeCharniakFamily.allowed` allows (finishing: only closes, the root's too)."""
    L = caps.num_labels
    can_open = (tree.depth < caps.max_open_nts) & (tree.opens < caps.max_consecutive_opens)
    top_non_empty = tree.non_empty[jnp.maximum(tree.depth - 1, 0)]
    can_close = jnp.where(finishing, tree.depth >= 1, (tree.depth >= 2) & top_non_empty)
    can_word = tree.depth >= 1
    not_finishing = jnp.logical_not(finishing)
    return jnp.concatenate([jnp.broadcast_to(can_open & not_finishing, (L,)),
                            jnp.stack([can_close, can_word & not_finishing])])


def fits(layout: LayoutState, tree: TreeState, caps: Caps, tg: bool, word_pieces, later_pieces,
         stack_only: bool = False) -> jnp.ndarray:
    """`[L + 2]` bool: after the action, the hypothesis can still end within `caps.capacity` positions.

    Counts the positions after the action (the cached ones, the pending
    ones, the action's), the later words' pieces (`later_pieces`: words
    after the next one) and closing everything then open. Conservative by
    one close (the very last is never run). With `stack_only`, also: the
    action's pushed positions fit in the `caps.stack_slots` memory slots
    (`layout` committed; a close pops its constituent's keys first, so
    it always fits).
    """
    used = layout.length + layout.num_pending
    cw = close_width(tg)
    after_open = used + 1 + word_pieces + later_pieces + cw * (tree.depth + 1)
    after_close = used + cw + word_pieces + later_pieces + cw * (tree.depth - 1)
    after_word = used + word_pieces + later_pieces + cw * tree.depth
    C = caps.capacity
    open_ok, word_ok = after_open <= C, after_word <= C
    if stack_only:
        slots = caps.memory_slots(True)
        open_ok &= layout.mem_len + 1 <= slots
        word_ok &= layout.mem_len + word_pieces <= slots
    return jnp.concatenate([jnp.broadcast_to(open_ok, (caps.num_labels,)), jnp.stack([after_close <= C, word_ok])])


def advance_tree(tree: TreeState, action, caps: Caps) -> tuple[TreeState, jnp.ndarray]:
    """The parse after `action` (an allowed one), and the record code (l, L + label, or 2L)."""
    L = caps.num_labels
    d = tree.depth
    top = jnp.maximum(d - 1, 0)
    is_open, is_close = action < L, action == L
    opened = TreeState(tree.labels.at[jnp.minimum(d, caps.max_open_nts - 1)].set(action),
                       tree.non_empty.at[jnp.minimum(d, caps.max_open_nts - 1)].set(False), d + 1, tree.opens + 1)
    # Closing the innermost makes its parent non-empty (nothing to mark when the root closes).
    parent = jnp.maximum(d - 2, 0)
    closed = TreeState(tree.labels, tree.non_empty.at[parent].set(tree.non_empty[parent] | (d >= 2)), d - 1,
                       jnp.int32(0))
    worded = TreeState(tree.labels, tree.non_empty.at[top].set(True), d, jnp.int32(0))
    pick = lambda a, b, c: jnp.where(is_open, a, jnp.where(is_close, b, c))
    new = TreeState(*(pick(a, b, c) for a, b, c in zip(opened, closed, worded)))
    record = pick(action, L + tree.labels[top], 2 * L)
    return new, record.astype(jnp.int32)


def memory_writes(layout: LayoutState, caps: Caps, stack_only: bool = False) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Where the pending positions go in the memory once run: slots `[Q]` (C: not kept) and the new mem_len.

    Default: every pending position, after the cached ones. `stack_only`:
    the slots whose keys the pending CNT1 pops are freed first (the kept
    ones are a prefix), then the pushed pending positions (an ONT, a word's
    pieces, a CNT1; never a CNT2, the last of a close) take the next slots.
    """
    C, Q = caps.capacity, caps.pending_width
    q = jnp.arange(Q)
    live_q = q < layout.num_pending
    if stack_only:
        held = jnp.arange(C) < layout.mem_len
        kept = jnp.sum(held & (layout.key_pop[layout.mem_pos] == NEVER)).astype(jnp.int32)
        keep_q = live_q & (layout.key_push[jnp.minimum(layout.length + q, C - 1)] != NEVER)
    else:
        kept, keep_q = layout.mem_len, live_q
    return jnp.where(keep_q, kept + q, C).astype(jnp.int32), (kept + jnp.sum(keep_q)).astype(jnp.int32)


def commit(layout: LayoutState, ran, caps: Caps, stack_only: bool = False) -> LayoutState:
    """After the model ran the pending positions (where `ran`): they are cached, and in the memory map."""
    committed = layout._replace(length=jnp.where(ran, layout.length + layout.num_pending, layout.length),
                                num_pending=jnp.where(ran, 0, layout.num_pending))
    slots, mem_len = memory_writes(layout, caps, stack_only)
    mem_pos = layout.mem_pos.at[slots].set(layout.length + jnp.arange(caps.pending_width, dtype=jnp.int32),
                                           mode="drop")
    return committed._replace(mem_pos=jnp.where(ran, mem_pos, layout.mem_pos),
                              mem_len=jnp.where(ran, mem_len, layout.mem_len))


def advance_layout(layout: LayoutState, tree: TreeState, action, caps: Caps, tg: bool, open_ids, close_ids,
                   word_ids, word_types, num_pieces) -> LayoutState:
    """The layout after `action` from a committed layout (`num_pending == 0`); `tree` is the parse before it.

    Args:
      open_ids, close_ids: `[L]` model ids of `(label` and `label)`.
      word_ids, word_types: `[P]` the next word's pieces (ids, token types); num_pieces: how many.
    """
    L, Q, C = caps.num_labels, caps.pending_width, caps.capacity
    p = layout.length
    d = tree.depth
    top = jnp.maximum(d - 1, 0)
    is_open, is_close = action < L, action == L
    q = jnp.arange(Q)
    label = jnp.clip(action, 0, L - 1)
    close_id = close_ids[tree.labels[top]]
    cw = close_width(tg)
    # Pending positions of the action.
    word_ids_q = jnp.zeros(Q, jnp.int32).at[:word_ids.shape[0]].set(word_ids)
    word_types_q = jnp.full(Q, tt.PAD, jnp.int32).at[:word_types.shape[0]].set(word_types)
    close_types = jnp.where(q == 0, tt.CNT1, tt.CNT2) if tg else jnp.full(Q, tt.CLOSING_NT)
    num = jnp.where(is_open, 1, jnp.where(is_close, cw, num_pieces))
    ids = jnp.where(is_open, open_ids[label], jnp.where(is_close, close_id, word_ids_q))
    types = jnp.where(is_open, tt.OPENING_NT, jnp.where(is_close, close_types, word_types_q))
    live_q = q < num
    ids = jnp.where(live_q, ids, 0).astype(jnp.int32)
    types = jnp.where(live_q, types, tt.PAD).astype(jnp.int32)
    # Their key fields, written at positions p .. p + num - 1 (others dropped).
    slot = jnp.where(live_q, p + q, C)
    if tg:
        depth = jnp.where(is_open, d + 1, jnp.where(is_close, d, d + 1))
        push = jnp.where(types == tt.CNT2, NEVER, p + q)
    else:
        depth = jnp.zeros((), jnp.int32)
        push = p + q
    key_depth = layout.key_depth.at[slot].set(jnp.broadcast_to(depth, (Q,)).astype(jnp.int32), mode="drop")
    key_push = layout.key_push.at[slot].set(push.astype(jnp.int32), mode="drop")
    key_pop, open_pos = layout.key_pop, layout.open_pos
    if tg:
        # A CNT1 at p pops every live key from its ONT on.
        j = jnp.arange(C)
        live = (j < p) & (layout.key_push != NEVER) & (layout.key_pop == NEVER)
        popped = is_close & live & (j >= layout.open_pos[top])
        key_pop = jnp.where(popped, p, key_pop)
        open_pos = jnp.where(is_open, open_pos.at[jnp.minimum(d, caps.max_open_nts - 1)].set(p), open_pos)
    return LayoutState(p, ids, types, num.astype(jnp.int32), key_depth, key_push, key_pop, open_pos, layout.mem_pos,
                       layout.mem_len)


def model_fields(layout: LayoutState, tree: TreeState, caps: Caps, tg: bool, word_ids, word_types, num_pieces,
                 memory_slots: int | None = None):
    """One step's model inputs for one hypothesis: the window `[S]`, the memory keys `[C]`, and what to read.

    The window is the pending positions, then the next word's pieces but the
    last (`num_pieces` of `word_ids [P]`; 0 pieces: none), then padding; the
    memory slots are the memory map's (`mem_pos`, `mem_len`: the cached
    positions, or with `stack_only` the stack's), others empty; only the
    first `memory_slots` (default: all C) are given, when `mem_len` is
    below it.
    Returns `(fields, reads [P], targets [P])`: `fields` has `inputs`,
    `inputs_ttypes`, `position`, `depth`, `push_time`, `pop_time` `[S]` and
    `memory_pos`, `memory_depth`, `memory_push_time`, `memory_pop_time`
    `[memory_slots]` (the keys of `TransformerLM`'s compact batch); `reads[k]` is the
    window index that predicts piece k (reads[0] predicts the next action),
    `targets[k]` the piece's id.
    """
    S, C, P = caps.window, caps.capacity, caps.max_pieces
    n = layout.num_pending
    s = jnp.arange(S)
    k = s - n
    is_pending = s < n
    is_piece = (k >= 0) & (k < num_pieces - 1)
    kk = jnp.clip(k, 0, P - 1)
    sq = jnp.minimum(s, caps.pending_width - 1)
    position = layout.length + s
    inputs = jnp.where(is_pending, layout.pending_ids[sq], jnp.where(is_piece, word_ids[kk], 0))
    ttypes = jnp.where(is_pending, layout.pending_types[sq], jnp.where(is_piece, word_types[kk], tt.PAD))
    at = jnp.minimum(position, C - 1)
    if tg:
        depth = jnp.where(is_pending, layout.key_depth[at], jnp.where(is_piece, tree.depth + 1, 0))
        push = jnp.where(is_pending, layout.key_push[at], jnp.where(is_piece, position, NEVER))
    else:
        depth = jnp.zeros(S, jnp.int32)
        push = position
    M = C if memory_slots is None else memory_slots
    held = jnp.arange(M) < layout.mem_len
    pos = layout.mem_pos[:M]
    fields = {
        "inputs": inputs.astype(jnp.int32), "inputs_ttypes": ttypes.astype(jnp.int32),
        "position": position.astype(jnp.int32), "depth": depth.astype(jnp.int32), "push_time": push.astype(jnp.int32),
        "pop_time": jnp.full(S, NEVER, jnp.int32),
        "memory_pos": jnp.where(held, pos, -1).astype(jnp.int32),
        "memory_depth": jnp.where(held, layout.key_depth[pos], 0),
        "memory_push_time": jnp.where(held, layout.key_push[pos], NEVER),
        "memory_pop_time": jnp.where(held, layout.key_pop[pos], NEVER),
    }
    reads = jnp.minimum(n - 1 + jnp.arange(P), S - 1).astype(jnp.int32)
    targets = jnp.where(jnp.arange(P) < num_pieces, word_ids, 0).astype(jnp.int32)
    return fields, reads, targets


__all__ = ["Caps", "LayoutState", "NEVER", "TreeState", "advance_layout", "advance_tree", "allowed", "close_width",
           "commit", "fits", "initial_layout", "initial_tree", "memory_writes", "model_fields"]
