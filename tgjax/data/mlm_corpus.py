"""UDGN's masked-LM data on the host (`trainer="mlm"`, `tgjax.train.tasks.mlm`): words, vocabulary, batches.

- Words: from a treebank (`data.source = "builtin"`, `"treebank"` files or
  `"craft"`, CRAFT's id lists) only the tokens whose POS tag is one of the
  release's WORD_TAGS are kept, in the release's form (lower-cased, digit
  runs -> `N`); `"text"` files are one sentence per line, already filtered.
  Sentences left empty (or untagged, or over `data.max_length`) are skipped
  and counted (`read_split`).
- Vocabulary: `<unk>` 0, `<pad>` 1, `<mask>` 2 (`tgjax.models.mlm_masking`'s
  ids), then the training words seen at least `min_count` times, most
  frequent first (ties alphabetical).
- Batches: sentences sorted by length and packed greedily so that a batch's
  padded rows x width stays within the token budget (`token_budget_batches`),
  every batch of one width padded to the same rows (`make_batch`). The
  batches are fixed; epoch `e` gives them in `epoch_order(n, seed, e)`
  (`train_epochs`, a `grain.MapDataset` per epoch for
  `tgjax.data.batching.EpochBatches`).

Nothing here imports JAX.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tgjax.data.batching import epoch_order, local_rows, round_up

# The vocabulary's specials and their ids: `tgjax.models.mlm_masking` masks and scores with the same ones.
UNK, PAD, MASK = "<unk>", "<pad>", "<mask>"
SPECIALS = (UNK, PAD, MASK)
UNK_ID, PAD_ID, MASK_ID = 0, 1, 2

SOURCES = ("builtin", "treebank", "craft", "text")
CRAFT_SPLITS = {"train": "train", "valid": "dev", "test": "test"}


# -----------------------------------------------------------------------------
# Words.


def release_words(tree) -> list[str]:
    """The words the release keeps from a tree: WORD_TAGS only, lower-cased, digit runs -> N."""
    from tgjax.syntax.distance import release_word_form
    from tgjax.syntax.heads import WORD_TAGS
    from tgjax.syntax.trees import tagged_words

    return [release_word_form(word) for word, tag in tagged_words(tree) if tag in WORD_TAGS]


def craft_files(craft_dir: str, split: str) -> list[Path]:
    """CRAFT's `penn/<id>.tree` files of a split ("train", "valid" = dev, "test"), from `ids/craft-ids-*.txt`."""
    root = Path(craft_dir)
    ids_path = root / "ids" / f"craft-ids-{CRAFT_SPLITS[split]}.txt"
    if not ids_path.is_file():
        raise FileNotFoundError(f"no CRAFT id list at {ids_path}: expected the CRAFT treebank (ids/, penn/) in "
                                f"{root}; set data.craft_dir")
    ids = [line.strip() for line in ids_path.read_text().splitlines() if line.strip()]
    files = [root / "penn" / f"{i}.tree" for i in ids]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{ids_path} names {len(missing)} articles with no tree file, e.g. {missing[0]}")
    return files


def split_trees(data, split: str) -> list:
    """The trees of a split for the treebank sources ("builtin", "treebank", "craft")."""
    from tgjax.limits import max_words_of
    from tgjax.syntax.trees import read_treebank

    if data.source == "builtin":
        from tgjax.data.corpora import get_corpus

        count = {"train": data.num_train_sentences, "valid": data.num_valid_sentences,
                 "test": data.get("num_test_sentences", None)}[split]
        return get_corpus("builtin", split, num_sentences=count, seed=data.corpus_seed)
    if data.source == "craft":
        return [tree for path in craft_files(data.craft_dir, split)
                for tree in read_treebank(path, max_words=max_words_of(data))]
    path = {"train": data.train_path, "valid": data.valid_path, "test": data.get("test_path", "")}[split]
    if not path:
        return []
    if not Path(path).is_file():
        raise FileNotFoundError(f"no {split} treebank at {path} (config key data.{split}_path)")
    return read_treebank(path, max_words=max_words_of(data))  # a huge tree is refused before it is built


