"""The built-in treebank: determinism, exact agreement, minimal pairs, the registry."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tgjax.data import corpora
from tgjax.syntax.grammar import WeightedCFG
from tgjax.syntax.trees import Tree
from tgjax.syntax.trees import parse as parse_tree

NUMBER_OF_TAG = {"NN": "sg", "NNS": "pl", "VBZ": "sg", "VBP": "pl"}


@functools.cache
def train_sample() -> tuple[Tree, ...]:
    return tuple(corpora.builtin_treebank("train", 1000, seed=0))


def head_number(np_node: Tree) -> str:
    """Number of an NP's head noun: an NP's head is its first NP child's, else its last noun."""
    first = np_node.children[0]
    if isinstance(first, Tree) and first.label == "NP":
        return head_number(first)
    nouns = [c.label for c in np_node.children if isinstance(c, Tree) and c.label in ("NN", "NNS")]
    assert nouns, f"NP without a head noun: {np_node}"
    return NUMBER_OF_TAG[nouns[-1]]


def verb_number(vp: Tree) -> str:
    verb = vp.children[0]
    assert isinstance(verb, Tree) and verb.label in ("VBZ", "VBP"), f"VP without a finite verb: {vp}"
    return NUMBER_OF_TAG[verb.label]


def check_agreement(node: Tree, relativised_number: str | None = None) -> int:
    """Asserts agreement in every clause below `node`; returns how many clauses were checked.

    A clause with a subject NP agrees with it; a subject relative (a clause
    without one) agrees with the noun its SBAR modifies.
    """
    checked = 0
    kids = [c for c in node.children if isinstance(c, Tree)]
    if node.label == "S":
        labels = [c.label for c in kids]
        vp = kids[labels.index("VP")]
        subject = head_number(kids[0]) if labels[0] == "NP" else relativised_number
        assert subject is not None, f"clause without a subject: {node}"
        assert verb_number(vp) == subject, f"agreement violated in {node}"
        checked += 1
    for _i, child in enumerate(kids):
        passed = None
        if node.label == "NP" and child.label == "SBAR":
            passed = head_number(node)
        elif node.label == "SBAR":
            passed = relativised_number
        checked += check_agreement(child, passed)
    return checked


def test_grammar_parses_and_lexicon_categories_are_disjoint():
    g = corpora.builtin_grammar()
    categories = {}
    for r in g.rules:
        if len(r.rhs) == 1 and g.is_terminal(r.rhs[0]):
            categories.setdefault(r.rhs[0], set()).add(corpora.ptb_label(r.lhs))
    ambiguous = {w: tags for w, tags in categories.items() if len(tags) > 1}
    assert ambiguous == {}  # "the" is DT for both numbers: one PTB tag
    assert 250 <= len(g.terminals) <= 450
    assert g.partition_function()["S"] == pytest.approx(1.0, abs=1e-9)
    # Typical sentences are short but recursion is common.
    dist = g.length_distribution(corpora.MAX_SENTENCE_LENGTH)
    assert dist.sum() > 0.99
    mean = (np.arange(len(dist)) * dist).sum() / dist.sum()
    assert 7 < mean < 14


def test_treebank_is_deterministic_by_seed_and_split():
    a = [t.to_string() for t in corpora.builtin_treebank("train", 30, seed=0)]
    assert a == [t.to_string() for t in corpora.builtin_treebank("train", 30, seed=0)]
    assert a[:10] == [t.to_string() for t in corpora.builtin_treebank("train", 10, seed=0)]
    assert a != [t.to_string() for t in corpora.builtin_treebank("train", 30, seed=1)]
    assert a != [t.to_string() for t in corpora.builtin_treebank("valid", 30, seed=0)]
    assert len(corpora.builtin_treebank("test")) == 500
    with pytest.raises(ValueError, match="unknown split"):
        corpora.builtin_treebank("dev")


def test_every_sentence_agrees_and_has_the_expected_shape():
    trees = train_sample()
    clauses = 0
    for tree in trees:
        words = tree.leaves()
        assert tree.label == "S" and words[-1] == "."
        assert tree.children[-1] == Tree(".", ["."])
        assert 3 <= len(words) <= corpora.MAX_SENTENCE_LENGTH
        clauses += check_agreement(tree)
    assert clauses > len(trees) * 1.3  # relative clauses are checked too
    lengths = np.array([len(t.leaves()) for t in trees])
    assert 7 < lengths.mean() < 14 and np.mean((lengths >= 5) & (lengths <= 25)) > 0.8
    # Centre embedding (an object relative inside an object relative) does occur.
    strings = [t.to_string() for t in trees]
    nested = [s for s in strings if s.count("(SBAR") >= 2]
    assert len(nested) > 10


