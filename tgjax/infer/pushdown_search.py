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
winners' tapes are updated by Algorithm 1 and their caches gathered by
parent. There is no word-synchronous machinery (the paper's point: words and
structure are predicted in parallel), so this is its own small loop rather
than `tgjax.infer.device_beam`'s word-synchronous Choe–Charniak engine (whose
pool of FRONTIER/WORD slots, action beam and fast track have nothing to do
here). What it shares with that engine is the shape: one `lax.while_loop`
over positions, fixed `[beam, capacity]` arrays, caches gathered by parent.

The incremental step. A hidden state of position j depends on tape row j
only (the tape after token j; later attachments change *later* rows), so the
keys and values of past positions are computed once and cached per layer
(`[L, K, T, H, d_head]`): the step for position i runs the layers on one
query whose depth term reads the current tape row W_i, exactly what the
teacher-forced model computes (`pushdown_oracle` checks it against whole
forward passes). The attachment head caches A_k h_j pushed through the first
layer of its key MLP (`[K, T, key_dim]`); each step adds the depth
embeddings of the current row and runs the rest of the MLP.

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
  over its pieces; the end's is the ``<eos>`` token's;
* the best parse: the top hypothesis's attachments replayed into a binary
  bracketing over tokens, then merged back to words (Appendix C: a word's
  pieces collapse to one leaf; `merge_subword_bracketing`).

`PushdownSearch` is the Python entry point (eval commands, notebooks):
``search(list of word lists)`` for sentences (the `tgjax.eval.parse` scorer
protocol), ``search_ids`` for one id string, and ``prefix`` for a string
without an end (the Dyck evaluation: the top hypothesis's attachments and
per-position next-token log-probabilities under its own tape).

Capacity: arrays hold `T` positions, the string's length rounded up to
`bucket` (one compilation per beam size and bucket).
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

from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree


@dataclasses.dataclass(frozen=True)
class PushdownBeamConfig:
    beam_size: int = 300  # the paper's beam (§4.2, App. C)
    final_attachment: Literal["scored", "forced"] = "scored"
    surprisal: Literal["beam", "release"] = "beam"
    bucket: int = 16  # capacity rounded up to a multiple of this

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


class _Beam(NamedTuple):
    """The beam of one string on device (K hypotheses, T cached positions, tokens 0..T)."""

    scores: jax.Array  # [K] float32; −inf for an empty slot
    attach: jax.Array  # [K, T + 1] int32 attachment of each token read
    depth: jax.Array  # [K, T + 1] int32 the tape after the last token read
    ends: jax.Array  # [K, T + 1] bool: rightmost token of a stack element
    keys: jax.Array  # [L, K, T, H, d_head] cached attention keys
    values: jax.Array  # [L, K, T, H, d_head]
    head_keys: jax.Array  # [K, T, key_dim] A_k h_j through the head key MLP's first layer (no depth, no bias)


class _Records(NamedTuple):
    """Per-step marginals, entry i about token i + 1."""

    with_word: jax.Array  # [T] logsumexp_{b in B_i} score_b + log p(x_{i+1} | b)
    without_word: jax.Array  # [T] logsumexp_{b in B_i} score_b
    release: jax.Array  # [T] the release's reading (see the module docstring)


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


def _layer_step(layer, x: jax.Array, keys: jax.Array, values: jax.Array, tape_row: jax.Array, i: jax.Array):
    """One position through a `PushdownLayer` against cached keys/values.

    x `[K, 1, d]` (position i), keys/values `[K, T, H, dh]`, tape_row `[K, T]`;
    returns (x `[K, 1, d]`, keys, values) with position i written.
    """
    attention = layer.attention
    q, k, v = attention.project(x)
    keys = jax.lax.dynamic_update_slice_in_dim(keys, k.astype(keys.dtype), i, axis=1)
    values = jax.lax.dynamic_update_slice_in_dim(values, v.astype(values.dtype), i, axis=1)
    steps = jnp.arange(keys.shape[1])
    distance = (i - steps)[None, None, :]
    mask = (steps <= i)[None, None, :]
    attended = attention.attend(attention.scores(q, keys, tape_row[:, None, :], distance), mask, values)
    return layer.around_attention(x, attended), keys, values


