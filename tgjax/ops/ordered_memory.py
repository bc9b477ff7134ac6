"""The Ordered Memory recurrence (Shen et al., NeurIPS 2019; Shen's thesis §3.5) as one `lax.scan`.

N memory slots of size D, indexed 0..N-1 here; slot N-1 is the bottom of the
stack (the root) and smaller indices are nearer the top. The state carried
from step t-1 to t is the committed memory M [B, N, D], the candidate memory
M^ [B, N, D] and the cumulative pointer pi [B, N]. One step, with x~_t the
projected input:

    x~_t   = LN(x_t W_in + b_in)                                    [B, D]
    beta_i = (w . ReLU(q_t + k_{t,i}) + b) / sqrt(D)                [B, N]
             q_t = x~_t W_q + b_q,  k_{t,i} = M^_{t-1,i} W_k + b_k
    mask_i = pi_{t-1,i+1} for i < N-1, mask_{N-1} = 1               (one slot up at most)
    p_t    = mask * exp(beta) / sum(mask * exp(beta))               pointer [B, N], sums to 1
    pi_t   = cumsum_i p_t      (1 at and below the pointer)
    pi~_t  = reverse cumsum_i p_t (1 at and above the pointer)
    M_t    = (1 - pi~_t) M_{t-1} + pi~_t M^_{t-1}                   commit last step's candidates
    c_{-1} = x~_t;  c_i = (1 - pi_{t,i}) x~_t + pi_{t,i} Cell(c_{i-1}, M_{t,i}),  M^_{t,i} = c_i
    o_t    = M^_{t,N-1}                                             the root slot
    Cell(v, h) = LN(sig(g_v) v + sig(g_h) h + sig(g_c) u),
                 [g_v; g_h; g_c; u] = ReLU([v; h] W_1 + b_1) W_2 + b_2     (W_1: 2D x 4D, W_2: 4D x 4D)

The LN of the input projection and of the cell output are one LayerNorm
(shared parameters), in the thesis and in the release. The first step has no
previous pointer: p = 0, pi = 0, pi~ = 1, so M_1 = M^_0 = 0 and every
candidate M^_{1,i} = x~_1. The *one-step look-ahead*: M^_{t-1} holds x_{t-1}
composed with 0, 1, 2, ... stack elements; p_t, queried with x_t, picks which
of them to commit, so how far x_{t-1} reduces is decided after seeing x_t.

Thesis and release (released-code.md §3.1, §3.6) differ in three places.
The default follows the thesis; each release behaviour is a named switch,
and `RELEASE` holds all three:

* `query_key_norm` (default False): the thesis feeds the pair (x~_t, M^_i) to
  one feed-forward net, i.e. q + k without normalisation (thesis eqs.
  3.5.8-3.5.9, whose symbols were lost in the text; restated from the NeurIPS
  version). The release puts separate affine LayerNorms on q and on k.
* `mask_floor` (default 0): the release zeroes mask entries below 1e-5, so
  soft pointer mass that has almost vanished stops being reachable.
* `padding` (default "carry"): at a padded step (valid False) the state is
  carried unchanged, and each sequence's own first real token takes the
  first-step path, so padding on either side changes nothing. "zero" is the
  release: padded steps set p, pi, M, M^ and the output to 0, and only the
  batch's step 0 takes the first-step path; a left-padded sequence then sees
  a zero pointer at its first real token, whose mask forces the pointer to
  the root slot (released-code.md §3.6 quirk 1), so left padding changes
  its result.

Numerics: the masked softmax is computed as softmax(beta + log mask) over the
reachable slots (the same distribution; the release's exp(beta - max beta)
over all slots can underflow to an all-zero pointer). The release's shortcut
of skipping Cell on slots with pi = 0 is not taken (it is exact: those slots
equal x~_t anyway).

Dropout (the release's `dropoutm` in the attention and `dropout` in the cell)
is applied when `dropout_key` is given: on x~ before W_q, on M^ before W_k and
after the scorer's ReLU (rate `attention_dropout`), and on [v; h] and after
the cell's ReLU (rate `cell_dropout`), a fresh mask per step and slot.

`ordered_memory_step` is one step on an `OrderedMemoryState` (from
`initial_state`) and a projected input (`project_inputs`);
`ordered_memory_scan` projects every input at once and scans the step over
time. `pointer_distances` + `pointer_tree` read a binary tree off the pointers
(released-code.md §3.2).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["RELEASE", "OrderedMemoryOutput", "OrderedMemoryParams", "OrderedMemoryState", "initial_state",
           "ordered_memory_scan", "ordered_memory_step", "project_inputs",
           "pointer_distances", "pointer_tree"]

LAYER_NORM_EPS = 1e-5  # PyTorch's nn.LayerNorm default, as in the release

# The release's behaviour, for `ordered_memory_scan(..., **RELEASE)`.
RELEASE = {"query_key_norm": True, "mask_floor": 1e-5, "padding": "zero"}


class OrderedMemoryParams(NamedTuple):
    """The cell's parameters, weights in JAX's [in, out] layout. D = slot size, D_in = input size."""

    w_in: jax.Array  # [D_in, D] input projection
    b_in: jax.Array  # [D]
    ln_scale: jax.Array  # [D] the shared LayerNorm (input projection and cell output)
    ln_bias: jax.Array  # [D]
    w_q: jax.Array  # [D, D] pointer scorer: query map
    b_q: jax.Array  # [D]
    w_k: jax.Array  # [D, D] key map (applied to each candidate slot)
    b_k: jax.Array  # [D]
    ln_q_scale: jax.Array  # [D] LayerNorm on q (only with query_key_norm, the release)
    ln_q_bias: jax.Array  # [D]
    ln_k_scale: jax.Array  # [D] LayerNorm on k (only with query_key_norm)
    ln_k_bias: jax.Array  # [D]
    w_score: jax.Array  # [D] the scalar score of ReLU(q + k)
    b_score: jax.Array  # [] its bias
    w_1: jax.Array  # [2D, 4D] gated recursive cell, first layer on [v; h]
    b_1: jax.Array  # [4D]
    w_2: jax.Array  # [4D, 4D] second layer -> [g_v; g_h; g_c; u]
    b_2: jax.Array  # [4D]


class OrderedMemoryOutput(NamedTuple):
    outputs: jax.Array  # [B, T, D] root-slot output o_t (0 at padded steps)
    final_output: jax.Array  # [B, D] o_t at each sequence's last real step (0 if it has none)
    pointer: jax.Array  # [B, T, N] p_t (0 at first steps and padded steps)
    cumulative: jax.Array  # [B, T, N] pi_t = cumsum p_t
    reverse_cumulative: jax.Array  # [B, T, N] pi~_t (1 at first steps)
    memory: jax.Array  # [B, N, D] M after the last step
    candidates: jax.Array  # [B, N, D] M^ after the last step


def _layer_norm(z, scale, bias):
    mean = jnp.mean(z, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(z - mean), axis=-1, keepdims=True)
    return (z - mean) * lax.rsqrt(var + LAYER_NORM_EPS) * scale + bias


def _dropout(key, rate, z):
    if key is None or rate == 0.0:
        return z
    keep = jax.random.bernoulli(key, 1.0 - rate, z.shape)
    return jnp.where(keep, z / (1.0 - rate), 0.0)


def _pointer_scores(params, x_proj, candidates, query_key_norm, key, rate):
    """beta [B, N] from x~ [B, D] and the candidate slots M^ [B, N, D]."""
    keys = jax.random.split(key, 3) if key is not None else (None,) * 3
    query = _dropout(keys[0], rate, x_proj) @ params.w_q + params.b_q  # [B, D]
    slot_keys = _dropout(keys[1], rate, candidates) @ params.w_k + params.b_k  # [B, N, D]
    if query_key_norm:
        query = _layer_norm(query, params.ln_q_scale, params.ln_q_bias)
        slot_keys = _layer_norm(slot_keys, params.ln_k_scale, params.ln_k_bias)
    hidden = _dropout(keys[2], rate, jax.nn.relu(query[:, None, :] + slot_keys))
    return (hidden @ params.w_score + params.b_score) / jnp.sqrt(jnp.asarray(x_proj.shape[-1], x_proj.dtype))


def _masked_pointer(scores, cumulative_prev, mask_floor):
    """p [B, N]: softmax of scores over the slots reachable from the previous pointer.

    The mask is pi_{t-1} shifted up by one slot (mask_i = pi_{t-1,i+1}) with the
    root slot always reachable: the new pointer may sit at most one slot above
    the previous one (a push), or anywhere below it (reduces).
    """
    ones = jnp.ones_like(cumulative_prev[:, :1])
    mask = jnp.concatenate([cumulative_prev[:, 1:], ones], axis=1)
    if mask_floor > 0.0:
        mask = jnp.where(mask < mask_floor, 0.0, mask)
    reachable = mask > 0.0
    log_mask = jnp.log(jnp.where(reachable, mask, 1.0))
    logits = jnp.where(reachable, scores + log_mask, -jnp.inf)
    return jax.nn.softmax(logits, axis=-1)


def _cell(params, vertical, horizontal, key, rate):
    """Cell(v [B, D], h [B, D]) -> [B, D], the gated recursive cell."""
    D = vertical.shape[-1]
    keys = jax.random.split(key) if key is not None else (None, None)
    both = _dropout(keys[0], rate, jnp.concatenate([vertical, horizontal], axis=-1))
    hidden = _dropout(keys[1], rate, jax.nn.relu(both @ params.w_1 + params.b_1))
    gates = hidden @ params.w_2 + params.b_2
    gate_v, gate_h, gate_c, update = (gates[:, k * D : (k + 1) * D] for k in range(4))
    mixed = jax.nn.sigmoid(gate_v) * vertical + jax.nn.sigmoid(gate_h) * horizontal + jax.nn.sigmoid(gate_c) * update
    return _layer_norm(mixed, params.ln_scale, params.ln_bias)


def _new_candidates(params, x_proj, memory, cumulative, key, rate):
    """M^_t [B, N, D]: the recursion from the top slot (0) down to the root (N-1)."""
    N = memory.shape[1]

    def down_one_slot(composed_above, slot):
        memory_i, cumulative_i, index = slot
        slot_key = jax.random.fold_in(key, index) if key is not None else None
        composed = _cell(params, composed_above, memory_i, slot_key, rate)
        c_i = (1.0 - cumulative_i[:, None]) * x_proj + cumulative_i[:, None] * composed
        return c_i, c_i

    slots = (jnp.swapaxes(memory, 0, 1), jnp.swapaxes(cumulative, 0, 1), jnp.arange(N))
    _, candidates = lax.scan(down_one_slot, x_proj, slots)
    return jnp.swapaxes(candidates, 0, 1)


class OrderedMemoryState(NamedTuple):
    """What one step hands to the next."""

    memory: jax.Array  # [B, N, D] committed memory M
    candidates: jax.Array  # [B, N, D] candidate memory M^
    cumulative: jax.Array  # [B, N] pi of the last step (the next mask, shifted)
    started: jax.Array  # [B] bool: a previous pointer exists (False = take the first-step path)
    last_output: jax.Array  # [B, D] root output at the last real step


def initial_state(batch_size: int, n_slots: int, slot_size: int, dtype=jnp.float32) -> OrderedMemoryState:
    """The empty memory: M = M^ = 0, no previous pointer."""
    slots = jnp.zeros((batch_size, n_slots, slot_size), dtype)
    return OrderedMemoryState(slots, slots, jnp.zeros((batch_size, n_slots), dtype),
                              jnp.zeros((batch_size,), bool), jnp.zeros((batch_size, slot_size), dtype))


def project_inputs(params: OrderedMemoryParams, x):
    """x~ = LN(x W_in + b_in) with the shared LayerNorm: [..., D_in] -> [..., D]."""
    return _layer_norm(x @ params.w_in + params.b_in, params.ln_scale, params.ln_bias)


def ordered_memory_step(params: OrderedMemoryParams, state: OrderedMemoryState, x_proj, valid_t, *,
                        query_key_norm: bool = False, mask_floor: float = 0.0, padding: str = "carry",
                        dropout_key=None, attention_dropout: float = 0.0, cell_dropout: float = 0.0):
    """One Ordered Memory step (the module docstring's equations), batched.

    x_proj: [B, D] the projected input x~_t (`project_inputs`); valid_t: [B] bool.
    Returns (the next `OrderedMemoryState`, (output [B, D], pointer [B, N],
    cumulative [B, N], reverse_cumulative [B, N])), the last four 0 where not valid_t.
    Arrays must share one float dtype (`ordered_memory_scan` casts them).
    """
    memory_prev, candidates_prev, cumulative_prev, started, last_output = state
    score_key, cell_key = jax.random.split(dropout_key) if dropout_key is not None else (None, None)

    scores = _pointer_scores(params, x_proj, candidates_prev, query_key_norm, score_key, attention_dropout)
    pointer = _masked_pointer(scores, cumulative_prev, mask_floor)
    # The first step has no previous pointer: commit nothing of substance (M^_0 = 0)
    # and leave every candidate equal to x~ (pi = 0, pi~ = 1).
    pointer = jnp.where(started[:, None], pointer, 0.0)
    cumulative = jnp.cumsum(pointer, axis=1)
    reverse_cumulative = jnp.where(started[:, None], jnp.cumsum(pointer[:, ::-1], axis=1)[:, ::-1], 1.0)

    commit = reverse_cumulative[:, :, None]
    memory = (1.0 - commit) * memory_prev + commit * candidates_prev
    candidates = _new_candidates(params, x_proj, memory, cumulative, cell_key, cell_dropout)
    output = candidates[:, -1]

    keep = valid_t[:, None]
    if padding == "carry":  # the thesis: padding passes the state through untouched
        new_state = OrderedMemoryState(
            jnp.where(keep[:, :, None], memory, memory_prev), jnp.where(keep[:, :, None], candidates, candidates_prev),
            jnp.where(keep, cumulative, cumulative_prev), started | valid_t, jnp.where(keep, output, last_output))
    elif padding == "zero":  # the release: padding empties the state, and the first-step path is gone
        new_state = OrderedMemoryState(
            jnp.where(keep[:, :, None], memory, 0.0), jnp.where(keep[:, :, None], candidates, 0.0),
            jnp.where(keep, cumulative, 0.0), jnp.ones_like(started), jnp.where(keep, output, last_output))
    else:
        raise ValueError(f"padding must be 'carry' (thesis) or 'zero' (release), got {padding!r}")
    per_step = (jnp.where(keep, output, 0.0), jnp.where(keep, pointer, 0.0),
                jnp.where(keep, cumulative, 0.0), jnp.where(keep, reverse_cumulative, 0.0))
    return new_state, per_step


def ordered_memory_scan(x, valid, params: OrderedMemoryParams, *, n_slots: int, query_key_norm: bool = False,
                        mask_floor: float = 0.0, padding: str = "carry", dropout_key=None,
                        attention_dropout: float = 0.0, cell_dropout: float = 0.0) -> OrderedMemoryOutput:
    """Run Ordered Memory over a batch of sequences.

    Args:
      x: [B, T, D_in] inputs (embeddings).
      valid: [B, T] bool, False at padding (left or right); None = all real.
      params: `OrderedMemoryParams` (slot size D from `b_in`).
      n_slots: N, the number of memory slots (the maximum stack depth + 1);
        no parameter depends on it, so it may differ between training and test.
      query_key_norm, mask_floor, padding: thesis (default) or release
        behaviour, see the module docstring; `**RELEASE` gives the release's.
      dropout_key: a PRNG key to apply dropout; None = deterministic.
      attention_dropout, cell_dropout: the release's `dropoutm` and `dropout`.

    Returns an `OrderedMemoryOutput`: outputs [B, T, D], final_output [B, D],
    pointer / cumulative / reverse_cumulative [B, T, N], and the last memory
    and candidates [B, N, D].
    """
    if padding not in ("carry", "zero"):
        raise ValueError(f"padding must be 'carry' (thesis) or 'zero' (release), got {padding!r}")
    if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
        raise ValueError(f"n_slots must be a positive int, got {n_slots!r}")
    x = jnp.asarray(x)
    if x.ndim != 3:
        raise ValueError(f"x must be [B, T, D_in], got shape {x.shape}")
    B, T, D_in = x.shape
    params = OrderedMemoryParams(*(jnp.asarray(p) for p in params))
    D = params.b_in.shape[0]
    if params.w_in.shape != (D_in, D):
        raise ValueError(f"w_in must be [D_in, D] = {(D_in, D)}, got {params.w_in.shape}")
    if params.w_1.shape != (2 * D, 4 * D) or params.w_2.shape != (4 * D, 4 * D):
        raise ValueError(f"the cell wants w_1 [2D, 4D] and w_2 [4D, 4D] with D = {D}, "
                         f"got {params.w_1.shape} and {params.w_2.shape}")
    valid = jnp.ones((B, T), bool) if valid is None else jnp.asarray(valid, bool)
    if valid.shape != (B, T):
        raise ValueError(f"valid must be [B, T] = {(B, T)}, got {valid.shape}")
    dtype = jnp.result_type(x, *params)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    x = x.astype(dtype)
    params = OrderedMemoryParams(*(p.astype(dtype) for p in params))
    N = n_slots

    # All input projections at once, time-major: [T, B, D].
    x_proj_all = jnp.swapaxes(project_inputs(params, x), 0, 1)
    options = dict(query_key_norm=query_key_norm, mask_floor=mask_floor, padding=padding,
                   attention_dropout=attention_dropout, cell_dropout=cell_dropout)

    def step(state, inputs):
        x_proj, valid_t, t = inputs
        key_t = jax.random.fold_in(dropout_key, t) if dropout_key is not None else None
        return ordered_memory_step(params, state, x_proj, valid_t, dropout_key=key_t, **options)

    inputs = (x_proj_all, jnp.swapaxes(valid, 0, 1), jnp.arange(T))
    (memory, candidates, _, _, final_output), per_step = lax.scan(step, initial_state(B, N, D, dtype), inputs)
    outputs, pointer, cumulative, reverse_cumulative = (jnp.swapaxes(a, 0, 1) for a in per_step)
    return OrderedMemoryOutput(outputs, final_output, pointer, cumulative, reverse_cumulative, memory, candidates)


def pointer_distances(pointer, valid=None) -> list[list[int]]:
    """Per sentence, the release's distances: argmax_i p_t as a 1-based slot (N = root), the first := N.

    pointer: [B, T, N] (or [T, N] for one sentence); valid: [B, T] or None.
    Padded steps are dropped.
    """
    pointer = np.asarray(pointer)
    if pointer.ndim == 2:
        pointer = pointer[None]
        valid = None if valid is None else np.asarray(valid)[None]
    B, T, N = pointer.shape
    valid = np.ones((B, T), bool) if valid is None else np.asarray(valid, bool)
    result = []
    for b in range(B):
        slots = [int(np.argmax(pointer[b, t])) + 1 for t in range(T) if valid[b, t]]
        if slots:
            slots[0] = N
        result.append(slots)
    return result


def pointer_tree(distances, words=None, label: str | None = None):
    """The release's `build_tree` (released-code.md §3.2): a binary tree as nested lists.

    distances: 1-based pointer slots of one sentence (`pointer_distances`),
    N = the root slot. The stack "head" sits one slot above the last pointer:
    word t is shifted after d = distance_t - head binary reduces of the top
    two stack items (a reduce with fewer than two items does nothing: the
    second word is only placed beside the first), then head = distance_t - 1.
    At the end everything is reduced. `words` default to the positions 0..T-1.
    A one-word sentence is that word; an empty one is [].

    With `label` (e.g. "X"), the result is a `tgjax.syntax.trees.Tree`
    instead: every internal node labelled `label`, the words (as strings) its
    leaves, without preterminals; a one-word sentence is Tree(label, [word]).
    Built without recursion, so deep trees (long ListOps lines) are fine.

    Not the builder of `tgjax.syntax.distance.tree_from_distances` (ON-LSTM's),
    though both read a binary tree off "distances": that one splits a span
    top-down at the first maximum of one real distance per word and hangs the
    split word right-branchingly on the rest of its constituent, so it reaches
    only some binary trees (never `((a b) ((c d) e))`); this one is a
    shift-reduce parse of integer pointer slots (d_t - d_{t-1} + 1 reduces
    before word t) and reaches every binary tree. Neither input nor the trees
    reachable are the same, so both stay (the property test is
    tests/ops/test_ordered_memory.py).
    """
    distances = [int(d) for d in distances]
    words = list(range(len(distances))) if words is None else list(words)
    if len(words) != len(distances):
        raise ValueError(f"{len(words)} words but {len(distances)} distances")
    if not words:
        return []

    if label is not None:
        from tgjax.syntax.trees import Tree  # NumPy-only; imported here so the kernels need none of it

        words = [str(word) for word in words]

    def node(left, right):
        return [left, right] if label is None else Tree(label, [left, right])

    def reduce(stack):
        if len(stack) >= 2:
            right = stack.pop()
            stack[-1] = node(stack[-1], right)

    stack = [words[0]]
    head = distances[0] - 1
    for word, distance in zip(words[1:], distances[1:]):
        for _ in range(distance - head):
            reduce(stack)
        stack.append(word)
        head = distance - 1
    while len(stack) > 1:
        reduce(stack)
    if label is not None and isinstance(stack[0], str):
        return Tree(label, [stack[0]])
    return stack[0]
