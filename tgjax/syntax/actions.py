"""Choe–Charniak action sequences, their token types, and the TG transform at the string level.

A tree is linearised depth-first into actions (Choe & Charniak 2016), POS
tags dropped as in the Transformer Grammars paper (Sartran et al. 2022):

    (S (NP (DT the) (JJ blue) (NN bird)) (VP (VBZ sings)))      pos_tags=True
    -> ["(S", "(NP", "the", "blue", "bird", "NP)", "(VP", "sings", "VP)", "S)"]

Whether a tree has POS tags cannot be told from one node (`(VP barks)` is a
constituent in a tree without tags), so the caller says (`pos_tags`), having
decided for the whole file with `tgjax.syntax.pos_tags`.

An opening non-terminal is `"(" + label`, a closing one `label + ")"`, and
anything else is a terminal; `token_type` gives the integer token types of
`token_types.py` (the authors' released values).

Transformer Grammars duplicate every closing non-terminal: the first copy
(CNT1) performs COMPOSE and predicts nothing, the second (CNT2) performs STACK
and predicts the next action. `tg_transform` shows that transform on strings,
position by position; `actions_to_arrays` gives the integer arrays *before*
duplication that `tgjax.syntax.masks` consumes (it duplicates with
`token_types.duplicate_closing_nts`); `actions_from_tg` / `tree_from_tg` undo
the transform.

Documents: several sentence trees under one node labelled `DOC`
(configurable), `(DOC (S ...) (S ...))`, linearised like any tree;
`split_document` and `split_document_actions` recover the sentences.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import numpy as np

from tgjax.syntax import token_types as tt
from tgjax.syntax.trees import Child, Tree

BOS_TOKEN = "<s>"
PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
DOCUMENT_LABEL = "DOC"

_SPECIAL_TYPES = {BOS_TOKEN: tt.BOS, PAD_TOKEN: tt.PAD, UNK_TOKEN: tt.PLACEHOLDER}


class ActionSequenceError(ValueError):
    """A malformed action sequence. `position` is the 0-based index of the offending token."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason

    def __reduce__(self):
        return (type(self), (self.position, self.reason))


# ---------------------------------------------------------------------------
# Token types
# ---------------------------------------------------------------------------


def opening(label: str) -> str:
    """The opening non-terminal token of `label`: `"(NP"`."""
    return "(" + label


def closing(label: str) -> str:
    """The closing non-terminal token of `label`: `"NP)"`."""
    return label + ")"


def token_type(token: str) -> int:
    """`"(X"` -> OPENING_NT, `"X)"` -> CLOSING_NT, `"<s>"` -> BOS, `"<pad>"` -> PAD,
    `"<unk>"` -> PLACEHOLDER, anything else -> TERMINAL (values of `token_types`)."""
    special = _SPECIAL_TYPES.get(token)
    if special is not None:
        return special
    if len(token) > 1:
        if token[0] == "(":
            return tt.OPENING_NT
        if token[-1] == ")":
            return tt.CLOSING_NT
    return tt.TERMINAL


def token_types(tokens: Sequence[str]) -> np.ndarray:
    """`token_type` of each token: int32 array `[len(tokens)]`."""
    return np.fromiter((token_type(t) for t in tokens), dtype=np.int32, count=len(tokens))


def label_of(token: str) -> str:
    """The label of a non-terminal token: `"(NP"` -> `"NP"`, `"NP)"` -> `"NP"`."""
    kind = token_type(token)
    if kind == tt.OPENING_NT:
        return token[1:]
    if kind == tt.CLOSING_NT:
        return token[:-1]
    raise ValueError(f"{token!r} is not a non-terminal token")


# ---------------------------------------------------------------------------
# Choe–Charniak linearisation and its inverse
# ---------------------------------------------------------------------------


_BAD_LABEL_CHAR = re.compile(r"[\s()]")
_BLANK = re.compile(r"\s")


def _check_label(label: str) -> None:
    if not label or _BAD_LABEL_CHAR.search(label):
        raise ValueError(f"label {label!r} cannot be a non-terminal token (empty, blank or bracket)")


