"""Phrase-structure trees: the PTB bracket reader and writer, normalisation, binarisation.

A `Tree` is a label and a list of children; a child is a `Tree` or a word
(`str`). A POS pre-terminal is a `Tree` whose only child is a word,
`Tree("DT", ["the"])`.

Reading
-------
`parse` reads exactly one tree from a string, `parse_trees` any number, and
`read_treebank` a file (plain or `.gz`); `iter_trees` (text or lines) and
`iter_treebank` (a file, line by line) stream them. They accept one tree per
line (Tale of Two Cities, BLLIP, CRAFT) as well as multi-line `.mrg`-style
trees: a tree runs until its brackets balance. The PTB's unlabelled wrapper `( (S ...) )` is always
unwrapped. Malformed input raises `TreeSyntaxError`, whose message reads
`file:line:column: expected ..., found ...`; with `on_error="skip"` the bad
trees are left out and counted, with their locations, in a `ReadReport`.

By default every tree read is passed through `normalise`: `-NONE-` empty
elements are removed (and so are constituents left with no words), and
function tags and co-indices are stripped (`NP-SBJ-1` -> `NP`,
`PP-LOC=2` -> `PP`; labels that start with '-', such as `-LRB-`, `-RRB-`
and `-NONE-`, are kept as they are).

Line starts. Continuation lines of multi-line trees are indented in PTB
files, so by default a '(' in column 1 is taken to start a new tree: if the
previous tree is still open there, it is reported as unclosed at that point
(rather than at the end of the file), and skip mode carries on with the new
tree. Pass `tree_starts_at_line_start=False` for files whose continuation
lines begin in column 1.

Transforms
----------
All transforms return new trees and never modify their input. They walk the
tree with an explicit stack (as does the reader), so arbitrarily deep trees
do not hit Python's recursion limit.

- `binarise(tree, "right" | "left")` factors every node with more than two
  children into a chain of intermediate nodes labelled `@X` (for a node
  labelled `X`), e.g. right: `(NP a b c d)` -> `(NP a (@NP b (@NP c d)))`,
  left: `(NP (@NP (@NP a b) c) d)`. `unbinarise` splices every `@`-labelled
  node into its parent, which inverts both directions exactly.
- `collapse_unary` / `expand_unary`: `(S (VP (VB go)))` <-> `(S+VP (VB go))`.
- `strip_preterminals`: `(NP (DT the) (NN dog))` -> `(NP the dog)`.
- `words`, `pos_tags`, `tagged_words`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, TypedDict, Union, Unpack, overload

Child = Union["Tree", str]

# Labels and words must be non-empty and free of whitespace and brackets to be
# written (and read back) in bracketed form.
_UNWRITABLE = re.compile(r"[\s()]")


def _check_writable(token: str, what: str) -> None:
    if not token or _UNWRITABLE.search(token):
        raise ValueError(
            f"cannot write {what} {token!r} in bracketed form: labels and words must be "
            "non-empty and contain no whitespace, '(' or ')'"
        )


@dataclasses.dataclass(slots=True)
class Tree:
    """A labelled node; `children` holds sub-trees and words (`str`), in order."""

    label: str
    children: list[Child] = dataclasses.field(default_factory=list)

    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[str]:
        """The words, left to right."""
        words: list[str] = []
        stack: list[Child] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                words.append(node)
            else:
                stack.extend(reversed(node.children))
        return words

    def __eq__(self, other: object) -> bool:
        # Iterative, so that comparing very deep trees cannot overflow the stack.
        if not isinstance(other, Tree):
            return NotImplemented
        pairs: list[tuple[Tree, Tree]] = [(self, other)]
        while pairs:
            a, b = pairs.pop()
            if a.label != b.label or len(a.children) != len(b.children):
                return False
            for x, y in zip(a.children, b.children):
                x_is_word, y_is_word = isinstance(x, str), isinstance(y, str)
                if x_is_word or y_is_word:
                    if not (x_is_word and y_is_word and x == y):
                        return False
                else:
                    pairs.append((x, y))
        return True

    def to_string(self) -> str:
        """PTB bracketed form on one line, e.g. `(S (NP (DT the) (NN dog)) (VP (VBZ barks)))`.

        Raises ValueError for a label or word that cannot be read back (empty,
        or containing whitespace or brackets), so that `parse(t.to_string()) == t`.
        """
        parts: list[str] = []
        # Items are trees to open, words, or the ")" that closes a tree.
        stack: list[Child | None] = [self]
        while stack:
            item = stack.pop()
            if item is None:
                parts.append(")")
            elif isinstance(item, str):
                _check_writable(item, "word")
                parts.append(" " + item)
            else:
                _check_writable(item.label, "label")
                parts.append(("(" if not parts else " (") + item.label)
                stack.append(None)
                stack.extend(reversed(item.children))
        return "".join(parts)

    def to_pretty_string(self, indent: int = 2) -> str:
        """Multi-line bracketed form, one constituent per line, indented by depth.

        A node whose children are all words or pre-terminals stays on one line:

            (S
              (NP (DT the) (NN dog))
              (VP (VBZ barks)))

        The continuation lines are indented, so the reader's default
        `tree_starts_at_line_start=True` reads it back (for any `indent >= 1`).
        """
        lines: list[str] = []
        # Items are (child, depth) to write, or None for the ")" closing the last line.
        stack: list[tuple[Child, int] | None] = [(self, 0)]
        while stack:
            item = stack.pop()
            if item is None:
                lines[-1] += ")"
                continue
            node, depth = item
            pad = " " * (indent * depth)
            if isinstance(node, str):
                _check_writable(node, "word")
                lines.append(pad + node)
            elif all(isinstance(c, str) or c.is_preterminal() for c in node.children):
                lines.append(pad + node.to_string())
            else:
                _check_writable(node.label, "label")
                lines.append(f"{pad}({node.label}")
                stack.append(None)
                stack.extend((child, depth + 1) for child in reversed(node.children))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_string()


# ---------------------------------------------------------------------------
# Errors and the report of skipped trees
# ---------------------------------------------------------------------------


class SourceLocationError(ValueError):
    """Bad input at a place in a file. `str(err)` is `source:line:column: reason`.

    The base of every reader's error (trees here; ListOps and logic lines in
    `tgjax.data`), so a command reports any of them as one line.

    Attributes:
      source: the file name, or `<string>`.
      line, column: 1-based position of the offending token (columns count characters).
      reason: what was expected and what was found.
    """

    def __init__(self, source: str, line: int, column: int, reason: str):
        super().__init__(f"{source}:{line}:{column}: {reason}")
        self.source = source
        self.line = line
        self.column = column
        self.reason = reason

    def __reduce__(self):  # keeps the error picklable across worker processes
        return (type(self), (self.source, self.line, self.column, self.reason))


class TreeSyntaxError(SourceLocationError):
    """Malformed bracketed input (or a tree file that is not the expected encoding)."""


class SentenceTooLong(SourceLocationError):
    """A tree with more words than the reader's `max_words`, found while reading it (before it is built)."""


