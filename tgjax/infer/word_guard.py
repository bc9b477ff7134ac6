"""Which SentencePiece pieces a sampler may add so that every sampled word can stand in a tree.

A word of a tree must be non-empty, hold no whitespace and no bracket, and not
be a reserved token (`<s>`, `<pad>`), or the sample's tree does not read back
(`tgjax.syntax.trees`, `tgjax.syntax.actions`). Pieces sampled freely break
this: byte pieces (`byte_fallback`) decode to any character, control
whitespace such as `\\x0b` included, and a bare `▁` decodes to nothing. The
choice made here is to forbid, not to escape, so a sample stays exactly the
text of the ids the model produced:

* a piece whose own text holds whitespace or a bracket is never sampled (for a
  byte piece below 0x80: its character);
* a byte piece that would complete a multi-byte whitespace character (U+00A0,
  U+2000…U+200A, U+3000, …) after the byte pieces just before it is never
  sampled (other bytes decode as usual, an incomplete sequence as U+FFFD);
* a piece that leaves the word empty or reserved (a bare `▁`; pieces spelling
  `<s>`) is sampled only where one more piece still fits, and the word must
  then go on.

The restricted distribution is renormalised like every other restriction of
the sampler (`tgjax.infer.sampling`); log p stays the model's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from tgjax.syntax import actions as cc
from tgjax.syntax import token_types as tt

_BREAKS_A_WORD = re.compile(r"[\s()]")  # what `tgjax.syntax.trees` cannot write inside a word
_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
# Words that read back as something other than a word (BOS, PAD).
RESERVED_WORDS = tuple(t for t in (cc.BOS_TOKEN, cc.PAD_TOKEN) if cc.token_type(t) not in (tt.TERMINAL, tt.PLACEHOLDER))


@functools.cache
def _whitespace_completions() -> dict[bytes, frozenset[int]]:
    """UTF-8 prefix (a lead byte and its continuation bytes so far) -> the last bytes that make it whitespace."""
    table: dict[bytes, set[int]] = {}
    for code in range(0x80, 0x110000):
        if 0xD800 <= code < 0xE000 or not _BREAKS_A_WORD.match(chr(code)):
            continue
        encoded = chr(code).encode("utf-8")
        table.setdefault(encoded[:-1], set()).add(encoded[-1])
    return {prefix: frozenset(last) for prefix, last in table.items()}


def is_writable_word(text: str) -> bool:
    """Whether `text` reads back as one word of a tree."""
    return bool(text) and not _BREAKS_A_WORD.search(text) and text not in RESERVED_WORDS


class WordGuard:
    """The SentencePiece facts the sampler needs, per piece id (see the module docstring).

    Args:
      processor: the vocabulary's `sentencepiece.SentencePieceProcessor`.
      word_start, continuation: `[V]` bool, `ActionSpace.word_pieces`.
      unk_id: the UNK id (a word start that decodes as a reserved token of its own).
    """

    def __init__(self, processor, word_start: np.ndarray, continuation: np.ndarray, unk_id: int):
        self.processor, self.unk_id = processor, unk_id
        self.word_start, self.continuation = word_start, continuation
        size = len(word_start)
        self.byte_of = np.full(size, -1, np.int64)  # the byte of a byte piece, -1 for other pieces
        self.text_of: list[str | None] = [None] * size  # a piece's text in a word (None: a byte >= 0x80)
        for i in np.flatnonzero(word_start | continuation).tolist():
            piece = processor.id_to_piece(i)
            byte = _BYTE_PIECE.fullmatch(piece)
            if byte is not None:
                self.byte_of[i] = int(byte.group(1), 16)
                self.text_of[i] = chr(self.byte_of[i]) if self.byte_of[i] < 0x80 else None
            else:
                self.text_of[i] = piece.removeprefix("\u2581") if word_start[i] else piece
        self.text_of[unk_id] = None  # UNK is a word of its own, not text
        breaking = np.array([t is not None and bool(_BREAKS_A_WORD.search(t)) for t in self.text_of])
        self.never = breaking  # [V] bool: pieces never sampled
        # Word starts after which the word is empty or reserved: they need room for one more piece.
        self.start_needs_more = np.array([bool(word_start[i]) and i != unk_id and t is not None
                                          and not is_writable_word(t) for i, t in enumerate(self.text_of)])
        self._ids_by_text: dict[str, list[int]] = {}
        for i, text in enumerate(self.text_of):
            if text is not None and continuation[i]:
                self._ids_by_text.setdefault(text, []).append(i)

    def current_word(self, ids: Sequence[int]) -> list[int]:
        """The trailing pieces of the word being written (after UNK: the pieces after it, a word of their own)."""
        start = len(ids)
        while start > 0 and not self.word_start[ids[start - 1]]:
            start -= 1
        if start == 0:
            return list(ids)
        return list(ids[start:]) if ids[start - 1] == self.unk_id else list(ids[start - 1:])

    def after(self, ids: Sequence[int], can_grow: bool) -> tuple[bool, np.ndarray]:
        """For a state whose last action is a word: whether the word must go on, and `[V]` bool continuations
        it may take (`can_grow`: whether one more piece after the next one still fits)."""
        word = self.current_word(ids)
        allowed = self.continuation & ~self.never
        if not word:  # right after UNK: "<XXX>" is a word already
            return False, allowed
        text = self.processor.decode(word)
        must_continue = not is_writable_word(text)
        trailing = bytearray()  # the byte pieces at the word's end, for a character they have begun
        for i in reversed(word):
            if self.byte_of[i] < 0:
                break
            trailing.insert(0, int(self.byte_of[i]))
        table = _whitespace_completions()
        for k in (3, 2, 1):
            for byte in table.get(bytes(trailing[-k:]), ()) if len(trailing) >= k else ():
                allowed &= self.byte_of != byte
        if not can_grow:  # a piece that would spell a reserved word needs one more piece after it
            for reserved in RESERVED_WORDS:
                if reserved.startswith(text) and reserved != text:
                    allowed[self._ids_by_text.get(reserved[len(text):], [])] = False
        return must_continue, allowed
