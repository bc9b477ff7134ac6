"""Scoring sequences: log p(actions) per sequence and per token, for TG and the TXL baselines.

    scorer = tgjax.load("runs/tiny").tree_scorer(batch_size=32)   # a Scorer of the best checkpoint
    for s in score_treebank(scorer, "valid.txt"):          # streams the file, constant memory
        print(s.index, s.logp, s.num_predictions)
    w = word_surprisals(scorer, tree)                      # per-word surprisal of a given tree

What is scored
--------------
Exactly what training predicts (`tgjax.data.pipeline.encode_corpus`): the
inputs are BOS then the sequence's ids, the labels the ids; every id is one
prediction event (`labels_ttypes != PAD`). For TG and TXL (CC) the sequence
is the tree's Choe–Charniak actions, so a sequence's `logp` is log p(x, y),
the joint probability of the words x and the tree y (closing the root ends
the sentence). For TXL (terminals) it is the words then the end-of-sentence
token `</s>`, as in training (`pipeline.ends_with_eos`): the last word
predicts `</s>`, and `logp` is log p(x) of the whole sentence exactly,
`</s>` included (not the probability of x as a prefix). All logs are natural.

POS tags: the models do not read them, so the nodes of a tagged tree whose
only child is a word are dropped from its actions; in a tree without tags
(`tgjax sample` writes them) such a node is a constituent and is kept. Which
is decided once per file or list (`pos_tags`: "yes", "no", or "auto":
tagged iff every word is alone under a node; a file that mixes both is
refused), never per node (`tgjax.syntax.pos_tags`).

How it is run
-------------
Like training: a batch has B rows and each row reads its sequences one after
another, one segment of T positions per step, carrying the Transformer-XL
memory from step to step (TG: the stack, Figure 8 of the paper). A row
starting a sequence sees none of the previous sequence's memory (every
memory slot is marked empty), so each sequence's result is the same
whichever row and step it lands in, and whatever else is in the batch. The
step is jitted once (fixed `[B, T]`), deterministic (no dropout), and the
batch rows are split over the local devices. Sequences are dealt to rows
longest first, each to the row with the least work so far.

Per token, per word
-------------------
`token_logprobs[k]` is log p of the k-th token of the sequence given
everything before it: for TG and TXL (CC) the k-th action (so per original
action: the TG input's CNT1 copies of closing non-terminals predict nothing
and are mapped away; the CNT2 copy carries the prediction of the next
action), for TXL (terminals) the k-th word, and then `</s>` (`tokens` ends
with it; it is no word). With a SentencePiece
vocabulary a word is several ids; its entry is the sum over its pieces
(`piece_logprobs` keeps the per-id values).

Per-word surprisal of a given tree (`word_surprisals`): the surprisal of word
w_t is

    s_t = −log p(w_t, and the actions between w_{t−1} and w_t | everything before)
        = −Σ log p(a_k | a_<k) over the actions a_k after w_{t−1}, up to and including w_t,

that is, the opening non-terminals (and closing ones) leading to w_t are
charged to w_t. This is each word's share of −log p(x, y) for the tree y; the
closing actions after the last word form `end` (the analogue of a word
model's end-of-sentence surprisal), so Σ_t s_t + end = −log p(x, y). For
TXL (terminals) s_t = −log p(w_t | w_<t) and end = −log p(</s> | x), so
Σ_t s_t + end = −log p(x).

Word perplexity (`tgjax.eval.summaries.ScoreSummary`) is exp(−Σ logp / N_w) over the sentences,
with N_w the number of words: the end of each sentence (closing the root, or
`</s>`) is counted in the log-probability but not as a word, as in the TG
paper.

Unknown words are mapped as training maps them (a word dictionary: the UNK
id; SentencePiece: pieces, or UNK without byte fallback); `num_unk` counts
the words that became UNK, and the summaries report the total.

Ensembles (`tgjax.infer.ensemble.Ensemble`) offer the same `score_encoded`
method, so every function here takes a `Scorer` or an `Ensemble`.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tgjax.data import pipeline as pl
from tgjax.data.vocab import EOS_TOKEN, UNK_ID, Vocabulary, is_closing_nt, is_opening_nt
from tgjax.infer.loading import RestoredLM
from tgjax.limits import TREEBANK_MAX_WORDS, words_of_line
from tgjax.ops.log_probs import token_log_probs
from tgjax.syntax import masks, trees
from tgjax.syntax import pos_tags as tagging
from tgjax.syntax import token_types as tt

SUPPORTED_RULES = ("tg", "txl_cc", "txl_terminals")
DEFAULT_CHUNK_SIZE = 1024  # sequences encoded and batched together when streaming


# -----------------------------------------------------------------------------
# Encoding.


@dataclasses.dataclass
class Encoded:
    """One sequence ready for the model, with what maps its predictions back to tokens and words.

    `arrays` are `(inputs, inputs_ttypes, labels, labels_ttypes)` before CNT
    duplication, exactly as `pipeline.encode_corpus` makes them; `source[i]`
    is the token that id i came from; `is_word[k]` marks word tokens.
    """

    tokens: list[str]
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    source: np.ndarray  # [n_ids]
    is_word: np.ndarray  # [n_tokens] bool
    num_unk: int

    @property
    def num_ids(self) -> int:
        return len(self.source)

    @property
    def num_words(self) -> int:
        return int(self.is_word.sum())


def sequence_tokens(tree: trees.Tree, rule: str, *, pos_tags: bool) -> list[str]:
    """What a model of this rule reads of a tree: its actions (TG, TXL (CC)), or its words then `</s>`.

    `pos_tags`: whether the tree's nodes over a single word are POS tags (dropped) or constituents (kept),
    decided for the whole file (`tgjax.syntax.pos_tags`).
    """
    tokens = pl.tokens_for_rule(tree, rule, pos_tags=pos_tags)
    return tokens + [EOS_TOKEN] if pl.ends_with_eos(rule) else tokens


def is_word_token(tokens: Sequence[str]) -> np.ndarray:
    """`[n]` bool: which tokens are words (not opening or closing non-terminals, not `</s>`)."""
    return np.array([not (is_opening_nt(t) or is_closing_nt(t) or t == EOS_TOKEN) for t in tokens], bool)


def encode(vocab: Vocabulary, tokens: Sequence[str]) -> Encoded:
    """The model inputs of one token sequence (see `Encoded`); raises ValueError for an unknown non-terminal.

    A `</s>` token (`sequence_tokens` ends TXL (terminals) sentences with it)
    is the EOS id, a prediction event that is not a word.
    """
    if not tokens:
        raise ValueError("empty sequence: nothing to score")
    ids, source = vocab.encode_with_alignment(list(tokens))
    types = vocab.token_types(ids)
    inputs = np.concatenate([[vocab.bos_id], ids]).astype(np.int32)
    inputs_ttypes = np.concatenate([[tt.BOS], types]).astype(np.int32)
    labels = np.concatenate([ids, [0]]).astype(np.int32)
    labels_ttypes = np.concatenate([types, [tt.PAD]]).astype(np.int32)
    is_word = is_word_token(tokens)
    unk_tokens = np.unique(source[ids == UNK_ID])
    num_unk = int(is_word[unk_tokens].sum()) if unk_tokens.size else 0
    return Encoded(list(tokens), (inputs, inputs_ttypes, labels, labels_ttypes), source, is_word, num_unk)


def encode_tree(vocab: Vocabulary, tree: trees.Tree, rule: str, *, pos_tags: bool, where: str = "") -> Encoded:
    """`encode` of a tree's tokens (`sequence_tokens`); errors name `where` (file and sentence)."""
    try:
        return encode(vocab, sequence_tokens(tree, rule, pos_tags=pos_tags))
    except ValueError as e:
        raise ValueError(f"{where}: {e}" if where else str(e)) from e


