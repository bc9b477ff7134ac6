"""Head rules, and dependency trees derived from constituency trees (NumPy only).

Every constituent has one head child; the head word of a constituent is the
head word of its head child; the head word of every other child depends on
the head word of the constituent; the head word of the whole tree is the root,
which heads itself (the UDGN release's convention: `heads[root] == root`,
0-based; CoNLL-U writes 0 for it instead, see `tgjax.data.conllu`).

Head rules (`CollinsHeadFinder`) are Collins (1999) as CoreNLP's
`CollinsHeadFinder` implements them, restated in
../shared/reference/released-code.md §4.5:

* the label's basic category is used (`NP-SBJ-1` -> `NP`);
* a constituent with one child: that child;
* otherwise the label's rule lists are tried in order. `left`: for each
  category in priority order, scan the children left to right; `right`: the
  same, right to left; `leftdis` / `rightdis`: scan the children left to
  right / right to left and take the first whose category is in the set;
* when no list matches, the last list's direction decides: the leftmost
  child for `left`/`leftdis`, the rightmost for `right`/`rightdis`;
* coordination (`coordination="corenlp"`, the default: what CoreNLP's
  `CollinsHeadFinder.postOperationFix` does): when a list matched the head
  at index >= 2 and the child just before it is CC or CONJP, the head moves
  two to the left, unless the child there is a punctuation pre-terminal:
  then it stays. (CoreNLP's loop meant to skip punctuation re-tests the same
  child, so it runs off the start and leaves the head where it was.) The
  fallback of the previous point is never moved. So in
  `(NP (NN apples) (, ,) (NNS pears) (, ,) (CC and) (NNS plums))` "plums" heads.
  `coordination="skip_punctuation"` is what that loop was evidently meant to
  do, and tgjax's earlier behaviour: move two to the left, then further left
  past punctuation pre-terminals (unless that runs off the start), after the
  fallback too; "pears" heads the example;
* a label with no rule (NML, TOP with several children, a label the table
  does not know) is counted in `HeadReport.unknown_labels` and falls back to
  `UNKNOWN_LABEL_RULE` (leftmost child; CoreNLP raises instead).

Filtering (`dependencies(..., keep_tags=WORD_TAGS)`): the release keeps only
words whose tag is lexical (drops punctuation, `-NONE-`, `$`, `#`). A kept
word whose head is dropped climbs the head chain to the first kept word. If
the root itself is dropped, the kept words that climbed to it are rejoined
(`dropped_root="rechain"`, the default): the one nearest the old root (ties:
the right one) becomes the root and the others are chained towards it (each
to its neighbour on the root's side), which keeps a projective tree
projective. `dropped_root="udgn_release"` is the UDGN release's convention
(its data_dep.py, released-code.md §4.5): a word whose head chain reaches the
root through dropped words heads itself, so such a sentence has several
roots. Either way the sentence is counted in `HeadReport.reheaded_roots`.

Exact heads (`TableHeadFinder`): a grammar whose rules mark their head child
(`tgjax.syntax.grammar`, `VP^`) gives a table (label, child labels) -> head
index; trees sampled from it then have their heads exactly.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from tgjax.syntax.trees import Child, Tree, strip_function_tag

__all__ = [
    "COLLINS_HEAD_RULES",
    "COORDINATION_RULES",
    "DROPPED_ROOT_RULES",
    "PUNCTUATION_TAGS",
    "UNKNOWN_LABEL_RULE",
    "WORD_TAGS",
    "CollinsHeadFinder",
    "Dependencies",
    "HeadReport",
    "TableHeadFinder",
    "check_heads",
    "collins_rules",
    "dependencies",
    "grammar_head_table",
    "is_projective",
    "keep_tagged",
    "keep_tokens",
]

# The Penn Treebank language pack's punctuation tags (what the coordination fix skips).
PUNCTUATION_TAGS = frozenset({"''", "``", "-LRB-", "-RRB-", ".", ":", ","})

# The release's WORD_TAGS: the 36 PTB lexical tags plus AUX and AUXG (BLLIP).
WORD_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH "
    "VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB AUX AUXG".split()
)

HeadRule = tuple[tuple[str, tuple[str, ...]], ...]  # ((direction, categories), ...)

# How the head moves in coordination (module docstring): CoreNLP's, or on past punctuation.
COORDINATION_RULES = ("corenlp", "skip_punctuation")
# What the words under a dropped root head (module docstring): one re-chained root, or the release's self-heads.
DROPPED_ROOT_RULES = ("rechain", "udgn_release")


def _rule(*lists: str) -> HeadRule:
    """`_rule("left NNS QP", "right CD")` -> (("left", ("NNS", "QP")), ("right", ("CD",)))."""
    out = []
    for text in lists:
        direction, *categories = text.split()
        out.append((direction, tuple(categories)))
    return tuple(out)


# Collins (1999: 236-238) as CoreNLP's CollinsHeadFinder has it (released-code.md §4.5).
COLLINS_HEAD_RULES: Mapping[str, HeadRule] = {
    "ADJP": _rule("left NNS QP NN $ ADVP JJ VBN VBG ADJP JJR NP JJS DT FW RBR RBS SBAR RB"),
    "ADVP": _rule("right RB RBR RBS FW ADVP TO CD JJR JJ IN NP JJS NN"),
    "CONJP": _rule("right CC RB IN"),
    "FRAG": _rule("right"),
    "INTJ": _rule("left"),
    "LST": _rule("right LS :"),
    "NAC": _rule("left NN NNS NNP NNPS NP NAC EX $ CD QP PRP VBG JJ JJS JJR ADJP FW"),
    "NX": _rule("left"),
    "PP": _rule("right IN TO VBG VBN RP FW"),
    "PRN": _rule("left"),
    "PRT": _rule("right RP"),
    "QP": _rule("left $ IN NNS NN JJ RB DT CD NCD QP JJR JJS"),
    "RRC": _rule("right VP NP ADVP ADJP PP"),
    "S": _rule("left TO IN VP S SBAR ADJP UCP NP"),
    "SBAR": _rule("left WHNP WHPP WHADVP WHADJP IN DT S SQ SINV SBAR FRAG"),
    "SBARQ": _rule("left SQ S SINV SBARQ FRAG"),
    "SINV": _rule("left VBZ VBD VBP VB MD VP S SINV ADJP NP"),
    "SQ": _rule("left VBZ VBD VBP VB MD VP SQ"),
    "UCP": _rule("right"),
    "VP": _rule("left TO VBD VBN MD VBZ VB VBG VBP AUX AUXG VP ADJP NN NNS NP"),
    "WHADJP": _rule("left CC WRB JJ ADJP"),
    "WHADVP": _rule("right CC WRB"),
    "WHNP": _rule("left WDT WP WP$ WHADJP WHPP WHNP"),
    "WHPP": _rule("right IN TO FW"),
    "X": _rule("right"),
    "NP": _rule(
        "rightdis NN NNP NNPS NNS NX POS JJR", "left NP", "rightdis $ ADJP PRN", "right CD",
        "rightdis JJ JJS RB QP",
    ),
}

# A label the table does not know: the leftmost child (counted).
UNKNOWN_LABEL_RULE: HeadRule = _rule("left")


def collins_rules(*, nml_as_np: bool = False) -> dict[str, HeadRule]:
    """The Collins table; `nml_as_np=True` adds NML (nominal modifiers, as in CRAFT and
    OntoNotes-style trees) with NP's rule, as CoreNLP's ModCollinsHeadFinder does. Collins'
    table has no NML, so by default NML is an unknown label (counted, leftmost child)."""
    rules = dict(COLLINS_HEAD_RULES)
    if nml_as_np:
        rules["NML"] = COLLINS_HEAD_RULES["NP"]
    return rules

_DIRECTIONS = ("left", "right", "leftdis", "rightdis")


@dataclasses.dataclass
class HeadReport:
    """What a conversion counted.

    Attributes:
      num_trees: trees converted.
      unknown_labels: label -> how many constituents (with >= 2 children) had no head rule.
      filtered_tokens: words dropped by `keep_tags`.
      reheaded_roots: sentences whose root word was dropped (root chosen again).
      empty_sentences: sentences with no word left after filtering (skipped).
    """

    num_trees: int = 0
    unknown_labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    filtered_tokens: int = 0
    reheaded_roots: int = 0
    empty_sentences: int = 0

    def summary(self) -> str:
        lines = [f"converted {self.num_trees} trees; {self.filtered_tokens} tokens filtered, "
                 f"{self.reheaded_roots} roots chosen again, {self.empty_sentences} sentences left empty (skipped)"]
        if self.unknown_labels:
            total = sum(self.unknown_labels.values())
            common = ", ".join(f"{label} x{n}" for label, n in self.unknown_labels.most_common(10))
            lines.append(f"{total} constituents with labels the head rules do not know (leftmost child): {common}")
        return "\n".join(lines)


def _category(child: Child) -> str | None:
    return None if isinstance(child, str) else strip_function_tag(child.label)


def _is_punctuation(child: Child) -> bool:
    return isinstance(child, Tree) and child.is_preterminal() and child.label in PUNCTUATION_TAGS


def _search(direction: str, categories: tuple[str, ...], kids: Sequence[str | None]) -> int | None:
    n = len(kids)
    if direction == "left":
        for category in categories:
            for i in range(n):
                if kids[i] == category:
                    return i
    elif direction == "right":
        for category in categories:
            for i in range(n - 1, -1, -1):
                if kids[i] == category:
                    return i
    else:
        wanted = set(categories)
        indices = range(n) if direction == "leftdis" else range(n - 1, -1, -1)
        for i in indices:
            if kids[i] in wanted:
                return i
    return None


def _after_coordinator(head: int, categories: Sequence[str | None]) -> bool:
    return head >= 2 and categories[head - 1] in ("CC", "CONJP")


def _corenlp_coordination(head: int, kids: Sequence[Child], categories: Sequence[str | None]) -> int:
    """(X A CC B) takes A; (X A , CC B) keeps B: CoreNLP never moves the head onto or past punctuation."""
    if _after_coordinator(head, categories) and not _is_punctuation(kids[head - 2]):
        return head - 2
    return head


def _skip_punctuation_coordination(head: int, kids: Sequence[Child], categories: Sequence[str | None]) -> int:
    """(X A CC B) and (X A , CC B) both take A: the move goes on left past punctuation."""
    if not _after_coordinator(head, categories):
        return head
    candidate = head - 2
    while candidate >= 0 and _is_punctuation(kids[candidate]):
        candidate -= 1
    return candidate if candidate >= 0 else head


def _fallback(rule: HeadRule, num_kids: int) -> int:
    """No list matched: the last list's direction decides (the leftmost or the rightmost child)."""
    return 0 if rule[-1][0] in ("left", "leftdis") else num_kids - 1