def _head_row(head, hidden: jax.Array, next_embedding: jax.Array, head_keys: jax.Array, tape_row: jax.Array,
              i: jax.Array) -> jax.Array:
    """Slot logits `[K, T + 1]` of position i (the `AttachmentHead` formula for one query row).

    hidden `[K, d]` (h_i), next_embedding `[d_e]` (token i + 1), head_keys
    `[K, T, kd]` (cached), tape_row `[K, T]`.
    """
    kd = head.key_dim
    projected_q = hidden @ head.query_proj[...]
    e = jnp.broadcast_to(next_embedding, (hidden.shape[0], next_embedding.shape[-1]))
    query = head.query_mlp(jnp.concatenate([projected_q, e], -1), True)
    self_source = projected_q if head.self_key_input == "projection" else query
    self_key = head.self_key_mlp(jnp.concatenate([self_source, e], -1), True)
    mlp = head.key_depth_mlp
    depth_part = head.depth_embedding[...] @ mlp.w1[...][kd:]  # [D, kd]
    index = jnp.clip(tape_row, 0, head.num_depths - 1)
    depth_keys = mlp.hidden(head_keys + depth_part[index] + mlp.b1[...], True)  # [K, T, kd]
    token_scores = jnp.einsum("kc,ktc->kt", query, depth_keys)
    self_scores = jnp.sum(query * self_key, axis=-1)
    T = head_keys.shape[1]
    slots = jnp.arange(T + 1)
    logits = jnp.concatenate([token_scores, jnp.zeros_like(token_scores[:, :1])], axis=1)
    logits = jnp.where(slots[None, :] == i + 1, self_scores[:, None], logits)
    if head.rel_key is not None:
        rel_keys = head.position_table[...] @ head.rel_key[...]  # [P, kd]
        by_distance = query @ rel_keys.T  # [K, P]
        distance = jnp.clip(i + 1 - slots, 0, head.max_relative_position)
        logits = logits + by_distance[:, distance]
    if head.scaled:
        logits = logits / np.sqrt(kd)
    return logits


def _legal_slots(ends: jax.Array, i: jax.Array, final: jax.Array) -> jax.Array:
    """The slots token i + 1 may take, `[K, T + 1]` from the stack's element ends `[K, T + 1]`: ROOT (slot 0)
    alone for the final ``<eos>``, else an element end other than ROOT, or shift (`attachment_head.slot_legality`,
    what training normalises over)."""
    slots = jnp.arange(ends.shape[-1])[None, :]
    words = (ends & (slots <= i) & (slots > 0)) | (slots == i + 1)
    return jnp.where(final, jnp.broadcast_to(slots == 0, ends.shape), words)


def _slot_log_probs(logits: jax.Array, legal: jax.Array, causal: jax.Array, normalise_over: str) -> jax.Array:
    """`attachment_log_probs` for one query row: `logits, legal [K, T + 1]`, `causal [T + 1]`; −inf off the legal slots.

    ``"legal"`` (paper): softmax over the legal slots; ``"causal"`` (release):
    over every causal slot, then the illegal ones set to −inf, not renormalised.
    """
    allowed = legal & causal if normalise_over == "legal" else jnp.broadcast_to(causal, logits.shape)
    log_probs = jax.nn.log_softmax(jnp.where(allowed, logits, jnp.finfo(logits.dtype).min), axis=-1)
    return jnp.where(legal & causal, log_probs, -jnp.inf)