# -----------------------------------------------------------------------------
# Results.


@dataclasses.dataclass
class SequenceScore:
    """The scores of one sequence.

    index: its position in the input (global, across shards).
    logp: Σ log p over its prediction events (natural log). For an ensemble,
      its `mixture`: per action by default (Σ of the mixed per-action log p),
      or of whole sequences, log mean_k p_k (see `tgjax.infer.ensemble`).
    token_logprobs: `[n_tokens]` log p of each token (action or word) given
      its prefix; a word's pieces summed. For an ensemble, the per-action mixture.
    piece_logprobs: `[n_ids]` the same per vocabulary id.
    num_words, num_unk: words in the sequence, and how many became UNK.
    member_logps: ensembles only, `[K]` each member's log p.
    """

    index: int
    logp: float
    token_logprobs: np.ndarray
    piece_logprobs: np.ndarray
    num_words: int
    num_unk: int
    tokens: list[str] | None = None
    member_logps: np.ndarray | None = None

    @property
    def num_predictions(self) -> int:
        return int(self.piece_logprobs.shape[0])


def _make_score(index: int, encoded: Encoded, piece_logprobs: np.ndarray, logp: float | None = None,
                member_logps: np.ndarray | None = None) -> SequenceScore:
    piece_logprobs = np.asarray(piece_logprobs, np.float64)
    per_token = np.bincount(encoded.source, weights=piece_logprobs, minlength=len(encoded.tokens))
    total = float(math.fsum(piece_logprobs)) if logp is None else float(logp)
    return SequenceScore(index, total, per_token, piece_logprobs, encoded.num_words, encoded.num_unk,
                         encoded.tokens, member_logps)


