"""Synchronous Pushdown-LM inference on device: beam search over (token, attachment), p(x), surprisal, parses.

Murty et al. (EMNLP 2023) §3.3, eq. 7: a Pushdown-LM predicts the next token
and, in parallel, its attachment r_k (which stack element it reduces with;
`tgjax.syntax.stack_tape`). A string ``<s> t_1 .. t_m <eos>`` (the layout of
`tgjax.data.pushdown`; t are tokens, sub-word pieces or words) is searched
left to right, one token per step: every hypothesis of the beam B_{k-1}
(an attachment sequence for tokens 0..k-1, its stack tape and its caches)
is extended by the known token k and each of its legal attachments, scored

    score(y_<=k) = score(y_<k) + log p(x_k | x_<k; W_{k-1}) + log p(r_k | x_<=k; W_{k-1})

and the best `beam_size` of all (hypothesis, attachment) pairs form B_k; the
winners' tapes are updated by Algorithm 1.

The search runs on `tgjax.infer.device_beam`'s engine, the one TG and TXL
(CC) use, with `PushdownDevice` as its family: a "word" of the engine is one
token, an action its attachment slot, and every action generates the word,
so each token is one selection of the best `beam_size` of every (hypothesis,
attachment) pair (the engine's fast track alone: no action beam, no
frontier between tokens). The strings of a batch (`batch_sentences`, sorted
by length; by default 256 hypotheses in all) advance one token per
iteration of one compiled loop; a hypothesis's caches are copied only where
it has more than one child.

The incremental step. A hidden state of position j depends on tape row j
only (the tape after token j; later attachments change *later* rows), so the
keys and values of past positions are computed once and cached per layer
(a row per hypothesis, `[L, 2, H, T, d_head]`): the step for position i runs
the layers on one query whose depth term reads the current tape row W_i,
exactly what the teacher-forced model computes (`pushdown_oracle` checks it
against whole forward passes), attending to the positions held so far (the
engine's memory sizes; `_attend_one`). The attachment head caches A_k h_j
pushed through the first layer of its key MLP (`[T, key_dim]`); each step
adds the depth embeddings of the current row, and the MLP's second layer is
moved onto the query (`_head_row`).

Legal attachments and ROOT. ``<s>`` plays ROOT (Appendix B): a word never
attaches to it, and ``<eos>`` must, which closes the sentence (an unfinished
stack is folded right-branching under ROOT). So for a word k the legal slots
are the rightmost tokens of the stack's elements other than ROOT, and k
itself (shift); for ``<eos>``, ROOT alone. Training, this search and the
sampler share these sets (`attachment_head.slot_legality`). The head's
softmax runs over them (the paper's text), so each step's attachment
probabilities sum to one and a beam that holds every tree gives p(x)
exactly, the summed surprisals included; or over every causal slot
(`attachment_normalise="causal"`, the paper's Fig. 8 and the release), the
illegal ones then dropped without renormalising, as the release's beam does.
The ``<eos>`` attachment's log-probability is counted (``final_attachment=
"scored"``: eq. 7 counts every r_k; 0 under the legal softmax, ROOT being
its only slot) or not (``"forced"``: the release forces it to 0 and adds
only the string's log-probability).

What comes out, per string:

* log p(x) ≈ logsumexp of the final beam's scores (the paper; exact when the
  beam holds every tree: `pushdown_oracle.enumerate_joint` checks it);
* surprisal of token k, ``surprisal="beam"`` (default, the paper's "marginal
  based on the beam state at time step t"):
  −log [ Σ_{b∈B_{k-1}} p(x_<k, y_b) p(x_k | b) / Σ_{b∈B_{k-1}} p(x_<k, y_b) ];
  the attachment r_k sums out (its distribution is normalised), so this is the
  exact conditional given the hypotheses in B_{k-1}. ``surprisal="release"``
  is our reading of the release (beam_search_util.py:316-321, quirk §1.10.6):
  log p(x_<=k) ≈ logsumexp, over the distinct origins o of the surviving
  candidates, of the *o-th sorted candidate's* parent score plus its word
  log-probability (it indexes the sorted list by origin), and the surprisal is
  the difference of consecutive such prefixes. A word's surprisal is the sum
  over its pieces; the end's is the ``<eos>`` token's. Both are read from the
  engine's `Trace` (each token's starting beam and the next beam's parents);
* the best parse: the top hypothesis's attachments replayed into a binary
  bracketing over tokens, then merged back to words (Appendix C: a word's
  pieces collapse to one leaf; `merge_subword_bracketing`).

`PushdownSearch` is the Python entry point (eval commands, notebooks):
``search(list of word lists)`` for sentences (the `tgjax.eval.parse` scorer
protocol), ``search_ids`` for one id string, and ``prefix`` /
``prefix_attachments`` for strings without an end (the Dyck evaluation: the
top hypothesis's attachments and per-position next-token log-probabilities
under its own tape). `pushdown_oracle.host_beam` is the host oracle the
tests hold it to.

Capacity: a batch's caches hold `T` positions, its longest string rounded up
to `bucket` (one compilation per beam size, batch size and bucket).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.infer.device_beam import COMPLETE, Outcome, Selection, Sizes, WordInfo, compiled_search
from tgjax.infer.incremental import _Static
from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree

HYPOTHESES_PER_SEARCH = 256  # `batch_sentences=None`: strings per compiled search, times the beam


@dataclasses.dataclass(frozen=True)
class PushdownBeamConfig:
    beam_size: int = 300  # the paper's beam (§4.2, App. C)
    final_attachment: Literal["scored", "forced"] = "scored"
    surprisal: Literal["beam", "release"] = "beam"
    bucket: int = 16  # capacity rounded up to a multiple of this
    # Strings per compiled search (their caches: batch x beam rows of T positions); None: as many as make 256
    # hypotheses, at least one (on CPU the quickest per string: benchmarks/pushdown_engine.py).
    batch_sentences: int | None = None

    def __post_init__(self):
        if self.beam_size < 1:
            raise ValueError(f"beam size must be at least 1, got {self.beam_size}")
        if self.final_attachment not in ("scored", "forced"):
            raise ValueError(f"final_attachment: expected 'scored' (paper) or 'forced' (release), "
                             f"got {self.final_attachment!r}")
        if self.surprisal not in ("beam", "release"):
            raise ValueError(f"surprisal: expected 'beam' (paper) or 'release', got {self.surprisal!r}")
        if self.bucket < 1:
            raise ValueError(f"bucket must be positive, got {self.bucket}")
        if self.batch_sentences is not None and self.batch_sentences < 1:
            raise ValueError(f"batch_sentences must be at least 1, got {self.batch_sentences}")


def apply_attachment(attach: jax.Array, depth: jax.Array, ends: jax.Array, k: jax.Array, r: jax.Array):
    """Algorithm 1 for token k with attachment r, on one hypothesis's arrays `[T + 1]` (vectorised).

    A reduce pops the elements e_1 (ending at r) .. e_m (the top); token j of
    e_t gains t levels and token k gains m. With `ends` the elements'
    rightmost tokens and d_j = #ends in [r, j) (negative counts below r),
    token j < k gains 1 + d_j where d_j >= 0 (j inside e_1 .. e_m), token k
    gains d_k = m. The popped ends are removed and k becomes an end.
    """
    attach, depth, ends = jnp.asarray(attach), jnp.asarray(depth), jnp.asarray(ends)
    steps = jnp.arange(attach.shape[0])
    before = jnp.cumsum(ends) - ends  # ends strictly before j
    d = before - before[r]
    reduce = r != k
    gain = jnp.where(steps < k, 1 + d, d)
    gain = jnp.where(reduce & (steps <= k) & (d >= 0), gain, 0)
    popped = reduce & (steps >= r) & (steps < k)
    ends = (ends & ~popped) | (steps == k)
    return attach.at[k].set(r), depth + gain, ends


def _attend_one(attention, x: jax.Array, keys: jax.Array, values: jax.Array, here: jax.Array, tape_row: jax.Array,
                i: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`PushdownAttention` for one query per hypothesis, at position `i [n]`, against its cached keys and values.

    x `[n, d]`; keys, values `[n, H, M, dh]` (of positions < M, each head's
    one block); here `[n, M]`: position i, whose key and value are computed
    now (and returned, `[n, 2, H, dh]`; the memory's slot i is not read);
    tape_row `[n, M]` (W_i). The layer's formula (`scores`, `attend`) with
    only the distances 0..M-1 projected. Returns (`[n, d]`, the fresh keys
    and values).
    """
    q = jnp.einsum("bd,dhk->bhk", x, attention.query[...])
    fresh = jnp.stack([jnp.einsum("bd,dhk->bhk", x, attention.key[...]),
                       jnp.einsum("bd,dhk->bhk", x, attention.value[...])], axis=1)  # [n, 2, H, dh]
    now = here[:, None, :]  # [n, 1, M]
    M = keys.shape[2]
    logits = jnp.where(now, jnp.sum(q * fresh[:, 0], axis=-1)[..., None], jnp.einsum("bhk,bhmk->bhm", q, keys))
    near = min(M, attention.max_relative_position + 1)  # distances i - j of j <= i < M
    rel_keys = jnp.einsum("pd,dhk->phk", attention.position_table[...][:near], attention.rel_key[...])
    by_distance = jnp.einsum("bhk,phk->bhp", q, rel_keys)  # [n, H, near]
    distance = jnp.clip(i[:, None] - jnp.arange(M)[None, :], 0, near - 1)
    logits = logits + jnp.take_along_axis(by_distance, distance[:, None, :], axis=2)
    if attention.depth_embedding is not None:
        depth_keys = attention.depth_embedding[...]  # [D, dh] (head space), or [D, d] (model space)
        if attention.depth_space == "head":
            by_depth = jnp.einsum("bhk,ek->bhe", q, depth_keys)
        else:
            by_depth = jnp.einsum("bhk,ehk->bhe", q, jnp.einsum("ed,dhk->ehk", depth_keys, attention.key[...]))
        index = jnp.clip(tape_row, 0, attention.num_depths - 1)
        logits = logits + jnp.take_along_axis(by_depth, index[:, None, :], axis=2)
    mask = (jnp.arange(M)[None, :] <= i[:, None])[:, None, :]  # [n, 1, M]
    logits = jnp.where(mask, logits / np.sqrt(attention.head_dim), jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    attended = (jnp.einsum("bhm,bhmk->bhk", jnp.where(now, 0.0, weights), values)
                + jnp.sum(jnp.where(now, weights, 0.0), axis=-1)[..., None] * fresh[:, 1])
    return jnp.einsum("bhk,hkd->bd", attended, attention.out[...]), fresh


def _head_row(head, hidden: jax.Array, next_embedding: jax.Array, head_keys: jax.Array, tape_row: jax.Array,
              i: jax.Array) -> jax.Array:
    """Slot logits `[n, M + 1]` of n hypotheses at positions `i [n]` (the `AttachmentHead` formula, one query row).

    hidden `[n, d]` (h_i), next_embedding `[n, d_e]` (token i + 1), head_keys
    `[n, M, kd]` (cached: A_k h_j through the key MLP's first layer), tape_row
    `[n, M]`. As the head's depth-chunked path, the key MLP's second layer is
    moved onto the query, q · (W_2ᵀ g + b_2) = (W_2 q) · g + q · b_2 (g its
    hidden layer): `key_dim` products per slot instead of `key_dim²`.
    """
    kd = head.key_dim
    projected_q = hidden @ head.query_proj[...]
    query = head.query_mlp(jnp.concatenate([projected_q, next_embedding], -1), True)
    self_source = projected_q if head.self_key_input == "projection" else query
    self_key = head.self_key_mlp(jnp.concatenate([self_source, next_embedding], -1), True)
    mlp = head.key_depth_mlp
    depth_part = head.depth_embedding[...] @ mlp.w1[...][kd:]  # [D, kd]
    index = jnp.clip(tape_row, 0, head.num_depths - 1)
    hidden_keys = jax.nn.relu(head_keys + depth_part[index] + mlp.b1[...])  # [n, M, kd]
    token_scores = jnp.einsum("nc,nmc->nm", query @ mlp.w2[...].T, hidden_keys) + (query @ mlp.b2[...])[:, None]
    self_scores = jnp.sum(query * self_key, axis=-1)
    slots = jnp.arange(head_keys.shape[1] + 1)[None, :]
    logits = jnp.concatenate([token_scores, jnp.zeros_like(token_scores[:, :1])], axis=1)
    logits = jnp.where(slots == i[:, None] + 1, self_scores[:, None], logits)
    if head.rel_key is not None:
        near = min(head_keys.shape[1] + 1, head.max_relative_position + 1)  # distances i + 1 - c of slots c <= M
        by_distance = query @ (head.position_table[...][:near] @ head.rel_key[...]).T  # [n, near]
        distance = jnp.clip(i[:, None] + 1 - slots, 0, near - 1)
        logits = logits + jnp.take_along_axis(by_distance, distance, axis=1)
    if head.scaled:
        logits = logits / np.sqrt(kd)
    return logits


def _legal_slots(ends: jax.Array, i: jax.Array, final: jax.Array) -> jax.Array:
    """The slots token i + 1 may take, `[..., T + 1]` from the stack's element ends `[..., T + 1]` (i, final
    `[...]`): ROOT (slot 0) alone for the final ``<eos>``, else an element end other than ROOT, or shift
    (`attachment_head.slot_legality`, what training normalises over)."""
    slots = jnp.arange(ends.shape[-1])
    i = i[..., None]
    words = (ends & (slots <= i) & (slots > 0)) | (slots == i + 1)
    return jnp.where(final[..., None], slots == 0, words)


def _slot_log_probs(logits: jax.Array, legal: jax.Array, causal: jax.Array, normalise_over: str) -> jax.Array:
    """`attachment_log_probs` for one query row per hypothesis: `logits, legal, causal [n, T + 1]`; −inf off the
    legal slots.

    ``"legal"`` (paper): softmax over the legal slots; ``"causal"`` (release):
    over every causal slot, then the illegal ones set to −inf, not renormalised.
    """
    allowed = legal & causal if normalise_over == "legal" else causal
    log_probs = jax.nn.log_softmax(jnp.where(allowed, logits, jnp.finfo(logits.dtype).min), axis=-1)
    return jnp.where(legal & causal, log_probs, -jnp.inf)


class PushdownState(NamedTuple):
    """One hypothesis of the engine: its attachments and stack tape, and where it stands."""

    attach: jax.Array  # [T + 1] int32 attachment of each token read
    depth: jax.Array  # [T + 1] int32 the tape after the last token read
    ends: jax.Array  # [T + 1] bool: rightmost token of a stack element
    position: jax.Array  # [] int32: i, the last token read (its keys and values are computed by the next call)
    token: jax.Array  # [] int32: that token's id


class PushdownDevice:
    """A `PushdownLM` as a `tgjax.infer.device_beam` family (module docstring).

    Actions are the attachment slots 0..T of the next token (`A = T + 1`),
    each generating that token (the engine's word); its `WordInfo` holds the
    token's id (`ids[0]`) and how many follow it (`later`: 0 for the final
    ``<eos>``). Caches: per hypothesis row, every layer's keys and values
    `[L, 2, H, T, d_head]` (each head's positions one block, as the
    attention's products read them) and the head's keys `[T, key_dim]`.

    Args:
      graphdef, params, static: the model split (`nnx.split`) and its graph definition as a `_Static`.
      bos_id: the first token of every string (ROOT).
      capacity: T, the positions the caches hold.
      forced: the final attachment forced (0) rather than scored.
      ends: the strings end with ``<eos>`` (False: prefixes, no final token).
    """

    def __init__(self, graphdef, params, static: _Static, bos_id: int, capacity: int, *, forced: bool, ends: bool):
        self.graphdef, self.params, self.static = graphdef, params, static
        model = nnx.merge(graphdef, params)
        self.config, self.key_dim = model.config, model.head.key_dim
        self.bos_id = int(bos_id)
        self.capacity = int(capacity)
        self.forced, self.ends = bool(forced), bool(ends)
        self.num_actions = self.capacity + 1
        self.word_actions = np.ones(self.num_actions, bool)  # every attachment generates the token
        self.cache_slots = self.capacity

    @property
    def signature(self) -> tuple:
        return (self.static, self.bos_id, self.capacity, self.forced, self.ends)

    def initial_state(self) -> PushdownState:
        size = self.capacity + 1
        return PushdownState(jnp.zeros(size, jnp.int32), jnp.zeros(size, jnp.int32),
                             jnp.zeros(size, bool).at[0].set(True),  # <s> shifted: it is a stack element
                             jnp.int32(0), jnp.int32(self.bos_id))

    def init_cache(self, batch: int, pool: int) -> tuple:
        c, rows = self.config, batch * pool
        return (jnp.zeros((rows, c.num_layers, 2, c.num_heads, self.capacity, c.d_model // c.num_heads), jnp.float32),
                jnp.zeros((rows, self.capacity, self.key_dim), jnp.float32))

    def memory_used(self, state: PushdownState) -> jax.Array:
        return state.position + 1

    def _final(self, word: WordInfo) -> jax.Array:
        return jnp.logical_and(self.ends, word.later == 0)

    def score(self, params, state: PushdownState, cache: tuple, word: WordInfo, rows: jax.Array, slots: int):
        """n hypotheses at their positions i: log p(slot | token) `[n, T + 1]`, log p(token) `[n]`, the states,
        the writes (position i's keys and values, and its head key)."""
        model = nnx.merge(self.graphdef, params)
        c = model.config
        kv, head_keys = cache
        M = min(slots, self.capacity)
        i = state.position
        row = jnp.minimum(rows, kv.shape[0] - 1)
        tape_row = state.depth[:, :M]
        if c.binary_tape:
            tape_row = jnp.minimum(tape_row, 1)
        table = model.embedding[...]
        x = table[state.token] * np.sqrt(c.d_model)  # [n, d]
        here = jnp.arange(M)[None, :] == i[:, None]  # [n, M]: position i, computed now
        fresh = []
        for index, layer in enumerate(model.layers):
            keys, values = kv[row, index, 0, :, :M], kv[row, index, 1, :, :M]  # [n, H, M, dh]: one layer's at a time
            attended, kv_fresh = _attend_one(layer.attention, x, keys, values, here, tape_row, i)
            x = layer.around_attention(x, attended)
            fresh.append(kv_fresh)  # [n, 2, H, dh]
        hidden = x
        next_token = word.ids[:, 0]
        word_lp = jnp.take_along_axis(jax.nn.log_softmax(hidden @ table.T + model.output_bias[...], axis=-1),
                                      next_token[:, None], axis=1)[:, 0]
        head = model.head
        head_key = (hidden @ head.key_proj[...]) @ head.key_depth_mlp.w1[...][:head.key_dim]  # [n, kd]
        held_keys = jnp.where(here[..., None], head_key[:, None], head_keys[row, :M])
        logits = _head_row(head, hidden, table[next_token], held_keys, tape_row, i)  # [n, M + 1]
        logits = jnp.pad(logits, ((0, 0), (0, self.capacity - M)))
        final = self._final(word)
        legal = _legal_slots(state.ends, i, final)
        causal = jnp.arange(self.num_actions)[None, :] <= i[:, None] + 1
        attach = _slot_log_probs(logits, legal, causal, c.attachment_normalise)
        if self.forced:
            attach = jnp.where(final[:, None] & legal, 0.0, attach)
        return attach, word_lp, state, (i, jnp.stack(fresh, axis=1), head_key)

    def write(self, cache: tuple, writes: tuple, rows: jax.Array) -> tuple:
        kv, head_keys = cache
        position, fresh, head_key = writes  # [n], [n, L, 2, H, dh], [n, kd]
        return (kv.at[rows, :, :, :, position].set(fresh, mode="drop"),
                head_keys.at[rows, position].set(head_key, mode="drop"))

    def copy_rows(self, cache: tuple, src: jax.Array, dst: jax.Array, slots: int) -> tuple:
        kv, head_keys = cache
        m = min(slots, self.capacity)
        src = jnp.minimum(src, kv.shape[0] - 1)
        return (kv.at[dst, :, :, :, :m].set(kv[src, :, :, :, :m], mode="drop"),
                head_keys.at[dst, :m].set(head_keys[src, :m], mode="drop"))

    def allowed(self, state: PushdownState, finishing, word: WordInfo) -> jax.Array:
        return _legal_slots(state.ends, state.position, self._final(word))

    def fits(self, state: PushdownState, word: WordInfo) -> jax.Array:
        return jnp.ones(self.num_actions, bool)  # the caches hold every position of the batch's strings

    def advance(self, state: PushdownState, action, word: WordInfo):
        k = state.position + 1
        attach, depth, ends = apply_attachment(state.attach, state.depth, state.ends, k, action)
        return PushdownState(attach, depth, ends, k, word.ids[0]), action

    def complete(self, state: PushdownState):
        return jnp.bool_(True)  # after the last token, nothing is left to do


# -----------------------------------------------------------------------------
# Host side: strings in, results out.


def merge_subword_bracketing(tree: stt.Bracketing, word_index: Sequence[int]) -> Tree | str:
    """A token bracketing -> a tree over words (Appendix C: a word's pieces merge into one leaf).

    Every node whose span does not cut a word is kept, as a span of words;
    nodes inside one word vanish (the right-branching pieces (ab (ra (ca
    dabra))) become the word's leaf), and a node that cuts a word (possible:
    the search does not force pieces together) is dropped, its children
    joining its parent. Returns a `Tree` labelled ``X`` (a bare word for a
    one-word sentence): n-ary only where a cut node was dropped.
    """
    word_index = np.asarray(word_index)
    n = int(word_index[-1]) + 1
    first = {int(w): int(np.argmax(word_index == w)) for w in range(n)}
    last = {int(w): int(len(word_index) - 1 - np.argmax(word_index[::-1] == w)) for w in range(n)}
    spans = set()
    for lo, hi in stt.bracketing_spans(tree):
        wl, wh = int(word_index[lo]), int(word_index[hi])
        if first[wl] == lo and last[wh] == hi and wl < wh:
            spans.add((wl, wh))
    return tree_from_word_spans(n, spans)


def tree_from_word_spans(n: int, spans) -> Tree | str:
    """Nested word spans (each of >= 2 words) over word indices -> a `Tree` of `X` nodes with leaves "0".."n-1"."""
    spans = sorted(set(spans) | {(0, n - 1)}, key=lambda s: (s[0], -s[1]))
    if n == 1:
        return "0"
    inside: dict[tuple[int, int], list[tuple[int, int]]] = {(0, n - 1): []}  # span -> its largest sub-spans
    stack = [(0, n - 1)]
    for lo, hi in spans[1:]:
        while not (stack[-1][0] <= lo and hi <= stack[-1][1]):
            stack.pop()
        inside[stack[-1]].append((lo, hi))
        inside[(lo, hi)] = []
        stack.append((lo, hi))

    def build(lo: int, hi: int) -> Tree:
        out: list[Tree | str] = []
        position = lo
        for clo, chi in sorted(inside[(lo, hi)]):
            out.extend(str(w) for w in range(position, clo))
            out.append(build(clo, chi))
            position = chi + 1
        out.extend(str(w) for w in range(position, hi + 1))
        return Tree("X", out)

    return build(0, n - 1)


def _with_words(tree: Tree | str, words: Sequence[str]) -> Tree:
    if isinstance(tree, str):
        return Tree("X", [words[int(tree)]])
    return Tree(tree.label, [_with_words(c, words) if isinstance(c, Tree) else words[int(c)] for c in tree.children])


@dataclasses.dataclass
class PushdownResult:
    """One string's answer (nats). The attribute names follow `tgjax.infer.beam.BeamResult` where they mean the same.

    words: the sentence's words; ids: the token string ``<s> .. <eos>``;
    word_index: ``[tokens]`` the word of each piece (``-1`` for ``<s>``, ``<eos>``).
    log_prob: log p(x) ≈ logsumexp of the final beam (``<eos>`` included).
    token_surprisals: ``[tokens - 1]`` surprisal of tokens 1..; surprisals: ``[words]`` per word (sum of its pieces);
    end_surprisal: the ``<eos>`` token's.
    best_attach: ``[tokens]`` the top hypothesis's attachments; best_log_prob: its log p(x, y).
    final_scores: the final beam's scores, best first (finite ones).
    best_tree: the top parse over the words (labels ``X``), sub-words merged.
    num_unknown: words read as UNK.
    """

    words: list[str]
    ids: np.ndarray
    word_index: np.ndarray
    log_prob: float
    token_surprisals: np.ndarray
    surprisals: np.ndarray
    end_surprisal: float
    best_attach: np.ndarray
    best_log_prob: float
    final_scores: np.ndarray
    best_tree: Tree
    num_unknown: int = 0


@dataclasses.dataclass
class PrefixResult:
    """A string without an end (`PushdownSearch.prefix`).

    best_attach: ``[n]`` the top hypothesis's attachments; log_probs: ``[n, V]`` next-token log-probabilities
    at every position under that hypothesis's own tape (row n - 1: after the whole prefix); log_prob:
    log Σ_beam p(prefix, y).
    """

    best_attach: np.ndarray
    log_probs: np.ndarray
    log_prob: float


class _Space:
    """`encode_word` for `tgjax.eval.parse.UnknownWords`: a word's ids, and whether it is UNK."""

    def __init__(self, vocab):
        self.vocab = vocab

    def encode_word(self, word: str) -> tuple[tuple[int, ...], bool]:
        ids = tuple(int(i) for i in self.vocab.encode([word]))
        unk = getattr(self.vocab, "unk_id", None)
        return ids, unk is not None and ids == (unk,)


class _Found(NamedTuple):
    """One string's search, on the host: its final beam and the trace of its tokens (`device_beam.Trace`)."""

    scores: np.ndarray  # the final beam's log p(x, y), best first (float64)
    best_attach: np.ndarray  # [n] the top hypothesis's attachments
    beam_scores: np.ndarray  # [n - 1, K] per token: log p of the beam before it (-inf: empty)
    with_word: np.ndarray  # [n - 1, K] ... plus the token's log-probability from each
    parents: np.ndarray  # [n - 1, K] the next beam's parents, best first (-1: empty)


class PushdownSearch:
    """Beam search of a `PushdownLM` (see the module docstring). `search` is the eval scorer protocol."""

    rule = "pushdown"

    def __init__(self, model, vocab, config: PushdownBeamConfig | None = None):
        self.model = model
        self.vocab = vocab
        self.config = config or PushdownBeamConfig()
        self.space = _Space(vocab)
        self.graphdef, self.params = nnx.split(model)
        self._static = _Static(self.graphdef)
        self.last_stats: dict = {}

    def _capacity(self, positions: int) -> int:
        bucket = self.config.bucket
        return max(bucket, -(-positions // bucket) * bucket)

    def _search_strings(self, strings: Sequence[np.ndarray], names: Sequence[str], *, prefix: bool,
                        beam_size: int | None = None, batch: int | None = None) -> list[_Found]:
        """The engine over id strings (``<s>`` and at least one more token each), `batch` per compiled search.

        Strings are searched sorted by length, at most `batch` (default
        `batch_sentences`) at a time, each batch at the capacity of its
        longest and padded to a power of two (few compiled searches).
        """
        K = beam_size or self.config.beam_size
        most = batch or self.config.batch_sentences or max(1, HYPOTHESES_PER_SEARCH // K)
        bos = int(self.vocab.bos_id)
        for ids, name in zip(strings, names):
            if int(ids[0]) != bos:
                raise ValueError(f"{name}: expected <s> (id {bos}) first, got id {int(ids[0])}")
        found: list[_Found | None] = [None] * len(strings)
        order = sorted(range(len(strings)), key=lambda s: len(strings[s]))
        self.last_stats = {"iterations": 0, "rows_run": 0}
        for start in range(0, len(order), most):
            group = order[start:start + most]
            run, args, sizes = self._batch([strings[s] for s in group], min(most, 1 << (len(group) - 1).bit_length()),
                                           K, prefix=prefix)
            out: Outcome = jax.tree.map(np.asarray, run(*args))
            if int(out.iteration) >= sizes.max_iterations:  # pragma: no cover - the loop always ends before
                raise RuntimeError(f"pushdown beam: {names[group[0]]}..: the search did not end")
            self.last_stats["iterations"] += int(out.iteration)
            self.last_stats["rows_run"] += int(out.rows_run)
            assert out.trace is not None
            for b, s in enumerate(group):
                m = len(strings[s]) - 1
                complete = np.flatnonzero(out.status[b] == COMPLETE)
                if not complete.size:
                    raise ValueError(f"{names[s]}: the beam found no complete parse")
                scores = out.score[b, complete].astype(np.float64)
                ranked = np.argsort(-scores, kind="stable")
                best = complete[ranked[0]]
                found[s] = _Found(scores[ranked], np.r_[0, out.records[b, best, :m]].astype(np.int32),
                                  out.trace.scores[b, :m].astype(np.float64),
                                  out.trace.with_word[b, :m].astype(np.float64), out.trace.parents[b, :m])
        return found  # type: ignore[return-value]

    def _batch(self, strings: Sequence[np.ndarray], B: int, K: int, *, prefix: bool):
        """(the compiled search, its arguments, its sizes) of up to B strings at beam K, T their longest's
        capacity."""
        T = self._capacity(max(len(ids) for ids in strings) - 1)
        ids = np.zeros((B, T, 1), np.int32)
        counts = np.zeros((B, T), np.int32)
        later = np.zeros((B, T), np.int32)
        num_words = np.zeros(B, np.int32)
        for b, string in enumerate(strings):
            m = len(string) - 1  # tokens to predict: each an engine word
            ids[b, :m, 0], counts[b, :m], later[b, :m], num_words[b] = string[1:], 1, np.arange(m)[::-1], m
        family = PushdownDevice(self.graphdef, self.params, self._static, self.vocab.bos_id, T,
                                forced=self.config.final_attachment == "forced", ends=not prefix)
        sizes = Sizes(batch=B, pool=K, words=T, records=T, max_iterations=T + 2, chunk=B * K, copy_chunk=100)
        run = compiled_search(family, Selection(K, 0, K, "count"), sizes)
        args = (self.params, jnp.asarray(ids), jnp.zeros_like(jnp.asarray(ids)), jnp.asarray(counts),
                jnp.asarray(later), jnp.asarray(num_words))
        return run, args, sizes

    def encode(self, words: Sequence[str], name: str = "sentence") -> tuple[np.ndarray, np.ndarray, int]:
        """(ids ``<s> pieces <eos>``, word_index (-1 for ``<s>``/``<eos>``), UNK count) of a sentence's words."""
        if not words:
            raise ValueError(f"{name}: empty sentence; a Pushdown-LM needs at least one word to parse or score")
        pieces, word_index = self.vocab.encode_with_alignment(list(words))
        unk = getattr(self.vocab, "unk_id", None)
        num_unknown = sum(1 for w in words if unk is not None and tuple(self.vocab.encode([w]).tolist()) == (unk,))
        ids = np.concatenate([[self.vocab.bos_id], pieces, [self.vocab.eos_id]]).astype(np.int32)
        return ids, np.concatenate([[-1], word_index, [-1]]).astype(np.int32), num_unknown

    def search(self, sentences: Sequence[Sequence[str]]) -> list[PushdownResult]:
        """The beam's answer for each sentence (a list of words), searched `batch_sentences` at a time."""
        names = [f"sentence {i}" for i in range(len(sentences))]
        encoded = [self.encode(words, name) for words, name in zip(sentences, names)]
        found = self._search_strings([ids for ids, _, _ in encoded], names, prefix=False)
        return [self._result(f, ids, word_index, list(words), unknown)
                for f, (ids, word_index, unknown), words in zip(found, encoded, sentences)]

    def search_words(self, words: Sequence[str], name: str = "sentence") -> PushdownResult:
        ids, word_index, num_unknown = self.encode(words, name)
        return self.search_ids(ids, word_index=word_index, words=list(words), name=name, num_unknown=num_unknown)

    def search_ids(self, ids: Sequence[int], *, word_index: Sequence[int] | None = None,
                   words: Sequence[str] | None = None, name: str = "sentence", num_unknown: int = 0
                   ) -> PushdownResult:
        """The beam over ``<s> t_1 .. t_m <eos>`` (ids); ``word_index`` maps pieces to words (-1 at the ends)."""
        ids = np.asarray(ids, np.int32)
        if ids.ndim != 1 or ids.size < 3:
            raise ValueError(f"{name}: expected <s>, at least one token and <eos> ({ids.size} ids given)")
        if word_index is None:
            word_index = np.r_[-1, np.arange(ids.size - 2), -1]
        word_index = np.asarray(word_index, np.int32)
        if word_index.shape != ids.shape:
            raise ValueError(f"{name}: word_index has {word_index.size} entries for {ids.size} ids")
        inner = word_index[1:-1]
        stt._check_word_index(inner)
        num_words = int(inner[-1]) + 1
        words = list(words) if words is not None else [str(i) for i in range(num_words)]
        if len(words) != num_words:
            raise ValueError(f"{name}: {len(words)} words for a word_index of {num_words} words")
        found, = self._search_strings([ids], [name], prefix=False)
        return self._result(found, ids, word_index, words, num_unknown)

    def _result(self, found: _Found, ids: np.ndarray, word_index: np.ndarray, words: list[str],
                num_unknown: int) -> PushdownResult:
        inner = word_index[1:-1]
        token_surprisals = self._surprisals(found)
        per_word = np.zeros(len(words))
        np.add.at(per_word, inner, token_surprisals[:-1])
        tree = self.word_tree(found.best_attach, inner)
        return PushdownResult(words=words, ids=ids, word_index=word_index,
                              log_prob=float(np.logaddexp.reduce(found.scores)), token_surprisals=token_surprisals,
                              surprisals=per_word, end_surprisal=float(token_surprisals[-1]),
                              best_attach=found.best_attach, best_log_prob=float(found.scores[0]),
                              final_scores=found.scores, best_tree=_with_words(tree, words), num_unknown=num_unknown)

    def _surprisals(self, found: _Found) -> np.ndarray:
        """``[n - 1]`` surprisals of tokens 1 .. n-1 (see the module docstring)."""
        if self.config.surprisal == "beam":
            return -(np.logaddexp.reduce(found.with_word, axis=1) - np.logaddexp.reduce(found.beam_scores, axis=1))
        prefix = [0.0]
        for with_word, parents in zip(found.with_word, found.parents):
            kept = parents[parents >= 0]  # the sorted candidates' parents, best first
            # The release indexes the sorted candidates by origin: candidate o's parent, for each origin o.
            values = [with_word[kept[o]] for o in sorted(set(kept.tolist())) if o < kept.size]
            prefix.append(float(np.logaddexp.reduce(values)) if values else -np.inf)
        return -np.diff(np.asarray(prefix))

    @staticmethod
    def word_tree(attach: np.ndarray, word_index: np.ndarray) -> Tree | str:
        """The sentence's parse over words from a full attachment sequence ``<s> pieces <eos>``.

        The pieces' forest before ``<eos>`` is what ``<eos>``'s attachment to
        ROOT folds right-branching; its leaves are shifted back to 0.
        """
        _, forest = stt.replay(np.asarray(attach[:-1]))
        pieces = [_shift(tree, -1) for tree in forest[1:]]  # forest[0] is <s>
        tree = pieces[-1]
        for element in reversed(pieces[:-1]):
            tree = (element, tree)
        return merge_subword_bracketing(tree, word_index)

    def prefix(self, ids: Sequence[int], *, beam_size: int | None = None, name: str = "prefix") -> PrefixResult:
        """The beam over a string without an end (``ids[0]`` is ``<s>``): the Dyck evaluation's entry point.

        Returns the top hypothesis's attachments and the next-token
        log-probabilities `[n, V]` at every position under its own tape
        (one teacher-forced pass), row n - 1 predicting what follows the prefix.
        """
        ids = _checked_prefix(ids, name)
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"{name}: beam size must be at least 1, got {beam_size}")
        best_attach, log_prob = self.prefix_attachments([ids], beam_size=beam_size, num_parallel=1, names=[name])[0]
        return PrefixResult(best_attach, teacher_forced_log_probs(self.model, ids, best_attach), log_prob)

    def prefix_attachments(self, strings: Sequence[Sequence[int]], *, beam_size: int | None = None,
                           num_parallel: int = 8, names: Sequence[str] | None = None
                           ) -> list[tuple[np.ndarray, float]]:
        """`(best_attach [n], log Σ_beam p(prefix, y))` of each prefix: what `prefix` finds, `num_parallel`
        strings per compiled search (the Dyck evaluation: far fewer device loops than one string at a time).

        A string of ``<s>`` alone only shifts, with probability 1.
        """
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"beam size must be at least 1, got {beam_size}")
        if num_parallel < 1:
            raise ValueError(f"num_parallel must be at least 1, got {num_parallel}")
        names = list(names) if names is not None else [f"prefix {index}" for index in range(len(strings))]
        rows = [_checked_prefix(ids, name) for ids, name in zip(strings, names)]
        results: list[tuple[np.ndarray, float]] = [(np.zeros(1, np.int32), 0.0)] * len(rows)
        longer = [index for index, ids in enumerate(rows) if ids.size > 1]
        found = self._search_strings([rows[i] for i in longer], [names[i] for i in longer], prefix=True,
                                     beam_size=beam_size, batch=num_parallel)
        for index, f in zip(longer, found):
            results[index] = (f.best_attach, float(np.logaddexp.reduce(f.scores)))
        return results


def _checked_prefix(ids: Sequence[int], name: str) -> np.ndarray:
    """`ids` as an int32 vector, or a ValueError naming it unless it holds at least the <s> id."""
    ids = np.asarray(ids, np.int32)
    if ids.ndim != 1 or ids.size < 1:
        raise ValueError(f"{name}: expected at least the <s> id")
    return ids


@functools.partial(jax.jit, static_argnames=("graphdef",))
def forward(graphdef, state, batch: dict) -> dict:
    """The model's teacher-forced outputs (`PushdownLM.__call__`, no dropout), jitted on (graphdef, state)."""
    return nnx.merge(graphdef, state)(batch, deterministic=True)


def _teacher_forced(model, ids: np.ndarray, attach: np.ndarray) -> tuple[dict, int, int]:
    """(outputs of one teacher-forced pass over `ids` with the tape replayed from `attach`, n, padded length)."""
    n = len(ids)
    if len(attach) != n:
        raise ValueError(f"{len(attach)} attachments for {n} tokens: a tape must have one attachment per token")
    depths, _ = stt.replay(np.asarray(attach))
    padded = -(-n // 8) * 8  # one compilation for many lengths; attention is causal
    tape = np.zeros((1, padded, padded), np.int32)
    tape[0, :n, :n] = np.minimum(depths, 1) if model.config.binary_tape else depths
    inputs = np.zeros((1, padded), np.int32)
    inputs[0, :n] = ids
    targets = np.zeros((1, padded), np.int32)
    targets[0, :n - 1] = ids[1:]
    batch = {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets),
             "weights": jnp.asarray((np.arange(padded) < n).astype(np.float32)[None]), "tape": jnp.asarray(tape)}
    return forward(*nnx.split(model), batch), n, padded


def joint_log_prob_terms(model, ids: Sequence[int], attach: Sequence[int], *, final_attachment: str = "scored"
                         ) -> tuple[np.ndarray, np.ndarray]:
    """eq. 7's terms of a string ``<s> .. <eos>`` (``ids [n]``) and its attachments (``attach [n]``), one
    teacher-forced pass with the tape replayed from ``attach``.

    Returns ``(words, attachments)``, float64 ``[n - 1]`` each, entry k - 1 for
    token k = 1 .. n - 1 (``<eos>`` last): log p(x_k | x_<k; W_{k-1}) and
    log p(r_k | x_<=k; W_{k-1}), the head normalised as the model was trained
    (`attachment_normalise`) over the legal slots of the given parse (the
    ROOT rule, `slot_legality`); ``final_attachment="forced"`` sets ``<eos>``'s
    attachment term to 0 (the release). Their total is `gold_joint_log_prob`.
    """
    from tgjax.nn.attachment_head import attachment_log_probs, slot_legality

    ids, attach = np.asarray(ids, np.int32), np.asarray(attach, np.int32)
    outputs, n, padded = _teacher_forced(model, ids, attach)
    token_lp = jax.nn.log_softmax(outputs["lm_logits"][0].astype(jnp.float32), axis=-1)
    full_attach = np.arange(padded + 1, dtype=np.int32)
    full_attach[:n] = attach
    legal = slot_legality(jnp.asarray(full_attach[None]))
    slot_lp = attachment_log_probs(outputs["attach_logits"].astype(jnp.float32), legal,
                                   normalise_over=model.config.attachment_normalise, mask_illegal=True)[0]
    steps = np.arange(n - 1)
    words = np.asarray(token_lp)[steps, ids[1:]].astype(np.float64)
    attachments = np.asarray(slot_lp)[steps, attach[1:]].astype(np.float64)
    if final_attachment == "forced":
        attachments[-1] = 0.0
    return words, attachments


def gold_joint_log_prob(model, ids: Sequence[int], attach: Sequence[int], *, final_attachment: str = "scored"
                        ) -> float:
    """log p(x, y) (eq. 7) of a string ``<s> .. <eos>`` and its attachments, from one teacher-forced pass.

    The same sum as `pushdown_oracle.joint_log_prob` (a pass per prefix): each
    token's log-probability and its attachment's, the head normalised as the
    model was trained (`attachment_normalise`) over the legal slots of the
    given parse; ``final_attachment="forced"`` leaves out ``<eos>``'s
    (the terms: `joint_log_prob_terms`).
    """
    words, attachments = joint_log_prob_terms(model, ids, attach, final_attachment=final_attachment)
    return float(words.sum() + attachments.sum())


def teacher_forced_log_probs(model, ids: np.ndarray, attach: np.ndarray) -> np.ndarray:
    """Next-token log-probabilities `[n, V]` of the string `ids [n]` under the tape replayed from `attach [n]`."""
    outputs, n, _ = _teacher_forced(model, np.asarray(ids, np.int32), np.asarray(attach, np.int32))
    return np.asarray(jax.nn.log_softmax(outputs["lm_logits"][0, :n].astype(jnp.float32), axis=-1))


def _shift(tree: stt.Bracketing, offset: int) -> stt.Bracketing:
    return stt._shift_leaves(tree, offset)


__all__ = ["HYPOTHESES_PER_SEARCH", "PrefixResult", "PushdownBeamConfig", "PushdownDevice", "PushdownResult",
           "PushdownSearch", "PushdownState", "apply_attachment", "forward", "gold_joint_log_prob",
           "joint_log_prob_terms", "merge_subword_bracketing", "teacher_forced_log_probs", "tree_from_word_spans"]