def _search_one(graphdef, state, tokens: jax.Array, length: jax.Array, *, beam_size: int, capacity: int,
                prefix: bool, forced: bool) -> tuple[_Beam, _Records]:
    """The beam over one string `tokens [capacity + 1]` (the first `length` real), positions 0 .. length - 2."""
    model = nnx.merge(graphdef, state)
    cfg = model.config
    K, T = beam_size, capacity
    L = len(model.layers)
    H = cfg.num_heads
    dh = cfg.d_model // H
    table = model.embedding[...]
    head = model.head
    beam = _Beam(
        scores=jnp.full((K,), -jnp.inf, jnp.float32).at[0].set(0.0),
        attach=jnp.zeros((K, T + 1), jnp.int32),
        depth=jnp.zeros((K, T + 1), jnp.int32),
        ends=jnp.zeros((K, T + 1), bool).at[:, 0].set(True),  # <s> shifted: it is a stack element
        keys=jnp.zeros((L, K, T, H, dh), jnp.float32),
        values=jnp.zeros((L, K, T, H, dh), jnp.float32),
        head_keys=jnp.zeros((K, T, head.key_dim), jnp.float32))
    records = _Records(*(jnp.zeros((T,), jnp.float32) for _ in range(3)))
    slots = jnp.arange(T + 1)

    def body(i, carry):
        beam, records = carry
        tape_row = beam.depth[:, :T]
        if cfg.binary_tape:
            tape_row = jnp.minimum(tape_row, 1)
        x = jnp.broadcast_to(table[tokens[i]] * np.sqrt(cfg.d_model), (K, 1, cfg.d_model))
        new_keys, new_values = [], []
        for layer_index, layer in enumerate(model.layers):
            x, k, v = _layer_step(layer, x, beam.keys[layer_index], beam.values[layer_index], tape_row, i)
            new_keys.append(k)
            new_values.append(v)
        hidden = x[:, 0]
        next_token = tokens[i + 1]
        word = jax.nn.log_softmax(hidden @ table.T + model.output_bias[...], axis=-1)[:, next_token]  # [K]
        kd = head.key_dim
        head_keys = jax.lax.dynamic_update_slice_in_dim(
            beam.head_keys, ((hidden @ head.key_proj[...]) @ head.key_depth_mlp.w1[...][:kd])[:, None], i, axis=1)
        logits = _head_row(head, hidden, table[next_token], head_keys, tape_row, i)
        final = jnp.logical_and(i + 1 == length - 1, not prefix)
        legal = _legal_slots(beam.ends, i, final)
        slot_lp = _slot_log_probs(logits, legal, slots <= i + 1, cfg.attachment_normalise)
        attach_term = jnp.where(final & forced, 0.0, slot_lp) if forced else slot_lp
        candidates = jnp.where(legal, beam.scores[:, None] + word[:, None] + attach_term, -jnp.inf)
        top, flat = jax.lax.top_k(candidates.reshape(-1), K)
        parent, r = flat // (T + 1), flat % (T + 1)
        # The release's reading: the o-th sorted candidate's parent, for each distinct origin o.
        present = jnp.zeros((K,), bool).at[parent].max(jnp.isfinite(top))
        release = jax.nn.logsumexp(jnp.where(present & jnp.isfinite(top), (beam.scores + word)[parent], -jnp.inf))
        records = _Records(records.with_word.at[i].set(jax.nn.logsumexp(beam.scores + word)),
                           records.without_word.at[i].set(jax.nn.logsumexp(beam.scores)),
                           records.release.at[i].set(release))
        attach, depth, ends = jax.vmap(apply_attachment, in_axes=(0, 0, 0, None, 0))(
            beam.attach[parent], beam.depth[parent], beam.ends[parent], i + 1, r)
        beam = _Beam(top, attach, depth, ends, jnp.stack(new_keys)[:, parent], jnp.stack(new_values)[:, parent],
                     head_keys[parent])
        return beam, records

    return jax.lax.fori_loop(0, length - 1, body, (beam, records))


_SEARCH_STATIC = ("graphdef", "beam_size", "capacity", "prefix", "forced")
_search = functools.partial(jax.jit, static_argnames=_SEARCH_STATIC)(_search_one)


