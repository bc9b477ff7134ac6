"""CoNLL-U for dependency trees: a writer and a checking reader (no JAX).

Sentences are `tgjax.syntax.heads.Dependencies` (0-based heads, the root
heading itself); in the file heads are 1-based with 0 for the root, as
CoNLL-U has them. Columns written: ID, FORM, LEMMA `_`, UPOS `_`, XPOS (the
POS tag, `_` when unknown), FEATS `_`, HEAD, DEPREL (`root` or `dep`: our
conversions give no labels), DEPS `_`, MISC `_`; each sentence starts with
`# sent_id = N` and `# text = ...`.

The reader takes any CoNLL-U file, and CoNLL-X files too (the same ten
columns: HEAD is the 7th, POSTAG the 5th, CPOSTAG the 4th): comments are
skipped, multiword-token lines (`3-4`) and empty nodes (`5.1`) are skipped and
counted (`ConlluReport`); the tag is XPOS (CoNLL-X: POSTAG), or UPOS (CPOSTAG)
when that is `_`. `tgjax eval dependency --gold` scores against it. Every sentence is
checked to be a tree; a malformed line, an ID out of sequence, a head out of
range, a second root or a cycle raises `ConlluError` (`file:line:column:
reason`), or with `on_error="skip"` drops the sentence and records the error.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from typing import Literal

import numpy as np

from tgjax.syntax.heads import Dependencies
from tgjax.syntax.trees import SourceLocationError, text_lines

__all__ = ["ConlluError", "ConlluReport", "format_sentence", "parse_conllu", "read_conllu", "write_conllu"]

NUM_COLUMNS = 10


class ConlluError(SourceLocationError):
    """A CoNLL-U line that is malformed, or a sentence that is not a tree."""


@dataclasses.dataclass
class ConlluReport:
    """What a read kept and skipped.

    Attributes:
      source: the file name.
      num_sentences: sentences returned.
      multiword_lines: multiword-token lines (`3-4`) skipped.
      empty_nodes: empty-node lines (`5.1`) skipped.
      errors: sentences dropped in skip mode, one error each.
    """

    source: str
    num_sentences: int = 0
    multiword_lines: int = 0
    empty_nodes: int = 0
    errors: list[ConlluError] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.source}: read {self.num_sentences} sentences, skipped {len(self.errors)} bad ones, "
                 f"{self.multiword_lines} multiword-token lines and {self.empty_nodes} empty nodes"]
        lines += [f"  {err}" for err in self.errors[:10]]
        return "\n".join(lines)


def _check_field(text: str, what: str) -> str:
    if not text or "\t" in text or "\n" in text:
        raise ValueError(f"cannot write {what} {text!r} in CoNLL-U: it must be non-empty, without tabs or newlines")
    return text


def format_sentence(deps: Dependencies, sent_id: int | str | None = None) -> str:
    """One sentence in CoNLL-U, ending with the blank line."""
    lines = []
    if sent_id is not None:
        lines.append(f"# sent_id = {sent_id}")
    lines.append("# text = " + " ".join(deps.words))
    for i, (word, tag, head) in enumerate(zip(deps.words, deps.tags, deps.heads)):
        root = int(head) == i
        fields = [str(i + 1), _check_field(word, "word"), "_", "_", _check_field(tag, "tag") if tag else "_", "_",
                  "0" if root else str(int(head) + 1), "root" if root else "dep", "_", "_"]
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n\n"


def write_conllu(path: str | os.PathLike, sentences: Iterable[Dependencies]) -> int:
    """Writes the sentences (numbered from 1; whole or not at all); returns how many."""
    from tgjax.outputs import atomic_write

    count = 0
    with atomic_write(path) as f:
        for count, deps in enumerate(sentences, start=1):
            f.write(format_sentence(deps, count))
    return count


def _column(line: str, field_index: int) -> int:
    """1-based column where tab-separated field `field_index` starts."""
    return sum(len(part) + 1 for part in line.split("\t")[:field_index]) + 1


@dataclasses.dataclass
class _Token:
    line_no: int
    line: str
    fields: list[str]


def _sentence(tokens: list[_Token], source: str) -> Dependencies:
    """Checks one sentence's tokens and builds it (raises ConlluError)."""
    n = len(tokens)
    heads = np.empty(n, dtype=np.int64)
    root_line = None
    for i, tok in enumerate(tokens):
        if tok.fields[0] != str(i + 1):
            raise ConlluError(source, tok.line_no, 1, f"expected token ID {i + 1}, found {tok.fields[0]!r}")
        head_text = tok.fields[6]
        if not head_text.isdigit():
            raise ConlluError(source, tok.line_no, _column(tok.line, 6),
                              f"expected a head (an integer 0..{n}), found {head_text!r}")
        head = int(head_text)
        if head > n:
            raise ConlluError(source, tok.line_no, _column(tok.line, 6),
                              f"head {head} out of range 0..{n} (the sentence has {n} words)")
        if head == 0:
            if root_line is not None:
                raise ConlluError(source, tok.line_no, _column(tok.line, 6),
                                  f"a second root (head 0); the first is on line {root_line}")
            root_line = tok.line_no
            heads[i] = i
        else:
            heads[i] = head - 1
    # Every word must reach the root by following heads.
    state = np.zeros(n, dtype=np.int8)  # 0 unknown, 1 on the current path, 2 reaches the root
    if root_line is not None:
        state[heads == np.arange(n)] = 2
    for start in range(n):
        path, node = [], start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = int(heads[node])
        if state[node] == 1:  # came back onto the path: a cycle
            cycle = path[path.index(node):]
            tok = tokens[cycle[0]]
            what = " -> ".join(str(k + 1) for k in cycle + [cycle[0]])
            raise ConlluError(source, tok.line_no, _column(tok.line, 6),
                              f"cycle through tokens {what}; expected every word to reach the root (head 0)")
        state[path] = 2
    tags = [tok.fields[4] if tok.fields[4] != "_" else (tok.fields[3] if tok.fields[3] != "_" else None)
            for tok in tokens]
    return Dependencies([tok.fields[1] for tok in tokens], tags, heads)