class CollinsHeadFinder:
    """`finder(node) -> index of node's head child` with the Collins rules (module docstring).

    Args:
      rules: label -> rule lists (default `COLLINS_HEAD_RULES`).
      unknown_rule: the rule for labels not in `rules`.
      report: a `HeadReport` whose `unknown_labels` this counts into.
      coordination: "corenlp" (default) or "skip_punctuation" (`COORDINATION_RULES`, module docstring).
    """

    def __init__(
        self,
        rules: Mapping[str, HeadRule] = COLLINS_HEAD_RULES,
        unknown_rule: HeadRule = UNKNOWN_LABEL_RULE,
        report: HeadReport | None = None,
        coordination: str = "corenlp",
    ):
        for label, rule in list(rules.items()) + [("<unknown>", unknown_rule)]:
            if not rule or any(d not in _DIRECTIONS for d, _ in rule):
                raise ValueError(f"head rule for {label!r}: expected lists led by one of {_DIRECTIONS}, got {rule}")
        if coordination not in COORDINATION_RULES:
            raise ValueError(f"coordination must be one of {COORDINATION_RULES}, got {coordination!r}")
        self.rules, self.unknown_rule, self.coordination = rules, unknown_rule, coordination
        self.report = report if report is not None else HeadReport()

    def __call__(self, node: Tree) -> int:
        kids = node.children
        if len(kids) == 1:
            return 0
        category = strip_function_tag(node.label)
        rule = self.rules.get(category)
        if rule is None:
            self.report.unknown_labels[category] += 1
            rule = self.unknown_rule
        categories = [_category(kid) for kid in kids]
        head = None
        for direction, wanted in rule:
            head = _search(direction, wanted, categories)
            if head is not None:
                break
        if self.coordination == "skip_punctuation":
            head = _fallback(rule, len(kids)) if head is None else head
            return _skip_punctuation_coordination(head, kids, categories)
        # CoreNLP returns its fallback before the coordination fix: only a head a list matched can move.
        return _fallback(rule, len(kids)) if head is None else _corenlp_coordination(head, kids, categories)