class SequenceScorer(Protocol):
    """What the scoring functions need: a `Scorer` or an `Ensemble`."""

    vocab: Vocabulary
    rule: str

    def score_encoded(self, encoded: Sequence[Encoded], indices: Sequence[int] | None = None
                      ) -> list[SequenceScore]: ...


# -----------------------------------------------------------------------------
# The batched scorer of one model.


def _deal(num_segments: np.ndarray, num_rows: int) -> list[list[int]]:
    """Sequences to rows, longest first, each to the row with the fewest segments so far."""
    order = np.lexsort((np.arange(len(num_segments)), -num_segments))
    heap = [(0, row) for row in range(num_rows)]
    rows: list[list[int]] = [[] for _ in range(num_rows)]
    for s in order:
        filled, row = heapq.heappop(heap)
        rows[row].append(int(s))
        heapq.heappush(heap, (filled + int(num_segments[s]), row))
    return rows


def _padding_segment(chunks: masks.CompactChunk) -> dict[str, np.ndarray]:
    """An idle row's segment: no tokens, an empty memory, nothing predicted (as the training pipeline's)."""
    pad = {name: np.zeros_like(field[0]) for name, field in zip(chunks._fields, chunks)}
    for name in ("memory_pos", "mem_src_seq", "mem_src_mem"):
        pad[name][...] = -1
    for name in ("push_time", "pop_time", "memory_push_time", "memory_pop_time"):
        pad[name][...] = masks.NEVER
    for name in ("causal", "linear_relpos", "distinct_compose"):
        pad[name][...] = getattr(chunks, name)[0]
    pad["beginning_of_seq"][...] = 1
    pad["end_of_seq"][...] = 1
    return pad


@functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("memory",))
def _score_step(graphdef, params, rest, batch, memory):
    """log p of each position's label `[B, T]` (0 where nothing is predicted), and the next memory.

    One jitted function for every scorer: models of the same structure
    (ensemble members, shards of a job, repeated commands) share compilations;
    the shardings come with the arguments.
    """
    model = nnx.merge(graphdef, params, rest)
    logits, new_memory = model(batch, memory, deterministic=True)
    picked = token_log_probs(logits, batch["labels"])
    return jnp.where(batch["labels_ttypes"] != tt.PAD, picked, 0.0), new_memory