def _parse_lines(
    lines: Iterable[str], source: str, on_error: Literal["raise", "skip"], report: ConlluReport
) -> Iterator[Dependencies]:
    tokens: list[_Token] = []
    bad: ConlluError | None = None

    def finish() -> Iterator[Dependencies]:
        nonlocal tokens, bad
        error = bad
        if error is None and tokens:
            try:
                sentence = _sentence(tokens, source)
            except ConlluError as e:
                error = e
            else:
                report.num_sentences += 1
                yield sentence
        if error is not None:
            if on_error == "raise":
                raise error
            report.errors.append(error)
        tokens, bad = [], None

    for line_no, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            yield from finish()
            continue
        if line.startswith("#") or bad is not None:
            continue
        fields = line.split("\t")
        if len(fields) != NUM_COLUMNS:
            bad = ConlluError(source, line_no, 1, f"expected {NUM_COLUMNS} tab-separated fields, found {len(fields)}")
            continue
        token_id = fields[0]
        if "-" in token_id:
            report.multiword_lines += 1
            continue
        if "." in token_id:
            report.empty_nodes += 1
            continue
        if not token_id.isdigit():
            bad = ConlluError(source, line_no, 1, f"expected a token ID (an integer), found {token_id!r}")
            continue
        tokens.append(_Token(line_no, line, fields))
    yield from finish()


def parse_conllu(text: str, *, source: str = "<string>", on_error: Literal["raise", "skip"] = "raise"
                 ) -> tuple[list[Dependencies], ConlluReport]:
    """Reads CoNLL-U text; returns the sentences and the report."""
    report = ConlluReport(source)
    return list(_parse_lines(text.splitlines(keepends=True), source, on_error, report)), report


def read_conllu(path: str | os.PathLike, *, on_error: Literal["raise", "skip"] = "raise"
                ) -> tuple[list[Dependencies], ConlluReport]:
    """Reads a CoNLL-U file (plain or `.gz`); returns the sentences and the report."""
    source = os.fspath(path)
    report = ConlluReport(source)
    return list(_parse_lines(text_lines(source), source, on_error, report)), report
