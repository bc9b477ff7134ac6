"""Reading the commands' small text inputs (JSON, JSON lines, word lists) so that every error names the file.

Bytes that are not UTF-8 are located as the treebank readers locate them
(`file:line:column: expected utf-8 text, found the byte 0x..`, from
`tgjax.syntax.trees.text_lines`, which also decompresses `.gz` and drops a
byte-order mark), and invalid JSON as `file:line:column: invalid JSON (...)`.
Every error is a `ValueError` (a `SourceLocationError` where the place is
known), which the commands print as one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from tgjax.syntax.trees import SourceLocationError, text_lines


def read_text(path: str | os.PathLike) -> str:
    """The whole text of a UTF-8 file (`.gz` decompressed); bad bytes raise an error naming file:line:column."""
    return "".join(text_lines(path))


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, without their line ends (as `str.splitlines`)."""
    return read_text(path).splitlines()


def read_json(path: str | os.PathLike) -> Any:
    """One JSON value from a file; bad bytes or invalid JSON raise an error naming file:line:column."""
    source = os.fspath(path)
    text = read_text(source)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise SourceLocationError(source, err.lineno, err.colno, f"invalid JSON ({err.msg})") from None


def json_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of every non-blank line of a JSON-lines file, for the caller to parse and
    to name as `file:line` in its errors; bad bytes raise an error naming file:line:column."""
    for number, line in enumerate(text_lines(path), start=1):
        if line.strip():
            yield number, line


def parse_json_line(line: str, source: str, number: int) -> Any:
    """One line of a JSON-lines file; invalid JSON raises an error naming file:line:column."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise SourceLocationError(source, number, err.colno, f"invalid JSON ({err.msg})") from None


def decode_line(raw: bytes, source: str, number: int) -> str:
    """One line's bytes as UTF-8 text; bad bytes raise an error naming file:line:column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        column = len(raw[: err.start].decode("utf-8", errors="replace")) + 1
        raise SourceLocationError(source, number, column,
                                  f"expected utf-8 text, found the byte 0x{raw[err.start]:02x}") from None


__all__ = ["decode_line", "json_lines", "parse_json_line", "read_json", "read_lines", "read_text"]