class Scorer:
    """Batched, jitted, deterministic scoring of token sequences under one model (see the module docstring).

    Args:
      loaded: a `RestoredLM` (`tgjax.load(workdir).restore()`, or `loading.from_model`).
      batch_size: rows per step (rounded up to a multiple of the device count).
      devices: the devices the rows are split over (default: all local devices).
    """

    def __init__(self, loaded: RestoredLM, *, batch_size: int = 32, devices: Sequence | None = None):
        if loaded.rule not in SUPPORTED_RULES:
            raise ValueError(f"scoring supports the rules {SUPPORTED_RULES}; {loaded.describe()} uses {loaded.rule!r}")
        if loaded.pipeline_fields.get("transparency_depth", -1) >= 0:
            raise ValueError(f"{loaded.describe()}: transparent constituents (data.transparency_depth >= 0) "
                             f"are not supported by the compact segments the model reads")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.loaded = loaded
        self.vocab = loaded.vocab
        self.rule = loaded.rule
        self.masking = pl.make_rule(pl.PipelineConfig(**loaded.pipeline_fields))
        devices = list(devices) if devices is not None else jax.local_devices()
        self.batch_size = -(-batch_size // len(devices)) * len(devices)
        mesh = Mesh(np.array(devices), ("data",))
        replicated = NamedSharding(mesh, P())
        self._batch_sharding = NamedSharding(mesh, P("data"))
        self._memory_sharding = NamedSharding(mesh, P(None, "data"))
        self._params = jax.device_put(loaded.params, replicated)
        self._rest = jax.device_put(loaded.rest, replicated)
        self._graphdef = loaded.graphdef
        cfg = loaded.model_config
        self._memory_shape = (cfg.num_layers, self.batch_size, cfg.memory_length, cfg.d_model)
        self._memory = None

    @property
    def stats(self) -> masks.MaskingStats:
        """What the masking rule counted (sequences, segments, stack entries dropped from a full memory)."""
        return self.masking.stats

    def _empty_memory(self) -> jax.Array:
        return jax.device_put(np.zeros(self._memory_shape, np.float32), self._memory_sharding)

    def piece_logprobs(self, encoded: Sequence[Encoded]) -> list[np.ndarray]:
        """Per sequence, `[n_ids]` float64 log p of each id given its prefix."""
        if not encoded:
            return []
        arrays = [e.arrays for e in encoded]
        chunks, seq_of_chunk = self.masking.compact_chunks_many(arrays)
        G = len(seq_of_chunk)
        num_segments = np.bincount(seq_of_chunk, minlength=len(arrays))
        first_chunk = np.cumsum(num_segments) - num_segments
        # Each row's reads, as chunk indices; G is the idle (padding) segment.
        rows = _deal(num_segments, self.batch_size)
        reads = [np.concatenate([first_chunk[s] + np.arange(num_segments[s]) for s in row]) if row
                 else np.zeros(0, np.int64) for row in rows]
        num_steps = max(len(r) for r in reads)
        schedule = np.full((num_steps, self.batch_size), G, np.int64)
        for b, r in enumerate(reads):
            schedule[:len(r), b] = r
        pad = _padding_segment(chunks)
        fields = {name: np.concatenate([field, pad[name][None]]) for name, field in zip(chunks._fields, chunks)}
        memory = self._memory if self._memory is not None else self._empty_memory()
        self._memory = None  # donated below
        outputs = []
        for t in range(num_steps):
            batch = {name: field[schedule[t]] for name, field in fields.items()}
            out, memory = _score_step(self._graphdef, self._params, self._rest,
                                      jax.device_put(batch, self._batch_sharding), memory)
            outputs.append(out)
        self._memory = memory
        per_step = np.stack(jax.device_get(outputs)).astype(np.float64)  # [steps, B, T]
        by_chunk = np.zeros((G + 1, self.masking.seq_len), np.float64)
        by_chunk[schedule.reshape(-1)] = per_step.reshape(-1, self.masking.seq_len)
        events = chunks.labels_ttypes != tt.PAD  # [G, T]
        values = by_chunk[:G][events]  # in (sequence, segment, position) order
        counts = np.bincount(seq_of_chunk, weights=events.sum(axis=1), minlength=len(arrays)).astype(np.int64)
        out = np.split(values, np.cumsum(counts)[:-1])
        for e, v in zip(encoded, out):
            if len(v) != e.num_ids:  # the rules predict every id once: anything else is a bug
                raise AssertionError(f"{len(v)} prediction events for {e.num_ids} ids")
        return out

    def score_encoded(self, encoded: Sequence[Encoded], indices: Sequence[int] | None = None) -> list[SequenceScore]:
        """`SequenceScore`s of encoded sequences (`indices` default to 0, 1, ...)."""
        indices = range(len(encoded)) if indices is None else indices
        return [_make_score(i, e, lp) for i, e, lp in zip(indices, encoded, self.piece_logprobs(encoded))]


# -----------------------------------------------------------------------------
# Scoring many sequences, streaming.


def _batched(iterable: Iterable, n: int) -> Iterator[list]:
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, n)):
        yield chunk