def _check_word(word: str) -> None:
    if not word or token_type(word) not in (tt.TERMINAL, tt.PLACEHOLDER) or _BLANK.search(word):
        raise ValueError(
            f"word {word!r} would not read back as a terminal (it is empty, contains a blank, "
            f"starts with '(' / ends with ')', or is {BOS_TOKEN!r} / {PAD_TOKEN!r})"
        )


def choe_charniak(tree: Tree, *, pos_tags: bool) -> list[str]:
    """Linearises a tree depth-first: `["(S", "(NP", "the", ..., "NP)", ..., "S)"]`.

    Args:
      tree: a tree; not modified.
      pos_tags: whether the tree's nodes whose only child is a word are POS
        tags. True: they contribute just their word, as in the TG paper.
        False, for trees without POS tags (`tgjax sample`'s, or from
        `tree_from_choe_charniak` or `strip_preterminals`): every node is a
        constituent, a unary one over a single word (`(VP barks)`) included.
        The root is never dropped. Decide it per file with
        `tgjax.syntax.pos_tags.resolve`, not per tree.
    Returns:
      The actions, one string each. Raises ValueError for a label or word
      that would not read back as its kind of token.
    """
    actions: list[str] = []
    # Items are trees to open, words, or the closing token of a tree opened earlier;
    # the last two go to the output as they are, so a word is checked before it is pushed.
    stack: list[Child] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            actions.append(item)
            continue
        if pos_tags and item is not tree and item.is_preterminal():
            word = item.children[0]
            _check_word(word)
            actions.append(word)
            continue
        _check_label(item.label)
        actions.append("(" + item.label)
        stack.append(item.label + ")")
        for child in reversed(item.children):
            if isinstance(child, str):
                _check_word(child)
            stack.append(child)
    return actions


def tree_from_choe_charniak(actions: Sequence[str]) -> Tree:
    """Inverse of `choe_charniak`: the tree (without pre-terminals) of exactly one action sequence.

    Raises ActionSequenceError (a ValueError) naming the token position for:
    a closing label that does not match the open one, a closing token with
    nothing open, a terminal outside any constituent, constituents still open
    at the end, BOS/PAD tokens, an empty sequence, or a second tree.
    """
    tree: Tree | None = None
    # Open constituents: (label, children, position of the opening token).
    stack: list[tuple[str, list[Child], int]] = []
    for position, token in enumerate(actions):
        kind = token_type(token)
        if kind == tt.OPENING_NT:
            if tree is not None:
                raise ActionSequenceError(position, f"{token!r} starts a second tree; expected one")
            stack.append((token[1:], [], position))
        elif kind == tt.CLOSING_NT:
            if not stack:
                raise ActionSequenceError(position, f"closing {token!r} with no constituent open")
            open_label, children, open_position = stack.pop()
            if token[:-1] != open_label:
                raise ActionSequenceError(
                    position,
                    f"closing {token!r} does not match the open constituent "
                    f"{opening(open_label)!r} at position {open_position}",
                )
            node = Tree(open_label, children)
            if stack:
                stack[-1][1].append(node)
            else:
                tree = node
        elif kind in (tt.TERMINAL, tt.PLACEHOLDER):
            if not stack:
                raise ActionSequenceError(position, f"terminal {token!r} outside any constituent")
            stack[-1][1].append(token)
        else:
            raise ActionSequenceError(
                position, f"{token!r} ({tt.NAMES[kind]}) is not an action; strip BOS and padding first"
            )
    if stack:
        open_label, _, open_position = stack[-1]
        raise ActionSequenceError(
            len(actions), f"end of sequence with {opening(open_label)!r} (position {open_position}) still open"
        )
    if tree is None:
        raise ActionSequenceError(0, "empty action sequence; expected one tree")
    return tree


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


def make_document(sentences: Sequence[Tree], label: str = DOCUMENT_LABEL) -> Tree:
    """`(DOC s1 s2 ...)`: the sentence trees (not copied) under one document node."""
    if not sentences:
        raise ValueError("a document needs at least one sentence")
    return Tree(label, list(sentences))