def _child_key(child: Child) -> str:
    return child if isinstance(child, str) else child.label


def grammar_head_table(
    rules: Iterable, relabel: Callable[[str], str] | None = None, terminals: Iterable[str] = ()
) -> dict[tuple[str, tuple[str, ...]], int]:
    """(label, child labels) -> head index from rules that mark their head (`Rule.head`).

    Args:
      rules: objects with `lhs`, `rhs`, `head` (`tgjax.syntax.grammar.Rule`);
        one-symbol rules need no mark, ε-rules are left out.
      relabel: maps non-terminal names to the labels trees carry (e.g. the
        built-in treebank's `ptb_label`); terminals (`terminals`) are kept.
    Raises:
      ValueError: a rule with >= 2 symbols has no head, or two rules that
        relabel to the same (label, children) mark different heads.
    """
    relabel = relabel or (lambda name: name)
    terminal_set = set(terminals)
    table: dict[tuple[str, tuple[str, ...]], int] = {}
    origin: dict[tuple[str, tuple[str, ...]], str] = {}
    for rule in rules:
        if not rule.rhs:
            continue
        text = f"{rule.lhs} -> {' '.join(rule.rhs)}"
        head = 0 if len(rule.rhs) == 1 and rule.head is None else rule.head
        if head is None:
            raise ValueError(f"rule {text}: no head child marked (write the head symbol with a trailing '^')")
        key = (relabel(rule.lhs), tuple(s if s in terminal_set else relabel(s) for s in rule.rhs))
        if table.setdefault(key, head) != head:
            raise ValueError(f"rules {origin[key]} and {text} both read {key} but mark different heads")
        origin.setdefault(key, text)
    return table