def score_sequences(scorer: SequenceScorer, items: Iterable[tuple[int, Encoded]], *,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[SequenceScore]:
    """Scores `(index, Encoded)` items lazily, `chunk_size` at a time, in input order."""
    for chunk in _batched(items, chunk_size):
        yield from scorer.score_encoded([e for _, e in chunk], [i for i, _ in chunk])


def score_trees(scorer: SequenceScorer, tree_list: Sequence[trees.Tree], *, pos_tags: str | bool = "auto",
                chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[SequenceScore]:
    """Scores trees in memory (their actions, or their words for TXL (terminals)).

    `pos_tags`: "yes", "no" or "auto" for the list as a whole (`tgjax.syntax.pos_tags.resolve`), or a bool.
    """
    tagged = pl.corpus_pos_tags(tree_list, pos_tags, "trees")
    items = ((i, encode_tree(scorer.vocab, t, scorer.rule, pos_tags=tagged, where=f"tree {i}"))
             for i, t in enumerate(tree_list))
    return list(score_sequences(scorer, items, chunk_size=chunk_size))


def resolve_input_pos_tags(path: str | os.PathLike, pos_tags: str | bool, input_format: str = "trees",
                           max_words: int | None = TREEBANK_MAX_WORDS, *, skip_bad_trees: bool = False) -> bool:
    """Whether an input file's trees are read as tagged (`tgjax.syntax.pos_tags.resolve_file`); words: False.

    `skip_bad_trees`: malformed trees are left out of the decision (`read_sentences` reports them), not an error.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such input file {os.fspath(path)!r}")
    if input_format == "words":  # flat `(X w1 ... wn)`: no tags, and only TXL (terminals) reads them
        tagging.check_setting(pos_tags)
        return False
    skipping = dict(on_error="skip", report=trees.ReadReport(os.fspath(path))) if skip_bad_trees else {}
    return tagging.resolve_file(pos_tags, path, max_words=max_words, **skipping)


def read_sentences(path: str | os.PathLike, input_format: str = "trees",
                   max_words: int | None = TREEBANK_MAX_WORDS,
                   report: trees.ReadReport | None = None) -> Iterator[trees.Tree]:
    """Trees of a treebank file, lazily; or, with `input_format="words"`, one sentence of words per line.

    A words line becomes a flat tree `(X w1 ... wn)` (its words are all a
    TXL (terminals) model reads). Empty lines of a words file are skipped
    (and so not counted). A sentence over `max_words` is refused while read, naming its file and line.
    A malformed tree stops the reading (file:line:column), or with a `report` is skipped and recorded in it.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such input file {path!r}")
    if input_format == "trees":
        skipping = dict(on_error="skip", report=report) if report is not None else {}
        yield from trees.iter_treebank(path, max_words=max_words, **skipping)
        return
    if input_format != "words":
        raise ValueError(f"input format: expected 'trees' or 'words', got {input_format!r}")
    for number, line in enumerate(trees.text_lines(path), start=1):
        words = words_of_line(line, max_words, path, number)
        if words:
            yield trees.Tree("X", words)


def score_treebank(scorer: SequenceScorer, path: str | os.PathLike, *, pos_tags: str | bool = "auto",
                   input_format: str = "trees", shard: tuple[int, int] = (0, 1),
                   chunk_size: int = DEFAULT_CHUNK_SIZE,
                   max_words: int | None = TREEBANK_MAX_WORDS,
                   report: trees.ReadReport | None = None) -> Iterator[SequenceScore]:
    """Streams a file's sentences (this shard's: index % N == I) through the scorer; constant memory.

    `pos_tags`: "yes", "no" or "auto", decided over the whole file first
    (`tgjax.syntax.pos_tags.resolve_file`: "auto" and "yes" read it once
    more), or a bool already decided. Raises ValueError for an empty file,
    for a file whose trees do not fit `pos_tags`, and naming the file and
    sentence for sentences the vocabulary cannot encode (a non-terminal it does not have).
    A malformed tree raises `TreeSyntaxError` (file:line:column); with a
    `report` it is skipped and recorded there, and indices count the trees kept.
    """
    if input_format == "words" and scorer.rule != "txl_terminals":
        raise ValueError(f"--input-format words is for TXL (terminals) models; a {scorer.rule} model scores trees")
    index, count = shard
    path = os.fspath(path)
    tagged = resolve_input_pos_tags(path, pos_tags, input_format, max_words, skip_bad_trees=report is not None)
    seen = 0

    def items():
        nonlocal seen
        for i, tree in enumerate(read_sentences(path, input_format, max_words, report)):
            seen += 1
            if i % count == index:
                yield i, encode_tree(scorer.vocab, tree, scorer.rule, pos_tags=tagged, where=f"{path}: sentence {i}")

    yield from score_sequences(scorer, items(), chunk_size=chunk_size)
    if seen == 0 and report is not None and report.errors:
        raise ValueError(f"{path}: no sentences left: every tree is malformed ({report.num_skipped} skipped; the "
                         f"first: {report.errors[0]})")
    if seen == 0:
        raise ValueError(f"{path}: no sentences (the file is empty)")


# -----------------------------------------------------------------------------
# Per-word surprisal.


@dataclasses.dataclass
class WordSurprisals:
    """Per-word surprisals (nats) of one tree; Σ surprisals + end = −log p(x, y) (see the module docstring)."""

    words: list[str]
    surprisals: np.ndarray  # [num_words]
    end: float  # −log p of what follows the last word: closing non-terminals, or `</s>` for TXL (terminals)
    logp: float  # log p(x, y) (log p(x), `</s>` included, for TXL (terminals)); ensembles: Σ of the per-action mixture
    num_unk: int


def surprisals_from_score(score: SequenceScore) -> WordSurprisals:
    """Groups a sequence's token log probs into per-word surprisals (each word takes the actions before it)."""
    tokens = score.tokens or []
    is_word = is_word_token(tokens)
    lp = np.asarray(score.token_logprobs, np.float64)
    word_at = np.flatnonzero(is_word)
    if word_at.size == 0:
        raise ValueError("the sequence has no words")
    owner = np.searchsorted(word_at, np.arange(len(lp)), side="left")  # the next word at or after each token
    per_word = np.bincount(owner, weights=-lp, minlength=len(word_at) + 1)
    total = float(math.fsum(lp))
    return WordSurprisals([tokens[k] for k in word_at], per_word[:len(word_at)],
                          float(per_word[len(word_at)]), total, score.num_unk)


def word_surprisals(scorer: SequenceScorer, tree: trees.Tree, *, pos_tags: str | bool = "auto") -> WordSurprisals:
    """Per-word surprisals of a given tree (or of a sentence's words for TXL (terminals)).

    `pos_tags` as `score_trees`; "auto" on one tree reads it as tagged iff every word is alone under a node.
    """
    tagged = pl.corpus_pos_tags([tree], pos_tags, "tree")
    encoded = encode_tree(scorer.vocab, tree, scorer.rule, pos_tags=tagged)
    (score,) = scorer.score_encoded([encoded])
    return surprisals_from_score(score)


def word_surprisals_many(scorer: SequenceScorer, tree_list: Sequence[trees.Tree], *, pos_tags: str | bool = "auto",
                         chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[WordSurprisals]:
    """`word_surprisals` of many trees, batched; `pos_tags` decided for the list as a whole, as `score_trees`."""
    tagged = pl.corpus_pos_tags(tree_list, pos_tags, "trees")
    encoded = [encode_tree(scorer.vocab, t, scorer.rule, pos_tags=tagged, where=f"tree {i}")
               for i, t in enumerate(tree_list)]
    out = []
    for start in range(0, len(encoded), chunk_size):
        part = encoded[start:start + chunk_size]
        out += [surprisals_from_score(s) for s in scorer.score_encoded(part)]
    return out