def read_split(data, split: str) -> tuple[list[list[str]], dict[str, int]]:
    """(sentences as word lists, {"empty": n, "untagged": m[, "too_long": k]}: sentences skipped, counted).

    "empty": nothing left after filtering; "untagged": a tree with a word not
    under a POS pre-terminal (CRAFT has `(NN Xpd TTD)`), whose words cannot be
    filtered; "too_long": sentences over `data.max_length` words (0 = no
    limit, the release), training and validation alike.
    """
    skipped = {"empty": 0, "untagged": 0}
    if data.source == "text":
        path = {"train": data.train_path, "valid": data.valid_path}[split]
        if not Path(path).is_file():
            raise FileNotFoundError(f"no {split} text at {path} (config key data.{split}_path): one sentence per "
                                    "line, words separated by spaces, punctuation already removed")
        lines = [line.split() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    else:
        lines = []
        for tree in split_trees(data, split):
            try:
                lines.append(release_words(tree))
            except ValueError:
                skipped["untagged"] += 1
    kept = [words for words in lines if words]
    skipped["empty"] = len(lines) - len(kept)
    limit = data.get("max_length", 0)
    if limit:  # a CPU-scale cap (few compiled widths); the release has none
        short = [words for words in kept if len(words) <= limit]
        skipped["too_long"] = len(kept) - len(short)
        kept = short
    return kept, skipped


# -----------------------------------------------------------------------------
# Vocabulary.


def build_vocabulary(sentences: list[list[str]], min_count: int) -> list[str]:
    """The specials, then words seen >= min_count times, most frequent first (ties alphabetical)."""
    counts = collections.Counter(word for words in sentences for word in words)
    kept = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                  key=lambda w: (-counts[w], w))
    return [*SPECIALS, *kept]


def encode(sentences: list[list[str]], words: list[str]) -> tuple[list[np.ndarray], int]:
    """Id arrays per sentence, and how many words became `<unk>`."""
    index = {w: i for i, w in enumerate(words)}
    out = [np.array([index.get(w, UNK_ID) for w in s], np.int32) for s in sentences]
    unknown = sum(int(np.sum(ids == UNK_ID)) for ids in out) - sum(s.count(UNK) for s in sentences)
    return out, unknown


# -----------------------------------------------------------------------------
# Token-budget batches.


def rows_for(width: int, budget: int, rows_multiple: int = 1) -> int:
    """Rows of a batch of `width`: as many as fit in `budget` tokens, a multiple of `rows_multiple`."""
    return (budget // width) // rows_multiple * rows_multiple


def token_budget_batches(lengths: np.ndarray, budget: int, bucket: int, rows_multiple: int = 1
                         ) -> list[np.ndarray]:
    """Sentence indices per batch: sorted by length, packed greedily with rows x width <= budget.

    width = the longest sentence rounded up to a multiple of `bucket`. Raises
    ValueError when a sentence alone does not fit.
    """
    order = np.argsort(lengths, kind="stable")
    batches, current, width = [], [], 0
    for i in order:
        w = round_up(int(lengths[i]), bucket)
        if rows_for(w, budget, rows_multiple) < 1:
            raise ValueError(f"a sentence of {int(lengths[i])} words (width {w}) does not fit the token budget "
                             f"{budget}: raise training.token_budget or drop long sentences")
        if current and len(current) + 1 > rows_for(max(width, w), budget, rows_multiple):
            batches.append(np.array(current))
            current, width = [], 0
        current.append(int(i))
        width = max(width, w)
    if current:
        batches.append(np.array(current))
    return batches


def make_batch(sentences: list[np.ndarray], indices: np.ndarray, budget: int, bucket: int,
               rows_multiple: int = 1) -> dict[str, np.ndarray]:
    """tokens [R, W] int32 (padding `<pad>`), valid [R, W] bool; R fixed by the width W (empty filler rows)."""
    width = round_up(max(len(sentences[i]) for i in indices), bucket)
    rows = rows_for(width, budget, rows_multiple)
    tokens = np.full((rows, width), PAD_ID, np.int32)
    for row, i in enumerate(indices):
        tokens[row, :len(sentences[i])] = sentences[i]
    valid = np.zeros((rows, width), bool)
    for row, i in enumerate(indices):
        valid[row, :len(sentences[i])] = True
    return {"tokens": tokens, "valid": valid}


def train_epochs(sentences: list[np.ndarray], batches: list[np.ndarray], budget: int, bucket: int, seed: int, *,
                 rows_multiple: int = 1, process_index: int = 0, process_count: int = 1
                 ) -> Callable[[int], Any]:
    """epoch -> a `grain.MapDataset` of that epoch's training batches (this process's rows), for `EpochBatches`:
    the fixed `batches` in `epoch_order(len(batches), seed, epoch)`, each made by `make_batch`."""

    def batch(indices: np.ndarray) -> dict[str, np.ndarray]:
        return local_rows(make_batch(sentences, indices, budget, bucket, rows_multiple), process_index, process_count)

    def epoch(e: int):
        import grain  # the loader; imported here so that `import tgjax.data` stays light

        return grain.MapDataset.source([batches[i] for i in epoch_order(len(batches), seed, e)]).map(batch)

    return epoch


__all__ = ["CRAFT_SPLITS", "MASK", "MASK_ID", "PAD", "PAD_ID", "SOURCES", "SPECIALS", "UNK", "UNK_ID",
           "build_vocabulary", "craft_files", "encode", "make_batch", "read_split", "release_words", "rows_for",
           "split_trees", "token_budget_batches", "train_epochs"]