def too_long_reason(max_words: int) -> str:
    """What a reader says of a sentence over its length limit (the same words for trees and other records)."""
    return (f"expected a sentence of at most {max_words:,} words (the command's length limit: --max-words, or "
            f"data.max_words in training, raises it), found a longer one")


@dataclasses.dataclass
class ReadReport:
    """What a read in skip mode kept and left out.

    Attributes:
      source: the file name, or `<string>`.
      num_trees: trees returned.
      errors: one `TreeSyntaxError` per skipped tree (or run of stray text), in file order.
      too_long: one `SentenceTooLong` per tree skipped as over `max_words` (`on_too_long="skip"`).
      noun: what the summary calls the records read ("trees"; readers of other records reuse the report:
        "proposals", "pairs", with their own located errors).
    """

    source: str
    num_trees: int = 0
    errors: list[TreeSyntaxError] = dataclasses.field(default_factory=list)
    too_long: list[SentenceTooLong] = dataclasses.field(default_factory=list)
    noun: str = "trees"

    @property
    def num_skipped(self) -> int:
        return len(self.errors)

    @property
    def num_too_long(self) -> int:
        return len(self.too_long)

    def summary(self, max_errors: int = 10) -> str:
        """`source: read N trees, skipped K` and then the first `max_errors` messages."""
        if self.num_trees == 0 and not self.errors:
            return f"{self.source}: read 0 {self.noun} (the input is empty)"
        too_long = f" (and {self.num_too_long} over the length limit)" if self.too_long else ""
        lines = [f"{self.source}: read {self.num_trees} {self.noun}, skipped {self.num_skipped}{too_long}"]
        for skipped in (self.errors, self.too_long):
            lines += [f"  {err}" for err in skipped[:max_errors]]
            if len(skipped) > max_errors:
                lines.append(f"  ... and {len(skipped) - max_errors} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


# ---------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------

OnError = Literal["raise", "skip"]
ROOT_LABELS = ("ROOT", "TOP")

# Tokens of one line: '(' with the label written right after it (an empty
# label when blank or '(' follows: the PTB's unlabelled wrapper), ')', or a
# word. A label never follows its '(' after a blank: `( S ...)` is an
# unlabelled bracket holding the word `S`, which is an error. `_LINE_TOKEN`
# gives the same tokens with their columns, and is only run to locate an error.
_LINE_TOKEN = re.compile(r"\([^\s()]*|\)|[^\s()]+")


def _line_tokens(line: str) -> list[str]:
    # str methods are ~3x faster than a tokenizing regex over the same text.
    return line.replace("(", " (").replace(")", " ) ").split()


def _error(source: str, line_index: int, line: str, token_index: int, reason: str) -> TreeSyntaxError:
    """The error at token `token_index` of line `line_index` (0-based), whose text is `line`."""
    starts = [m.start() for m in _LINE_TOKEN.finditer(line)]
    column = starts[token_index] + 1 if token_index < len(starts) else len(line.rstrip()) + 1
    return TreeSyntaxError(source, line_index + 1, column, reason)


def _where(line_index: int, line: str, token_index: int) -> str:
    err = _error("", line_index, line, token_index, "")
    return f"{err.line}:{err.column}"


def _opened(label: str) -> str:
    return f"'({label}'" if label else "'('"


class ReadOptions(TypedDict, total=False):
    """How every reader builds its trees; each key optional, with the defaults of `iter_trees`, which documents
    them. The readers take these as keywords (`read_treebank(path, max_words=100, unwrap_root=True)`)."""

    normalise: bool
    strip_function_tags: bool
    remove_empty: bool
    unwrap_root: bool
    tree_starts_at_line_start: bool
    max_words: int | None


@dataclasses.dataclass(frozen=True)
class _ReadOptions:
    normalise: bool = True
    strip_function_tags: bool = True
    remove_empty: bool = True
    unwrap_root: bool = False
    tree_starts_at_line_start: bool = True
    first_line: int = 1  # the number of the text's first line in its file, for messages
    max_words: int | None = None  # longer trees are refused while read (`SentenceTooLong`), never built


def _read_options(options: dict, first_line: int = 1) -> _ReadOptions:
    """The reader's options from a caller's keywords; an unknown keyword is a TypeError naming the known ones."""
    unknown = sorted(set(options) - set(ReadOptions.__annotations__))
    if unknown:
        raise TypeError(f"unknown tree-reading option(s) {', '.join(map(repr, unknown))}; "
                        f"expected some of {', '.join(ReadOptions.__annotations__)}")
    return _ReadOptions(first_line=first_line, **options)


_NOTHING_LEFT = "expected a tree with words, found none left after removing empty elements (-NONE-)"

# Where a tree starts: (0-based line index, line text, token index in the line).
_Start = tuple[int, str, int]


def _read_lines(
    lines: Iterable[str],
    source: str,
    fail: Callable[[TreeSyntaxError], None],
    options: _ReadOptions,
) -> Iterator[tuple[Tree, _Start]]:
    """Yields (tree, where it starts) for each good top-level tree of `lines`.

    The parser proper: one pass, an explicit stack, no recursion. Normalisation
    is fused in (the same rules as `normalise`, applied as each constituent
    closes) so that the reader builds each tree once.

    Each error is passed to `fail` (which raises, or records and returns); the
    reader then resynchronises: after an error inside a tree it skips to the
    ')' that closes that tree, or to the next line that starts with '('
    (when `tree_starts_at_line_start`), whichever comes first; after stray
    text at the top level it skips to the next '('.
    """
    strip_tags = options.normalise and options.strip_function_tags
    remove_empty = options.normalise and options.remove_empty
    line_starts_tree = options.tree_starts_at_line_start
    label_of: dict[str, str] = {}  # opening token -> label (function tags stripped)
    # Open constituents, outermost first: (label, children, line index, line, token index).
    stack: list[tuple[str, list[Child], int, str, int]] = []
    skip_depth = 0  # > 0 while skipping the rest of a bad tree: its bracket depth
    in_stray_text = False  # one error per run of stray tokens, not one per token
    max_words = options.max_words
    words_in_tree = 0  # words of the open top-level tree, counted as read: a huge tree is refused, not built
    last_line_index, last_line = -1, ""  # the last line with a token, for end-of-file errors

    for line_index, line in enumerate(lines, start=options.first_line - 1):
        tokens = _line_tokens(line)
        if not tokens:
            continue
        last_line_index, last_line = line_index, line
        if line_starts_tree and (stack or skip_depth) and line[0] == "(":
            if stack:
                open_label, _, open_line_index, open_line, open_token = stack[-1]
                fail(
                    _error(
                        source,
                        line_index,
                        line,
                        0,
                        f"expected ')' to close {_opened(open_label)} opened at "
                        f"{_where(open_line_index, open_line, open_token)}, found '(' starting a new "
                        "tree at the beginning of a line (if continuation lines in this input are "
                        "not indented, read it with tree_starts_at_line_start=False)",
                    )
                )
            stack.clear()
            skip_depth = 0
        for token_index, token in enumerate(tokens):
            first = token[0]
            if first == "(":
                if skip_depth:
                    skip_depth += 1
                    continue
                label = label_of.get(token)
                if label is None:
                    label = strip_function_tag(token[1:]) if strip_tags else token[1:]
                    label_of[token] = label
                if not label and stack:  # only the top-level wrapper may be unlabelled
                    following = tokens[token_index + 1] if token_index + 1 < len(tokens) else None
                    fail(
                        _error(
                            source,
                            line_index,
                            line,
                            token_index,
                            "found an empty tree '()'"
                            if following == ")"
                            else f"expected a label after '(', found {following or 'end of line'!r}",
                        )
                    )
                    skip_depth = len(stack) + 1
                    stack.clear()
                    continue
                in_stray_text = False
                if not stack:
                    words_in_tree = 0
                stack.append((label, [], line_index, line, token_index))
            elif first == ")":
                if skip_depth:
                    skip_depth -= 1
                    continue
                if not stack:
                    if not in_stray_text:
                        fail(_error(source, line_index, line, token_index, "expected '(' to start a tree, found ')'"))
                        in_stray_text = True
                    continue
                label, children, open_line_index, open_line, open_token = stack.pop()
                node: Tree | None
                if label:
                    if remove_empty and (not children or label == EMPTY_ELEMENT):
                        node = None
                    else:
                        node = Tree(label, children)
                elif len(children) == 1 and isinstance(children[0], Tree):
                    node = children[0]  # the PTB's unlabelled wrapper `( (S ...) )`
                else:
                    literally_empty = open_line_index == line_index and open_token + 1 == token_index
                    if literally_empty:
                        reason = "found an empty tree '()'"
                    elif not children:
                        reason = _NOTHING_LEFT
                    elif any(isinstance(c, str) for c in children):
                        word = next(c for c in children if isinstance(c, str))
                        reason = f"expected a label after '(', found {word!r}"
                    else:
                        reason = f"expected one tree inside the unlabelled '( ... )' wrapper, found {len(children)}"
                    fail(_error(source, open_line_index, open_line, open_token, reason))
                    continue
                if stack:
                    if node is not None:
                        stack[-1][1].append(node)
                elif node is None:
                    fail(
                        _error(
                            source,
                            open_line_index,
                            open_line,
                            open_token,
                            _NOTHING_LEFT,
                        )
                    )
                else:
                    if options.normalise and options.unwrap_root:
                        node = _unwrap_root(node)
                    yield node, (open_line_index, open_line, open_token)
            else:  # a word
                if skip_depth:
                    continue
                if stack:
                    words_in_tree += 1
                    if max_words is not None and words_in_tree > max_words:
                        _, _, open_line_index, open_line, open_token = stack[0]
                        start = _error(source, open_line_index, open_line, open_token, "")
                        fail(SentenceTooLong(source, start.line, start.column, too_long_reason(max_words)))
                        skip_depth = len(stack)  # skip to the ')' that closes the tree
                        stack.clear()
                        continue
                    stack[-1][1].append(token)
                elif not in_stray_text:
                    reason = f"expected '(' to start a tree, found {token!r}"
                    fail(_error(source, line_index, line, token_index, reason))
                    in_stray_text = True
    if stack:
        open_label, _, open_line_index, open_line, open_token = stack[-1]
        fail(
            _error(
                source,
                last_line_index,
                last_line,
                len(_line_tokens(last_line)),  # just past the last token
                f"expected ')' to close {_opened(open_label)} opened at "
                f"{_where(open_line_index, open_line, open_token)}, found end of file",
            )
        )


def _read(
    lines: Iterable[str],
    source: str,
    on_error: OnError,
    report: ReadReport | None,
    options: _ReadOptions,
    on_too_long: OnError = "raise",
) -> Iterator[tuple[Tree, _Start]]:
    """`_read_lines` with the error policies applied (malformed trees: `on_error`; trees over
    `options.max_words`: `on_too_long`) and the report kept."""
    for name, policy in (("on_error", on_error), ("on_too_long", on_too_long)):
        if policy not in ("raise", "skip"):
            raise ValueError(f"{name} must be 'raise' or 'skip', got {policy!r}")
        if policy == "skip" and report is None:
            raise ValueError(f"{name}='skip' needs a ReadReport to record the skipped trees in")

    def fail(err: TreeSyntaxError) -> None:
        too_long = isinstance(err, SentenceTooLong)
        if (on_too_long if too_long else on_error) == "raise":
            raise err
        (report.too_long if too_long else report.errors).append(err)

    for tree, start in _read_lines(lines, source, fail, options):
        if report is not None:
            report.num_trees += 1
        yield tree, start


def iter_trees(
    text: str | Iterable[str],
    *,
    source: str = "<string>",
    on_error: OnError = "raise",
    report: ReadReport | None = None,
    on_too_long: OnError = "raise",
    **options: Unpack[ReadOptions],
) -> Iterator[Tree]:
    """Yields the trees of a bracketed text one by one (the streaming core of the reader).

    Args:
      text: a string, or an iterable of lines (e.g. an open file), holding
        zero or more bracketed trees in any layout (one per line, multi-line).
      source: name used in error messages.
      on_error: "raise" raises `TreeSyntaxError` at the first malformed tree;
        "skip" leaves bad trees out, recording each error in `report`.
      report: counts the trees yielded and, in skip mode, records the errors;
        required when `on_error="skip"`.
      on_too_long: what a tree over `max_words` meets: "raise" or "skip", as
        `on_error`, recorded in `report.too_long`.
      **options (`ReadOptions`, the same for every reader):
        normalise: apply the rules of `normalise` (with the three options
          below) to every tree (default True).
        strip_function_tags, remove_empty, unwrap_root: see `normalise`
          (defaults True, True, False).
        tree_starts_at_line_start: a '(' in column 1 starts a new tree (see the
          module docstring; default True).
        max_words: a tree with more words is refused while it is read, before
          it is built (`SentenceTooLong`, at the tree's start), or with
          `on_too_long="skip"` left out (default None: no limit).
    Yields:
      `Tree`s in input order. Empty input yields nothing (no error here;
      `parse_trees` and `read_treebank` decide what empty input means).
    """
    read_options = _read_options(options)  # here, not in the generator: a misspelt option fails at the call
    lines = text.split("\n") if isinstance(text, str) else text
    return (tree for tree, _ in _read(lines, source, on_error, report, read_options, on_too_long))


def parse(
    text: str,
    *,
    source: str = "<string>",
    first_line: int = 1,
    **options: Unpack[ReadOptions],
) -> Tree:
    """Reads exactly one bracketed tree, e.g. `parse("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))")`.

    Options as in `iter_trees`; `first_line` numbers the text's lines in
    messages (a line read from a file: its line number). Raises
    `TreeSyntaxError` for malformed input, for empty input, and for more than
    one tree.
    """
    lines = text.split("\n")
    trees = _read(lines, source, "raise", None, _read_options(options, first_line))
    first = next(trees, None)
    if first is None:
        raise TreeSyntaxError(source, first_line, 1, "expected a tree, found an empty input")
    second = next(trees, None)
    if second is not None:
        raise _error(source, *second[1], "expected exactly one tree, found a second one")
    return first[0]


@overload
def parse_trees(text: str, *, on_error: Literal["raise"] = ..., **options) -> list[Tree]: ...
@overload
def parse_trees(text: str, *, on_error: Literal["skip"], **options) -> tuple[list[Tree], ReadReport]: ...


def parse_trees(
    text: str | Iterable[str],
    *,
    source: str = "<string>",
    on_error: OnError = "raise",
    on_too_long: OnError = "raise",
    **options: Unpack[ReadOptions],
):
    """Reads all trees of a bracketed text (a string or an iterable of lines); options as `iter_trees`.

    Returns:
      with `on_error="raise"` (default): `list[Tree]`; raises `TreeSyntaxError`
        on the first malformed tree, and on empty input ("found an empty file"
        when `source` names a file).
      with `on_error="skip"`: `(trees, report)`, where `report.errors` lists
        every skipped tree with its location; empty input gives `([], report)`
        with `report.num_trees == 0` and no errors.
      with `on_too_long="skip"` too: `(trees, report)`, the trees over
        `max_words` in `report.too_long` (an empty input still raises when
        `on_error="raise"`).
    """
    report = ReadReport(source)
    with _gc_paused():
        trees = list(iter_trees(text, source=source, on_error=on_error, report=report, on_too_long=on_too_long,
                                **options))
    if on_error == "raise" and not trees and not report.too_long:  # no trees, no error: no tokens at all
        what = "an empty input" if source == "<string>" else "an empty file"
        raise TreeSyntaxError(source, 1, 1, f"expected at least one tree, found {what}")
    return (trees, report) if "skip" in (on_error, on_too_long) else trees


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector while a treebank is built.

    Building many small containers triggers collections that rescan every tree
    built so far; trees hold no reference cycles, and pausing the collector
    makes reading about twice as fast. Reference counting still frees memory.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _open_text(path: str, mode: str, encoding: str):
    opener = gzip.open if path.endswith(".gz") else open
    return opener(path, mode, encoding=encoding)


def _strip_bom(lines: Iterable[str]) -> Iterator[str]:
    for index, line in enumerate(lines):
        yield line[1:] if index == 0 and line.startswith("\ufeff") else line


def text_lines(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[str]:
    """The lines of a text file (`.gz` is decompressed; a leading byte-order mark is dropped).

    Bytes that are not valid `encoding` raise `TreeSyntaxError` naming the
    file, line and column of the first bad byte ("expected utf-8 text"), in
    skip mode too: the encoding is the whole file's, not one tree's.
    """
    source = os.fspath(path)
    lines_read = 0
    try:
        with _open_text(source, "rt", encoding) as f:
            for line in _strip_bom(f):
                lines_read += 1
                yield line
    except UnicodeDecodeError:
        # The text layer decodes whole blocks and reports block offsets: find the line again.
        raise _decode_error(source, encoding) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:  # a .gz cut short (a killed copy) or not gzip at all
        raise TreeSyntaxError(source, lines_read + 1, 1, f"the .gz file cannot be decompressed ({err}); "
                                                         f"is it truncated?") from None


def _decode_error(source: str, encoding: str) -> TreeSyntaxError:
    """Where the first byte that is not `encoding` lies, as a TreeSyntaxError (file:line:column)."""
    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rb") as f:
        for line_index, raw in enumerate(f):
            try:
                raw.decode(encoding)
            except UnicodeDecodeError as err:
                before = raw[: err.start].decode(encoding, errors="replace")
                if line_index == 0:
                    before = before.removeprefix("\ufeff")
                return TreeSyntaxError(
                    source, line_index + 1, len(before) + 1,
                    f"expected {encoding} text, found the byte 0x{raw[err.start]:02x} (convert the file to "
                    f"{encoding}, e.g. with iconv -f latin1 -t {encoding})",
                )
    # Only a multi-byte encoding can fail across lines; the line is then unknown.
    return TreeSyntaxError(source, 1, 1, f"expected {encoding} text, found bytes that are not")


def iter_treebank(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    report: ReadReport | None = None,
    encoding: str = "utf-8",
    on_too_long: OnError = "raise",
    **options: Unpack[ReadOptions],
) -> Iterator[Tree]:
    """Streams the trees of a file (`.gz` is decompressed) line by line; as `iter_trees`.

    Memory holds one tree at a time, so it suits corpora too large to load.
    Errors name the file as given by `path`. Empty files yield nothing.
    """
    source = os.fspath(path)
    return iter_trees(text_lines(source, encoding), source=source, on_error=on_error, report=report,
                      on_too_long=on_too_long, **options)


def iter_treebank_lines(path: str | os.PathLike, *, encoding: str = "utf-8", on_error: OnError = "raise",
                        on_too_long: OnError = "raise", report: ReadReport | None = None,
                        **options: Unpack[ReadOptions]) -> Iterator[tuple[Tree, int]]:
    """`iter_treebank`, each tree with the 1-based line it starts on."""
    source = os.fspath(path)
    read_options = _read_options(options)  # at the call, as `iter_trees`
    trees = _read(text_lines(source, encoding), source, on_error, report, read_options, on_too_long)
    return ((tree, line_index + 1) for tree, (line_index, _, _) in trees)


@overload
def read_treebank(path: str | os.PathLike, *, on_error: Literal["raise"] = ..., **options) -> list[Tree]: ...
@overload
def read_treebank(
    path: str | os.PathLike, *, on_error: Literal["skip"], **options
) -> tuple[list[Tree], ReadReport]: ...


def read_treebank(
    path: str | os.PathLike,
    *,
    on_error: OnError = "raise",
    encoding: str = "utf-8",
    on_too_long: OnError = "raise",
    **options: Unpack[ReadOptions],
):
    """Reads every tree of a bracketed file (`.gz` is decompressed); errors name the file; options as `iter_trees`.

    Returns `list[Tree]`, or `(trees, ReadReport)` with `on_error="skip"`, as
    `parse_trees`. An empty file raises `TreeSyntaxError` naming the file
    (skip mode: a report with zero trees).
    """
    source = os.fspath(path)
    return parse_trees(text_lines(source, encoding), source=source, on_error=on_error, on_too_long=on_too_long,
                       **options)


def write_treebank(
    trees: Iterable[Tree], path: str | os.PathLike, *, pretty: bool = False, encoding: str = "utf-8"
) -> None:
    """Writes trees one per line (or pretty-printed, blank-line separated); `.gz` is compressed."""
    separator = "\n\n" if pretty else "\n"
    with _open_text(os.fspath(path), "wt", encoding) as f:
        for tree in trees:
            f.write((tree.to_pretty_string() if pretty else tree.to_string()) + separator)


# ---------------------------------------------------------------------------
# Bottom-up rebuilding: the one traversal all transforms share
# ---------------------------------------------------------------------------

Visit = Callable[[Tree, list[Child]], list[Child]]


def _rebuild(tree: Tree, visit: Visit, prune: Callable[[Tree], bool] | None = None) -> list[Child]:
    """Rebuilds `tree` bottom-up with an explicit stack.

    `visit(node, new_children)` is called once per node after its children
    were rebuilt, and returns what replaces the node in its parent: `[]` to
    drop it, `[Tree(...)]` to replace it, or several children to splice in.
    Sub-trees for which `prune(child)` is true are dropped without being
    visited. Words are kept as they are. Returns what replaces the root.
    """
    result: list[Child] = []
    # Frames: (node, iterator over its remaining children, its rebuilt children so far).
    stack = [(tree, iter(tree.children), [])]
    while stack:
        node, pending, rebuilt = stack[-1]
        for child in pending:
            if isinstance(child, str):
                rebuilt.append(child)
            elif prune is None or not prune(child):
                stack.append((child, iter(child.children), []))
                break
        else:
            stack.pop()
            (stack[-1][2] if stack else result).extend(visit(node, rebuilt))
    return result


def _single_tree(rebuilt: list[Child], what: str) -> Tree:
    if len(rebuilt) != 1 or not isinstance(rebuilt[0], Tree):
        raise ValueError(f"{what} did not leave exactly one tree at the root: {rebuilt!r}")
    return rebuilt[0]


# ---------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------

EMPTY_ELEMENT = "-NONE-"
_FUNCTION_TAG_START = re.compile(r"[-=]")


@functools.lru_cache(maxsize=65536)
def strip_function_tag(label: str) -> str:
    """`NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`, `NP=1` -> `NP`; `-LRB-`, `-NONE-` unchanged.

    A label that starts with '-' is a tag such as `-LRB-` and is kept whole;
    otherwise everything from the first '-' or '=' on is dropped.
    """
    if not label or label[0] == "-":
        return label
    match = _FUNCTION_TAG_START.search(label)
    return label[: match.start()] if match else label


def _unwrap_root(tree: Tree) -> Tree:
    while tree.label in ROOT_LABELS and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]
    return tree


def _normalise_or_none(
    tree: Tree, strip_function_tags: bool, remove_empty: bool, unwrap_root: bool
) -> Tree | None:
    def visit(node: Tree, children: list[Child]) -> list[Child]:
        if remove_empty and not children:
            return []
        label = strip_function_tag(node.label) if strip_function_tags else node.label
        return [Tree(label, children)]

    prune = (lambda child: child.label == EMPTY_ELEMENT) if remove_empty else None
    if remove_empty and tree.label == EMPTY_ELEMENT:
        return None
    rebuilt = _rebuild(tree, visit, prune)
    if not rebuilt:
        return None
    return _unwrap_root(rebuilt[0]) if unwrap_root else rebuilt[0]


def normalise(
    tree: Tree,
    *,
    strip_function_tags: bool = True,
    remove_empty: bool = True,
    unwrap_root: bool = False,
) -> Tree:
    """The usual clean-up of treebank trees (what EVALB and LM preprocessing expect).

    Args:
      tree: any tree; not modified.
      strip_function_tags: `NP-SBJ-1` -> `NP` (see `strip_function_tag`).
      remove_empty: drop `-NONE-` sub-trees, then every constituent left
        without children, recursively (so `(NP-SBJ-1 (-NONE- *T*-1))` vanishes).
      unwrap_root: then replace a `ROOT` or `TOP` root that has one child tree
        by that child (repeatedly). The unlabelled PTB wrapper `( ... )` is
        always removed by the reader, whatever this says.
    Returns:
      A new tree. Raises ValueError when nothing is left (a tree made only of
      empty elements).
    """
    normal = _normalise_or_none(tree, strip_function_tags, remove_empty, unwrap_root)
    if normal is None:
        raise ValueError(f"nothing is left of {tree.to_string()} after removing empty elements")
    return normal


# ---------------------------------------------------------------------------
# Words and tags
# ---------------------------------------------------------------------------


def words(tree: Tree) -> list[str]:
    """The words, left to right (same as `tree.leaves()`)."""
    return tree.leaves()


def tagged_words(tree: Tree) -> list[tuple[str, str]]:
    """`[(word, POS tag), ...]` from the pre-terminals; ValueError if a word has none."""
    pairs: list[tuple[str, str]] = []
    stack: list[Child] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            raise ValueError(
                f"word {node!r} (word {len(pairs)}) has no POS pre-terminal above it in {tree.to_string()}"
            )
        if node.is_preterminal():
            pairs.append((node.children[0], node.label))
        else:
            stack.extend(reversed(node.children))
    return pairs


def pos_tags(tree: Tree) -> list[str]:
    """The POS tags (pre-terminal labels), left to right; ValueError if a word has none."""
    return [tag for _, tag in tagged_words(tree)]


def strip_preterminals(tree: Tree) -> Tree:
    """Replaces every pre-terminal by its word: `(NP (DT the) (NN dog))` -> `(NP the dog)`.

    The root is kept even when it is itself a pre-terminal, so the result is
    always a `Tree` (`(NN hello)` stays `(NN hello)`).
    """
    if tree.is_preterminal():
        return Tree(tree.label, list(tree.children))

    def visit(node: Tree, children: list[Child]) -> list[Child]:
        return children if node.is_preterminal() else [Tree(node.label, children)]

    return _single_tree(_rebuild(tree, visit), "strip_preterminals")


# ---------------------------------------------------------------------------
# Binarisation
# ---------------------------------------------------------------------------

INTERMEDIATE_PREFIX = "@"


def is_intermediate(label: str) -> bool:
    """Whether `label` marks a node introduced by `binarise` (`@NP`)."""
    return label.startswith(INTERMEDIATE_PREFIX)


def binarise(tree: Tree, direction: Literal["right", "left"] = "right") -> Tree:
    """Factors every node with more than two children into binary nodes.

    The intermediate nodes under a node labelled `X` are labelled `@X`:
      right: `(X a b c d)` -> `(X a (@X b (@X c d)))`
      left:  `(X a b c d)` -> `(X (@X (@X a b) c) d)`
    Nodes with at most two children (pre-terminals, unary chains) are kept.
    Raises ValueError if a label already starts with `@`, since `unbinarise`
    could not then tell it from an intermediate node.
    """
    if direction not in ("right", "left"):
        raise ValueError(f"direction must be 'right' or 'left', got {direction!r}")

    def visit(node: Tree, children: list[Child]) -> list[Child]:
        if is_intermediate(node.label):
            raise ValueError(
                f"cannot binarise a tree that has a label starting with {INTERMEDIATE_PREFIX!r} "
                f"({node.label!r}): unbinarise would not invert it"
            )
        if len(children) <= 2:
            return [Tree(node.label, children)]
        mark = INTERMEDIATE_PREFIX + node.label
        if direction == "right":
            factored = Tree(mark, children[-2:])
            for child in reversed(children[1:-2]):
                factored = Tree(mark, [child, factored])
            return [Tree(node.label, [children[0], factored])]
        factored = Tree(mark, children[:2])
        for child in children[2:-1]:
            factored = Tree(mark, [factored, child])
        return [Tree(node.label, [factored, children[-1]])]

    return _single_tree(_rebuild(tree, visit), "binarise")


def unbinarise(tree: Tree) -> Tree:
    """Inverts `binarise` (either direction): splices each `@X` node into its parent."""
    if is_intermediate(tree.label):
        raise ValueError(f"the root {tree.label!r} is an intermediate node; nothing to splice it into")

    def visit(node: Tree, children: list[Child]) -> list[Child]:
        return children if is_intermediate(node.label) else [Tree(node.label, children)]

    return _single_tree(_rebuild(tree, visit), "unbinarise")


# ---------------------------------------------------------------------------
# Unary chains
# ---------------------------------------------------------------------------

UNARY_JOINER = "+"


def collapse_unary(tree: Tree, *, joiner: str = UNARY_JOINER, collapse_preterminals: bool = False) -> Tree:
    """Merges each unary chain into one node: `(S (VP (VB go)))` -> `(S+VP (VB go))`.

    A node with exactly one child that is a tree is merged with that child,
    labels joined by `joiner`. Pre-terminals are not merged into (as in most
    parsers) unless `collapse_preterminals`, which gives `(S+VP+VB go)`.
    Raises ValueError if a label already contains `joiner` (`expand_unary`
    could not invert it).
    """

    def visit(node: Tree, children: list[Child]) -> list[Child]:
        if joiner in node.label:
            raise ValueError(f"label {node.label!r} contains the joiner {joiner!r}; expand_unary could not invert it")
        if len(children) == 1 and isinstance(children[0], Tree):
            child = children[0]
            if collapse_preterminals or not child.is_preterminal():
                return [Tree(node.label + joiner + child.label, child.children)]
        return [Tree(node.label, children)]

    return _single_tree(_rebuild(tree, visit), "collapse_unary")


def expand_unary(tree: Tree, *, joiner: str = UNARY_JOINER) -> Tree:
    """Inverts `collapse_unary`: `(S+VP (VB go))` -> `(S (VP (VB go)))`."""

    def visit(node: Tree, children: list[Child]) -> list[Child]:
        labels = node.label.split(joiner)
        expanded = Tree(labels[-1], children)
        for label in reversed(labels[:-1]):
            expanded = Tree(label, [expanded])
        return [expanded]

    return _single_tree(_rebuild(tree, visit), "expand_unary")


__all__ = [
    "Child",
    "EMPTY_ELEMENT",
    "INTERMEDIATE_PREFIX",
    "ROOT_LABELS",
    "ReadReport",
    "SentenceTooLong",
    "Tree",
    "SourceLocationError",
    "TreeSyntaxError",
    "UNARY_JOINER",
    "binarise",
    "collapse_unary",
    "expand_unary",
    "is_intermediate",
    "iter_treebank",
    "iter_treebank_lines",
    "iter_trees",
    "normalise",
    "parse",
    "parse_trees",
    "pos_tags",
    "read_treebank",
    "strip_function_tag",
    "strip_preterminals",
    "tagged_words",
    "unbinarise",
    "words",
    "too_long_reason",
    "write_treebank",
]
