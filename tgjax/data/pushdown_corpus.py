"""Pushdown-LM training data on the host (`trainer="pushdown_lm"`, `tgjax.train.tasks.pushdown_lm`).

`load_splits` reads a config's training and validation data: the built-in
treebank or bracketed files (`read_trees`; vocabulary: `load_vocabulary`),
or Dyck strings (`tgjax.data.dyck`), encoded as `PushdownSentence` rows
(`tgjax.data.pushdown`) and fitted to the model's rows (`prepare_split`:
sentences longer than a row skipped and counted, or refused; with
`data.windows` whole sentences packed into rows, `pack_windows`), with notes
for the user on what was changed. `unigram_loss` is the validation baseline.
The rows are batched by `tgjax.data.pushdown.train_epochs`.

Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tgjax.data.pushdown import PushdownReport, PushdownSentence, encode_trees


@dataclasses.dataclass
class SplitData:
    """A split's rows (sentences, or windows of them) and what reading and fitting them changed."""

    sentences: list[PushdownSentence]
    report: PushdownReport


def read_trees(data, split: str):
    """The trees of one split: the built-in treebank's, or a bracketed file's (errors name file:line)."""
    limit = data.num_train_sentences if split == "train" else data.num_valid_sentences
    if data.source == "builtin":
        from tgjax.data.corpora import builtin_treebank

        return builtin_treebank(split, limit, seed=data.corpus_seed), f"built-in treebank ({split})"
    key = f"data.{split}_path"
    path = data[f"{split}_path"]
    if not path or not Path(path).is_file():  # the config's unset placeholder is no file either
        raise FileNotFoundError(f"{key}: {path!r} is not a file; give your {split} treebank (one bracketed tree per "
                                f"line): `--config.{key}=FILE`, or `--config=CONFIG.py:TRAIN,VALID`")
    from tgjax.limits import max_words_of
    from tgjax.syntax.trees import read_treebank

    trees = read_treebank(path, max_words=max_words_of(data))  # a huge tree is refused before it is built
    return (trees[:limit] if limit is not None else trees), str(path)


def load_vocabulary(data, train_trees):
    """`data.vocab_path` (a saved vocabulary, e.g. SentencePiece) or a word dictionary of the training words."""
    from tgjax.data import vocab as vocabulary

    if data.vocab_path:
        path = Path(data.vocab_path)
        if not path.is_file():
            raise FileNotFoundError(f"data.vocab_path: {str(path)!r} is not a file")
        return vocabulary.load_vocabulary(path)
    return vocabulary.build_word_dictionary([tree.leaves() for tree in train_trees],
                                            min_count=data.min_word_count)


def pack_windows(sentences: list[PushdownSentence], max_tokens: int) -> tuple[list[PushdownSentence], int]:
    """Whole sentences packed greedily, in order, into rows of at most `max_tokens` tokens (Appendix B).

    Each sentence keeps its `<s>` (the ROOT) and `<eos>`; attachment labels and
    node spans move by the sentence's offset in the row. Returns the rows and
    the number of sentences longer than a row (left out; the caller reports them).
    """
    rows, current, used, too_long = [], [], 0, 0

    def flush():
        if not current:
            return
        offsets = np.cumsum([0] + [len(s) for s in current[:-1]])
        rows.append(PushdownSentence(
            tokens=np.concatenate([s.tokens for s in current]),
            attach=np.concatenate([s.attach + o for s, o in zip(current, offsets)]).astype(np.int32),
            node_start=np.concatenate([s.node_start + o for s, o in zip(current, offsets)]).astype(np.int32),
            node_end=np.concatenate([s.node_end + o for s, o in zip(current, offsets)]).astype(np.int32),
            num_binarised=sum(s.num_binarised for s in current), roots=tuple(int(o) for o in offsets)))

    for sentence in sentences:
        if len(sentence) > max_tokens:
            too_long += 1
            continue
        if used + len(sentence) > max_tokens:
            flush()
            current, used = [], 0
        current.append(sentence)
        used += len(sentence)
    flush()
    return rows, too_long


def leaf_depths(sentence: PushdownSentence) -> np.ndarray:
    """`[N]` the number of nodes above each token: the largest entry of its tape column."""
    diff = np.zeros(len(sentence) + 1, np.int64)
    np.add.at(diff, sentence.node_start, 1)
    np.add.at(diff, sentence.node_end + 1, -1)
    return np.cumsum(diff)[:-1]


def count_clipped(sentence: PushdownSentence, num_depths: int) -> int:
    """Tape entries of the rows the model reads (0..N-2) at or beyond the depth table (what `make_batch` counts)."""
    if leaf_depths(sentence).max(initial=0) < num_depths:  # the cheap bound: no entry can reach the table's end
        return 0
    n = len(sentence)
    return int(np.count_nonzero(np.tril(sentence.depths[: n - 1, : n - 1]) >= num_depths))