@functools.partial(jax.jit, static_argnames=_SEARCH_STATIC)
def _search_many(graphdef, state, tokens: jax.Array, lengths: jax.Array, *, beam_size: int, capacity: int,
                 prefix: bool, forced: bool) -> tuple[_Beam, _Records]:
    """`_search_one` over S strings at once, `tokens [S, capacity + 1]`, `lengths [S]`: every array gains a
    leading S. The loop runs to the longest string; a finished string's beam is held as it was (the batching
    rule of a loop whose bound differs per string), so each string's answer is its own search's."""
    def one(string_tokens, length):
        return _search_one(graphdef, state, string_tokens, length, beam_size=beam_size, capacity=capacity,
                           prefix=prefix, forced=forced)

    return jax.vmap(one)(tokens, lengths)


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


class PushdownSearch:
    """Beam search of a `PushdownLM` (see the module docstring). `search` is the eval scorer protocol."""

    rule = "pushdown"

    def __init__(self, model, vocab, config: PushdownBeamConfig | None = None):
        self.model = model
        self.vocab = vocab
        self.config = config or PushdownBeamConfig()
        self.space = _Space(vocab)
        self.graphdef, self.state = nnx.split(model)

    def _capacity(self, positions: int) -> int:
        bucket = self.config.bucket
        return max(bucket, -(-positions // bucket) * bucket)

    def _run(self, ids: np.ndarray, *, prefix: bool, beam_size: int | None = None):
        ids = np.asarray(ids, np.int32)
        capacity = self._capacity(len(ids) - (0 if prefix else 1))
        tokens = np.zeros(capacity + 1, np.int32)
        tokens[:len(ids)] = ids
        return _search(self.graphdef, self.state, jnp.asarray(tokens), jnp.asarray(len(ids), jnp.int32),
                       beam_size=beam_size or self.config.beam_size, capacity=capacity, prefix=prefix,
                       forced=self.config.final_attachment == "forced")

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
        """The beam's answer for each sentence (a list of words)."""
        return [self.search_words(words, name=f"sentence {i}") for i, words in enumerate(sentences)]

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
        beam, records = jax.device_get(self._run(ids, prefix=False))
        n = ids.size
        scores = np.asarray(beam.scores, np.float64)
        finite = np.isfinite(scores)
        if not finite.any():
            raise ValueError(f"{name}: the beam found no complete parse")
        log_prob = float(np.logaddexp.reduce(scores[finite]))
        token_surprisals = self._surprisals(records, n)
        best = int(np.argmax(scores))
        best_attach = np.asarray(beam.attach[best, :n])
        tree = self.word_tree(best_attach, inner)
        per_word = np.zeros(num_words)
        np.add.at(per_word, inner, token_surprisals[:-1])
        return PushdownResult(words=words, ids=ids, word_index=word_index, log_prob=log_prob,
                              token_surprisals=token_surprisals, surprisals=per_word,
                              end_surprisal=float(token_surprisals[-1]), best_attach=best_attach,
                              best_log_prob=float(scores[best]), final_scores=np.sort(scores[finite])[::-1],
                              best_tree=_with_words(tree, words), num_unknown=num_unknown)

    def _surprisals(self, records: _Records, n: int) -> np.ndarray:
        """``[n - 1]`` surprisals of tokens 1 .. n-1 (see the module docstring)."""
        with_word = np.asarray(records.with_word[:n - 1], np.float64)
        if self.config.surprisal == "beam":
            return -(with_word - np.asarray(records.without_word[:n - 1], np.float64))
        prefix = np.r_[0.0, np.asarray(records.release[:n - 1], np.float64)]
        return prefix[:-1] - prefix[1:]

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
        if ids.size == 1:
            best_attach, log_prob = _top_of_beam(None, ids.size)
        else:
            beam, _ = jax.device_get(self._run(ids, prefix=True, beam_size=beam_size))
            best_attach, log_prob = _top_of_beam(beam, ids.size)
        return PrefixResult(best_attach, teacher_forced_log_probs(self.model, ids, best_attach), log_prob)

    def prefix_attachments(self, strings: Sequence[Sequence[int]], *, beam_size: int | None = None,
                           num_parallel: int = 8) -> list[tuple[np.ndarray, float]]:
        """`(best_attach [n], log Σ_beam p(prefix, y))` of each prefix: what `prefix` finds, `num_parallel`
        strings per compiled search (the Dyck evaluation: far fewer device loops than one string at a time).

        Strings are searched in order, `num_parallel` at a time at the capacity of the longest of them; a
        short last group is padded with empty strings (one compiled program per capacity bucket).
        """
        if beam_size is not None and beam_size < 1:
            raise ValueError(f"beam size must be at least 1, got {beam_size}")
        if num_parallel < 1:
            raise ValueError(f"num_parallel must be at least 1, got {num_parallel}")
        rows = [_checked_prefix(ids, f"prefix {index}") for index, ids in enumerate(strings)]
        results: list[tuple[np.ndarray, float]] = []
        for first in range(0, len(rows), num_parallel):
            group = rows[first:first + num_parallel]
            capacity = self._capacity(max(len(ids) for ids in group))
            tokens = np.zeros((num_parallel, capacity + 1), np.int32)
            lengths = np.ones(num_parallel, np.int32)  # padding strings: <s> alone, no step
            for row, ids in enumerate(group):
                tokens[row, :len(ids)], lengths[row] = ids, len(ids)
            beams, _ = jax.device_get(_search_many(
                self.graphdef, self.state, jnp.asarray(tokens), jnp.asarray(lengths),
                beam_size=beam_size or self.config.beam_size, capacity=capacity, prefix=True,
                forced=self.config.final_attachment == "forced"))
            results += [_top_of_beam(jax.tree.map(lambda field: field[row], beams) if ids.size > 1 else None,
                                     ids.size) for row, ids in enumerate(group)]
        return results


def _checked_prefix(ids: Sequence[int], name: str) -> np.ndarray:
    """`ids` as an int32 vector, or a ValueError naming it unless it holds at least the <s> id."""
    ids = np.asarray(ids, np.int32)
    if ids.ndim != 1 or ids.size < 1:
        raise ValueError(f"{name}: expected at least the <s> id")
    return ids


def _top_of_beam(beam: _Beam | None, n: int) -> tuple[np.ndarray, float]:
    """(the top hypothesis's attachments `[n]`, log Σ_beam p(prefix, y)) of one string's final beam (host
    arrays); None: the string is <s> alone, which only shifts, with probability 1."""
    if beam is None:
        return np.zeros(1, np.int32), 0.0
    scores = np.asarray(beam.scores, np.float64)
    best = int(np.argmax(scores))
    return np.asarray(beam.attach[best, :n]), float(np.logaddexp.reduce(scores[np.isfinite(scores)]))


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


def gold_joint_log_prob(model, ids: Sequence[int], attach: Sequence[int], *, final_attachment: str = "scored"
                        ) -> float:
    """log p(x, y) (eq. 7) of a string ``<s> .. <eos>`` and its attachments, from one teacher-forced pass.

    The same sum as `pushdown_oracle.joint_log_prob` (a pass per prefix): each
    token's log-probability and its attachment's, the head normalised as the
    model was trained (`attachment_normalise`) over the legal slots of the
    given parse; ``final_attachment="forced"`` leaves out ``<eos>``'s.
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
    return float(words.sum() + attachments.sum())


def teacher_forced_log_probs(model, ids: np.ndarray, attach: np.ndarray) -> np.ndarray:
    """Next-token log-probabilities `[n, V]` of the string `ids [n]` under the tape replayed from `attach [n]`."""
    outputs, n, _ = _teacher_forced(model, np.asarray(ids, np.int32), np.asarray(attach, np.int32))
    return np.asarray(jax.nn.log_softmax(outputs["lm_logits"][0, :n].astype(jnp.float32), axis=-1))


def _shift(tree: stt.Bracketing, offset: int) -> stt.Bracketing:
    return stt._shift_leaves(tree, offset)


__all__ = ["PrefixResult", "PushdownBeamConfig", "PushdownResult", "PushdownSearch", "apply_attachment", "forward",
           "gold_joint_log_prob",
           "merge_subword_bracketing", "teacher_forced_log_probs", "tree_from_word_spans"]