class TableHeadFinder:
    """`finder(node) -> head child index` from a `grammar_head_table`; a node the table lacks
    is counted in `report.unknown_labels` (as `label -> children`) and goes to `fallback`."""

    def __init__(self, table: Mapping[tuple[str, tuple[str, ...]], int], fallback=None,
                 report: HeadReport | None = None):
        self.table = table
        self.report = report if report is not None else HeadReport()
        self.fallback = fallback if fallback is not None else CollinsHeadFinder(report=self.report)

    def __call__(self, node: Tree) -> int:
        if len(node.children) == 1:
            return 0
        key = (node.label, tuple(_child_key(c) for c in node.children))
        head = self.table.get(key)
        if head is None:
            self.report.unknown_labels[f"{key[0]} -> {' '.join(key[1])}"] += 1
            return self.fallback(node)
        return head


@dataclasses.dataclass
class Dependencies:
    """One sentence's dependency tree.

    Attributes:
      words: [n] the words.
      tags: [n] their POS tags (None for a word with no pre-terminal).
      heads: [n] int, 0-based index of each word's head; the root heads itself.
    """

    words: list[str]
    tags: list[str | None]
    heads: np.ndarray

    def __len__(self) -> int:
        return len(self.words)

    @property
    def root(self) -> int:
        return int(np.flatnonzero(self.heads == np.arange(len(self.heads)))[0])


