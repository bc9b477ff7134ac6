"""Vocabularies for Choe–Charniak action sequences: SentencePiece, and a word dictionary.

A Choe–Charniak (CC) sequence is a list of tokens such as
``(S (NP the blue bird NP) (VP sings VP) S)``: opening non-terminals ``(X``,
closing non-terminals ``X)``, and words. Both vocabularies here

* reserve the ids PAD 0 ``<PAD>``, BOS 1 ``<s>``, EOS 2 ``</s>``, UNK 3
  ``<XXX>`` (the strings of the Transformer Grammars release);
* give every non-terminal exactly one id, and refuse (``ValueError``) a
  non-terminal they were not built with: a parse with an unknown label is a
  data error, not something to paper over with UNK;
* map each id to a token type of `tgjax.syntax.token_types`: opening NT ids
  to OPENING_NT, closing NT ids to CLOSING_NT, word ids and word pieces to
  TERMINAL, UNK to PLACEHOLDER, BOS to BOS, PAD to PAD, and EOS to TERMINAL
  (it is predicted and read like a word, e.g. the ``<eos>`` of Pushdown LMs).

`SentencePieceVocabulary` follows the TG paper: a unigram SentencePiece model
whose non-terminals are user-defined symbols, so words split into pieces and
non-terminals stay whole. It is trained on the words of the corpus only (the
non-terminals are added as symbols, not learnt) and encodes each word on its
own, so a word's first piece carries the ``▁`` word-start mark and a
non-terminal is never glued to a stray ``▁`` piece. With ``byte_fallback``
(the default) every word round-trips, including words and characters never
seen in training (unseen characters become byte pieces); without it a word
with an unseen character is encoded as a single UNK id, like an unknown word
in the dictionary.

`WordDictionary` follows the release's ``build_dictionary``: reserved tokens,
then terminals, then opening NTs, then closing NTs, each a contiguous id range
(so token types are id ranges), with words below a minimum count or beyond a
maximum size mapped to UNK (they decode as ``<XXX>``).

A token is an opening non-terminal iff it starts with ``(`` and is longer than
one character, a closing one iff it ends with ``)`` and is longer than one
character (Penn Treebank words escape brackets as -LRB-/-RRB-).
"""

from __future__ import annotations

import abc
import collections
import io
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from tgjax.syntax import token_types as tt

logger = logging.getLogger(__name__)

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<PAD>", "<s>", "</s>", "<XXX>"
RESERVED_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
_RESERVED_IDS = {token: i for i, token in enumerate(RESERVED_TOKENS)}
_RESERVED_TYPES = (tt.PAD, tt.BOS, tt.TERMINAL, tt.PLACEHOLDER)

TokensLike = str | Sequence[str]

_SPM_FORMAT = "tgjax.sentencepiece/1"
_WORD_FORMAT = "tgjax.word_dictionary/1"
_WORD_START = "\u2581"  # SentencePiece's whitespace mark, "▁"


# ---------------------------------------------------------------------------
# Tokens.


def is_opening_nt(token: str) -> bool:
    return len(token) > 1 and token.startswith("(")


def is_closing_nt(token: str) -> bool:
    return len(token) > 1 and token.endswith(")")


def string_token_type(token: str) -> int:
    """The `token_types` constant of a CC token string (reserved strings included)."""
    if token in _RESERVED_IDS:
        return _RESERVED_TYPES[_RESERVED_IDS[token]]
    if is_opening_nt(token):
        return tt.OPENING_NT
    if is_closing_nt(token):
        return tt.CLOSING_NT
    return tt.TERMINAL


def nt_label(token: str) -> str:
    """``"(NP"`` and ``"NP)"`` -> ``"NP"``."""
    if is_opening_nt(token):
        return token[1:]
    if is_closing_nt(token):
        return token[:-1]
    raise ValueError(f"{token!r} is not a non-terminal")


def as_tokens(tokens: TokensLike, *, where: str = "input") -> list[str]:
    """A CC line (split on whitespace) or a token list, checked: no empty tokens, no whitespace."""
    if isinstance(tokens, str):
        return tokens.split()
    out = list(tokens)
    for i, token in enumerate(out):
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise ValueError(f"{where}: token {i} is {token!r}; expected a non-empty string without whitespace")
    return out


