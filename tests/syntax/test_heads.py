"""Collins head rules and dependencies from constituency trees (tgjax.syntax.heads).

Hand-worked heads below are read off the table in
../shared/reference/released-code.md §4.5; the comments show the steps.
Heads are written 1-based with 0 for the root (CoNLL-U) for readability.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import random_trees
from tgjax.syntax import heads as H
from tgjax.syntax.grammar import GrammarError, Rule, WeightedCFG
from tgjax.syntax.trees import Tree, parse


def conll_heads(deps: H.Dependencies) -> list[int]:
    return [0 if h == i else int(h) + 1 for i, h in enumerate(deps.heads)]


def collins(text: str, **kwargs) -> tuple[list[str], list[int], H.HeadReport]:
    report = H.HeadReport()
    deps = H.dependencies(parse(text, normalise=False), report=report, **kwargs)
    return deps.words, conll_heads(deps), report


def test_simple_clause_with_function_tag():
    # NP-SBJ -> NP: rightdis {NN ...} from the right finds NN "dog".
    # VP: left, TO absent, VBD "chased". S: left TO, IN absent, VP found.
    words, heads, report = collins(
        "(S (NP-SBJ (DT The) (NN dog)) (VP (VBD chased) (NP (DT the) (NN cat))) (. .))"
    )
    assert words == ["The", "dog", "chased", "the", "cat", "."]
    assert heads == [2, 3, 0, 5, 3, 3]
    assert not report.unknown_labels


def test_prepositional_phrase_and_copula():
    # PP: right-scan for IN: "in". VP: VBZ "is" (Collins: the copula heads). ADVP absent.
    _, heads, _ = collins("(S (NP (PRP it)) (VP (VBZ is) (PP (IN in) (NP (DT the) (NN park)))))")
    assert heads == [2, 0, 2, 5, 3]


def collins_with(text: str, coordination: str) -> list[int]:
    return conll_heads(H.dependencies(parse(text, normalise=False), H.CollinsHeadFinder(coordination=coordination)))


FRUIT = "(NP (NN apples) (, ,) (NNS pears) (, ,) (CC and) (NNS plums))"


def test_coordination_as_corenlp_stops_at_punctuation():
    # NP: rightdis finds NNS "plums" (index 5) after CC (index 4); index 3 is "," so CoreNLP's
    # loop re-tests that one child until it runs off the start: the head stays "plums".
    _, heads, _ = collins(FRUIT)
    assert heads == [6, 6, 6, 6, 6, 0]
    _, heads, _ = collins("(NP (NNS cats) (, ,) (CC and) (NNS dogs))")
    assert heads == [4, 4, 4, 0]
    # Without the comma: index 2 -> 0 directly ("cats").
    _, heads, _ = collins("(NP (NNS cats) (CC and) (NNS dogs))")
    assert heads == [0, 1, 1]
    # Head at index 1 after a CC at 0: no move (needs index >= 2).
    _, heads, _ = collins("(NP (CC both) (NNS dogs))")
    assert heads == [2, 0]


def test_coordination_fix_sees_only_a_head_a_list_matched():
    # UCP: "right" with no categories, so no list matches and the rightmost child ("red")
    # is CoreNLP's fallback, returned before the coordination fix: it stays.
    text = "(UCP (NN state) (CC and) (JJ red))"
    assert collins(text)[1] == [3, 3, 0]
    # The earlier behaviour moved the fallback too: "state".
    assert collins_with(text, "skip_punctuation") == [0, 1, 1]


def test_coordination_past_punctuation_is_a_named_switch():
    # skip_punctuation: from "plums" two to the left is "," (index 3), on past it to "pears" (index 2).
    assert collins_with(FRUIT, "skip_punctuation") == [3, 3, 0, 3, 3, 3]
    assert collins_with("(NP (NNS cats) (, ,) (CC and) (NNS dogs))", "skip_punctuation") == [0, 1, 1, 1]
    # All punctuation to the left: the move would run off the start, so the head stays.
    assert collins_with("(NP (, ,) (, ,) (CC and) (NNS dogs))", "skip_punctuation") == [4, 4, 4, 0]
    with pytest.raises(ValueError, match="coordination must be one of"):
        H.CollinsHeadFinder(coordination="collins")


def test_np_falls_to_left_np_then_rightmost():
    # (NP (NP ...) (PP ...)): rightdis {NN ...} sees NP, PP: none; left {NP}: index 0.
    _, heads, _ = collins("(NP (NP (DT a) (NN cup)) (PP (IN of) (NP (NN tea))))")
    assert heads == [2, 0, 2, 3]
    # (NP (DT this)): unary. (NP (DT all) (DT these)): no list matches; the last
    # list is rightdis, so the rightmost child.
    _, heads, _ = collins("(NP (DT all) (DT these))")
    assert heads == [2, 0]


def test_sbar_takes_the_wh_phrase_and_empty_rules_take_their_side():
    _, heads, _ = collins("(SBAR (WHNP (WDT that)) (S (VP (VBZ barks))))")
    assert heads == [0, 1]
    # FRAG: right with no categories -> the rightmost child; INTJ: left -> leftmost.
    _, heads, _ = collins("(FRAG (NN no) (NN way))")
    assert heads == [2, 0]
    _, heads, _ = collins("(INTJ (UH oh) (UH well))")
    assert heads == [0, 1]
    # ADVP: right, so of two RB the right one; ADJP: left, so of two JJ the left one.
    _, heads, _ = collins("(ADVP (RB very) (RB much))")
    assert heads == [2, 0]
    _, heads, _ = collins("(ADJP (JJ big) (JJ red))")
    assert heads == [0, 1]


def test_unknown_label_is_counted_and_takes_the_leftmost_child():
    words, heads, report = collins("(S (FOO (NN a) (NN b)) (VP (VBZ c)))")
    assert heads == [3, 1, 0]
    assert report.unknown_labels == {"FOO": 1}
    assert "FOO x1" in report.summary()


def test_nml_is_unknown_to_collins_unless_read_as_np():
    text = "(NP (NML (NN Complex) (NN trait)) (NN analysis))"
    _, heads, report = collins(text)
    # NML unknown: leftmost child, "Complex" heads "trait". NP: rightdis NN -> "analysis".
    assert heads == [3, 1, 0] and report.unknown_labels == {"NML": 1}
    finder = H.CollinsHeadFinder(H.collins_rules(nml_as_np=True))
    deps = H.dependencies(parse(text), finder)
    assert conll_heads(deps) == [2, 3, 0] and not finder.report.unknown_labels


def test_filtered_head_climbs_and_punctuation_is_dropped():
    # PRN: left, no categories -> leftmost child, the "-LRB-" pre-terminal; so "grain"
    # depends on "-LRB-", which depends on "rice" (outer NP: rightdis sees NP, PRN: none;
    # left {NP}: index 0). Filtering drops -LRB-, -RRB- and ".", and "grain" climbs to "rice".
    text = "(S (NP (NP (NN rice)) (PRN (-LRB- -LRB-) (NP (NN grain)) (-RRB- -RRB-))) (VP (VBZ grows)) (. .))"
    _, full, _ = collins(text)
    assert full == [5, 1, 2, 2, 0, 5]
    words, heads, report = collins(text, keep_tags=H.WORD_TAGS)
    assert words == ["rice", "grain", "grows"]
    assert heads == [3, 1, 0]
    assert report.filtered_tokens == 3 and report.reheaded_roots == 0


def test_none_element_is_dropped_by_the_tag_filter():
    # A raw (not normalised) tree: the -NONE- trace is a word until filtered.
    text = "(S (NP-SBJ (-NONE- *-1)) (VP (TO to) (VP (VB go))))"
    _, full, _ = collins(text)
    # S: left TO (absent among NP, VP), IN, VP -> VP; VP: left TO -> "to"; inner VP: "go".
    assert full == [2, 0, 2]
    words, heads, _ = collins(text, keep_tags=H.WORD_TAGS)
    assert words == ["to", "go"] and heads == [0, 1]


def test_dropped_root_is_replaced_by_the_nearest_kept_word_and_chained():
    # (X ...) is right-headed: the root is the final ":"; every other word depends on it.
    # Dropping it leaves three orphans; the nearest ("c") becomes the root, the others chain.
    words, heads, report = collins("(LST (NN a) (NN b) (NN c) (: :))", keep_tags=H.WORD_TAGS)
    assert words == ["a", "b", "c"]
    assert heads == [2, 3, 0]
    assert report.reheaded_roots == 1
    assert H.is_projective(np.array(heads) - 1 + (np.array(heads) == 0) * (np.arange(3) + 1))


def test_dropped_root_as_the_release_makes_each_orphan_its_own_root():
    # The same tree: a, b, c all depend on the dropped ":" root; the release climbs them to ROOT,
    # so each heads itself (three roots).
    words, heads, report = collins("(LST (NN a) (NN b) (NN c) (: :))", keep_tags=H.WORD_TAGS,
                                   dropped_root="udgn_release")
    assert words == ["a", "b", "c"] and heads == [0, 0, 0] and report.reheaded_roots == 1
    # Words that reach a kept word first keep it: FRAG is right-headed, so "." is the root;
    # "the" -> "dog" (NP), "dog" and "barks" -> "."; only those two climb to ROOT.
    text = "(FRAG (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))"
    words, heads, _ = collins(text, keep_tags=H.WORD_TAGS, dropped_root="udgn_release")
    assert words == ["the", "dog", "barks"] and heads == [2, 0, 0]
    # Re-chaining instead: "barks" (nearest the old root) is the root, "dog" chains to it.
    assert collins(text, keep_tags=H.WORD_TAGS)[1] == [2, 3, 0]
    # A kept root: both conventions agree.
    text = "(S (NP (NNS dogs)) (VP (VBP bark)) (. .))"
    assert collins(text, keep_tags=H.WORD_TAGS, dropped_root="udgn_release")[1] == [2, 0]
    assert collins(text, keep_tags=H.WORD_TAGS)[1] == [2, 0]
    with pytest.raises(ValueError, match="dropped_root must be one of"):
        collins(text, keep_tags=H.WORD_TAGS, dropped_root="release")


def test_sentence_with_no_word_left_is_counted():
    report = H.HeadReport()
    assert H.dependencies(parse("(S (. .))"), keep_tags=H.WORD_TAGS, report=report) is None
    assert report.empty_sentences == 1


def test_constituent_without_children_is_refused():
    with pytest.raises(ValueError, match=r"\(NP\) has no children"):
        H.dependencies(Tree("S", [Tree("NP", []), Tree("VP", [Tree("VBZ", ["go"])])]))


def test_one_word_sentence_heads_itself():
    deps = H.dependencies(parse("(NN word)"))
    assert deps.heads.tolist() == [0] and deps.root == 0


# --------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(random_trees(max_depth=5, max_children=4))
def test_heads_form_a_projective_tree(tree):
    report = H.HeadReport()
    deps = H.dependencies(tree, report=report)
    assert len(deps) == len(tree.leaves())
    assert H.check_heads(deps.heads) is None
    assert H.is_projective(deps.heads)


@settings(max_examples=150, deadline=None)
@given(random_trees(max_depth=5, max_children=4), st.sampled_from([H.WORD_TAGS, {"NN", "DT"}, {"."}]))
def test_filtered_heads_stay_a_projective_tree(tree, keep):
    deps = H.dependencies(tree, keep_tags=keep)
    if deps is None:
        return
    assert H.check_heads(deps.heads) is None
    assert H.is_projective(deps.heads)


def test_check_heads_and_projectivity_by_hand():
    assert H.check_heads([1, 1, 1]) is None
    assert "out of range" in H.check_heads([1, 3, 1])
    assert "exactly one root" in H.check_heads([0, 1, 1])
    assert "cycle" in H.check_heads([1, 0, 2])
    # 0 -> 2 and 1 -> 3 cross.
    assert not H.is_projective([2, 3, 2, 2])
    assert H.is_projective([1, 1, 1, 2])
    # An arc over the root is not projective: root 1, arc 0 <- 2.
    assert not H.is_projective([2, 1, 1])


# ------------------------------------------------------ exact grammar heads


GRAMMAR = """
S -> NP VP^ '.'
NP -> DT NN^ | NP^ PP
PP -> IN^ NP
VP -> VB^ NP | VB
DT -> the
NN -> dog | park
IN -> in
VB -> sees
"""


def test_grammar_marks_heads_and_writes_them_back():
    grammar = WeightedCFG.from_string(GRAMMAR)
    marked = {(r.lhs, r.rhs): r.head for r in grammar.rules}
    assert marked[("S", ("NP", "VP", "."))] == 1
    assert marked[("NP", ("NP", "PP"))] == 0
    assert marked[("VP", ("VB",))] is None
    again = WeightedCFG.from_string(grammar.to_string())
    assert again.rules == grammar.rules
    with pytest.raises(GrammarError, match=r"<string>:1: more than one head"):
        WeightedCFG.from_string("S -> A^ A^\nA -> a")
    with pytest.raises(GrammarError, match="not an index"):
        WeightedCFG([Rule("S", ("a",), 1.0, 3)])


def test_grammar_head_table_gives_exact_heads_on_samples():
    grammar = WeightedCFG.from_string(GRAMMAR)
    table = H.grammar_head_table(grammar.rules, terminals=grammar.terminals)
    finder = H.TableHeadFinder(table)
    tree = parse("(S (NP (NP (DT the) (NN dog)) (PP (IN in) (NP (DT the) (NN park)))) (VP (VB sees)) .)")
    deps = H.dependencies(tree, finder)
    # the -> dog; dog -> sees; in -> dog; park -> in; the -> park; . -> sees.
    assert conll_heads(deps) == [2, 6, 2, 5, 3, 0, 6]
    assert not finder.report.unknown_labels
    rng = np.random.default_rng(0)
    for _ in range(20):
        deps = H.dependencies(grammar.sample(rng), finder)
        assert H.check_heads(deps.heads) is None and H.is_projective(deps.heads)
    assert not finder.report.unknown_labels


def test_grammar_head_table_refuses_unmarked_and_conflicting_rules():
    with pytest.raises(ValueError, match="no head child marked"):
        H.grammar_head_table(WeightedCFG.from_string("S -> A B\nA -> a\nB -> b").rules)
    grammar = WeightedCFG.from_string("S -> A_x^ B | A_y B^\nA_x -> a\nA_y -> a\nB -> b")
    with pytest.raises(ValueError, match="different heads"):
        H.grammar_head_table(grammar.rules, relabel=lambda name: name.split("_")[0])


def test_builtin_treebank_heads_are_exact_and_complete():
    from tgjax.data import corpora

    grammar = corpora.builtin_grammar()
    table = H.grammar_head_table(grammar.rules, corpora.ptb_label, grammar.terminals)
    finder = H.TableHeadFinder(table)
    for tree in corpora.builtin_treebank("valid", num_sentences=50):
        deps = H.dependencies(tree, finder)
        assert H.check_heads(deps.heads) is None and H.is_projective(deps.heads)
        # The main verb is the root unless copular (then the adjective); "." hangs on it.
        root_tag = deps.tags[deps.root]
        assert root_tag in ("VBZ", "VBP", "JJ")
        assert deps.heads[-1] == deps.root
    assert not finder.report.unknown_labels