def _head_arcs(tree: Tree, head_child: Callable[[Tree], int]) -> Dependencies:
    """Words, tags and heads of every leaf (no filtering), iteratively (deep trees are fine)."""
    items: list[Child] = []  # every node and word, in pre-order
    children_of: list[list[int]] = []
    leaf_of: list[int] = []  # item -> leaf index (words) or -1
    words: list[str] = []
    tags: list[str | None] = []
    stack: list[tuple[Child, int]] = [(tree, -1)]
    while stack:
        item, parent = stack.pop()
        index = len(items)
        items.append(item)
        children_of.append([])
        if parent >= 0:
            children_of[parent].append(index)
        if isinstance(item, str):
            leaf_of.append(len(words))
            words.append(item)
            parent_node = items[parent] if parent >= 0 else None
            tags.append(parent_node.label if parent_node is not None and parent_node.is_preterminal() else None)
        else:
            if not item.children:
                raise ValueError(f"constituent ({item.label}) has no children, so no head; normalise the tree first")
            leaf_of.append(-1)
            stack.extend((child, index) for child in reversed(item.children))
    heads = np.full(len(words), -1, dtype=np.int64)
    head_word = leaf_of[:]  # item -> its head word
    for index in range(len(items) - 1, -1, -1):  # children before parents
        item = items[index]
        if isinstance(item, str):
            continue
        kids = children_of[index]
        chosen = head_child(item)
        if not 0 <= chosen < len(kids):
            raise ValueError(f"head finder chose child {chosen} of ({item.label} ...) with {len(kids)} children")
        head_word[index] = head_word[kids[chosen]]
        for k, kid in enumerate(kids):
            if k != chosen:
                heads[head_word[kid]] = head_word[index]
    if not words:
        raise ValueError("a tree with no words has no dependencies")
    heads[head_word[0]] = head_word[0]
    return Dependencies(words, tags, heads)


def keep_tokens(deps: Dependencies, keep: np.ndarray, report: HeadReport | None = None, *,
                dropped_root: str = "rechain") -> Dependencies | None:
    """The sentence without the words where `keep` is False, heads climbed past them.

    Returns None (counted in `report.empty_sentences`) when nothing is kept.
    `dropped_root` ("rechain" or "udgn_release", `DROPPED_ROOT_RULES`): what the
    words that climbed to a dropped root head; see the module docstring.
    """
    if dropped_root not in DROPPED_ROOT_RULES:
        raise ValueError(f"dropped_root must be one of {DROPPED_ROOT_RULES}, got {dropped_root!r}")
    report = report if report is not None else HeadReport()
    keep = np.asarray(keep, dtype=bool)
    n = len(deps)
    kept = np.flatnonzero(keep)
    report.filtered_tokens += n - len(kept)
    if len(kept) == 0:
        report.empty_sentences += 1
        return None
    heads = deps.heads
    new_index = np.full(n, -1, dtype=np.int64)
    new_index[kept] = np.arange(len(kept))
    old_root = deps.root
    new_heads = np.empty(len(kept), dtype=np.int64)
    orphans = []  # kept words that climbed to a dropped root
    for new_i, i in enumerate(kept):
        h = heads[i]
        while not keep[h] and h != old_root:
            h = heads[h]
        if keep[h]:
            new_heads[new_i] = new_index[h]
        else:
            orphans.append(new_i)
    if orphans:
        report.reheaded_roots += 1
        if dropped_root == "udgn_release":
            new_heads[orphans] = orphans  # the release climbs to ROOT (0) and makes each its own root
        else:
            _rechain(new_heads, orphans, kept[orphans], old_root)
    return Dependencies([deps.words[i] for i in kept], [deps.tags[i] for i in kept], new_heads)