def prepare_split(sentences: list[PushdownSentence], report: PushdownReport, *, seq_len: int, num_depths: int,
                  binary: bool, windows: bool, on_too_long: str, source: str) -> SplitData:
    """Fits sentences to rows of `seq_len` inputs (packing them with `windows`), counting what it skips and clips."""
    if windows:
        rows, too_long = pack_windows(sentences, seq_len + 1)
    else:
        rows = [s for s in sentences if len(s) - 1 <= seq_len]
        too_long = len(sentences) - len(rows)
    if too_long and on_too_long == "error":
        longest = max(len(s) - 2 for s in sentences)
        raise ValueError(f"{source}: {too_long} sentence(s) do not fit model.sequence_length={seq_len} (at most "
                         f"{seq_len - 1} tokens; the longest has {longest}); set data.on_too_long='skip' to skip "
                         f"and count them, or raise model.sequence_length")
    report.num_skipped_too_long += too_long
    if not rows:
        raise ValueError(f"{source}: no sentence left to train on ({too_long} longer than model.sequence_length)")
    if not binary:
        report.num_clipped_entries += sum(count_clipped(s, num_depths) for s in rows)
    return SplitData(rows, report)


def unigram_loss(train: list[PushdownSentence], valid: list[PushdownSentence], vocab_size: int) -> float:
    """Validation cross-entropy per predicted token (tokens 1..N-1 of each row) of add-one training unigrams."""
    counts = np.ones(vocab_size, np.float64)
    for row in train:
        np.add.at(counts, row.tokens[1:], 1.0)
    log_probs = np.log(counts / counts.sum())
    targets = np.concatenate([row.tokens[1:] for row in valid])
    return float(-log_probs[targets].mean())


def token_strings(vocab) -> list[str]:
    """The vocabulary's tokens by id (what WORKDIR/vocab.txt lists)."""
    if hasattr(vocab, "tokens"):
        return list(vocab.tokens)
    return [str(t) for t in vocab.decode(np.arange(vocab.size))]


@dataclasses.dataclass
class PushdownData:
    """A config's data: the training rows, the validation rows (None: no validation data), the vocabulary's
    size and its file text (one token a line, by id), and notes for the user on what reading changed."""

    train: SplitData
    valid: SplitData | None
    vocab_size: int
    vocab_text: str
    notes: list[str]


def load_splits(config, *, unset_path: str | None = None) -> PushdownData:
    """The training and validation rows of `config` (its `data` section, and `model.sequence_length` and
    `model.num_depths`, which the rows are fitted to). `unset_path`: the placeholder of a path not set
    (`data.valid_path` equal to it: no validation data)."""
    c, d = config, config.data
    notes: list[str] = []
    seq_len = c.model.sequence_length
    binary = d.source == "dyck"
    fit = dict(seq_len=seq_len, num_depths=c.model.num_depths, binary=binary, windows=bool(d.windows),
               on_too_long=d.on_too_long)
    if binary:
        from tgjax.data import dyck

        vocab = dyck.dyck_vocabulary(d.dyck_num_types)
        splits = {}
        for split, count, seed in (("train", d.dyck_num_train, d.corpus_seed),
                                   ("valid", d.dyck_num_valid, d.corpus_seed + 1)):
            if not count:
                continue
            strings, redrawn = dyck.dyck_corpus(count, seed, num_types=d.dyck_num_types,
                                                max_depth=d.dyck_max_depth, max_length=d.dyck_max_length,
                                                min_length=d.dyck_min_length,
                                                open_probability=d.dyck_open_probability)
            mean_length = sum(map(len, strings)) / len(strings)
            notes.append(f"Dyck {split}: {count} strings of Dyck_({d.dyck_num_types},{d.dyck_max_depth}), "
                         f"mean length {mean_length:.1f} (open probability {d.dyck_open_probability}); "
                         f"{redrawn} longer than data.dyck_max_length={d.dyck_max_length} redrawn")
            rows = dyck.encode_for_pushdown(strings, vocab)
            splits[split] = prepare_split(rows, PushdownReport(num_sentences=len(rows)),
                                          source=f"Dyck {split}", **fit)
        text = "\n".join(list(vocab.tokens)) + "\n"
        return PushdownData(splits["train"], splits.get("valid"), vocab.size, text, notes)
    train_trees, train_where = read_trees(d, "train")
    vocab = load_vocabulary(d, train_trees)
    sources = {"train": (train_trees, train_where)}
    if d.source == "builtin" or (d.valid_path and d.valid_path != unset_path):
        sources["valid"] = read_trees(d, "valid")
    out = {}
    for split, (trees, where) in sources.items():
        rows, report = encode_trees(trees, vocab, source=where)
        unknown = sum(int(np.count_nonzero(s.tokens == vocab.unk_id)) for s in rows)
        if unknown:
            notes.append(f"{split}: {unknown} word(s) outside the vocabulary read as <unk>")
        out[split] = prepare_split(rows, report, source=where, **fit)
    text = "\n".join(token_strings(vocab)) + "\n"
    return PushdownData(out["train"], out.get("valid"), vocab.size, text, notes)


__all__ = ["PushdownData", "SplitData", "count_clipped", "leaf_depths", "load_splits", "load_vocabulary",
           "pack_windows", "prepare_split", "read_trees", "token_strings", "unigram_loss"]
