"""The device beam engine: word-synchronous beam search as one compiled loop over fixed-capacity hypothesis arrays.

One engine serves every family that searches word by word: TG and TXL (CC),
and per-action ensembles of them (`ChoeCharniakDevice`, below), and the
Pushdown-LM (`tgjax.infer.pushdown_search.PushdownDevice`). Every hypothesis
lives on the device in arrays with a leading `[batch, pool]` axis pair, and
one `lax.while_loop` runs the whole search of a batch of sentences: the host
sends word ids in and reads trees, log p(x) and per-word surprisals out. For
TG / TXL (CC) the search is the host search's (`tgjax.infer.beam`, whose
docstring states it exactly: word beam k_w, action beam k_a, fast track
k_ft, `stop="bound"` or `"count"`, the caps, closing everything after the
last word).

The pool of a sentence has `P = k_w + k_a` slots, each EMPTY, FRONTIER (its
last action chosen, not yet run through the model), WORD (it has generated
the current word: the next word beam, kept as the best k_w seen so far, in
slots 0 .. k_w - 1) or COMPLETE (finished: everything closed). One
iteration, for every sentence at once:

1. the model runs on the FRONTIER slots only: their flat indices are
   packed and run `chunk` hypotheses per call in an inner loop (the last
   call padded), so the work follows the live hypotheses, not the pool's
   size. Each runs the pending positions of its last action and the current
   word's pieces, with its memory (`family.score`);
   the pending positions' keys and values are written into it;
2. per sentence, the host search's selection on device: every FRONTIER slot
   by every allowed action (`allowed`, and the capacity check `fits`), fast
   track (`lax.top_k` over the word successors), the action beam (top k_a of
   the rest), the word successors merged into the next word beam (top k_w),
   the stop rule; when the word is done, the next word beam becomes the
   frontier (and after the last word, the finishing closes run one per
   iteration, until every hypothesis is `complete`);
3. the new pool is gathered by parent index (state, the actions taken)
   and advanced by the chosen actions (`advance`). Memories are not
   gathered: each pool slot names the row of the caches that holds its
   memory, the first child of a parent takes over its parent's row, and
   only a parent's further children get a copy, into the rows of parents
   that had none (copy on write, `_assign_rows`).

Sentences advance independently: a sentence between two words moves on in
the same iteration, a finished one idles (its rows still run: sentences of
similar lengths are batched together).

A device family plugs into the engine through a small interface:

    family.num_actions                        A action codes
    family.word_actions                       [A] bool (NumPy, static): the actions that generate the current word
    family.initial_state()                    one hypothesis's state (a pytree), before any action
    family.init_cache(batch, pool)            the caches: a tuple of arrays of batch * pool rows, one memory each
    family.cache_slots                        the most memory slots of a row
    family.memory_used(state)                 [...] memory slots a hypothesis reads or writes in its next call
    family.score(params, state, cache, word, rows, slots)
        -> log_probs [n, A], word_log_probs [n], state, writes: one model call for n hypotheses (state and
           word with a leading [n] axis; rows [n] the rows of their memories, past the end for padding),
           reading the first `slots` memory slots. word_log_probs: log p of the current word from each
           hypothesis as it stands; log_probs: of each action, given the word where the action generates
           it (a successor scores prefix + word + action, summed in that order). The states come back
           "committed", their pending positions' keys and values in `writes`
    family.write(cache, writes, rows)         the caches with `writes` stored in rows [n]
    family.copy_rows(cache, src, dst, slots)  the caches with rows dst [n] a copy of rows src [n] (first `slots`)
    family.allowed(state, finishing, word)    [A] bool for one committed hypothesis (finishing: the end)
    family.fits(state, word)                  [A] bool: the action leaves room in the caches
    family.advance(state, action, word)       -> (state, record code) for one committed hypothesis
    family.complete(state)                    bool, after the last word: nothing is left to close
    family.signature                          what the compiled search depends on besides `params` (hashable)

where `word` is a `WordInfo` (the current word's pieces), and a driver
(`DeviceBeamSearch`, `PushdownSearch`) turns the records into its results.
`score` takes packed rows, `memory_used` lets the engine read and copy only
the memory slots in use, and `write` / `copy_rows` spare the gather of
every memory by parent. The two families:

* Choe–Charniak: an action opens a label, closes the innermost
  constituent, or generates the word (all its pieces, the one word action):
  a word takes as many selections as the opens and closes before it, and
  after the last word the finishing closes run.
* Pushdown-LM: a "word" is one token (a sub-word piece, or the final
  ``<eos>``), an action is its attachment slot (`A = T + 1`), and every
  action generates the word. Each word is then one selection, the best k_w
  of every (hypothesis, attachment) pair (`Selection(k_w, 0, k_w)`: the
  fast track alone, no action beam), and a hypothesis is complete once the
  last token is read. For such a family (every action a word action) the
  engine also keeps each word's starting beam, its scores and the word's
  log-probability from each, and the parents of the next beam
  (`Outcome.trace`): what the Pushdown-LM's surprisal definitions read.

For TG and TXL (CC), and per-action
ensembles of them, the family is `ChoeCharniakDevice`: the syntax state is
`tgjax.infer.device_syntax` (the parse, plus one layout per member: TG and
TXL (CC) members mix), the cache one `[batch * pool, K, A, 2, H, slots,
dk]` array of keys and values per member (per layer K and attention module
A: each head's slots one block, as the attention's batched products read
them, and a row copied in one piece), and an ensemble's log-probabilities are mixed per action (and per word
piece), as `tgjax.infer.ensemble.score_mixed` does, before the beam sees
them.

The stack-only memory. A TG whose every head of every layer uses the
STACK/COMPOSE rule attends, from any later position, only to keys still on
the stack (and, at a CNT1, to those it pops), and a key's keys and values
never change once computed. So such a member's memory holds only the
stack (`device_syntax`'s memory map: a dozen slots where the layout has
hundreds of positions): the attention, the mask rebuilt from the slots'
own position, depth, push and pop, and the copies of memories read only
the stack's slots (at most BOS, the open constituents and one per piece:
`stack_slots`, by default that bound, so no sentence is searched again
for it). TXL (CC) and TG variants with unrestricted heads or layers
keep every position (`stack_cache=False` gives that path for any TG: the
tests check both give the same results).

Capacity. A hypothesis may use `capacity` layout positions (BOS, actions,
TG's doubled closes); the caches, and so memory, grow with it (the
attention and the copies read only the memory slots in use, rounded up to
32, 64, half or all of the slots: one compiled branch each). By
default a batch gets `positions_per_piece * pieces + 8` (4 per piece)
for its longest sentence, the pieces and the result rounded up to a power
of two or 1.5 times one (few shapes, few compilations: with a word
dictionary one per length bucket; compiled searches are shared by models
of one structure). A hypothesis that would outgrow it cannot take the action; when
that happened to a sentence, it is searched again with twice the room, up
to `max_capacity` (counted in `last_stats["retried"]`), so the result is
the host search's. Only at `max_capacity` (or a fixed `capacity`) do the
refused successors stay refused: they are counted per sentence in
`last_stats["capacity_pruned"]` and reported with a warning, the search
then differing from the host's. A sentence that cannot fit at all (its
pieces, BOS and the root's open and close above the limit) is an error
naming it.

Where the time goes. In the first version of the engine (CPU, ToTC-size TG, 16
sentences x 25 slots, 128 cache positions, per iteration): the layers on
the new positions 0.16 CPU-s, the gather of the caches by parent 0.09, the
slice and write-back of the held prefix about as much again, the output
projection 0.01, the selection and syntax state under 0.01: memory traffic
over the caches, and every pool slot running the model whether it held a
frontier hypothesis or not (0.36x the host search's sentences/s). The
model run on the FRONTIER slots only (`chunk` at a time: 28-40% of the
pool's slot-iterations, `last_stats["rows_run"]` against
`"rows_offered"`) and the stack-only memory took that to 0.20-0.70x. A
profile (`jax.profiler`, XLA CPU ops) then showed the rest was still
memory traffic, not arithmetic: 2-3 copies per iteration of the whole
caches (`[256, 400, ...]`, 420 MB: XLA copies a buffer that a `lax.switch`
branch both slices and updates), the gather of every memory by parent, and
per model call a transpose of every layer's memory keys and values into
the layout the attention's batched products read. Three changes remove
them: the switch over memory sizes wraps only the model call, to which the
caches are read-only (the writes and copies run outside it; the copies
pick their size with one loop per size that runs no times but for one);
copy on write instead of the gather by parent; and the caches laid out
hypothesis-major with each head's slots one block. On the benchmark (64
ToTC test sentences, random-init ToTC-size TG, 2 quiet cores) the engine
went from 0.20x to 1.55x the host search's sentences/s (2.53 against 1.64;
same best trees 64/64, log p(x) within 1.6e-4); per iteration of 16
sentences, 83 ms -> 26 ms; with the attention against the memory as
fused products and sums, 1.73x (load ~4). The 5x target on CPU is still not met: the
search runs as many hypotheses through the model as the host search does
(~2,200 per sentence here), and on 2 CPU cores the host search's one
model call per step is mostly that arithmetic too. What is left: a
one-position window for hypotheses whose pending action is one position
(opens, one-piece words, every TXL (CC) action: half of the layer work of
those rows is padding), at the price of twice the compiled branches.

Numerics: float32 scores (the host search sums in float64): on the
benchmark's 64 ToTC sentences (up to 68 words) log p(x) agreed with the
host's to 1.6e-4, the tests' short sentences to 1e-4.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.data.batching import round_up
from tgjax.data.vocab import Vocabulary
from tgjax.infer import device_syntax as ds
from tgjax.infer.beam import BeamConfig, BeamResult, logsumexp
from tgjax.infer.choe_charniak import ActionSpace
from tgjax.infer.ensemble import member_list
from tgjax.infer.incremental import _Static, project
from tgjax.models.transformer_lm import TransformerLM
from tgjax.syntax import token_types as tt

EMPTY, FRONTIER, WORD, COMPLETE = 0, 1, 2, 3
IN_WORDS, FINISHING, DONE = 0, 1, 2
KEEP = -1  # "no action": the slot is carried over unchanged


class WordInfo(NamedTuple):
    """The current word of a sentence (or of one hypothesis's sentence).

    ids, types `[..., P]`: its pieces' model ids and token types (padding
    past `num`); num `[...]`: its pieces (0 when finishing); later `[...]`:
    pieces of the words after it.
    """

    ids: jnp.ndarray
    types: jnp.ndarray
    num: jnp.ndarray
    later: jnp.ndarray


# -----------------------------------------------------------------------------
# One step of a TransformerLM from cached keys and values.
#
# `hidden_states` (what `PrefixScorer` runs) takes the memory as layer inputs and projects every memory slot
# to keys and values again at each call: with a pool of hypotheses and hundreds of slots that projection is
# nearly all of a step's work. The keys and values of a position never change once computed (every mask is
# causal), so the engine caches them instead, per layer (and per attention module: `tg_distinct_mha` has
# two), and runs the layers below on the new positions only, with the model's own weights and its own
# masks and relative positions (`attention_inputs`). The tests check it against the host search, which
# runs `hidden_states`.


def _keys_values(attention, x):
    """`[2, N, T, H, dk]`: the keys and values of positions `x [N, T, d]` (no bias, as the model)."""
    return jnp.stack([jnp.einsum("btd,dhk->bthk", x, attention.key[...]),
                      jnp.einsum("btd,dhk->bthk", x, attention.value[...])])


def _attend(attention, x, memory_kv, fresh_kv, mask, relpos):
    """`RelativeMultiHeadAttention.__call__` with the keys and values of `[memory, segment]` given.

    x `[N, S, d]`; memory_kv `[N, 2, H, M, dk]` (as the cache holds them:
    each head's slots one block) and fresh_kv `[2, N, S, H, dk]` (keys, values; memory and segment
    apart, so that the cache is never concatenated); mask, relpos
    `[N, (H,) S, M + S]`.
    """
    q = jnp.einsum("btd,dhk->bthk", x, attention.query[...])
    q_content = q + attention.content_bias[...]
    # Against the memory, S (1-2) queries per head: as products and sums XLA fuses into one loop, not as N * H
    # tiny batched matrix products (measured 15% faster on CPU).
    memory_keys, memory_values = memory_kv[:, 0], memory_kv[:, 1]  # [N, H, M, dk]
    by_memory = jnp.sum(jnp.swapaxes(q_content, 1, 2)[:, :, :, None] * memory_keys[:, :, None], axis=-1)
    content = jnp.concatenate([by_memory, jnp.einsum("bthk,bshk->bhts", q_content, fresh_kv[0])], axis=-1)
    rel_keys = jnp.einsum("pd,dhk->phk", attention.position_table[...], attention.rel_key[...])
    by_position = jnp.einsum("bthk,phk->bhtp", q + attention.position_bias[...], rel_keys)
    if mask.ndim == 3:
        mask, relpos = mask[:, None], relpos[:, None]
    index = jnp.clip(relpos, attention.rel_min, attention.rel_max) - attention.rel_min
    index = jnp.broadcast_to(index, content.shape).astype(jnp.int32)
    scores = (content + jnp.take_along_axis(by_position, index, axis=-1)) / np.sqrt(attention.head_dim)
    mask = jnp.broadcast_to(mask, scores.shape)
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1)
    weights = jnp.where(mask.any(axis=-1, keepdims=True), weights, 0.0)
    M = memory_kv.shape[3]
    from_memory = jnp.sum(weights[..., :M, None] * memory_values[:, :, None], axis=3)  # [N, H, S, dk]
    attended = jnp.swapaxes(from_memory, 1, 2) + jnp.einsum("bhts,bshk->bthk", weights[..., M:], fresh_kv[1])
    return jnp.einsum("bthk,hkd->btd", attended, attention.out[...]) + attention.out_bias[...]


def cached_forward(model: TransformerLM, batch: dict, kv: jax.Array):
    """Final hidden states `[N, S, d]` of the new positions, and their keys/values `[N, S, K, A, 2, H, dk]`.

    `batch`: the new positions' fields `[N, S]` and the memory keys' `[N, M]`
    (as `hidden_states`); `kv [N, K, A, 2, H, M, dk]`: the cached keys and
    values of the memory slots per layer (K) and attention module (A).
    `hidden_states` (eval mode) with each layer's attention reading the
    memory's keys and values from the cache: the model's own embedding,
    rule, layers and norms, only the attention's inputs differ.
    """
    c = model.config
    attn, mask, relpos = model.attention_rule(batch)
    compose = batch["inputs_ttypes"] == tt.CNT1
    x = model.embed(batch["inputs"])
    first_unrestricted = c.num_layers - c.num_unrestricted_layers
    new_kv = []
    for index, layer in enumerate(model.layers):
        if c.tg and index >= first_unrestricted:
            m, r = attn["causal_mask"], attn["causal_relpos"]
        else:
            m, r = mask, relpos
        fresh = [_keys_values(attention, x) for attention in layer.attention_modules()]  # each [2, N, S, H, dk]

        def attend(attention, x=x, fresh=fresh, layer=layer, index=index, m=m, r=r):
            a = 0 if attention is layer.attention else 1  # the STACK module, or the COMPOSE one
            return _attend(attention, x, kv[:, index, a], fresh[a], m, r)

        x = layer.around_attention(x, attend, compose, deterministic=True)
        new_kv.append(jnp.stack(fresh))  # [A, 2, N, S, H, dk]
    # [K, A, 2, N, S, H, dk] -> [N, S, K, A, 2, H, dk]
    return x, jnp.transpose(jnp.stack(new_kv), (3, 4, 0, 1, 2, 5, 6))


# -----------------------------------------------------------------------------
# The Choe–Charniak device family (TG, TXL (CC), ensembles).


class CCDeviceState(NamedTuple):
    tree: ds.TreeState
    layouts: tuple  # one ds.LayoutState per member


class ChoeCharniakDevice:
    """TG / TXL (CC) models (one, or the per-action mixture of several) as a device family.

    Args:
      members: (model, rule) pairs, rule "tg" or "txl_cc".
      space: the vocabulary's actions.
      bos_id: the id before every sequence.
      caps: the static sizes (`device_syntax.Caps`).
    """

    def __init__(self, members: Sequence[tuple[TransformerLM, str]], space: ActionSpace, bos_id: int, caps: ds.Caps,
                 stack_cache: bool = True):
        self.space = space
        self.caps = caps
        self.bos_id = int(bos_id)
        self.rules = tuple(rule for _, rule in members)
        self.tg = tuple(rule == "tg" for rule in self.rules)
        # Stack-only memory (device_syntax's memory map) where every head of every layer reads the stack only.
        self.stack_only = tuple(stack_cache and rule == "tg" and not model.config.num_unrestricted_heads
                                and not model.config.num_unrestricted_layers for model, rule in members)
        split = [nnx.split(model) for model, _ in members]
        self.graphdefs = tuple(g for g, _ in split)
        self.params = tuple(p for _, p in split)
        self.configs = tuple(model.config for model, _ in members)
        self.num_actions = space.num_labels + 2
        self.word_actions = np.arange(self.num_actions) == space.num_labels + 1  # the word, all its pieces
        self.open_ids = jnp.asarray(space.open_ids, jnp.int32)
        self.close_ids = jnp.asarray(space.close_ids, jnp.int32)
        self.candidates = jnp.asarray(np.concatenate([space.open_ids, space.close_ids]), jnp.int32)

    @functools.cached_property
    def _structure(self) -> tuple:
        return (tuple(_Static(g) for g in self.graphdefs), self.rules, self.stack_only, self.bos_id,
                tuple(self.space.open_ids.tolist()), tuple(self.space.close_ids.tolist()))

    @property
    def signature(self) -> tuple:
        """What the compiled search depends on besides the parameters (models of one structure share it)."""
        return self._structure + (self.caps,)

    def with_caps(self, caps: ds.Caps) -> ChoeCharniakDevice:
        new = object.__new__(ChoeCharniakDevice)
        new.__dict__.update(self.__dict__)
        new.caps = caps
        return new

    def initial_state(self) -> CCDeviceState:
        return CCDeviceState(ds.initial_tree(self.caps),
                             tuple(ds.initial_layout(self.caps, self.bos_id) for _ in self.rules))

    def init_cache(self, batch: int, pool: int) -> tuple:
        """Per member, keys and values `[batch * pool, K, A, 2, H, M, dk]` (K layers, A attention modules, M slots).

        One row per hypothesis (a row is copied whole, `copy_rows`); within
        it each head's slots are one block, as the attention reads them.
        """
        return tuple(jnp.zeros((batch * pool, c.num_layers, 1 + c.distinct_compose, 2, c.num_heads,
                                self.caps.memory_slots(stack_only), c.d_model // c.num_heads), jnp.float32)
                     for c, stack_only in zip(self.configs, self.stack_only))

    @property
    def cache_slots(self) -> int:
        """The most memory slots of any member's cache (`init_cache`)."""
        return max(self.caps.memory_slots(stack_only) for stack_only in self.stack_only)

    def memory_used(self, state: CCDeviceState) -> jnp.ndarray:
        """`[...]`: memory slots a hypothesis reads or writes in its next call (the most over members)."""
        return functools.reduce(jnp.maximum, [lay.mem_len + lay.num_pending for lay in state.layouts])

    def copy_rows(self, cache: tuple, src: jnp.ndarray, dst: jnp.ndarray, slots: int) -> tuple:
        """`cache` with the memories of rows `dst [n]` replaced by those of rows `src [n]` (dst past the end: none).

        Only the first `slots` memory slots are copied (every hypothesis holds
        fewer). The engine never copies into a row it reads from in the same call.
        """
        def one(c):
            m = min(slots, c.shape[5])
            return c.at[dst, :, :, :, :, :m].set(c[jnp.minimum(src, c.shape[0] - 1), :, :, :, :, :m], mode="drop")

        return tuple(one(c) for c in cache)

    def write(self, cache: tuple, writes: tuple, rows: jnp.ndarray) -> tuple:
        """The pending positions' keys and values `writes` (from `score`) stored in the memories of `rows [n]`.

        Per member, `writes` is (slots `[n, Q]`, keys and values `[n, Q, K, A, 2, H, dk]`); slots past the
        member's cache (positions not kept) and rows past the end (padding) are dropped.
        """
        return tuple(c.at[rows[:, None], :, :, :, :, slots].set(kv, mode="drop")
                     for c, (slots, kv) in zip(cache, writes))

    def score(self, params, state: CCDeviceState, cache: tuple, word: WordInfo, rows: jnp.ndarray, slots: int):
        """One model call on n hypotheses: log p of every action `[n, A]` (0 for the word action) and of the word
        `[n]` (all its pieces), their committed states, the cache writes.

        state, word: the n hypotheses' (leading axis `[n]`); rows `[n]`: the
        rows of their memories in the caches (past the end: a padding
        hypothesis, whose results are ignored); slots: how many memory slots
        to read (every hypothesis holds fewer). The pending positions' keys
        and values go to `write` (`device_syntax.memory_writes` says where).
        """
        n = rows.shape[0]
        caps = self.caps
        valid = rows < cache[0].shape[0]
        next_lps, piece_lps, layouts, writes = [], [], [], []
        for k, (graphdef, tg, stack_only) in enumerate(zip(self.graphdefs, self.tg, self.stack_only)):
            layout = state.layouts[k]
            rows_total = cache[k].shape[0]
            M = min(slots, cache[k].shape[5])
            fields, reads, targets = jax.vmap(
                lambda lay, tr, ids, types, num: ds.model_fields(lay, tr, caps, tg, ids, types, num, M)
            )(layout, state.tree, word.ids, word.types, word.num)
            kv = cache[k][jnp.minimum(rows, rows_total - 1), :, :, :, :, :M]  # [n, K, A, 2, H, M, dk]
            model = nnx.merge(graphdef, params[k])
            x, fresh = cached_forward(model, fields, kv)
            read = jnp.take_along_axis(x, reads[..., None], axis=1)  # [n, P_max, d]
            log_probs = jax.nn.log_softmax(project(model, read).astype(jnp.float32), axis=-1)  # [n, P_max, V]
            next_lps.append(log_probs[:, 0][:, self.candidates])  # [n, 2L]
            piece_lps.append(jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0])  # [n, P_max]
            write_slots, _ = jax.vmap(lambda lay: ds.memory_writes(lay, caps, stack_only))(layout)  # [n, Q]
            # fresh [n, S, K, A, 2, H, dk]: its first Q positions are the pending ones.
            writes.append((write_slots, fresh[:, :write_slots.shape[1]]))
            layouts.append(jax.vmap(lambda lay: ds.commit(lay, True, caps, stack_only))(layout))
        next_lp = _mix(next_lps)
        piece_lp = _mix(piece_lps)
        word_lp = jnp.sum(jnp.where(jnp.arange(caps.max_pieces) < word.num[:, None], piece_lp, 0.0), axis=-1)
        L = caps.num_labels
        top = state.tree.labels[jnp.arange(n), jnp.maximum(state.tree.depth - 1, 0)]
        close_lp = jnp.take_along_axis(next_lp[:, L:], top[:, None], axis=1)
        lp = jnp.concatenate([next_lp[:, :L], close_lp, jnp.zeros_like(word_lp[:, None])], axis=1)
        lp, word_lp = jnp.where(valid[:, None], lp, 0.0), jnp.where(valid, word_lp, 0.0)
        return lp, word_lp, CCDeviceState(state.tree, tuple(layouts)), tuple(writes)

    def allowed(self, state: CCDeviceState, finishing, word: WordInfo) -> jnp.ndarray:
        return ds.allowed(state.tree, self.caps, finishing)

    def fits(self, state: CCDeviceState, word: WordInfo) -> jnp.ndarray:
        ok = jnp.ones(self.num_actions, bool)
        for layout, tg, stack_only in zip(state.layouts, self.tg, self.stack_only):
            ok &= ds.fits(layout, state.tree, self.caps, tg, word.num, word.later, stack_only)
        return ok

    def advance(self, state: CCDeviceState, action, word: WordInfo):
        layouts = tuple(ds.advance_layout(layout, state.tree, action, self.caps, tg, self.open_ids, self.close_ids,
                                          word.ids, word.types, word.num)
                        for layout, tg in zip(state.layouts, self.tg))
        tree, record = ds.advance_tree(state.tree, action, self.caps)
        return CCDeviceState(tree, layouts), record

    def complete(self, state: CCDeviceState):
        return state.tree.depth == 0

    def tokens(self, records: Sequence[int], words: Sequence[str]) -> list[str]:
        return self.space.action_tokens(records, words)