def test_all_yields_have_positive_inside_probability():
    g = corpora.builtin_grammar()
    for tree in train_sample()[:300]:
        assert np.isfinite(g.log_prob(tree.leaves()))


def test_vocabulary_size():
    trees = corpora.builtin_treebank("train")
    vocab = {w for t in trees for w in t.leaves()}
    assert len(trees) == 5000
    assert 300 <= len(vocab) <= len(corpora.builtin_grammar().terminals)


def embedding_depth(node: Tree) -> int:
    """The most PPs and SBARs nested on one path from `node` down to a word."""
    below = max((embedding_depth(c) for c in node.children if isinstance(c, Tree)), default=0)
    return below + (node.label in ("PP", "SBAR"))


def subjects_and_objects(tree: Tree) -> tuple[list[Tree], list[Tree]]:
    """Every clause's subject NP (a clause's first child, when an NP) and every other NP not inside one."""
    subjects, others = [], []

    def visit(node: Tree) -> None:
        kids = [c for c in node.children if isinstance(c, Tree)]
        for i, child in enumerate(kids):
            if node.label == "S" and i == 0 and child.label == "NP":
                subjects.append(child)
            elif child.label == "NP":
                others.append(child)
            visit(child)

    visit(tree)
    return subjects, others


def uncapped_grammar():
    """The built-in grammar with free nesting in subjects too (NP_x_subj -> NP_x)."""
    text = corpora.BUILTIN_GRAMMAR_TEXT
    capped = ["S -> NP_sg_subj VP_sg^ PUNCT 1 | NP_pl_subj VP_pl^ PUNCT 1",
              "S_objrel -> NP_sg_subj VP_sg_gap^ 1 | NP_pl_subj VP_pl_gap^ 1"]
    for rule in capped:
        assert rule in text
        text = text.replace(rule, rule.replace("_subj", ""))
    return WeightedCFG.from_string(text)


def test_training_subjects_have_at_most_one_embedding():
    """No training sentence has a clause whose subject nests two PPs / relative clauses; objects may."""
    subject_depths, object_depths = [], []
    for tree in corpora.builtin_treebank("train"):
        subjects, others = subjects_and_objects(tree)
        subject_depths += [embedding_depth(s) for s in subjects]
        object_depths += [embedding_depth(o) for o in others]
    counts = np.bincount(subject_depths)
    assert len(counts) == 2 and counts[1] > 0.2 * counts.sum()  # depth 0 and 1 only, 1 common
    assert len(subject_depths) > 5000 * 1.1  # object relatives' subjects are counted too
    assert max(object_depths) >= 3 and sum(d >= 2 for d in object_depths) > 100


def test_hand_measured_embedding_depths():
    pp2 = parse_tree("(NP (NP (DT the) (NNS dogs)) (PP (IN near) (NP (NP (DT the) (NN cat)) "
                           "(PP (IN near) (NP (DT the) (NNS houses))))))")
    relative = parse_tree("(NP (NP (DT the) (NN dog)) (SBAR (WHNP (WDT that)) (S (NP (DT the) (NNS cats)) "
                                "(VP (VBP chase)))))")
    assert [embedding_depth(t) for t in (pp2, relative, pp2.children[0])] == [2, 1, 0]


