"""From a treebank to fixed-shape batches of segments, on the host.

The shape of the stream is Transformer-XL's: a batch has B rows, and each
row reads its sequences one after another, one segment per step, so that the
memory a row carries from one step to the next belongs to the same sequence
(`beginning_of_seq` tells the model to reset it). Sequences are dealt to
rows by a seeded shuffle and a greedy balance on their segment counts, the
same on every host; a host builds only its own rows (process index/count).

Each step's batch is built by a `grain.MapDataset` (worker processes when
`num_workers > 0`), from the masking rules of `tgjax.syntax.masks`: the
compact form by default (what the jitted train step expands on device), the
dense `Chunk` for interoperability. The iterator's state is two integers,
(epoch, step), which a checkpoint saves; resuming rebuilds the same epoch
layout and skips to the step. Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tgjax.data import corpora
from tgjax.data.pushdown import PushdownSentence, encode_tree
from tgjax.data.vocab import Vocabulary, build_word_dictionary, train_sentencepiece
from tgjax.limits import TREEBANK_MAX_WORDS
from tgjax.syntax import actions, masks, trees
from tgjax.syntax import pos_tags as tagging  # (`pos_tags` names the decision, a bool, below)
from tgjax.syntax import token_types as tt

log = logging.getLogger(__name__)

# The masking each model family reads its data with.
RULES = ("tg", "txl_cc", "txl_terminals", "pushdown")


MAX_WORDS = TREEBANK_MAX_WORDS  # the default length limit of a treebank file's sentences


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """What the pipeline needs to know; `from_dict` rejects unknown keys by name."""

    corpus: str = "builtin"  # "builtin" (the synthetic treebank) or a treebank file path
    split: str = "train"  # for the built-in corpus
    num_sentences: int | None = None  # built-in corpus size (None: the split's default)
    rule: str = "tg"  # one of RULES
    seq_len: int = 256
    mem_len: int = 256
    batch_size: int = 16  # global rows, divided among hosts
    smart_memory: bool = True
    distinct_compose: bool = False
    transparency_depth: int = -1
    linear_relpos: bool = False
    compact: bool = True  # emit `CompactChunk` fields (else dense `Chunk` fields)
    max_actions: int | None = None  # longest sequence (before duplication) accepted
    # Longest sentence read from a file, checked while reading: a huge tree is refused (or skipped, per
    # on_too_long) before its actions and masks are built. 25,000 words keep one epoch within about 1.5 GB.
    max_words: int | None = MAX_WORDS
    on_too_long: str = "error"  # "error" or "skip" (counted and reported)
    on_bad_tree: str = "error"  # treebank files: "error" or "skip" (counted and reported)
    seed: int = 0
    num_workers: int = 0  # grain worker processes (0: in this process)
    pos_tags: str = "auto"  # "yes", "no" or "auto": whether the corpus's trees carry POS tags (`corpus_pos_tags`)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PipelineConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown pipeline config key(s) {unknown}; expected some of {sorted(known)}")
        return cls(**values)

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"rule: unknown {self.rule!r}; expected one of {RULES}")
        for name in ("on_too_long", "on_bad_tree"):
            if getattr(self, name) not in ("error", "skip"):
                raise ValueError(f"{name}: expected 'error' or 'skip', got {getattr(self, name)!r}")
        for name in ("seq_len", "mem_len", "batch_size") + (("max_words",) if self.max_words is not None else ()):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        tagging.check_setting(self.pos_tags)
        if self.transparency_depth >= 0 and self.compact:
            # The device rebuild (and so training and scoring) has no transparent constituents.
            raise ValueError(f"transparency_depth={self.transparency_depth}: transparent constituents exist in the "
                             f"dense form only (compact=False); the compact form the models read has none")


def load_trees(config: PipelineConfig) -> tuple[list[trees.Tree], trees.ReadReport | None]:
    """The corpus's trees: the built-in treebank, or a treebank file.

    A malformed tree in a file raises (naming file, line and column), or with
    `on_bad_tree="skip"` is skipped and counted in the returned report; so is a
    tree over `max_words` words, with `on_too_long` (found while reading: it is never built).
    """
    if config.corpus == "builtin":
        tree_list = corpora.get_corpus("builtin", config.split, num_sentences=config.num_sentences, seed=config.seed)
        return tree_list, None
    if not os.path.exists(config.corpus):
        raise FileNotFoundError(f"corpus: no such treebank file {config.corpus!r} (or use 'builtin')")
    if os.path.isdir(config.corpus):
        raise ValueError(f"corpus: {config.corpus!r} is a directory; give a treebank file (or 'builtin')")
    policies = dict(on_error="skip" if config.on_bad_tree == "skip" else "raise",
                    on_too_long="skip" if config.on_too_long == "skip" else "raise")
    if "skip" in policies.values():
        tree_list, report = trees.read_treebank(config.corpus, max_words=config.max_words, **policies)
        if report.num_skipped or report.num_too_long:
            log.warning("%s", report.summary())
        return tree_list, report
    return trees.read_treebank(config.corpus, max_words=config.max_words), None


def corpus_pos_tags(tree_list: Sequence[trees.Tree], setting: str | bool, source: str) -> bool:
    """Whether the corpus's trees are read as tagged: `pos_tags.resolve` over all of them (one decision per corpus).

    `source` names the corpus in errors (a file whose trees mix both is refused, naming the tree).
    """
    return tagging.resolve(setting, tagging.located_trees(tree_list, source))


def tokens_for_rule(tree: trees.Tree, rule: str, *, pos_tags: bool) -> list[str]:
    """What a model of this family reads: Choe–Charniak actions, or the words alone.

    `pos_tags`: whether the tree's nodes over a single word are POS tags, to
    be dropped (decided for the whole corpus: `corpus_pos_tags`); else they
    are constituents. Never the end-of-sentence token of `ends_with_eos`
    rules: these tokens also build the vocabulary, and `</s>` is not a word of it.
    """
    if rule in ("txl_terminals", "pushdown"):
        return tree.leaves()
    return actions.choe_charniak(tree, pos_tags=pos_tags)


def ends_with_eos(rule: str) -> bool:
    """Whether the rule's sequences end with the end-of-sentence token `</s>` (`vocab.EOS_ID`), a prediction event.

    TXL (terminals) reads the words alone, so nothing else ends its sentences:
    it reads `<s> w1 ... wn </s>`, the last word predicts `</s>` and `</s>`
    predicts nothing, so its log p(x) is that of a whole sentence rather than
    of a prefix, comparable with the syntactic rules (whose closing of the
    root ends the sentence). The EOS is added when encoding (`encode_corpus`).
    """
    return rule == "txl_terminals"


def build_vocabulary(token_lists: Sequence[Sequence[str]], kind: str = "words", size: int = 2000,
                     min_count: int = 1) -> Vocabulary:
    """A vocabulary over the corpus: a word dictionary, or SentencePiece with NTs kept whole.

    `min_count` (word dictionaries): words seen fewer times become UNK, so that
    the UNK embedding is trained on the rare words and serves the unseen ones.
    """
    if kind == "words":
        return build_word_dictionary(token_lists, min_count=min_count)
    if kind == "sentencepiece":
        return train_sentencepiece(token_lists, size)
    raise ValueError(f"vocabulary kind: expected 'words' or 'sentencepiece', got {kind!r}")


@dataclasses.dataclass
class EncodedCorpus:
    """Model inputs for every kept sequence: `(inputs, inputs_ttypes, labels, labels_ttypes)`."""

    sequences: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    source_index: np.ndarray  # [S] index of each kept sequence in the corpus
    skipped_too_long: int = 0
    # Pushdown only: per sequence, its `tgjax.data.pushdown` encoding (`<s> tokens <eos>`: attachment labels
    # and the node spans its tape is rebuilt from); the inputs are its positions 0..n, the <eos> is not read.
    tapes: list[PushdownSentence] | None = None


def encode_corpus(tree_list: Sequence[trees.Tree], vocab: Vocabulary, config: PipelineConfig, *,
                  pos_tags: bool | None = None) -> EncodedCorpus:
    """Encodes every tree; sequences over `max_actions` raise or are skipped and counted.

    A sequence is BOS then the ids of `tokens_for_rule` (then EOS for an
    `ends_with_eos` rule) as inputs, and the same ids shifted left with a 0
    label (nothing predicted) appended as labels. `max_actions` counts the
    ids, the EOS included. `pos_tags`: the corpus's decision, when already
    made; None decides it here from `config.pos_tags` (`corpus_pos_tags`).
    """
    if pos_tags is None:
        pos_tags = corpus_pos_tags(tree_list, config.pos_tags, config.corpus)
    sequences = []
    kept = []
    tapes = [] if config.rule == "pushdown" else None
    skipped = 0
    for index, tree in enumerate(tree_list):
        tokens = tokens_for_rule(tree, config.rule, pos_tags=pos_tags)
        try:
            ids = vocab.encode(tokens, add_eos=ends_with_eos(config.rule))
        except ValueError as error:  # name the file and the tree: the vocabulary's own message cannot
            raise ValueError(f"{config.corpus}: tree {index}: {error}") from None
        if config.max_actions is not None and len(ids) > config.max_actions:
            if config.on_too_long == "error":
                raise ValueError(
                    f"sequence {index} ({config.corpus}): {len(ids)} tokens, over max_actions={config.max_actions}"
                    " (set on_too_long='skip' to skip and count such sequences)"
                )
            skipped += 1
            continue
        types = vocab.token_types(ids)
        inputs = np.concatenate([[vocab.bos_id], ids]).astype(np.int32)
        inputs_ttypes = np.concatenate([[tt.BOS], types]).astype(np.int32)
        labels = np.concatenate([ids, [0]]).astype(np.int32)
        labels_ttypes = np.concatenate([types, [tt.PAD]]).astype(np.int32)
        sequences.append((inputs, inputs_ttypes, labels, labels_ttypes))
        kept.append(index)
        if tapes is not None:
            sentence = encode_tree(tree, vocab, name=f"{config.corpus}: tree {index}")
            if not np.array_equal(sentence.tokens[:-1], inputs):
                raise ValueError(f"{config.corpus}: tree {index}: the vocabulary encodes its words differently with "
                                 "and without alignment; the stack tape would not match the tokens")
            tapes.append(sentence)
    if skipped:
        log.warning("skipped %d of %d sequences longer than max_actions=%s", skipped, len(tree_list),
                    config.max_actions)
    if not sequences:
        raise ValueError(f"corpus {config.corpus!r}: no sequences left to batch ({skipped} skipped as too long)")
    return EncodedCorpus(sequences, np.asarray(kept), skipped, tapes)


def make_rule(config: PipelineConfig):
    if config.rule == "tg":
        return masks.TGMasking(
            config.seq_len, config.mem_len, smart_memory=config.smart_memory,
            distinct_compose=config.distinct_compose, transparency_depth=config.transparency_depth,
            linear_relpos=config.linear_relpos,
        )
    return masks.TXLMasking(config.seq_len, config.mem_len)


def segments_per_sequence(sequences, rule) -> np.ndarray:
    """`[S]` how many segments each sequence takes: `rule.num_segments`, the count the rule's chunks have.

    (Counting here from the full length would give a sequence with trailing
    padding more segments than the rule makes, and the batch would read the
    next sequence's.)
    """
    return rule.num_segments(sequences)


def deal_to_rows(num_segments: np.ndarray, num_rows: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
    """Shuffle sequences, then give each to the row with the fewest segments so far.

    Returns, per row, its (sequence, segment) reads in order.
    """
    order = rng.permutation(len(num_segments))
    heap = [(0, row) for row in range(num_rows)]
    rows: list[list[tuple[int, int]]] = [[] for _ in range(num_rows)]
    for s in order:
        filled, row = heapq.heappop(heap)
        rows[row].extend((int(s), k) for k in range(int(num_segments[s])))
        heapq.heappush(heap, (filled + int(num_segments[s]), row))
    return rows


class BatchSource:
    """Step -> batch for one epoch of one host: a random-access source for `grain.MapDataset`.

    Every field has a leading `[local_batch]` axis; besides the `Chunk` /
    `CompactChunk` fields, `seq_index [local_batch]` (position of the
    sequence in the corpus, -1 for an idle row) and `segment_index`.
    """

    def __init__(self, encoded: EncodedCorpus, config: PipelineConfig, epoch: int,
                 process_index: int = 0, process_count: int = 1):
        if config.batch_size % process_count:
            raise ValueError(f"batch_size {config.batch_size} does not divide among {process_count} hosts")
        self.encoded = encoded
        self.config = config
        self.rule = make_rule(config)
        rng = np.random.default_rng([config.seed, epoch])
        all_rows = deal_to_rows(segments_per_sequence(encoded.sequences, self.rule), config.batch_size, rng)
        local = config.batch_size // process_count
        self.rows = all_rows[process_index * local:(process_index + 1) * local]
        self.num_steps = max(len(r) for r in all_rows)  # the same on every host
        self._padding = None

    def __len__(self) -> int:
        return self.num_steps

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        reads = [row[step] if step < len(row) else None for row in self.rows]
        wanted = sorted({r[0] for r in reads if r is not None})
        make = self.rule.compact_chunks_many if self.config.compact else self.rule.chunks_many
        # An all-idle step still needs a template for the padding rows.
        chunks, seq_of_chunk = make([self.encoded.sequences[s] for s in wanted or [0]])
        first_chunk = dict(zip(wanted, np.searchsorted(seq_of_chunk, np.arange(len(wanted)))))
        pad = self._padding_from(chunks)
        batch = {
            name: np.stack([pad[name] if r is None else field[first_chunk[r[0]] + r[1]] for r in reads])
            for name, field in zip(chunks._fields, chunks)
        }
        batch["seq_index"] = np.array(
            [-1 if r is None else int(self.encoded.source_index[r[0]]) for r in reads], np.int32)
        batch["segment_index"] = np.array([-1 if r is None else r[1] for r in reads], np.int32)
        if self.encoded.tapes is not None:
            batch.update(self._tapes(reads))
        return batch

    def _padding_from(self, template) -> dict[str, np.ndarray]:
        """An idle row: no tokens, no memory, nothing attended; it resets its memory."""
        if self._padding is None:
            pad = {name: np.zeros_like(field[0]) for name, field in zip(template._fields, template)}
            for name in ("memory_pos", "mem_src_seq", "mem_src_mem"):
                pad[name][...] = -1
            for name in ("push_time", "pop_time", "memory_push_time", "memory_pop_time"):
                if name in pad:
                    pad[name][...] = masks.NEVER
            for name in ("causal", "linear_relpos", "distinct_compose"):
                if name in pad:
                    pad[name][...] = template._asdict()[name][0]
            pad["beginning_of_seq"][...] = 1
            pad["end_of_seq"][...] = 1
            self._padding = pad
        return self._padding

    def _tapes(self, reads) -> dict[str, np.ndarray]:
        """Pushdown stack tapes for each row's segment: attach `[B, T]` (labels as input positions), depths `[B, T, T]`.

        The sentence's tape (`PushdownSentence.depths`, from its node spans) at
        the segment's positions: position 0 is `<s>`, which no read row reduces.
        """
        T = self.config.seq_len
        attach = np.zeros((len(reads), T), np.int32)
        depths = np.zeros((len(reads), T, T), np.int16)
        for b, read in enumerate(reads):
            if read is None:
                continue
            s, k = read
            sentence = self.encoded.tapes[s]
            positions = np.arange(k * T, min((k + 1) * T, len(sentence) - 1))  # the <eos> is not an input
            cols = np.arange(positions.size)
            attach[b, cols] = sentence.attach[positions]
            depths[b][np.ix_(cols, cols)] = sentence.depths[np.ix_(positions, positions)]
        return {"attach": attach, "stack_depths": depths}


class Pipeline:
    """The whole host-side pipeline for one corpus: trees -> vocabulary -> encoded -> batches."""

    def __init__(self, config: PipelineConfig, vocab: Vocabulary | None = None, *,
                 tree_list: Sequence[trees.Tree] | None = None,
                 process_index: int = 0, process_count: int = 1):
        self.config = config
        # What reading the treebank skipped (on_bad_tree="skip"), for reports.
        self.read_report: trees.ReadReport | None = None
        if tree_list is None:
            tree_list, self.read_report = load_trees(config)
        self.trees = list(tree_list)
        if not self.trees:
            raise ValueError(f"corpus {config.corpus!r}: no trees")
        # Tagged or not: one decision for the whole corpus (a file that mixes both is refused).
        self.pos_tags = corpus_pos_tags(self.trees, config.pos_tags, config.corpus)
        self.vocab = vocab or build_vocabulary([tokens_for_rule(t, config.rule, pos_tags=self.pos_tags)
                                                for t in self.trees])
        self.encoded = encode_corpus(self.trees, self.vocab, config, pos_tags=self.pos_tags)
        self.process_index = process_index
        self.process_count = process_count

    def epoch_source(self, epoch: int) -> BatchSource:
        return BatchSource(self.encoded, self.config, epoch, self.process_index, self.process_count)

    def epoch_dataset(self, epoch: int, start_step: int = 0):
        """This epoch's batches from `start_step` on, as a `grain.MapDataset`."""
        import grain  # the loader; imported here so that `import tgjax.data` stays light

        return grain.MapDataset.source(self.epoch_source(epoch))[start_step:]

    def iterator(self, state: dict[str, int] | None = None) -> BatchIterator:
        return BatchIterator(self, state)


class BatchIterator(Iterator[dict[str, np.ndarray]]):
    """Endless batches over epochs; `get_state()` / `set_state()` make it resumable."""

    def __init__(self, pipeline: Pipeline, state: dict[str, int] | None = None):
        self.pipeline = pipeline
        self.epoch, self.step = 0, 0
        self._iter = None
        if state is not None:
            self.set_state(state)

    def get_state(self) -> dict[str, int]:
        """The position: the next batch is step `step` of epoch `epoch`."""
        return {"epoch": self.epoch, "step": self.step}

    def set_state(self, state: dict[str, int]) -> None:
        unknown = set(state) - {"epoch", "step"}
        if unknown:
            raise ValueError(f"pipeline state: unknown key(s) {sorted(unknown)}; expected 'epoch' and 'step'")
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self._iter = None

    def _open(self):
        import grain

        ds = self.pipeline.epoch_dataset(self.epoch, self.step).to_iter_dataset()
        workers = self.pipeline.config.num_workers
        if workers > 0:
            _absl_flags_parsed()
            ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        return iter(ds)

    def __next__(self) -> dict[str, np.ndarray]:
        while True:
            if self._iter is None:
                self._iter = self._open()
            try:
                batch = next(self._iter)
            except StopIteration:
                self.epoch, self.step, self._iter = self.epoch + 1, 0, None
                continue
            self.step += 1
            return {name: np.asarray(value) for name, value in batch.items()}


def _absl_flags_parsed() -> None:
    """grain's worker processes read absl flags; mark them parsed when the caller did not."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