def _mix(member_log_probs: list) -> jnp.ndarray:
    """The uniform mixture per entry, log mean_k exp(x_k) (the member's own for K = 1)."""
    if len(member_log_probs) == 1:
        return member_log_probs[0]
    stacked = jnp.stack(member_log_probs)
    return jax.nn.logsumexp(stacked, axis=0) - math.log(len(member_log_probs))


# -----------------------------------------------------------------------------
# The engine.


@dataclasses.dataclass(frozen=True)
class Selection:
    """How the engine selects: word beam k_w, action beam k_a, fast track k_ft, the stop rule (`tgjax.infer.beam`).

    `action_beam=0` suits a family whose every action generates the word
    (the Pushdown-LM): the fast track alone then keeps the best k_ft
    successors, and no frontier is left after a selection.
    """

    word_beam: int
    action_beam: int
    fast_track: int
    stop: str = "bound"

    @classmethod
    def of(cls, config: BeamConfig) -> Selection:
        return cls(config.word_beam, config.action_beam, config.fast_track, config.stop)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The static sizes of one compiled search."""

    batch: int
    pool: int
    words: int  # N: most words of a sentence in the batch
    records: int  # most actions a hypothesis records
    max_iterations: int
    chunk: int  # hypotheses per model call (the live ones are run `chunk` at a time)
    copy_chunk: int = 0  # memories per copying call (0: `chunk`)


class Trace(NamedTuple):
    """Per word t of each sentence (a family whose every action generates the word: one selection per word).

    scores `[B, N, P]`: log p(prefix) of the beam the word started from
    (-inf off it); with_word `[B, N, P]`: plus the word's log-probability
    from each; parents `[B, N, k_w]`: the slot each hypothesis of the next
    beam came from, best first (-1: empty).
    """

    scores: jnp.ndarray
    with_word: jnp.ndarray
    parents: jnp.ndarray


class Outcome(NamedTuple):
    """The loop's state; the compiled search returns it without `state` and `cache` (None)."""

    state: object
    cache: object
    memory_rows: jnp.ndarray  # [B, P] int32: the row of each pool slot's memory in the caches
    status: jnp.ndarray  # [B, P] int32
    score: jnp.ndarray  # [B, P] float32: log p(prefix)
    records: jnp.ndarray  # [B, P, R] int32
    num_records: jnp.ndarray  # [B, P] int32
    t: jnp.ndarray  # [B]: the current word
    phase: jnp.ndarray  # [B]
    prefix: jnp.ndarray  # [B, N + 1] log p(x_<=t): the word beam's after word t
    steps: jnp.ndarray  # [B]: action steps (as the host search counts them)
    pruned: jnp.ndarray  # [B]: successors refused for capacity
    iteration: jnp.ndarray
    rows_run: jnp.ndarray  # hypotheses run through the model, summed over iterations (a statistic)
    trace: Trace | None  # None unless every action generates the word


