"""Whether a file's trees carry POS tags: decided once per file, never per node.

A tree is *tagged* when every word is the only child of its parent node (a
POS pre-terminal, `(DT the)`). The TG paper's models do not read tags, so the
Choe–Charniak actions of a tagged tree drop those nodes. A tree without tags
(`tgjax sample` writes them, e.g. `(S (NP the dog) (VP barks))`) must keep
every node, a unary one over a single word (`(VP barks)`) included, or the
model scores a different tree. A node alone cannot tell the two apart, so the
decision is made for a whole file (or list of trees) by a setting:

* "yes": the trees are tagged; one with a word that is not alone under its
  parent is an error naming where it is and the word;
* "no": no tags; every node is a constituent;
* "auto": tagged iff every tree is tagged. A file in which some trees are
  tagged and others are not is an error naming the first tree that differs
  from the first tree of the file: the two readings give different trees,
  so it cannot be guessed (pass "yes" or "no").

    tagged = resolve("auto", located_trees(tree_list, "valid.txt"))   # -> bool
    actions.choe_charniak(tree, pos_tags=tagged)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from tgjax.syntax import trees
from tgjax.syntax.trees import Tree

SETTINGS = ("yes", "no", "auto")


class PosTagError(ValueError):
    """A file whose trees do not fit the POS-tag setting; the message names the file, the tree and the word."""


def untagged_word(tree: Tree) -> str | None:
    """The first word (depth-first) that is not the only child of its parent, or None when the tree is tagged.

    `(S (NP (DT the) (NN dog)))` -> None; `(S (NP the dog) (VP barks))` -> "the".
    """
    stack: list[Tree] = [tree]
    while stack:
        node = stack.pop()
        if len(node.children) > 1:
            word = next((c for c in node.children if isinstance(c, str)), None)
            if word is not None:
                return word
        stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))
    return None


def is_tagged(tree: Tree) -> bool:
    """Every word of the tree is the only child of its parent node."""
    return untagged_word(tree) is None


def located_trees(tree_list: Iterable[Tree], source: str) -> Iterator[tuple[Tree, str]]:
    """`(tree, "SOURCE: tree N")` (N from 1) for trees whose lines are not known."""
    for number, tree in enumerate(tree_list, start=1):
        yield tree, f"{source}: tree {number}"


def resolve_file(setting: str | bool, path, **read_options) -> bool:
    """`resolve` over the trees of a treebank file, located by line (`"file:line"`); "no" reads nothing.

    "yes" and "auto" read the whole file once (before any tree is used), so
    every shard of a job decides the same way; a bool is a decision already made.
    """
    check_setting(setting)
    if isinstance(setting, bool) or setting == "no":
        return resolve(setting, ())
    located = ((tree, f"{path}:{line}") for tree, line in trees.iter_treebank_lines(path, **read_options))
    return resolve(setting, located)


def check_setting(setting: str | bool) -> None:
    if not isinstance(setting, bool) and setting not in SETTINGS:
        raise ValueError(f"pos_tags: expected one of {', '.join(SETTINGS)} (or a bool), got {setting!r}")


def resolve(setting: str | bool, located: Iterable[tuple[Tree, str]]) -> bool:
    """The decision for a whole file: True when its trees are read as tagged (see the module docstring).

    Args:
      setting: "yes", "no" or "auto"; or a decision already made (True or
        False), returned as it is without reading `located`.
      located: every tree of the file with where it is (`"file:line"`), in
        file order; not read at all for "no".
    Raises:
      PosTagError naming the tree (and, for "auto", the first tree of the
      other kind) when the trees do not fit the setting.
    """
    check_setting(setting)
    if isinstance(setting, bool):
        return setting
    if setting == "no":
        return False
    if setting == "yes":
        for tree, where in located:
            word = untagged_word(tree)
            if word is not None:
                raise PosTagError(f"{where}: the word {word!r} is not alone under a node of its own; expected "
                                  f"every word under a POS tag (pos tags: yes), or say pos tags: no (--pos-tags no) "
                                  f"for trees without tags")
        return True
    first: tuple[bool, str, str | None] | None = None  # (tagged?, where, an untagged word)
    for tree, where in located:
        word = untagged_word(tree)
        if first is None:
            first = (word is None, where, word)
        elif (word is None) != first[0]:
            raise PosTagError(_mixed_message(first, (word is None, where, word)))
    return first is not None and first[0]


def _mixed_message(first: tuple[bool, str, str | None], other: tuple[bool, str, str | None]) -> str:
    def kind(entry):
        tagged, _, word = entry
        return ("every word is alone under a node of its own (POS tags)" if tagged
                else f"the word {word!r} is not alone under a node (no POS tags)")

    return (f"{other[1]}: {kind(other)}, but in the file's first tree ({first[1]}) {kind(first)}; expected every "
            f"tree of a file tagged or every tree without tags. Say which with --pos-tags yes|no")


def setting_name(tagged: bool) -> str:
    """"yes" or "no": the resolved setting, for summaries."""
    return "yes" if tagged else "no"


__all__: Sequence[str] = ["PosTagError", "SETTINGS", "check_setting", "is_tagged", "located_trees", "resolve",
                          "resolve_file", "setting_name", "untagged_word"]