@pytest.mark.parametrize("depth", [2, 3])
def test_deep_minimal_pairs(depth):
    """Depth d: d nested embeddings, d attractors all of the other number, only the verb differs."""
    training, uncapped = corpora.builtin_grammar(), uncapped_grammar()
    pairs = corpora.agreement_minimal_pairs(30, seed=4, depth=depth)
    assert [p.construction for p in pairs[:3]] == list(corpora.CONSTRUCTIONS)
    assert {p.subject_number for p in pairs} == {"sg", "pl"}
    for pair in pairs:
        good, bad = pair.good_words, pair.bad_words
        assert [i for i, (x, y) in enumerate(zip(good, bad)) if x != y] == [pair.verb_index]
        assert len(good) == len(bad)
        check_agreement(pair.good)
        subject = pair.good.children[0]
        assert pair.depth == depth and embedding_depth(subject) == depth
        assert head_number(subject) == pair.subject_number
        other = "pl" if pair.subject_number == "sg" else "sg"
        nouns = [NUMBER_OF_TAG[c.label] for c in _preterminals(subject) if c.label in ("NN", "NNS")]
        assert nouns == [pair.subject_number] + [other] * depth
        assert NUMBER_OF_TAG[_preterminals(pair.bad)[pair.verb_index].label] == other
        # In the language with free nesting, out of the training grammar's.
        assert np.isfinite(uncapped.log_prob(good)) and uncapped.log_prob(bad) == -np.inf
        assert training.log_prob(good) == -np.inf
    with pytest.raises(ValueError, match="depth"):
        corpora.agreement_minimal_pairs(1, depth=0)


def test_minimal_pairs():
    g = corpora.builtin_grammar()
    pairs = corpora.agreement_minimal_pairs(60, seed=3)
    assert [p.construction for p in pairs[:3]] == list(corpora.CONSTRUCTIONS)
    assert {p.subject_number for p in pairs} == {"sg", "pl"}
    for pair in pairs:
        good, bad = pair.good_words, pair.bad_words
        assert len(good) == len(bad)
        diff = [i for i, (x, y) in enumerate(zip(good, bad)) if x != y]
        assert diff == [pair.verb_index]
        assert np.isfinite(g.log_prob(good))
        assert g.log_prob(bad) == -np.inf
        # The good tree agrees everywhere; an attractor of the other number sits
        # between the subject's head and the verb.
        check_agreement(pair.good)
        subject = pair.good.children[0]
        assert head_number(subject) == pair.subject_number
        assert pair.depth == 1 and embedding_depth(subject) == 1
        other = "pl" if pair.subject_number == "sg" else "sg"
        tags = [c.label for c in _preterminals(subject)]
        assert [NUMBER_OF_TAG.get(t) for t in tags if t in ("NN", "NNS")][1:].count(other) >= 1
        bad_verb = _preterminals(pair.bad)[pair.verb_index]
        assert NUMBER_OF_TAG[bad_verb.label] == other
    assert [p.good.to_string() for p in corpora.agreement_minimal_pairs(6, seed=3)] == [
        p.good.to_string() for p in pairs[:6]
    ]


def _preterminals(tree: Tree) -> list[Tree]:
    if tree.is_preterminal():
        return [tree]
    return [p for c in tree.children if isinstance(c, Tree) for p in _preterminals(c)]


def test_registry_and_writer(tmp_path):
    assert "builtin" in corpora.available_corpora()
    trees = corpora.get_corpus("builtin", "valid", num_sentences=5, seed=2)
    assert [t.to_string() for t in trees] == [
        t.to_string() for t in corpora.builtin_treebank("valid", 5, seed=2)
    ]
    with pytest.raises(KeyError, match="unknown corpus"):
        corpora.get_corpus("nope", "train")
    with pytest.raises(ValueError, match="already registered"):
        corpora.register_corpus("builtin", corpora.builtin_treebank)
    path = tmp_path / "valid.txt"
    assert corpora.write_treebank(path, trees) == 5
    assert path.read_text(encoding="utf-8").splitlines() == [t.to_string() for t in trees]


def test_simple_minimal_pairs_have_no_attractor():
    g = corpora.builtin_grammar()
    pairs = corpora.agreement_minimal_pairs(20, seed=5, constructions=("simple",))
    for pair in pairs:
        assert np.isfinite(g.log_prob(pair.good_words)) and g.log_prob(pair.bad_words) == -np.inf
        check_agreement(pair.good)
        subject = pair.good.children[0]
        assert all(c.is_preterminal() for c in subject.children)  # [DT (JJ) NN] and nothing else
        assert head_number(subject) == pair.subject_number
        nouns = [NUMBER_OF_TAG[c.label] for c in _preterminals(subject) if c.label in ("NN", "NNS")]
        assert nouns == [pair.subject_number]
    with pytest.raises(ValueError, match="unknown construction"):
        corpora.agreement_minimal_pairs(1, constructions=("cleft",))
