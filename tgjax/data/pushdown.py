"""Pushdown-LM inputs on the host: token ids, attachment labels and compact stack tapes.

One sentence is laid out as the authors' release lays it out
(released-code.md §1.2): ``<s> w_1 ... w_n <eos>``, with ``<s>`` playing the
paper's ROOT (Appendix B) and ``<eos>`` attaching to it, so the tree is
``(<s>, (S, <eos>))`` (`tgjax.syntax.stack_tape.window_stack_tape` with
``root=True, eos=True``). The model reads positions 0..N-2 (``<s>`` through
``w_n``) and at position i predicts token i+1 and its attachment
``attach[i+1]`` (the slot index of `tgjax.nn.attachment_head`); row i of the
tape is the depths after token i, so the ``<eos>`` reduce is never in a tape
the model reads (as in the release).

Trees: labels dropped, unary chains (and pre-terminals) collapsed, n-ary
nodes right-binarised as the release's nltk ``chomsky_normal_form`` does;
each n-ary node is counted (`PushdownReport.num_binarised`). Sub-word
vocabularies: each word's pieces form a right-branching subtree (Appendix C;
the word map comes from `Vocabulary.encode_with_alignment`).

Compact form. A binary tree over N tokens has N − 1 nodes, and the tape is
``W[k, j] = #{nodes (s, e): s <= j <= e <= k}``; batches carry the node spans
``node_start, node_end [B, T]`` and `tgjax.nn.pushdown_attention.
stack_tape_from_nodes` rebuilds ``[B, T, T]`` on device (a scatter and two
cumulative sums), instead of shipping T² integers per row. ``dense=True``
adds the host-built tape for interoperability and tests.

Depth table. Depths at or beyond ``num_depths`` are clipped by the model to
``num_depths - 1``; the batcher counts the tape entries (of the rows a model
reads) that will be clipped, in `PushdownReport.num_clipped_entries`.

Training batches: an epoch's order is `epoch_batches` (a shuffle from
(seed, epoch), optionally grouped by length), each batch padded to the row
length or to its `bucket_width`; `train_epochs` makes each epoch a
`grain.MapDataset` for `tgjax.data.batching.EpochBatches`, whose position
{"epoch", "step"} is all a checkpoint needs. `PushdownBatches` walks the
same order, filtering and counting as it goes. Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tgjax.data.batching import local_rows
from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PushdownSentence:
    """One encoded sentence of N = (tokens) + 2 positions.

    Attributes:
      tokens: ``[N]`` int32 ids, ``<s> ... <eos>``.
      attach: ``[N]`` int32 attachment labels (``attach[k] == k``: shift).
      node_start, node_end: ``[N - 1]`` int32 inclusive spans of the binary
        nodes, sorted by (end, start).
      num_binarised: n-ary nodes of the source tree that were right-binarised.
      final_attachment: whether the last input position's attachment target
        (that of the final token) is trained: True for text (``<eos>`` to
        ``<s>``), False for Dyck (the end token's label is not in the release).
      roots: positions of the ROOT tokens (``<s>``), one per sentence: (0,)
        unless several sentences share the row (windows).
    """

    tokens: np.ndarray
    attach: np.ndarray
    node_start: np.ndarray
    node_end: np.ndarray
    num_binarised: int = 0
    final_attachment: bool = True
    roots: tuple[int, ...] = (0,)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def depths(self) -> np.ndarray:
        """``[N, N]`` int32 tape, row k = depths after token k (built from the nodes; not stored)."""
        return tape_from_nodes(self.node_start, self.node_end, len(self))


def tape_from_nodes(node_start: np.ndarray, node_end: np.ndarray, length: int) -> np.ndarray:
    """``[T, T]`` int32 tape ``W[k, j] = #{nodes: s <= j <= e <= k}`` from node spans (-1 padding ignored)."""
    diff = np.zeros((length + 1, length + 1), np.int32)
    keep = (np.asarray(node_start) >= 0) & (np.asarray(node_end) < length)
    starts, ends = np.asarray(node_start)[keep], np.asarray(node_end)[keep]
    np.add.at(diff, (ends, starts), 1)
    np.add.at(diff, (ends, ends + 1), -1)
    return np.cumsum(np.cumsum(diff, axis=1), axis=0)[:length, :length].astype(np.int32)


def sentence_from_attachments(tokens: np.ndarray, attach: np.ndarray, *, name: str = "sentence",
                              final_attachment: bool = True) -> PushdownSentence:
    """A `PushdownSentence` from ids and labels (replayed through the stack, which checks them)."""
    tokens, attach = np.asarray(tokens, np.int32), np.asarray(attach, np.int32)
    if tokens.shape != attach.shape:
        raise ValueError(f"{name}: {attach.size} attachment labels for {tokens.size} tokens")
    try:
        _, forest = stt.replay(attach)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    ordered = sorted(stt.bracketing_spans(forest), key=lambda span: (span[1], span[0]))
    starts = np.asarray([s for s, _ in ordered], np.int32).reshape(-1)
    ends = np.asarray([e for _, e in ordered], np.int32).reshape(-1)
    return PushdownSentence(tokens, attach, starts, ends, final_attachment=final_attachment)


@dataclasses.dataclass
class PushdownReport:
    """What the data side changed or dropped, for the user."""

    num_sentences: int = 0
    num_binarised: int = 0  # n-ary nodes right-binarised
    num_skipped_too_long: int = 0
    num_clipped_entries: int = 0  # tape entries (read by the model) at or beyond the depth table

    def summary(self) -> str:
        return (f"{self.num_sentences} sentences; {self.num_binarised} n-ary nodes right-binarised; "
                f"{self.num_skipped_too_long} skipped as too long; "
                f"{self.num_clipped_entries} tape entries clipped to the depth table")


def count_nary(tree: Tree) -> int:
    """Nodes of `tree` with more than two children (each becomes a right-branching chain)."""
    count, todo = 0, [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, Tree):
            count += len(node.children) > 2
            todo.extend(node.children)
    return count


def encode_bracketing(words: Sequence[int], bracketing: stt.Bracketing, *, bos_id: int, eos_id: int,
                      word_index: np.ndarray | None = None, name: str = "sentence",
                      num_binarised: int = 0) -> PushdownSentence:
    """Ids and a word-level bracketing -> `PushdownSentence`.

    Args:
      words: ``[n]`` token ids (sub-word pieces when ``word_index`` is given).
      bracketing: binary bracketing over the sentence's words 0..m-1.
      word_index: ``[n]`` the word of each token (sub-words), or None (one token per word).
      name: names the sentence in errors (e.g. ``"train.mrg: tree 17"``).
    Raises:
      ValueError: an empty sentence, or a tree whose words do not match the tokens.
    """
    words = np.asarray(words, np.int32)
    if words.size == 0:
        raise ValueError(f"{name}: empty sentence (no tokens); a Pushdown sentence needs at least one word")
    num_words = stt.num_leaves(bracketing)
    if word_index is None:
        if num_words != words.size:
            raise ValueError(f"{name}: the tree has {num_words} words but the sentence has {words.size} tokens; "
                             f"expected one token per word (or pass word_index for sub-words)")
    else:
        word_index = np.asarray(word_index)
        if word_index.shape != words.shape:
            raise ValueError(f"{name}: word_index has {word_index.size} entries for {words.size} tokens")
        try:
            bracketing = stt.expand_subwords(bracketing, word_index, branching="right")
        except ValueError as error:
            raise ValueError(f"{name}: the tokens do not match the tree's {num_words} words: {error}") from None
    # (<s>, (S, <eos>)): S's labels shifted by one; <s> shifts and <eos> attaches to <s> (both label 0).
    # (Equal to window_stack_tape([S], root=True, eos=True).attach, without its O(N²) tape.)
    window_attach = np.concatenate([[0], stt.attachments(bracketing) + 1, [0]]).astype(np.int32)
    n = words.size + 2
    # The window's forest is (<s>, (S, <eos>)): its nodes are S's shifted by one, plus two.
    spans = {(s + 1, e + 1) for s, e in stt.bracketing_spans(bracketing)} | {(1, n - 1), (0, n - 1)}
    ordered = sorted(spans, key=lambda span: (span[1], span[0]))
    starts = np.asarray([s for s, _ in ordered], np.int32)
    ends = np.asarray([e for _, e in ordered], np.int32)
    tokens = np.concatenate([[bos_id], words, [eos_id]]).astype(np.int32)
    return PushdownSentence(tokens, window_attach, starts, ends, num_binarised)


def encode_tree(tree: Tree, vocab, *, name: str = "sentence") -> PushdownSentence:
    """A tree -> `PushdownSentence` with `vocab` (words, or sub-word pieces forming right-branching subtrees)."""
    words = tree.leaves()
    if not words:
        raise ValueError(f"{name}: empty sentence (the tree has no words)")
    try:
        ids, word_index = vocab.encode_with_alignment(words)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    bracketing = stt.tree_to_bracketing(tree, nary="right")
    subwords = ids.size != len(words)
    return encode_bracketing(ids, bracketing, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                             word_index=word_index if subwords else None, name=name,
                             num_binarised=count_nary(tree))


def encode_trees(tree_list: Sequence[Tree], vocab, *, source: str = "corpus"
                 ) -> tuple[list[PushdownSentence], PushdownReport]:
    sentences = [encode_tree(tree, vocab, name=f"{source}: tree {i}") for i, tree in enumerate(tree_list)]
    report = PushdownReport(num_sentences=len(sentences), num_binarised=sum(s.num_binarised for s in sentences))
    if report.num_binarised:
        log.info("%s: right-binarised %d n-ary nodes", source, report.num_binarised)
    return sentences, report


def make_batch(sentences: Sequence[PushdownSentence | None], seq_len: int, *, num_depths: int | None = None,
               binary_tape: bool = False, dense: bool = False) -> tuple[dict[str, np.ndarray], int]:
    """Fixed-shape arrays for up to B sentences (None: an idle row); each needs ``len <= seq_len + 1``.

    Returns ``(batch, num_clipped)``, batch fields (T = seq_len):
      inputs ``[B, T]`` ids of positions 0..N-2; targets ``[B, T]`` ids of tokens 1..N-1 (0 padding);
      attach ``[B, T + 1]`` labels of tokens 0..T (padding shifts); attach_targets ``[B, T]`` = attach[:, 1:];
      weights ``[B, T]`` float32 (1 on real positions); attach_weights ``[B, T]`` (0 also where the
      final attachment is not trained); node_start, node_end ``[B, T]`` int32 (-1 padding);
      roots ``[B, T + 1]`` bool, the ROOT tokens (the legal slots depend on them: `attachment_head.slot_legality`);
      with ``dense``: tape ``[B, T, T]`` int16 (binary or clipped to the table).
    ``num_clipped``: tape entries of the read rows at or beyond ``num_depths``.
    """
    B, T = len(sentences), seq_len
    batch = {
        "inputs": np.zeros((B, T), np.int32),
        "targets": np.zeros((B, T), np.int32),
        "attach": np.tile(np.arange(T + 1, dtype=np.int32), (B, 1)),
        "weights": np.zeros((B, T), np.float32),
        "attach_weights": np.zeros((B, T), np.float32),
        "node_start": np.full((B, T), -1, np.int32),
        "node_end": np.full((B, T), -1, np.int32),
        "roots": np.zeros((B, T + 1), bool),
    }
    batch["roots"][:, 0] = True  # idle rows too: every row starts with a ROOT
    if dense:
        batch["tape"] = np.zeros((B, T, T), np.int16)
    clipped = 0
    for b, sentence in enumerate(sentences):
        if sentence is None:
            continue
        n = len(sentence)
        if n - 1 > T:
            raise ValueError(f"row {b}: a sentence of {n} positions does not fit seq_len={T} (needs {n - 1})")
        batch["inputs"][b, : n - 1] = sentence.tokens[:-1]
        batch["targets"][b, : n - 1] = sentence.tokens[1:]
        batch["attach"][b, :n] = sentence.attach
        batch["weights"][b, : n - 1] = 1.0
        batch["attach_weights"][b, : n - 1 if sentence.final_attachment else n - 2] = 1.0
        # A forest (Dyck) has fewer than N - 1 nodes; the rest stay -1.
        batch["node_start"][b, : sentence.node_start.size] = sentence.node_start
        batch["node_end"][b, : sentence.node_end.size] = sentence.node_end
        batch["roots"][b, list(sentence.roots)] = True
        read = sentence.depths[: n - 1, : n - 1]
        if num_depths is not None and not binary_tape:
            clipped += int(np.count_nonzero(np.tril(read) >= num_depths))
        if dense:
            tape = (read > 0) if binary_tape else np.minimum(read, (num_depths or read.max() + 1) - 1)
            batch["tape"][b, : n - 1, : n - 1] = tape
    batch["attach_targets"] = batch["attach"][:, 1:].copy()
    return batch, clipped


# -----------------------------------------------------------------------------
# Training batches.


SMALLEST_BUCKET = 16


def bucket_widths(seq_len: int, *, smallest: int = SMALLEST_BUCKET) -> list[int]:
    """Every width `bucket_width` can return: the powers of two from `smallest` below `seq_len`, then `seq_len`."""
    widths = []
    width = smallest
    while width < seq_len:
        widths.append(width)
        width *= 2
    return widths + [seq_len]


def bucket_width(sentences: Sequence[PushdownSentence | None], seq_len: int, *,
                 smallest: int = SMALLEST_BUCKET) -> int:
    """The width a batch's rows are padded to: the smallest power of two (at least `smallest`) that holds
    its longest sentence's inputs, and at most `seq_len`.

    Padding is masked out everywhere, so the loss does not depend on the width; what does is the work.
    One long string is enough to need the full width: most random batches of 64 Dyck strings (39 tokens
    on average, a few near 500) still need all 512 columns; batches grouped by length mostly need 16-64.
    Powers of two keep the number of compiled steps to a handful (log2(seq_len / smallest) + 1 at most).
    """
    longest = max((len(s) - 1 for s in sentences if s is not None), default=1)
    return next((width for width in bucket_widths(seq_len, smallest=smallest) if width >= longest), seq_len)


GROUP_POOL_BATCHES = 50  # batches per pool sorted by length (`epoch_batches(lengths=...)`)


def epoch_batches(num_rows: int, batch_size: int, seed: int, epoch: int, *, lengths: np.ndarray | None = None,
                  pool_batches: int = GROUP_POOL_BATCHES) -> list[np.ndarray]:
    """The row indices of each batch of `epoch`, in order: a function of (seed, epoch) only.

    The rows shuffled (`np.random.default_rng([seed, epoch])`) and cut into
    batches, the last one partial. With `lengths` (grouping by length) the
    shuffled rows are cut into pools of `pool_batches` batches, each pool
    sorted by length before it is cut into batches, and the epoch's batches
    are shuffled again: every row still once an epoch, but a batch holds rows
    of similar length (with `bucket_width`, far fewer columns).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(num_rows)
    if lengths is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    pool = batch_size * pool_batches
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start:start + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def train_epochs(rows: Sequence[PushdownSentence], *, seq_len: int, batch_size: int, seed: int,
                 process_index: int = 0, process_count: int = 1, bucket_lengths: bool = False,
                 group_by_length: bool = False, pool_batches: int = GROUP_POOL_BATCHES
                 ) -> Callable[[int], Any]:
    """epoch -> a `grain.MapDataset` of that epoch's training batches, for `tgjax.data.batching.EpochBatches`.

    Every process draws the same global batch (`epoch_batches`; grouped by
    length with `group_by_length`) and keeps its own rows; the last batch of
    an epoch is filled with idle rows (weight 0). Each batch is `seq_len`
    wide, or with `bucket_lengths` the `bucket_width` of its rows. Grouping
    makes the batches no uniform draws, which the paper's recipe does not
    say it used: a switch, off by default. The rows are used as they are
    (fitted to `seq_len` already: `tgjax.data.pushdown_corpus.prepare_split`).
    """
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows)) if group_by_length else None

    def batch(indices: np.ndarray) -> dict[str, np.ndarray]:
        chosen: list[PushdownSentence | None] = [rows[i] for i in indices]
        chosen += [None] * (batch_size - len(chosen))  # idle rows, weight 0
        width = bucket_width(chosen, seq_len) if bucket_lengths else seq_len
        return local_rows(make_batch(chosen, width)[0], process_index, process_count)

    def epoch(e: int):
        import grain  # the loader; imported here so that `import tgjax.data` stays light

        plan = epoch_batches(len(rows), batch_size, seed, e, lengths=lengths, pool_batches=pool_batches)
        return grain.MapDataset.source(plan).map(batch)

    return epoch


class PushdownBatches:
    """Epochs of fixed-shape batches of whole sentences (`epoch_batches`' order); reports what it skipped and clipped.

    Sentences longer than ``seq_len + 1`` positions raise, or with
    ``on_too_long="skip"`` are skipped and counted in `report`.
    """

    def __init__(self, sentences: Sequence[PushdownSentence], *, seq_len: int, batch_size: int, num_depths: int,
                 binary_tape: bool = False, dense: bool = False, on_too_long: str = "error", seed: int = 0,
                 report: PushdownReport | None = None, source: str = "corpus"):
        if on_too_long not in ("error", "skip"):
            raise ValueError(f"on_too_long: expected 'error' or 'skip', got {on_too_long!r}")
        self.report = report or PushdownReport(num_sentences=len(sentences))
        kept = []
        for i, sentence in enumerate(sentences):
            if len(sentence) - 1 > seq_len:
                if on_too_long == "error":
                    raise ValueError(f"{source}: sentence {i} has {len(sentence) - 2} tokens; seq_len={seq_len} "
                                     f"holds at most {seq_len - 1} (set on_too_long='skip' to skip and count)")
                self.report.num_skipped_too_long += 1
                continue
            kept.append(sentence)
        if not kept:
            raise ValueError(f"{source}: no sentences left to batch ({self.report.num_skipped_too_long} too long)")
        self.sentences = kept
        self.seq_len, self.batch_size, self.num_depths = seq_len, batch_size, num_depths
        self.binary_tape, self.dense, self.seed = binary_tape, dense, seed
        if self.report.num_skipped_too_long:
            log.warning("%s: %s", source, self.report.summary())

    def __len__(self) -> int:
        return -(-len(self.sentences) // self.batch_size)

    def epoch(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """The epoch's batches; the last is filled with idle rows. Clipped entries accumulate in `report`."""
        for indices in epoch_batches(len(self.sentences), self.batch_size, self.seed, epoch):
            rows: list[PushdownSentence | None] = [self.sentences[i] for i in indices]
            rows += [None] * (self.batch_size - len(rows))
            batch, clipped = make_batch(rows, self.seq_len, num_depths=self.num_depths,
                                        binary_tape=self.binary_tape, dense=self.dense)
            self.report.num_clipped_entries += clipped
            yield batch