def _top_k(values, k):
    """`lax.top_k` with k clipped to the size (ties: the lower index first, as a stable sort)."""
    k = min(k, values.shape[-1])
    return jax.lax.top_k(values, k)


def _successors(score, lp, word_lp, allowed, word_actions: np.ndarray):
    """`[P, A]` log p of every successor of the slots `score [P]`, -inf where not `allowed`: the prefix's, plus
    the word's (`word_lp [P]`) for a word action, plus the action's (`lp [P, A]`), summed in that order (as
    eq. 7 and the host searches)."""
    prefix = jnp.where(word_actions, (score + word_lp)[:, None], score[:, None])
    return jnp.where(allowed, prefix + lp, -jnp.inf)


def _select_in_words(selection: Selection, status, score, values, word_actions: np.ndarray):
    """One sentence's action step (the host's `_word_step`): the new pool as (src, action, value, status), and done.

    status, score `[P]`; values `[P, A]` (`_successors`). New pool: slots 0..k_w-1 the
    next word beam (best first), then the k_a frontier slots (best first).
    """
    P, A = values.shape
    W, F, ft = selection.word_beam, selection.action_beam, selection.fast_track
    neg = jnp.float32(-jnp.inf)
    others = np.flatnonzero(~word_actions).astype(np.int32)
    words = np.flatnonzero(word_actions).astype(np.int32)
    # Successors in the host's order (the other actions by parent, then the word actions by parent), for ties.
    cand = jnp.concatenate([values[:, others].reshape(-1), values[:, words].reshape(-1)])
    cand_parent = jnp.asarray(np.concatenate([np.repeat(np.arange(P, dtype=np.int32), len(others)),
                                              np.repeat(np.arange(P, dtype=np.int32), len(words))]))
    cand_action = jnp.asarray(np.concatenate([np.tile(others, P), np.tile(words, P)]))
    is_word = jnp.asarray(np.concatenate([np.zeros(P * len(others), bool), np.ones(P * len(words), bool)]))
    first_word = P * len(others)
    if ft > 0:
        fast_val, fast_idx = _top_k(cand[first_word:], ft)
        fast_idx = fast_idx + first_word
        fast_ok = fast_val > neg
        rest = cand.at[fast_idx].set(neg) if F > 0 else cand
    else:
        fast_val, fast_idx, fast_ok = jnp.zeros(0), jnp.zeros(0, jnp.int32), jnp.zeros(0, bool)
        rest = cand
    if F > 0:
        pool_val, pool_idx = _top_k(rest, F)
    else:
        pool_val, pool_idx = jnp.zeros(0), jnp.zeros(0, jnp.int32)
    pool_ok = pool_val > neg
    # The next word beam: what it held, the fast track, the pool's word successors (insertion order for ties).
    old = jnp.where(status == WORD, score, neg)
    merge_val = jnp.concatenate([old, jnp.where(fast_ok, fast_val, neg),
                                 jnp.where(pool_ok & is_word[pool_idx], pool_val, neg)])
    merge_src = jnp.concatenate([jnp.arange(P, dtype=jnp.int32), cand_parent[fast_idx], cand_parent[pool_idx]])
    merge_act = jnp.concatenate([jnp.full(P, KEEP, jnp.int32), cand_action[fast_idx], cand_action[pool_idx]])
    items = jnp.sum(merge_val > neg)
    word_val, word_idx = _top_k(merge_val, W)
    word_val = jnp.pad(word_val, (0, W - word_val.shape[0]), constant_values=-jnp.inf)
    word_idx = jnp.pad(word_idx, (0, W - word_idx.shape[0]))
    word_ok = word_val > neg
    # The new frontier: the pool's other successors, best first.
    if F > 0:
        front_val, front_idx = _top_k(jnp.where(pool_ok & ~is_word[pool_idx], pool_val, neg), F)
        front_val = jnp.pad(front_val, (0, F - front_val.shape[0]), constant_values=-jnp.inf)
        front_idx = jnp.pad(front_idx, (0, F - front_idx.shape[0]))
    else:
        front_val, front_idx = jnp.zeros(0), jnp.zeros(0, jnp.int32)
    front_ok = front_val > neg
    full = items >= W
    if selection.stop == "count":
        done = full | ~jnp.any(front_ok)
    else:
        threshold = word_val[W - 1]
        front_ok = front_ok & (~full | (front_val > threshold))
        done = ~jnp.any(front_ok)
    src = jnp.concatenate([merge_src[word_idx], cand_parent[pool_idx][front_idx]])
    act = jnp.concatenate([merge_act[word_idx], cand_action[pool_idx][front_idx]])
    ok = jnp.concatenate([word_ok, front_ok])
    val = jnp.concatenate([word_val, front_val])
    new_status = jnp.concatenate([jnp.full(W, WORD), jnp.full(F, FRONTIER)])
    new_status = jnp.where(ok, new_status, EMPTY)
    act = jnp.where(ok, act, KEEP)
    src = jnp.where(ok, src, 0)
    # Between words: the next word beam becomes the frontier.
    new_status = jnp.where(done, jnp.where(new_status == WORD, FRONTIER, EMPTY), new_status)
    return src.astype(jnp.int32), act.astype(jnp.int32), jnp.where(ok, val, neg), new_status, done, word_val