def _rechain(new_heads: np.ndarray, orphans: list[int], positions: np.ndarray, old_root: int) -> None:
    """One root among the orphans (nearest the old root, ties right), the others chained towards it."""
    distance = np.abs(positions - old_root) * 2 - (positions > old_root)  # ties go right
    root_k = int(np.argmin(distance))
    for k, orphan in enumerate(orphans):
        if k < root_k:
            new_heads[orphan] = orphans[k + 1]
        elif k > root_k:
            new_heads[orphan] = orphans[k - 1]
        else:
            new_heads[orphan] = orphan


def dependencies(
    tree: Tree,
    head_finder: Callable[[Tree], int] | None = None,
    *,
    keep_tags: Iterable[str] | None = None,
    report: HeadReport | None = None,
    dropped_root: str = "rechain",
) -> Dependencies | None:
    """The dependency tree of a constituency tree.

    Args:
      tree: a tree (normalised or not: `-NONE-` words are words here, and
        dropped by `keep_tags` like any other tag).
      head_finder: node -> head child index; default `CollinsHeadFinder`
        counting into `report`.
      keep_tags: keep only words with these tags (e.g. `WORD_TAGS`, as the
        release); None keeps every word. Words without a tag are kept.
      report: counts (unknown labels, filtered words, ...).
      dropped_root: "rechain" (default) or "udgn_release": the root rule of
        `keep_tokens` when filtering drops the root word.
    Returns:
      The `Dependencies`, or None when filtering leaves no word (counted).
    """
    report = report if report is not None else HeadReport()
    finder = head_finder if head_finder is not None else CollinsHeadFinder(report=report)
    deps = _head_arcs(tree, finder)
    report.num_trees += 1
    if keep_tags is None:
        return deps
    return keep_tagged(deps, keep_tags, report, dropped_root=dropped_root)


def keep_tagged(deps: Dependencies, keep_tags: Iterable[str], report: HeadReport | None = None, *,
                dropped_root: str = "rechain") -> Dependencies | None:
    """`keep_tokens` of the words whose tag is in `keep_tags` (or that have no tag): the release's filter."""
    keep_set = set(keep_tags)
    return keep_tokens(deps, np.array([t is None or t in keep_set for t in deps.tags], dtype=bool), report,
                       dropped_root=dropped_root)


def check_heads(heads: Sequence[int] | np.ndarray) -> str | None:
    """None when `heads` (0-based, root heads itself) is a tree, else what is wrong.

    A tree: every head in range, exactly one root, and every word reaches the
    root (no cycle).
    """
    heads = np.asarray(heads, dtype=np.int64)
    n = len(heads)
    if n == 0:
        return "no words"
    bad = np.flatnonzero((heads < 0) | (heads >= n))
    if len(bad):
        return f"word {bad[0] + 1} has head {heads[bad[0]] + 1}, out of range 1..{n}"
    roots = np.flatnonzero(heads == np.arange(n))
    if len(roots) != 1:
        return f"expected exactly one root, found {len(roots)}"
    reaches = np.zeros(n, dtype=bool)
    reaches[roots[0]] = True
    for start in range(n):
        path = []
        node = start
        while not reaches[node]:
            if node in path:
                cycle = path[path.index(node):]
                return "cycle through words " + " -> ".join(str(i + 1) for i in cycle)
            path.append(node)
            node = int(heads[node])
        reaches[path] = True
    return None


def is_projective(heads: Sequence[int] | np.ndarray) -> bool:
    """True when no two arcs cross (the root's self-arc is not an arc).

    Equivalent to every arc's span being covered by the head's subtree, given a tree.
    """
    heads = np.asarray(heads, dtype=np.int64)
    n = len(heads)
    arcs = [(min(i, int(h)), max(i, int(h))) for i, h in enumerate(heads) if h != i]
    root = [i for i in range(n) if heads[i] == i]
    for a, b in arcs:
        for c, d in arcs:
            if a < c < b < d:
                return False
        # No arc may pass over the root either (the root's virtual arc spans everything).
        if root and a < root[0] < b:
            return False
    return True