def split_document(document: Tree, label: str = DOCUMENT_LABEL) -> list[Tree]:
    """The sentence trees under a document node made by `make_document`."""
    if document.label != label:
        raise ValueError(f"expected a document labelled {label!r}, found {document.label!r}")
    words = [c for c in document.children if isinstance(c, str)]
    if words:
        raise ValueError(f"a document holds sentence trees only, found the word {words[0]!r} directly under it")
    return list(document.children)


def document_actions(sentences: Sequence[Tree], *, pos_tags: bool, label: str = DOCUMENT_LABEL) -> list[str]:
    """Choe–Charniak actions of a document: `["(DOC", <sentence 1>..., <sentence 2>..., "DOC)"]`."""
    return choe_charniak(make_document(sentences, label), pos_tags=pos_tags)


def split_document_actions(actions: Sequence[str], *, label: str = DOCUMENT_LABEL) -> list[list[str]]:
    """Inverse of `document_actions`: the action sequence of each sentence (validated)."""
    document = tree_from_choe_charniak(actions)
    return [choe_charniak(s, pos_tags=False) for s in split_document(document, label)]


# ---------------------------------------------------------------------------
# The TG transform
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TGPosition:
    """One position of the TG (duplicated) sequence.

    Attributes:
      token: the input token (`"<s>"` at position 0).
      ttype: its type: BOS, OPENING_NT, TERMINAL, CNT1 (= CLOSING_NT), CNT2, PLACEHOLDER.
      label: the action predicted here (the next original action), or None
        for a CNT1 and for the last position.
      label_ttype: `token_type(label)`, or PAD when there is no label.
    """

    token: str
    ttype: int
    label: str | None
    label_ttype: int


def tg_transform(actions: Sequence[str], *, validate: bool = True) -> list[TGPosition]:
    """Choe–Charniak actions -> the TG input/label sequence, position by position.

    Inputs are BOS then the actions; labels are the actions then none (inputs
    shifted left). Each closing non-terminal then becomes two positions: CNT1
    (COMPOSE), with no label, and CNT2 (STACK), with the original label. For
    `(S (NP the blue bird) (VP sings))` this is the 14 positions of the
    paper's Figure 2. Length: `1 + len(actions) + number of closing NTs`.

    Args:
      actions: one tree's actions (checked with `tree_from_choe_charniak`
        unless `validate=False`, e.g. for a prefix).
    """
    if validate:
        tree_from_choe_charniak(actions)
    inputs = [BOS_TOKEN, *actions]
    labels: list[str | None] = [*actions, None]
    rows: list[TGPosition] = []
    for token, label in zip(inputs, labels):
        kind = token_type(token)
        label_kind = tt.PAD if label is None else token_type(label)
        if kind == tt.CLOSING_NT:
            rows.append(TGPosition(token, tt.CNT1, None, tt.PAD))
            rows.append(TGPosition(token, tt.CNT2, label, label_kind))
        else:
            rows.append(TGPosition(token, kind, label, label_kind))
    return rows


def format_tg_table(rows: Sequence[TGPosition]) -> str:
    """The rows as an aligned text table (position, token, type, label), for display."""
    width = max([len(r.token) for r in rows] + [5])
    lines = [f"{'pos':>3}  {'token':<{width}}  {'type':<4}  label"]
    for i, r in enumerate(rows):
        lines.append(f"{i:>3}  {r.token:<{width}}  {tt.NAMES[r.ttype]:<4}  {'' if r.label is None else r.label}")
    return "\n".join(lines)