def _select_finishing(status, score, values):
    """One finishing step: every FRONTIER slot takes its (only) allowed action, a close."""
    P, A = values.shape
    best = jnp.argmax(values, axis=1)
    take = (status == FRONTIER) & jnp.any(values > -jnp.inf, axis=1)
    act = jnp.where(take, best, KEEP).astype(jnp.int32)
    val = jnp.where(take, values[jnp.arange(P), best], score)
    return jnp.arange(P, dtype=jnp.int32), act, val, status


def _vmap2(fn, *args):
    return jax.vmap(jax.vmap(fn))(*args)


def _score_live(family, params, state, cache, word, run, memory_rows, chunk: int, buckets: Sequence[int], bucket):
    """`family.score` on the hypotheses `run [B, P]` only, `chunk` per model call, as many calls as needed.

    Returns log p `[B, P, A]` and of the word `[B, P]` (0 where not run), the
    states (committed where run) and the caches with the run hypotheses' new keys and values
    written (into their memories' rows `memory_rows [B, P]`). The live
    hypotheses are packed (their flat indices in order) and run `chunk` at a
    time in a loop, so the work follows them (rounded up to a chunk) with
    one compiled copy of the model; padding hypotheses' writes are dropped.
    Each call reads `buckets[bucket]` memory slots (`lax.switch`: one
    compiled branch per size; the caches enter it read-only, so they are
    never copied).
    """
    B, P = run.shape
    hyps_all, calls = _packed(run.reshape(B * P), chunk)
    flat = lambda x: x.reshape((B * P,) + x.shape[2:])
    state_flat, word_flat, rows_flat = jax.tree.map(flat, state), jax.tree.map(flat, word), flat(memory_rows)
    branches = [functools.partial(lambda m, *args: family.score(*args, slots=m), m) for m in buckets]

    def one_call(i, carry):
        lp_all, word_all, state_all, cache = carry
        hyps = jax.lax.dynamic_slice(hyps_all, (i * chunk,), (chunk,))
        padding = hyps >= B * P
        take = lambda x: x[jnp.minimum(hyps, B * P - 1)]
        rows = jnp.where(padding, B * P, take(rows_flat))
        lp, word_lp, scored, writes = jax.lax.switch(bucket, branches, params, jax.tree.map(take, state_all),
                                                     cache, jax.tree.map(take, word_flat), rows)
        writes = _after(writes, lp)
        put = lambda full, part: full.at[hyps].set(part, mode="drop")
        return (put(lp_all, lp), put(word_all, word_lp), jax.tree.map(put, state_all, scored),
                family.write(cache, writes, rows))

    carry = (jnp.zeros((B * P, family.num_actions), jnp.float32), jnp.zeros(B * P, jnp.float32), state_flat, cache)
    if chunk >= B * P:  # one call runs every live hypothesis: no loop (XLA would copy the caches it carries)
        lp, word_lp, state_flat, cache = one_call(0, carry)
    else:
        lp, word_lp, state_flat, cache = jax.lax.fori_loop(0, calls, one_call, carry)
    unflat = lambda x: x.reshape((B, P) + x.shape[1:])
    return unflat(lp), unflat(word_lp), jax.tree.map(unflat, state_flat), cache