def _scan_corpus(corpus: Iterable[TokensLike]) -> tuple[list[list[str]], set[str], int]:
    """Words of every line, the set of non-terminal labels, and the number of lines."""
    word_lines: list[list[str]] = []
    labels: set[str] = set()
    num_lines = 0
    for line_no, line in enumerate(corpus, start=1):
        num_lines += 1
        words = []
        for token in as_tokens(line, where=f"training line {line_no}"):
            kind = string_token_type(token)
            if kind in (tt.OPENING_NT, tt.CLOSING_NT):
                labels.add(nt_label(token))
            elif token not in _RESERVED_IDS:
                words.append(token)
        word_lines.append(words)
    if num_lines == 0:
        raise ValueError("empty training set: the corpus has no lines")
    if not any(word_lines):
        raise ValueError(f"empty training set: {num_lines} lines but no words (terminals) in them")
    return word_lines, labels, num_lines


def _nt_tokens(labels: Iterable[str]) -> tuple[list[str], list[str]]:
    """Opening and closing NT strings for the labels, in the same (sorted) order."""
    ordered = sorted(labels)
    return [f"({label}" for label in ordered], [f"{label})" for label in ordered]


# ---------------------------------------------------------------------------
# The common interface.


class Vocabulary(abc.ABC):
    """Maps CC token sequences to integer ids and back.

    Ids are int32. ``encode`` takes a CC line (a string, split on whitespace)
    or a list of tokens; ``decode`` returns tokens (words whole again).
    """

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __init__(self, opening_nts: Sequence[str], closing_nts: Sequence[str]):
        self.opening_nts: list[str] = list(opening_nts)
        self.closing_nts: list[str] = list(closing_nts)

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Number of ids; every id is in ``[0, size)``."""

    @property
    @abc.abstractmethod
    def _nt_to_id(self) -> dict[str, int]:
        """Every non-terminal string -> its id."""

    @abc.abstractmethod
    def _encode_word(self, word: str, position: int) -> list[int]:
        """The ids of one word (one or more pieces, or ``[UNK]``)."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """``[n_ids]`` ids -> CC tokens (words reassembled from their pieces)."""

    @abc.abstractmethod
    def _type_table(self) -> np.ndarray:
        """``[size]`` int32: the token type of every id."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Writes the vocabulary so that ``load(path)`` / `load_vocabulary` restores it."""

    @classmethod
    @abc.abstractmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Reads a vocabulary written by `save`."""

    def encode_with_alignment(
        self, tokens: TokensLike, *, add_bos: bool = False, add_eos: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids, and for each id the index of the input token it came from.

        Returns:
          ``(ids, source)``, both ``[n_ids]`` int32; ``source`` is -1 for an
          added BOS/EOS. For words split into pieces ``source`` is the word
          map that `tgjax.syntax.stack_tape.expand_subwords` takes (after
          removing non-terminals).
        Raises:
          ValueError: a non-terminal this vocabulary was not built with, or a
            malformed token.
        """
        token_list = as_tokens(tokens)
        nt_to_id = self._nt_to_id
        ids: list[int] = [self.bos_id] if add_bos else []
        source: list[int] = [-1] if add_bos else []
        for i, token in enumerate(token_list):
            if token in _RESERVED_IDS:
                piece_ids = [_RESERVED_IDS[token]]
            elif is_opening_nt(token) or is_closing_nt(token):
                if token not in nt_to_id:
                    raise ValueError(
                        f"token {i}: unknown non-terminal {token!r}; this vocabulary has "
                        f"{len(self.opening_nts)} labels: {' '.join(self.opening_nts[:20])}"
                        f"{' ...' if len(self.opening_nts) > 20 else ''}"
                    )
                piece_ids = [nt_to_id[token]]
            else:
                piece_ids = self._encode_word(token, i)
            ids.extend(piece_ids)
            source.extend([i] * len(piece_ids))
        if add_eos:
            ids.append(self.eos_id)
            source.append(-1)
        return np.asarray(ids, dtype=np.int32), np.asarray(source, dtype=np.int32)

    def encode(self, tokens: TokensLike, *, add_bos: bool = False, add_eos: bool = False) -> np.ndarray:
        """``[n_ids]`` int32 ids of a CC line or token list (see `encode_with_alignment`)."""
        return self.encode_with_alignment(tokens, add_bos=add_bos, add_eos=add_eos)[0]

    def token_types(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Token types (`tgjax.syntax.token_types`) of ids of any shape; int32, same shape."""
        ids = np.asarray(ids)
        self._check_ids(ids)
        return self._type_table()[ids]

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be integers, got dtype {ids.dtype}")
        bad = (ids < 0) | (ids >= self.size)
        if bad.any():
            raise ValueError(f"id {int(ids[bad].flat[0])} out of range [0, {self.size})")


# ---------------------------------------------------------------------------
# Files: a vocabulary is saved in a run's workdir, which may be a bucket.


def _file(path: str | os.PathLike) -> Any:
    """A path object whose own `open` reads and writes the file: the object given (a `pathlib.Path`, or the
    `etils.epath.Path` of a file in a bucket workdir, `tgjax.workdir.workdir_path`), or for a string a
    `pathlib.Path`, or an `etils.epath.Path` when it is a URL (`gs://...`)."""
    if hasattr(path, "open") and hasattr(path, "exists"):
        return path
    text = os.fspath(path)
    if "://" in text:
        from etils import epath  # only bucket files need it

        return epath.Path(text)
    return Path(text)


def _sidecar(path: str | os.PathLike) -> Any:
    """The `.json` sidecar beside a SentencePiece model file (`vocab.model` -> `vocab.model.json`)."""
    return _file(os.fspath(path) + ".json")


# ---------------------------------------------------------------------------
# SentencePiece.


class SentencePieceVocabulary(Vocabulary):
    """A SentencePiece model with the CC non-terminals as user-defined symbols.

    Build one with `train_sentencepiece`; ``save(path)`` writes the model to
    ``path`` (conventionally ``*.model``) and the non-terminal lists to the
    sidecar ``path + ".json"``.
    """

    def __init__(self, model_proto: bytes, opening_nts: Sequence[str], closing_nts: Sequence[str]):
        super().__init__(opening_nts, closing_nts)
        self._model_proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._model_proto)
        reserved = [self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id()]
        if reserved != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
            raise ValueError(f"SentencePiece model reserves ids {reserved}; expected PAD 0, BOS 1, EOS 2, UNK 3")
        self._nt_ids: dict[str, int] = {}
        for nt in self.opening_nts + self.closing_nts:
            nt_id = self._sp.piece_to_id(nt)
            if nt_id == UNK_ID or self._sp.id_to_piece(nt_id) != nt:
                raise ValueError(f"non-terminal {nt!r} is not a symbol of this SentencePiece model")
            self._nt_ids[nt] = nt_id
        self._id_to_nt = {i: nt for nt, i in self._nt_ids.items()}
        table = np.full(self.size, tt.TERMINAL, dtype=np.int32)
        table[: len(_RESERVED_TYPES)] = _RESERVED_TYPES
        table[[self._nt_ids[nt] for nt in self.opening_nts]] = tt.OPENING_NT
        table[[self._nt_ids[nt] for nt in self.closing_nts]] = tt.CLOSING_NT
        self._types = table
        self._word_starts = np.array(
            [self._sp.id_to_piece(i).startswith(_WORD_START) for i in range(self.size)], dtype=bool
        )
        self._word_cache: dict[str, list[int]] = {}

    @property
    def size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        return self._sp

    @property
    def _nt_to_id(self) -> dict[str, int]:
        return self._nt_ids

    def _type_table(self) -> np.ndarray:
        return self._types

    def _encode_word(self, word: str, position: int) -> list[int]:
        cached = self._word_cache.get(word)
        if cached is not None:
            return cached
        ids = self._sp.encode(word, out_type=int)
        if any(i in self._id_to_nt for i in ids):
            raise ValueError(
                f"token {position}: word {word!r} contains a non-terminal symbol; it would not "
                f"decode as one word (escape brackets, e.g. -LRB-)"
            )
        if UNK_ID in ids:
            # An unseen character without byte fallback: the whole word is unknown.
            ids = [UNK_ID]
        # Decoding splits words at pieces that start with "▁": only the first may.
        elif not ids or not self._word_starts[ids[0]] or self._word_starts[ids[1:]].any():
            raise ValueError(f"token {position}: word {word!r} does not encode as one word (does it contain '▁'?)")
        if len(self._word_cache) > 200_000:
            self._word_cache.clear()
        self._word_cache[word] = ids
        return ids

    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        ids_array = np.asarray(ids).reshape(-1)
        self._check_ids(ids_array)
        tokens: list[str] = []
        word: list[int] = []

        def flush() -> None:
            if word:
                tokens.append(self._sp.decode(word))
                word.clear()

        for i in ids_array.tolist():
            if i < len(RESERVED_TOKENS) or i in self._id_to_nt:
                flush()
                tokens.append(RESERVED_TOKENS[i] if i < len(RESERVED_TOKENS) else self._id_to_nt[i])
            else:
                if self._word_starts[i]:
                    flush()
                word.append(i)
        flush()
        return tokens

    def save(self, path: str | os.PathLike) -> None:
        """Writes the model to `path` and the non-terminal lists to `path.json` (local files, or objects in a
        bucket workdir: `_file`)."""
        with _file(path).open("wb") as f:
            f.write(self._model_proto)
        sidecar = {"format": _SPM_FORMAT, "opening_nts": self.opening_nts, "closing_nts": self.closing_nts}
        with _sidecar(path).open("w", encoding="utf-8") as f:
            json.dump(sidecar, f, ensure_ascii=False, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SentencePieceVocabulary:
        sidecar_path = _sidecar(path)
        if not sidecar_path.exists():
            raise ValueError(f"{os.fspath(path)}: missing sidecar {sidecar_path} (the non-terminal lists)")
        with sidecar_path.open(encoding="utf-8") as f:
            sidecar = json.load(f)
        if sidecar.get("format") != _SPM_FORMAT:
            raise ValueError(f"{sidecar_path}: format {sidecar.get('format')!r}, expected {_SPM_FORMAT!r}")
        with _file(path).open("rb") as f:
            proto = f.read()
        return cls(proto, sidecar["opening_nts"], sidecar["closing_nts"])


def train_sentencepiece(
    corpus: Iterable[TokensLike],
    vocab_size: int,
    *,
    byte_fallback: bool = True,
    model_type: str = "unigram",
    num_threads: int = 4,
) -> SentencePieceVocabulary:
    """Trains a SentencePiece vocabulary in memory on CC lines (no files, no downloads).

    Args:
      corpus: CC lines (strings) or token lists. Non-terminals become
        user-defined symbols (an opening and a closing one for every label
        seen, either side); the words are the training text.
      vocab_size: target size, a soft limit (tiny corpora may give fewer
        pieces); 32K for BLLIP in the TG paper, a few hundred for toy data.
      byte_fallback: add the 256 byte pieces so any word round-trips; needs
        ``vocab_size`` above 256 + the symbols.
      model_type: SentencePiece model type (``"unigram"`` as in the TG paper).
    Raises:
      ValueError: an empty corpus, or a ``vocab_size`` too small for the
        reserved ids, non-terminals, characters (and bytes).
    """
    word_lines, labels, _ = _scan_corpus(corpus)
    opening, closing = _nt_tokens(labels)
    chars = {c for words in word_lines for word in words for c in word}
    minimum = len(RESERVED_TOKENS) + len(opening) + len(closing) + len(chars | {_WORD_START})
    minimum += 256 if byte_fallback else 0
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size {vocab_size} is too small: {len(RESERVED_TOKENS)} reserved ids, "
            f"{len(opening) + len(closing)} non-terminals, {len(chars)} characters"
            f"{' and 256 bytes' if byte_fallback else ''} need at least {minimum}"
        )
    text = [" ".join(words) for words in word_lines if words]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            user_defined_symbols=opening + closing,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            pad_piece=PAD_TOKEN,
            bos_piece=BOS_TOKEN,
            eos_piece=EOS_TOKEN,
            unk_piece=UNK_TOKEN,
            byte_fallback=byte_fallback,
            character_coverage=1.0,
            # Identity normalisation: decode(encode(w)) == w (NFKC would rewrite some characters).
            normalization_rule_name="identity",
            # Long lines are otherwise skipped silently.
            max_sentence_length=max(4192, max(len(line.encode("utf-8")) for line in text) + 1),
            num_threads=num_threads,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise ValueError(f"SentencePiece training failed: {e}") from e
    return SentencePieceVocabulary(model.getvalue(), opening, closing)


# ---------------------------------------------------------------------------
# Word dictionary.


class WordDictionary(Vocabulary):
    """Reserved tokens, terminals, opening NTs, closing NTs: four contiguous id ranges.

    The closing NT of a label sits at the same offset in its range as the
    opening one: ``closing_id = opening_id + num_labels``.
    Build one with `build_word_dictionary`; ``save``/``load`` use a JSON file.
    """

    def __init__(self, terminals: Sequence[str], labels: Sequence[str]):
        opening, closing = _nt_tokens(labels)
        if list(labels) != sorted(labels):
            raise ValueError("labels must be sorted")
        super().__init__(opening, closing)
        self.terminals: list[str] = list(terminals)
        for i, word in enumerate(self.terminals):
            if string_token_type(word) != tt.TERMINAL or word in _RESERVED_IDS:
                raise ValueError(f"terminal {i} ({word!r}) is not a word")
        self._tokens = list(RESERVED_TOKENS) + self.terminals + opening + closing
        self._ids = {token: i for i, token in enumerate(self._tokens)}
        if len(self._ids) != len(self._tokens):
            raise ValueError("duplicate tokens in the word dictionary")
        start = len(RESERVED_TOKENS)
        self.terminal_range = (start, start + len(self.terminals))
        self.opening_range = (self.terminal_range[1], self.terminal_range[1] + len(opening))
        self.closing_range = (self.opening_range[1], self.opening_range[1] + len(closing))
        self._nt_ids = {nt: self._ids[nt] for nt in opening + closing}
        table = np.empty(len(self._tokens), dtype=np.int32)
        table[:start] = _RESERVED_TYPES
        table[slice(*self.terminal_range)] = tt.TERMINAL
        table[slice(*self.opening_range)] = tt.OPENING_NT
        table[slice(*self.closing_range)] = tt.CLOSING_NT
        self._types = table

    @property
    def size(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[str]:
        """Every token string, indexed by id."""
        return list(self._tokens)

    @property
    def _nt_to_id(self) -> dict[str, int]:
        return self._nt_ids

    def _type_table(self) -> np.ndarray:
        return self._types

    def _encode_word(self, word: str, position: int) -> list[int]:
        # Reserved strings and non-terminals never get here (see encode_with_alignment).
        return [self._ids.get(word, UNK_ID)]

    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        ids_array = np.asarray(ids).reshape(-1)
        self._check_ids(ids_array)
        return [self._tokens[i] for i in ids_array.tolist()]

    def save(self, path: str | os.PathLike) -> None:
        labels = [nt_label(nt) for nt in self.opening_nts]
        data = {"format": _WORD_FORMAT, "reserved": list(RESERVED_TOKENS), "terminals": self.terminals,
                "labels": labels}
        with _file(path).open("w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=0)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordDictionary:
        with _file(path).open(encoding="utf-8") as f:
            path = os.fspath(path)  # for the messages
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not a word dictionary (JSON error at line {e.lineno}: {e.msg})") from e
        if not isinstance(data, dict) or data.get("format") != _WORD_FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise ValueError(f"{path}: format {found!r}, expected {_WORD_FORMAT!r}")
        if data["reserved"] != list(RESERVED_TOKENS):
            raise ValueError(f"{path}: reserved tokens {data['reserved']}, expected {list(RESERVED_TOKENS)}")
        return cls(data["terminals"], data["labels"])


def build_word_dictionary(
    corpus: Iterable[TokensLike], *, min_count: int = 1, max_size: int | None = None
) -> WordDictionary:
    """A word dictionary from CC lines (strings) or token lists.

    Terminals are ordered by decreasing count, ties alphabetically. Words
    seen fewer than ``min_count`` times, and the least frequent ones beyond
    ``max_size`` ids in all (reserved + terminals + non-terminals), are left
    out and encode as UNK; how many is logged.

    Raises:
      ValueError: an empty corpus, or ``max_size`` smaller than the reserved
        ids plus the non-terminals.
    """
    word_lines, labels, num_lines = _scan_corpus(corpus)
    counts = collections.Counter(word for words in word_lines for word in words)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept = [word for word, count in ranked if count >= min_count]
    fixed = len(RESERVED_TOKENS) + 2 * len(labels)
    if max_size is not None:
        if max_size < fixed:
            raise ValueError(
                f"max_size {max_size} is too small: {len(RESERVED_TOKENS)} reserved ids and "
                f"{2 * len(labels)} non-terminals need {fixed}"
            )
        kept = kept[: max_size - fixed]
    dropped = len(counts) - len(kept)
    if dropped:
        kept_set = set(kept)
        dropped_tokens = sum(count for word, count in counts.items() if word not in kept_set)
        logger.info(
            "word dictionary: %d of %d word types (%d of %d tokens) map to %s",
            dropped, len(counts), dropped_tokens, sum(counts.values()), UNK_TOKEN,
        )
    return WordDictionary(kept, sorted(labels))


def load_vocabulary(path: str | os.PathLike) -> Vocabulary:
    """Loads a vocabulary saved by either class: a word-dictionary JSON, or a SentencePiece model + sidecar
    (local files, or objects in a bucket workdir: `_file`)."""
    with _file(path).open("rb") as f:
        head = f.read(1)
    if head == b"{":
        return WordDictionary.load(path)
    return SentencePieceVocabulary.load(path)