def actions_to_arrays(
    actions: Sequence[str],
    token_to_id: Mapping[str, int],
    *,
    unk_token: str | None = UNK_TOKEN,
    dtype: np.dtype | type = np.int32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Integer arrays of one sequence *before* CNT duplication (what `TGMasking.chunks` takes).

    Args:
      actions: Choe–Charniak actions, length n.
      token_to_id: vocabulary; must hold `"<s>"`. A token missing from it is
        mapped to `unk_token` (and typed PLACEHOLDER), or raises KeyError when
        `unk_token` is None or also missing.
      dtype: integer dtype of the outputs.
    Returns:
      `(inputs, inputs_ttypes, labels, labels_ttypes)`, each `[n + 1]`:
      inputs = [id of `<s>`] + ids, labels = ids + [0];
      inputs_ttypes = [BOS] + types, labels_ttypes = types + [PAD].
    """
    if BOS_TOKEN not in token_to_id:
        raise KeyError(f"the vocabulary has no {BOS_TOKEN!r} token")
    mapped: list[str] = []
    for position, token in enumerate(actions):
        if token not in token_to_id:
            if unk_token is None or unk_token not in token_to_id:
                raise KeyError(f"position {position}: {token!r} is not in the vocabulary (and no {unk_token!r})")
            token = unk_token
        mapped.append(token)
    ids = np.fromiter((token_to_id[t] for t in mapped), dtype=dtype, count=len(mapped))
    types = token_types(mapped).astype(dtype)
    inputs = np.concatenate([np.array([token_to_id[BOS_TOKEN]], dtype), ids])
    inputs_ttypes = np.concatenate([np.array([tt.BOS], dtype), types])
    labels = np.concatenate([ids, np.zeros(1, dtype)])
    labels_ttypes = np.concatenate([types, np.array([tt.PAD], dtype)])
    return inputs, inputs_ttypes, labels, labels_ttypes


def actions_from_tg(tokens: Sequence[str], ttypes: Sequence[int] | None = None) -> list[str]:
    """Undoes the TG transform on input tokens: the Choe–Charniak actions.

    Args:
      tokens: the duplicated input sequence, e.g. `[r.token for r in tg_transform(a)]`;
        a leading `"<s>"` and trailing `"<pad>"`s are dropped.
      ttypes: optional types of the same positions; when given they are
        checked (CNT1 then CNT2 for each closing pair, `token_type` otherwise).
    Raises:
      ActionSequenceError naming the position (in `tokens`) of a closing
      non-terminal that is not immediately repeated, or of a wrong type.
    """
    if ttypes is not None and len(ttypes) != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {len(ttypes)} token types")
    end = len(tokens)
    while end and tokens[end - 1] == PAD_TOKEN:
        end -= 1
    start = 1 if end and tokens[0] == BOS_TOKEN else 0
    if ttypes is not None and start and ttypes[0] != tt.BOS:
        raise ActionSequenceError(0, f"{BOS_TOKEN!r} has type {ttypes[0]}, expected BOS={tt.BOS}")
    actions: list[str] = []
    position = start
    while position < end:
        token = tokens[position]
        kind = token_type(token)
        if kind == tt.CLOSING_NT:
            if position + 1 >= end or tokens[position + 1] != token:
                raise ActionSequenceError(
                    position, f"closing {token!r} (CNT1) is not followed by its CNT2 copy"
                )
            if ttypes is not None and (ttypes[position], ttypes[position + 1]) != (tt.CNT1, tt.CNT2):
                raise ActionSequenceError(
                    position,
                    f"closing pair {token!r} has types ({ttypes[position]}, {ttypes[position + 1]}), "
                    f"expected (CNT1={tt.CNT1}, CNT2={tt.CNT2})",
                )
            position += 2
        else:
            if ttypes is not None and ttypes[position] != kind:
                raise ActionSequenceError(
                    position, f"{token!r} has type {ttypes[position]}, expected {kind} ({tt.NAMES[kind]})"
                )
            position += 1
        actions.append(token)
    return actions


def tree_from_tg(tokens: Sequence[str], ttypes: Sequence[int] | None = None) -> Tree:
    """The tree (without pre-terminals) of a TG input sequence; see `actions_from_tg`."""
    return tree_from_choe_charniak(actions_from_tg(tokens, ttypes))


__all__ = [
    "ActionSequenceError",
    "BOS_TOKEN",
    "DOCUMENT_LABEL",
    "PAD_TOKEN",
    "TGPosition",
    "UNK_TOKEN",
    "actions_from_tg",
    "actions_to_arrays",
    "choe_charniak",
    "closing",
    "document_actions",
    "format_tg_table",
    "label_of",
    "make_document",
    "opening",
    "split_document",
    "split_document_actions",
    "tg_transform",
    "token_type",
    "token_types",
    "tree_from_choe_charniak",
    "tree_from_tg",
]