def _after(writes, lp):
    """`writes` made to depend on `lp` (plus 0 times a sum of it): a model call's log-probabilities come from its
    last reads of the caches, so the caches are written after every read and XLA updates them in place. Without
    it XLA may copy the whole caches at every iteration, unsure of the order: it did for the Pushdown-LM (one
    memory size, no `lax.switch` between), at beam 300 on CPU 1.5x the time, 38 against 25 MiB of temporaries."""
    zero = 0.0 * jnp.sum(jnp.where(jnp.isfinite(lp), lp, 0.0))
    return jax.tree.map(lambda w: w + zero.astype(w.dtype) if jnp.issubdtype(w.dtype, jnp.floating) else w, writes)


def _packed(flags, chunk: int):
    """The indices where `flags [n]` holds, packed first and padded with n to whole chunks, and how many
    chunks hold any: the loops over live hypotheses and over copies run that many `chunk`-sized calls."""
    n = flags.shape[0]
    indices = jnp.nonzero(flags, size=-(-n // chunk) * chunk, fill_value=n)[0].astype(jnp.int32)
    return indices, (jnp.sum(flags) + chunk - 1) // chunk


def _assign_rows(memory_rows, src, kept):
    """One sentence's memory rows after a selection, and the copies that gives (copy on write).

    memory_rows `[P]`: the rows of the pool's memories; src `[P]`: each new
    slot's parent slot; kept `[P]`: whether the new slot holds a
    hypothesis. The first kept child of a parent takes over its parent's
    row (nothing moves); every other kept child gets the row of a parent
    with no child, and its parent's memory is copied there. Returns the new
    rows `[P]`, and per new slot the row to copy from and to (-1: none).
    There are as many childless parents as slots needing a row, and a copy
    never writes a row another copy reads (those have children).
    """
    P = src.shape[0]
    slot = jnp.arange(P)
    first_child = jnp.full(P, P, jnp.int32).at[jnp.where(kept, src, P)].min(slot.astype(jnp.int32), mode="drop")
    has_child = first_child < P
    inherits = kept & (first_child[src] == slot)
    needs_copy = kept & ~inherits
    free = memory_rows[jnp.argsort(has_child, stable=True)]  # the childless parents' rows first
    rank = jnp.cumsum(~inherits) - 1
    new_rows = jnp.where(inherits, memory_rows[src], free[jnp.clip(rank, 0, P - 1)])
    return new_rows, jnp.where(needs_copy, memory_rows[src], -1), jnp.where(needs_copy, new_rows, -1)


def _copy_memories(family, cache, copy_from, copy_to, chunk: int, buckets: Sequence[int], bucket):
    """The copies `copy_from -> copy_to [B, P]` (-1: none) made, `chunk` rows at a time: as many as there are.

    Each copies `buckets[bucket]` memory slots (as `_score_live` reads them):
    one loop per size, all but the chosen one running no times (a
    `lax.switch` returning the caches would copy them whole).
    """
    total = copy_from.size
    order, needed = _packed(copy_to.reshape(-1) >= 0, chunk)
    src = jnp.append(copy_from.reshape(-1), 0)[order]
    dst = jnp.where(order < total, jnp.append(copy_to.reshape(-1), 0)[order], total)  # past the last row: none
    for b, slots in enumerate(buckets):
        def one_call(i, cache, slots=slots):
            part = lambda x: jax.lax.dynamic_slice(x, (i * chunk,), (chunk,))
            return family.copy_rows(cache, part(src), part(dst), slots)

        cache = jax.lax.fori_loop(0, jnp.where(bucket == b, needed, 0), one_call, cache)
    return cache


class DeviceBeamSearch:
    """Word-synchronous beam search on the device, with a TG or TXL (CC) model or an ensemble (module docstring).

    Args:
      model, vocab, rule, config: as `tgjax.infer.beam.WordSynchronousBeamSearch`
        (`config.batch_sentences`: sentences per compiled loop; the row
        settings of the host scorer are not used).
      capacity: layout positions per hypothesis; None: per batch, from its
        longest sentence (module docstring).
      max_capacity: the most positions a hypothesis may ever take.
      positions_per_piece: the first capacity of a batch is this many
        positions per piece of its longest sentence, plus 8 (doubled when short).
      stack_cache: TG members whose every head reads the stack only keep
        only the stack's keys and values (`device_syntax`'s memory map);
        False: every position's, as TXL (CC) (the same results, slower).
      stack_slots: the memory slots of such a member's cache (its stack,
        not the layout's length); None: per batch, enough for any stack
        (`_stack_bound`). Fewer save memory; a sentence whose stack outgrows
        them is searched again with twice as many (as with capacity).
      chunk: hypotheses per model call; None: an eighth of a batch's pool
        slots (at least 32).
    """

    def __init__(self, model: TransformerLM | Sequence[TransformerLM], vocab: Vocabulary,
                 rule: str | Sequence[str], config: BeamConfig = BeamConfig(), *, capacity: int | None = None,
                 max_capacity: int = 1024, positions_per_piece: int = 4, stack_cache: bool = True,
                 stack_slots: int | None = None, chunk: int | None = None):
        members = member_list(model, rule)
        for _, member_rule in members:
            if member_rule not in ("tg", "txl_cc"):
                raise ValueError(f"the device beam needs syntactic models (rule 'tg' or 'txl_cc'), got rule "
                                 f"{member_rule!r}; use TerminalScorer for txl_terminals")
        for name in ("word_beam", "action_beam", "batch_sentences"):
            if getattr(config, name) < 1:  # BeamConfig checks too; a config built around it must not pass
                raise ValueError(f"device beam: {name} must be at least 1, got {getattr(config, name)}")
        if capacity is not None and capacity < 4:
            raise ValueError(f"device beam: capacity must be at least 4 positions, got {capacity}")
        if chunk is not None and chunk < 1:
            raise ValueError(f"device beam: chunk must be at least 1 hypothesis, got {chunk}")
        if stack_slots is not None and stack_slots < 4:
            raise ValueError(f"device beam: stack_slots must be at least 4, got {stack_slots}")
        if max_capacity < 4:
            raise ValueError(f"device beam: max_capacity must be at least 4 positions, got {max_capacity}")
        self.space = ActionSpace.from_vocab(vocab)
        if not self.space.num_labels:
            raise ValueError("the vocabulary has no non-terminals: cannot build trees")
        self.config = config
        self.capacity = capacity
        self.max_capacity = int(max_capacity)
        self.positions_per_piece = int(positions_per_piece)
        self.chunk = chunk
        self.stack_slots = stack_slots
        self.vocab = vocab
        self._family = ChoeCharniakDevice(members, self.space, vocab.bos_id,
                                          ds.Caps(self.space.num_labels, config.max_open_nts,
                                                  config.max_consecutive_opens, 32, 1), stack_cache)
        self.steps = 0  # action steps summed over sentences (for benchmarks)
        self.last_stats: dict = {}

    # -- host side -------------------------------------------------------------

    def _encode(self, index: int, words: Sequence[str]):
        if not words:
            raise ValueError(f"sentence {index}: no words; a tree needs at least one")
        try:
            encoded = [self.space.encode_word(w) for w in words]
        except ValueError as err:
            raise ValueError(f"sentence {index}: {err}") from None
        return [ids for ids, _ in encoded], sum(unk for _, unk in encoded)

    def _min_positions(self, pieces) -> int:
        """The fewest layout positions a tree of the sentence needs (BOS, root open, words, all but the last close)."""
        return 2 + sum(len(p) for p in pieces)

    def _stack_bound(self, pieces_per_sentence) -> int:
        """The most stack slots a hypothesis of these sentences can hold, rounded up (`_coarse`).

        A stack holds BOS, open constituents' ONTs (at most max_open_nts) and
        words' pieces and closed constituents' CNT1s (each of those covers a
        piece no other on the stack covers, so at most the pieces); plus the
        two positions of a close being run.
        """
        return _coarse(3 + self.config.max_open_nts + _longest(pieces_per_sentence))

    def _capacity(self, pieces_per_sentence) -> int:
        if self.capacity is not None:
            return self.capacity
        return min(self.max_capacity, _coarse(self.positions_per_piece * _longest(pieces_per_sentence) + 8))

    def search(self, sentences: Iterable[Sequence[str]]) -> list[BeamResult]:
        sentences = [list(s) for s in sentences]
        encoded = [self._encode(i, s) for i, s in enumerate(sentences)]
        limit = self.capacity if self.capacity is not None else self.max_capacity
        for i, (pieces, _) in enumerate(encoded):
            need = self._min_positions(pieces)
            if need > limit:
                raise ValueError(f"sentence {i} ({len(sentences[i])} words, {sum(len(p) for p in pieces)} pieces) "
                                 f"needs at least {need} layout positions; the device beam's capacity is {limit} "
                                 f"(raise capacity / max_capacity, or leave the sentence out)")
        results: list[BeamResult | None] = [None] * len(sentences)
        order = sorted(range(len(sentences)), key=lambda i: sum(len(p) for p in encoded[i][0]))
        B = self.config.batch_sentences
        self.last_stats = {"capacity_pruned": {}, "iterations": 0, "max_positions": 0, "retried": 0}
        for start in range(0, len(order), B):
            todo = order[start:start + B]
            capacity = self._capacity([encoded[i][0] for i in todo])
            stack_slots = min(capacity, self.stack_slots or self._stack_bound([encoded[i][0] for i in todo]))
            while todo:
                pruned = {}
                for i, result, count in zip(todo, *self._search_batch([sentences[i] for i in todo],
                                                                      [encoded[i] for i in todo], todo, capacity,
                                                                      stack_slots)):
                    results[i] = result
                    if count:
                        pruned[i] = count
                # Fallback: sentences whose search refused successors for room run again with twice the room.
                grown = capacity if self.capacity is not None else min(limit, 2 * capacity)
                more_slots = min(2 * stack_slots, grown) if any(self._family.stack_only) else stack_slots
                if not pruned or (grown, more_slots) == (capacity, stack_slots):
                    self.last_stats["capacity_pruned"].update(pruned)
                    for i in todo:
                        if results[i] is None:
                            raise RuntimeError(f"sentence {i}: no complete tree within the device beam's capacity "
                                               f"{capacity} positions, {stack_slots} stack slots")
                    break
                self.last_stats["retried"] += len(pruned)
                todo, capacity, stack_slots = sorted(pruned), grown, more_slots
        pruned = self.last_stats["capacity_pruned"]
        if pruned:
            warnings.warn(f"device beam: {len(pruned)} sentence(s) had successors refused for lack of cache capacity "
                          f"(sentence: count) {pruned}; raise capacity for the host search's results", stacklevel=2)
        return results  # type: ignore[return-value]

    def _search_batch(self, sentences, encoded, indices, C: int,
                      stack_slots: int) -> tuple[list[BeamResult | None], list[int]]:
        """One compiled search of up to `batch_sentences` sentences with capacity C: results, successors pruned.

        A sentence whose every hypothesis ran out of room gets None (and a
        count of pruned successors): `search` tries it again with more.
        """
        config = self.config
        num = len(sentences)
        P = config.word_beam + config.action_beam
        # Every batch the full size while its pool is small (a finished or absent sentence costs little: only
        # FRONTIER hypotheses run the model), so one compiled search serves every batch of a length; a large
        # pool (paper-size beams) gets the power of two at or above its sentences, to spare memory.
        full = config.batch_sentences * P <= _FULL_BATCH_ROWS
        B = config.batch_sentences if full else min(config.batch_sentences, _next_power_of_two(num))
        max_pieces = max(len(p) for pieces, _ in encoded for p in pieces)
        N = _coarse(max(len(s) for s in sentences), 8)
        caps = ds.Caps(self.space.num_labels, config.max_open_nts, config.max_consecutive_opens, C, max_pieces,
                       stack_slots)
        ids = np.zeros((B, N, max_pieces), np.int32)
        types = np.zeros((B, N, max_pieces), np.int32)
        counts = np.zeros((B, N), np.int32)
        num_words = np.zeros(B, np.int32)
        for b, (pieces, _) in enumerate(encoded):
            num_words[b] = len(pieces)
            for t, p in enumerate(pieces):
                ids[b, t, :len(p)] = p
                types[b, t, :len(p)] = self.space.token_types[list(p)]
                counts[b, t] = len(p)
        later = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1] - counts  # pieces after each word
        D = config.max_open_nts
        sizes = Sizes(B, P, N, C, N * (D + config.max_consecutive_opens + 2) + D + 4,
                      self.chunk or min(B * P, max(32, round_up(B * P // 8, 8))))
        run = compiled_search(self._family.with_caps(caps), Selection.of(config), sizes)
        out = run(self._family.params, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(counts),
                  jnp.asarray(later), jnp.asarray(num_words))
        out = jax.tree.map(np.asarray, out)
        if int(out.iteration) >= sizes.max_iterations:  # pragma: no cover - the loop always ends before
            raise RuntimeError(f"device beam: the search of sentences {indices} did not end in {sizes.max_iterations} "
                               f"iterations")
        self.last_stats["iterations"] += int(out.iteration)
        self.last_stats["rows_run"] = self.last_stats.get("rows_run", 0) + int(out.rows_run)
        self.last_stats["rows_offered"] = self.last_stats.get("rows_offered", 0) + int(out.iteration) * B * sizes.pool
        family = self._family
        results: list[BeamResult | None] = []
        for b, words in enumerate(sentences):
            n = len(words)
            if int(out.phase[b]) != DONE:  # pragma: no cover
                raise RuntimeError(f"sentence {indices[b]}: the device search did not finish")
            self.steps += int(out.steps[b])
            complete = np.flatnonzero(out.status[b] == COMPLETE)
            if not complete.size:
                if out.pruned[b]:  # room refused every way to the end: `search` tries again with more
                    results.append(None)
                    continue
                raise RuntimeError(f"sentence {indices[b]}: no complete tree within the device beam's capacity {C}")
            totals = out.score[b, complete].astype(np.float64)
            ranked = complete[np.argsort(-totals, kind="stable")]
            hypotheses = [(family.tokens(out.records[b, k, :out.num_records[b, k]].tolist(), words),
                           float(out.score[b, k])) for k in ranked]
            self.last_stats["max_positions"] = max(self.last_stats["max_positions"],
                                                   int(out.num_records[b].max()))
            prefix = out.prefix[b, :n + 1].astype(np.float64)
            log_prob = float(logsumexp(totals))
            results.append(BeamResult(
                words=list(words), prefix_log_probs=prefix, surprisals=prefix[:-1] - prefix[1:], log_prob=log_prob,
                end_surprisal=float(prefix[-1] - log_prob), best_actions=hypotheses[0][0],
                best_log_prob=hypotheses[0][1], hypotheses=hypotheses, num_unknown=encoded[b][1]))
        return results, [int(out.pruned[b]) for b in range(num)]

    # Convenience for the drivers (as the host search).
    def word_surprisals(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return [r.surprisals for r in self.search(sentences)]

    def log_probs(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        return np.array([r.log_prob for r in self.search(sentences)])


_FULL_BATCH_ROWS = 4096  # most pool slots (batch_sentences x pool) for which every batch is padded to full size

# Compiled searches by (family signature, selection, sizes): searches of models of one structure (an eval command
# run again, the tests) share them; the parameters are arguments.
_LOOPS: dict = {}


def compiled_search(family, selection: Selection, sizes: Sizes):
    """The jitted search of a batch, `run(params, ids, types, counts, later, num_words) -> Outcome` (`_search`).

    ids, types `[B, N, pieces]`, counts, later `[B, N]` (`WordInfo`'s fields
    per word), num_words `[B]`. One per (signature, selection, sizes).
    """
    key = (family.signature, selection, sizes)
    run = _LOOPS.get(key)
    if run is None:
        run = _LOOPS[key] = jax.jit(functools.partial(_search, family, selection, sizes))
    return run


def _search(family, selection: Selection, sizes: Sizes, params, ids, types, counts, later, num_words) -> Outcome:
    """The whole search of a batch (under jit): `lax.while_loop` over iterations until every sentence is DONE."""
    B, P, N, R = sizes.batch, sizes.pool, sizes.words, sizes.records
    W = selection.word_beam
    word_actions = np.asarray(family.word_actions, bool)
    tracing = bool(word_actions.all())  # one selection per word: keep each word's beam (`Trace`)
    init = family.initial_state()
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (B, P) + x.shape), init)
    status = jnp.zeros((B, P), jnp.int32).at[:, 0].set(FRONTIER)
    phase = jnp.where(num_words > 0, IN_WORDS, DONE)
    memory_rows = jnp.arange(B * P, dtype=jnp.int32).reshape(B, P)
    trace = Trace(jnp.full((B, N, P), -jnp.inf, jnp.float32), jnp.full((B, N, P), -jnp.inf, jnp.float32),
                  jnp.full((B, N, W), -1, jnp.int32)) if tracing else None
    carry = Outcome(state, family.init_cache(B, P), memory_rows, status, jnp.zeros((B, P), jnp.float32),
                    jnp.zeros((B, P, R), jnp.int32), jnp.zeros((B, P), jnp.int32), jnp.zeros(B, jnp.int32), phase,
                    jnp.zeros((B, N + 1), jnp.float32), jnp.zeros(B, jnp.int32), jnp.zeros(B, jnp.int32),
                    jnp.int32(0), jnp.int32(0), trace)

    def word_of(t, finishing):
        tt_ = jnp.minimum(t, N - 1)
        rows = jnp.arange(B)
        return WordInfo(ids[rows, tt_], types[rows, tt_], jnp.where(finishing, 0, counts[rows, tt_]),
                        jnp.where(finishing, 0, later[rows, tt_]))

    # Memory sizes: the attention reads only the slots held so far, rounded up to one of a few static sizes
    # (one compiled branch each).
    C = family.cache_slots
    buckets = sorted({min(C, m) for m in (32, 64, max(32, round_up(C // 2, 16)), C)})

    def body(c: Outcome) -> Outcome:
        finishing = c.phase == FINISHING
        word = word_of(c.t, finishing)
        word_bp = jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], (B, P) + x.shape[1:]), word)
        run = (c.status == FRONTIER) & (c.phase != DONE)[:, None]
        held = jnp.max(jnp.where(c.status != EMPTY, family.memory_used(c.state), 0))
        bucket = jnp.sum(held > jnp.asarray(buckets[:-1]))  # every slot read or written is below `held`
        lp, word_lp, state, cache = _score_live(family, params, c.state, c.cache, word_bp, run, c.memory_rows,
                                                sizes.chunk, buckets, bucket)
        fin_bp = jnp.broadcast_to(finishing[:, None], (B, P))
        allowed = _vmap2(family.allowed, state, fin_bp, word_bp) & run[..., None]
        fits = _vmap2(family.fits, state, word_bp)
        pruned = c.pruned + jnp.sum(allowed & ~fits, axis=(1, 2))
        allowed = allowed & fits

        def per_sentence(status, score, lp_s, word_lp_s, allowed_s, phase, t, n, prefix):
            values = _successors(score, lp_s, word_lp_s, allowed_s, word_actions)
            w_src, w_act, w_val, w_status, done, word_val = _select_in_words(selection, status, score, values,
                                                                             word_actions)
            f_src, f_act, f_val, f_status = _select_finishing(status, score, values)
            in_words = phase == IN_WORDS
            new_prefix = prefix.at[jnp.minimum(t + 1, N)].set(
                jnp.where(in_words & done, jax.nn.logsumexp(word_val), prefix[jnp.minimum(t + 1, N)]))
            new_t = jnp.where(in_words & done, t + 1, t)
            new_phase = jnp.where(in_words & done & (new_t == n), FINISHING, phase)
            pick = lambda a, b, keep: jnp.where(in_words, a, jnp.where(phase == FINISHING, b, keep))
            src = pick(w_src, f_src, jnp.arange(status.shape[0], dtype=jnp.int32))
            act = pick(w_act, f_act, jnp.full_like(w_act, KEEP))
            val = pick(w_val, f_val, score)
            new_status = pick(w_status, f_status, status)
            return src, act, val, new_status, new_t, new_phase, new_prefix, in_words.astype(jnp.int32)

        src, act, val, new_status, t, new_phase, prefix, stepped = jax.vmap(per_sentence)(
            c.status, c.score, lp, word_lp, allowed, c.phase, c.t, num_words, c.prefix)
        trace = c.trace
        if tracing:  # this iteration's selection was word c.t's whole step
            at, rows = jnp.where(c.phase == IN_WORDS, c.t, N), jnp.arange(B)
            parents = jnp.where(new_status[:, :W] != EMPTY, src[:, :W], -1)
            trace = Trace(trace.scores.at[rows, at].set(jnp.where(run, c.score, -jnp.inf), mode="drop"),
                          trace.with_word.at[rows, at].set(jnp.where(run, c.score + word_lp, -jnp.inf), mode="drop"),
                          trace.parents.at[rows, at].set(parents, mode="drop"))
        gather = lambda x: jnp.take_along_axis(x, src.reshape((B, P) + (1,) * (x.ndim - 2)), axis=1)
        state = jax.tree.map(gather, state)
        # The children's memories: copies only where a parent has more than one (`_assign_rows`).
        memory_rows, copy_from, copy_to = jax.vmap(_assign_rows)(c.memory_rows, src, new_status != EMPTY)
        cache = _copy_memories(family, cache, copy_from, copy_to, sizes.copy_chunk or sizes.chunk, buckets, bucket)
        records = gather(c.records)
        num_records = gather(c.num_records)
        # Advance by the chosen actions (the word is the one just generated: the current word of the step).
        advanced, record = _vmap2(lambda s, a, w: family.advance(s, jnp.maximum(a, 0), w), state, act, word_bp)
        moved = act >= 0
        state = jax.tree.map(lambda new, old: jnp.where(moved.reshape(moved.shape + (1,) * (new.ndim - 2)), new, old),
                             advanced, state)
        at = jnp.where(moved, num_records, R)
        records = records.at[jnp.arange(B)[:, None], jnp.arange(P)[None, :], at].set(record, mode="drop")
        num_records = num_records + moved
        # After the last word (from the selection that read it on): a hypothesis with nothing left to close is
        # complete, a sentence with none left to close is done.
        ending = new_phase == FINISHING
        complete = ending[:, None] & (new_status == FRONTIER) & _vmap2(family.complete, state)
        new_status = jnp.where(complete, COMPLETE, new_status)
        new_phase = jnp.where(ending & ~jnp.any(new_status == FRONTIER, axis=1), DONE, new_phase)
        return Outcome(state, cache, memory_rows, new_status, val, records, num_records, t, new_phase, prefix,
                       c.steps + stepped, pruned, c.iteration + 1, c.rows_run + jnp.sum(run), trace)

    def cond(c: Outcome):
        return jnp.any(c.phase != DONE) & (c.iteration < sizes.max_iterations)

    return jax.lax.while_loop(cond, body, carry)._replace(state=None, cache=None)


def _longest(pieces_per_sentence) -> int:
    """The most pieces of a sentence, rounded up as the words are (`_coarse(n, 8)`).

    So capacity and stack slots follow the length bucket: with a word
    dictionary every batch of one bucket gets one compiled search.
    """
    return _coarse(max(sum(len(p) for p in pieces) for pieces in pieces_per_sentence), 8)



def _coarse(n: int, least: int = 16) -> int:
    """n rounded up to `least`, a power of two or 1.5 times one: few distinct shapes, so few compilations."""
    size = max(int(least), 1)
    while size < n:
        size = size * 3 // 2 if size & (size - 1) == 0 and size >= 4 else _next_power_of_two(size + 1)
    return size


def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


__all__ = ["COMPLETE", "CCDeviceState", "ChoeCharniakDevice", "DeviceBeamSearch", "Outcome", "Selection", "Sizes",
           "Trace", "WordInfo", "compiled_search"]
