"""A word-level language model's training stream (the ON-LSTM task's, the release's AWD-style data; no JAX).

One sentence per line, split on whitespace, `<eos>` appended to every
sentence (an empty one is a lone `<eos>`), all of them concatenated:

    sentences = read_sentences("text", "train.txt", "train")   # or "builtin", "treebank", "craft"
    words = build_vocabulary(sentences)                          # first appearance, then <unk>
    ids, unknown = encode(sentences, {w: i for i, w in enumerate(words)})
    columns, dropped = batchify(ids, batch_size)                 # [batch, N // batch]

The trainer's task (`tgjax.train.tasks.onlstm_lm`) cuts the columns into
BPTT segments. A sentence-level model (`tgjax.train.tasks.stack_lm`) reads
each sentence alone instead, `<bos> w_1 .. w_n` predicting `w_1 .. w_n
<eos>`, in padded batches:

    batch = sentence_batch([ids_1, ids_2], bos, eos, rows, bucket)   # inputs, targets, mask [rows, L]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tgjax.data.batching import round_up
from tgjax.limits import TREEBANK_MAX_WORDS, words_of_line

EOS = "<eos>"
UNK = "<unk>"
BOS = "<bos>"  # a sentence-level model's first input (not in a stream's vocabulary)
SOURCES = ("builtin", "text", "treebank", "craft")  # data.source


def read_sentences(source: str, path: str | None, split: str, *, num_sentences=None, corpus_seed: int = 0,
                   max_words: int | None = TREEBANK_MAX_WORDS, key: str = "data") -> list[list[str]]:
    """The sentences of one split, each a list of words (without `<eos>`).

    "builtin": the synthetic treebank's `split`; "text": `path`, one sentence
    per line; "treebank": the leaves of each tree of the bracketed file `path`; "craft": `craft_sentences` of
    the CRAFT directory `path`. A sentence of a file over `max_words` is refused while read, naming its file
    and line. `key` is the config key that names `path`.
    """
    if source == "builtin":
        from tgjax.data.corpora import builtin_treebank

        return [tree.leaves() for tree in builtin_treebank(split, num_sentences, seed=corpus_seed)]
    if source == "craft":
        sentences = craft_sentences(path or "", split)
        return sentences[:num_sentences] if num_sentences is not None else sentences
    if not path or not Path(path).is_file():
        raise FileNotFoundError(f"{key}: {path!r} is not a file ({split} split, data.source={source!r}); "
                                f"give your {split} file: `--config.{key}=FILE` on the command line")
    if source == "text":
        from tgjax.syntax.trees import text_lines

        sentences = [words_of_line(line, max_words, path, number)
                     for number, line in enumerate(text_lines(path), start=1)]
    elif source == "treebank":
        from tgjax.syntax.trees import read_treebank

        sentences = [tree.leaves() for tree in read_treebank(path, max_words=max_words)]
    else:
        raise ValueError(f"data.source: unknown {source!r}; expected one of {SOURCES}")
    return sentences[:num_sentences] if num_sentences is not None else sentences


def craft_sentences(craft_dir: str, split: str) -> list[list[str]]:
    """CRAFT's sentences of `split` ("train", "valid" = the dev ids, "test") in the release's word form.

    The articles come from `tgjax.data.mlm_corpus.craft_files` (the id lists);
    each tree is filtered as the parsing evaluation filters it
    (`tgjax.syntax.distance.release_filter`: the release's 36 word tags), its
    words lower-cased with digit runs -> `N`. Trees with a word outside a POS
    tag, and trees left without words, are skipped.
    """
    from tgjax.data.mlm_corpus import craft_files
    from tgjax.syntax.distance import release_filter, release_word_form
    from tgjax.syntax.trees import read_treebank

    sentences = []
    for path in craft_files(craft_dir, split):
        for tree in read_treebank(path):
            try:
                words = release_filter(tree).words
            except ValueError:
                continue
            if words:
                sentences.append([release_word_form(w) for w in words])
    return sentences


def split_path(data, split: str) -> str | None:
    """The path a split is read from: the CRAFT directory (data.source "craft"), or data.{train,valid}_path."""
    if data.source == "craft":
        return data.craft_dir
    return data.train_path if split == "train" else data.valid_path


def build_vocabulary(*splits: list[list[str]], min_count: int = 1) -> list[str]:
    """Words in order of first appearance (with `<eos>` after each sentence, as the release), then `<unk>`.

    Words seen fewer than `min_count` times (over `splits`) are left out, so
    they read as `<unk>` and `<unk>` is trained (Mikolov's PTB files have
    this done already: the release's default is 1).
    """
    counts: dict[str, int] = {}
    for sentences in splits:
        for words in sentences:
            for word in words:
                counts[word] = counts.get(word, 0) + 1
            counts[EOS] = counts.get(EOS, 0) + 1
    kept = [w for w, n in counts.items() if n >= min_count or w == EOS]
    if EOS not in kept:
        kept.append(EOS)
    if UNK not in kept:
        kept.append(UNK)
    return kept


def encode(sentences: list[list[str]], index: dict[str, int]) -> tuple[np.ndarray, int]:
    """The concatenated ids with `<eos>` after every sentence [N] int32, and how many words became `<unk>`."""
    unk, eos = index[UNK], index[EOS]
    ids, unknown = [], 0
    for words in sentences:
        for word in words:
            i = index.get(word)
            if i is None:
                unknown += 1
                i = unk
            ids.append(i)
        ids.append(eos)
    return np.asarray(ids, np.int32), unknown


def sentence_batch(sentences, bos: int, eos: int, rows: int, bucket: int) -> dict[str, np.ndarray]:
    """inputs / targets [rows, L] int32 and mask [rows, L] float32 of sentences of word ids, each alone:
    `<bos> w_1 .. w_n` predicting `w_1 .. w_n <eos>`. L is the longest n + 1 rounded up to a multiple of
    `bucket`. Rows past the sentences and positions past a sentence's end have mask 0 (and the id `eos`: a
    left-to-right model never reads them before a real position)."""
    length = round_up(max((len(s) for s in sentences), default=0) + 1, bucket)
    inputs = np.full((rows, length), eos, np.int32)
    targets = np.full((rows, length), eos, np.int32)
    mask = np.zeros((rows, length), np.float32)
    for row, ids in enumerate(sentences):
        n = len(ids)
        inputs[row, 0] = bos
        inputs[row, 1:n + 1] = ids
        targets[row, :n] = ids
        mask[row, :n + 1] = 1.0
    return {"inputs": inputs, "targets": targets, "mask": mask}


def batchify(ids: np.ndarray, batch_size: int) -> tuple[np.ndarray, int]:
    """[N] -> ([batch, N // batch] contiguous columns of the stream, tokens dropped at the end)."""
    rows = len(ids) // batch_size
    return ids[: rows * batch_size].reshape(batch_size, rows), len(ids) - rows * batch_size


__all__ = ["BOS", "EOS", "SOURCES", "UNK", "batchify", "build_vocabulary", "craft_sentences", "encode",
           "read_sentences", "sentence_batch", "split_path"]
