"""PTB reader/writer, normalisation, binarisation: hand-worked examples, error locations, properties, real data."""

from __future__ import annotations

import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data_dir
from tests.strategies import random_bare_trees, random_trees
from tgjax.syntax import trees as T
from tgjax.syntax.trees import Tree, TreeSyntaxError

# A multi-line .mrg snippet in the PTB's layout: unlabelled wrapper, -NONE- traces,
# function tags and co-indices, and an SBAR that only holds empty elements.
MRG = """\
( (S 
    (NP-SBJ-1 (-NONE- *T*-1) )
    (NP-SBJ-2 (DT The) (NN luxury) (NN auto) (NN maker) )
    (NP-TMP (JJ last) (NN year) )
    (VP (VBD sold) 
      (NP (CD 1,214) (NNS cars) )
      (PP-LOC=3 (IN in) 
        (NP (DT the) (NNP U.S.) ))
      (SBAR (-NONE- 0) 
        (S (-NONE- *T*-2) )))
    (. .) ))
( (S (NP-SBJ (PRP He) ) (VP (VBD left) (PRN (-LRB- -LRB-) (ADVP-DIR (RB away) ) (-RRB- -RRB-) )) (. .) ))
"""

MRG_NORMALISED = [
    "(S (NP (DT The) (NN luxury) (NN auto) (NN maker)) (NP (JJ last) (NN year))"
    " (VP (VBD sold) (NP (CD 1,214) (NNS cars)) (PP (IN in) (NP (DT the) (NNP U.S.)))) (. .))",
    "(S (NP (PRP He)) (VP (VBD left) (PRN (-LRB- -LRB-) (ADVP (RB away)) (-RRB- -RRB-))) (. .))",
]
MRG_RAW = [
    "(S (NP-SBJ-1 (-NONE- *T*-1)) (NP-SBJ-2 (DT The) (NN luxury) (NN auto) (NN maker))"
    " (NP-TMP (JJ last) (NN year)) (VP (VBD sold) (NP (CD 1,214) (NNS cars))"
    " (PP-LOC=3 (IN in) (NP (DT the) (NNP U.S.))) (SBAR (-NONE- 0) (S (-NONE- *T*-2)))) (. .))",
    "(S (NP-SBJ (PRP He)) (VP (VBD left) (PRN (-LRB- -LRB-) (ADVP-DIR (RB away)) (-RRB- -RRB-))) (. .))",
]


def strings(trees: list[Tree]) -> list[str]:
    return [t.to_string() for t in trees]


# ---------------------------------------------------------------------------
# Hand-worked reading and normalisation
# ---------------------------------------------------------------------------


def test_mrg_snippet_is_read_and_normalised():
    assert strings(T.parse_trees(MRG)) == MRG_NORMALISED


def test_mrg_snippet_without_normalisation_keeps_everything_but_the_wrapper():
    assert strings(T.parse_trees(MRG, normalise=False)) == MRG_RAW


def test_normalisation_options_one_at_a_time():
    tags_kept = T.parse_trees(MRG, strip_function_tags=False)
    assert tags_kept[0].to_string() == (
        "(S (NP-SBJ-2 (DT The) (NN luxury) (NN auto) (NN maker)) (NP-TMP (JJ last) (NN year))"
        " (VP (VBD sold) (NP (CD 1,214) (NNS cars)) (PP-LOC=3 (IN in) (NP (DT the) (NNP U.S.)))) (. .))"
    )
    empties_kept = T.parse_trees(MRG, remove_empty=False)
    assert empties_kept[0].to_string() == (
        "(S (NP (-NONE- *T*-1)) (NP (DT The) (NN luxury) (NN auto) (NN maker)) (NP (JJ last) (NN year))"
        " (VP (VBD sold) (NP (CD 1,214) (NNS cars)) (PP (IN in) (NP (DT the) (NNP U.S.)))"
        " (SBAR (-NONE- 0) (S (-NONE- *T*-2)))) (. .))"
    )


@pytest.mark.parametrize("options", [{"normalise": False}, {"strip_function_tags": False}, {"remove_empty": False},
                                     {"unwrap_root": True, "normalise": False}])
def test_every_reader_honours_the_same_options(tmp_path, options):
    path = tmp_path / "snippet.mrg"
    path.write_text(MRG)
    expected = strings(T.parse_trees(MRG, **options))
    assert expected != MRG_NORMALISED  # each option changes what is read, so a dropped one would show
    assert strings(T.read_treebank(path, **options)) == expected
    assert strings(T.iter_treebank(path, **options)) == expected
    assert strings(tree for tree, _ in T.iter_treebank_lines(path, **options)) == expected
    assert strings(T.iter_trees(MRG, **options)) == expected


def test_an_unknown_reading_option_names_the_known_ones(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("(S (NN a))\n")
    for read in (lambda: T.read_treebank(path, unwrap_roots=True), lambda: T.parse("(S (NN a))", max_word=3),
                 lambda: list(T.iter_treebank(path, normalize=False))):
        with pytest.raises(TypeError, match=r"unknown tree-reading option.*expected some of normalise"):
            read()
    # The streaming readers refuse at the call, before anything is iterated (as a misspelt keyword would).
    for stream in (lambda: T.iter_trees("(S (NN a))", unwrap_roots=True),
                   lambda: T.iter_treebank(path, normalize=False),
                   lambda: T.iter_treebank_lines(path, max_word=3)):
        with pytest.raises(TypeError, match=r"unknown tree-reading option"):
            stream()


def test_explicit_normalise_matches_the_reader():
    raw = T.parse_trees(MRG, normalise=False)
    assert strings([T.normalise(t) for t in raw]) == MRG_NORMALISED
    # The input is not modified.
    assert strings(raw) == MRG_RAW


def test_strip_function_tag():
    cases = {
        "NP-SBJ-1": "NP", "PP-LOC=2": "PP", "NP=1": "NP", "S-TTL-3-FRM": "S", "WHNP-1": "WHNP",
        "NP-SBJ-1=2": "NP", "-LRB-": "-LRB-", "-RRB-": "-RRB-", "-NONE-": "-NONE-", "PRP$": "PRP$",
        "NP": "NP", ",": ",",
    }
    assert {label: T.strip_function_tag(label) for label in cases} == cases


def test_root_labels_unwrapped_only_on_request():
    assert T.parse("(ROOT (S (NP (PRP I)) (VP (VBP am))))", unwrap_root=True).to_string() == (
        "(S (NP (PRP I)) (VP (VBP am)))"
    )
    assert T.parse("(TOP (S (NP-SBJ (PRP I))))", unwrap_root=True).to_string() == "(S (NP (PRP I)))"
    assert T.parse("(TOP (S (NP (PRP I))))").label == "TOP"
    # A ROOT over two trees stays; one left unary by -NONE- removal is unwrapped.
    assert T.parse("(ROOT (S (NN a)) (S (NN b)))", unwrap_root=True).label == "ROOT"
    assert T.parse("(ROOT (S (-NONE- *)) (S (NN b)))", unwrap_root=True).to_string() == "(S (NN b))"
    assert T.normalise(T.parse("(ROOT (S (-NONE- *)) (S (NN b)))", normalise=False), unwrap_root=True) == (
        T.parse("(S (NN b))")
    )


def test_normalise_of_nothing_but_empty_elements_raises():
    with pytest.raises(ValueError, match="nothing is left"):
        T.normalise(Tree("S", [Tree("NP", [Tree("-NONE-", ["*T*-1"])])]))


def test_blank_and_odd_spacing():
    tree = T.parse("\n\n  (S\t(NP  (DT the)(NN dog) ) (VP (VBZ barks)))  \n\n")
    assert tree.to_string() == "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"
    # Two trees on one line, and a tree spread over indented lines.
    assert strings(T.parse_trees("(S (NN a)) (S (NN b))\n(S\n  (NN c))")) == ["(S (NN a))", "(S (NN b))", "(S (NN c))"]


def test_continuation_lines_in_column_one():
    text = "(S\n(NP (DT the) (NN dog))\n(VP (VBZ barks)))"
    with pytest.raises(TreeSyntaxError) as info:
        T.parse(text)
    assert (info.value.line, info.value.column) == (2, 1)
    assert "tree_starts_at_line_start=False" in str(info.value)
    assert T.parse(text, tree_starts_at_line_start=False).to_string() == (
        "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"
    )


def test_parse_wants_exactly_one_tree():
    with pytest.raises(TreeSyntaxError, match=r"^<string>:2:3: expected exactly one tree, found a second one$"):
        T.parse("(S (NN a))\n  (S (NN b))")
    with pytest.raises(TreeSyntaxError, match=r"^<string>:1:1: expected a tree, found an empty input$"):
        T.parse("  \n")


# ---------------------------------------------------------------------------
# Errors: file, line and column
# ---------------------------------------------------------------------------


def read_error(tmp_path, text: str, name: str = "train.txt") -> TreeSyntaxError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TreeSyntaxError) as info:
        T.read_treebank(path)
    assert info.value.source == str(path)
    assert str(info.value).startswith(f"{path}:{info.value.line}:{info.value.column}: ")
    return info.value


GOOD_LINE = "(S (NP (DT a) (NN cat)) (VP (VBZ sleeps)))"


def test_error_unclosed_at_end_of_file(tmp_path):
    text = "\n".join([GOOD_LINE] * 11 + ["(S  (NP (DT the) (NN dog)"]) + "\n"
    err = read_error(tmp_path, text)
    assert str(err) == f"{tmp_path / 'train.txt'}:12:26: expected ')' to close '(NP' opened at 12:5, found end of file"
    assert (err.line, err.column) == (12, 26)


def test_error_unclosed_multiline_tree(tmp_path):
    err = read_error(tmp_path, "( (S\n    (NP (DT the) (NN dog))\n    (VP (VBZ barks)\n", "wsj_0001.mrg")
    assert (err.line, err.column) == (3, 20)
    assert err.reason == "expected ')' to close '(VP' opened at 3:5, found end of file"


def test_error_unclosed_tree_followed_by_another(tmp_path):
    err = read_error(tmp_path, f"{GOOD_LINE}\n(S (NP (DT a) (NN dog)) (VP (VBZ barks))\n{GOOD_LINE}\n")
    assert (err.line, err.column) == (3, 1)
    assert err.reason.startswith("expected ')' to close '(S' opened at 2:1, found '(' starting a new tree")


def test_error_empty_tree(tmp_path):
    err = read_error(tmp_path, f"{GOOD_LINE}\n  ()\n")
    assert (err.line, err.column, err.reason) == (2, 3, "found an empty tree '()'")
    err = read_error(tmp_path, "(S (NP (DT a)) ())\n")
    assert (err.line, err.column, err.reason) == (1, 16, "found an empty tree '()'")


def test_error_stray_text(tmp_path):
    err = read_error(tmp_path, f"{GOOD_LINE}\nthe cat (S (NN b))\n")
    assert (err.line, err.column, err.reason) == (2, 1, "expected '(' to start a tree, found 'the'")
    err = read_error(tmp_path, "(S (NP (NN a))) b c)\n")
    assert (err.line, err.column, err.reason) == (1, 17, "expected '(' to start a tree, found 'b'")
    err = read_error(tmp_path, f"{GOOD_LINE})\n")
    assert (err.line, err.column, err.reason) == (1, len(GOOD_LINE) + 1, "expected '(' to start a tree, found ')'")


def test_error_label_missing(tmp_path):
    err = read_error(tmp_path, "(S ( (NP (NN a))))\n")
    assert (err.line, err.column, err.reason) == (1, 4, "expected a label after '(', found '(NP'")
    err = read_error(tmp_path, "( the dog)\n")
    assert (err.line, err.column, err.reason) == (1, 1, "expected a label after '(', found 'the'")
    err = read_error(tmp_path, "( (S (NN a)) (S (NN b)))\n")
    assert (err.line, err.column) == (1, 1)
    assert err.reason == "expected one tree inside the unlabelled '( ... )' wrapper, found 2"


def test_error_tree_of_empty_elements(tmp_path):
    err = read_error(tmp_path, f"{GOOD_LINE}\n( (S (NP-SBJ (-NONE- *T*-1))))\n")
    assert (err.line, err.column) == (2, 1)
    assert "only" not in err.reason and "removing empty elements" in err.reason


def test_error_empty_file(tmp_path):
    for text in ("", "\n  \n\n"):
        err = read_error(tmp_path, text, "empty.txt")
        assert str(err) == f"{tmp_path / 'empty.txt'}:1:1: expected at least one tree, found an empty file"
        trees, report = T.read_treebank(tmp_path / "empty.txt", on_error="skip")
        assert trees == [] and report.num_trees == 0 and report.num_skipped == 0
        assert report.summary() == f"{tmp_path / 'empty.txt'}: read 0 trees (the input is empty)"
    with pytest.raises(TreeSyntaxError, match=r"^<string>:1:1: expected at least one tree, found an empty input$"):
        T.parse_trees("")


def test_error_is_picklable_value_error():
    err = TreeSyntaxError("a.txt", 3, 7, "expected ')'")
    assert isinstance(err, ValueError)
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.source, copy.line, copy.column, copy.reason) == (
        "a.txt:3:7: expected ')'", "a.txt", 3, 7, "expected ')'"
    )


# ---------------------------------------------------------------------------
# Skip mode
# ---------------------------------------------------------------------------


def test_skip_mode_counts_and_resynchronises(tmp_path):
    lines = [
        "(S (NN one))",                      # 1 good
        "(S (NN two)",                       # 2 unclosed: reported where line 3 starts a tree
        "(S (NN three))",                    # 3 good
        "()",                                # 4 empty tree
        "junk words here",                   # 5 stray text
        "(S (NN four)) )",                   # 6 good, then a stray ')'
        "(S ( (NN x)) (NN y))",              # 7 label missing; skipped to its closing ')'
        "(S (NN five))",                     # 8 good
        "( (S (-NONE- *T*)))",               # 9 nothing left after normalisation
        "( (S (NN six)",                     # 10 unclosed at end of file
    ]
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(lines) + "\n")
    trees, report = T.read_treebank(path, on_error="skip")
    assert [t.leaves() for t in trees] == [["one"], ["three"], ["four"], ["five"]]
    assert report.num_trees == 4
    assert report.num_skipped == 7
    assert [(e.line, e.column) for e in report.errors] == [(3, 1), (4, 1), (5, 1), (6, 15), (7, 4), (9, 1), (10, 14)]
    assert report.summary().startswith(f"{path}: read 4 trees, skipped 7\n  {path}:3:1: expected ')'")
    with pytest.raises(TreeSyntaxError) as info:
        T.read_treebank(path)
    assert (info.value.line, info.value.column) == (3, 1)


def test_skip_mode_multiline_resynchronises_at_the_end_of_the_bad_tree():
    text = "( (S\n    (NP (DT the) ())\n    (VP (VBZ barks)))\n)\n( (S (NP (PRP it))))\n"
    trees, report = T.parse_trees(text, on_error="skip")
    assert strings(trees) == ["(S (NP (PRP it)))"]
    assert [(e.line, e.column, e.reason) for e in report.errors] == [(2, 18, "found an empty tree '()'")]


def test_iter_trees_needs_a_report_to_skip():
    with pytest.raises(ValueError, match="ReadReport"):
        list(T.iter_trees("(S a)", on_error="skip"))
    with pytest.raises(ValueError, match="on_error"):
        list(T.iter_trees("(S a)", on_error="ignore"))


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------

DOG = "(S (NP (DT the) (JJ big) (NN dog)) (VP (VBZ barks) (PP (IN at) (NP (PRP me)))) (. .))"


def test_to_string_and_pretty():
    tree = T.parse(DOG)
    assert tree.to_string() == DOG == str(tree)
    assert tree.to_pretty_string() == (
        "(S\n"
        "  (NP (DT the) (JJ big) (NN dog))\n"
        "  (VP\n"
        "    (VBZ barks)\n"
        "    (PP\n"
        "      (IN at)\n"
        "      (NP (PRP me))))\n"
        "  (. .))"
    )
    assert T.parse(tree.to_pretty_string(indent=4)) == tree
    assert Tree("S", []).to_string() == "(S)"
    assert T.parse("(S)", normalise=False) == Tree("S", [])


def test_writer_rejects_what_cannot_be_read_back():
    for bad in (Tree("S", ["two words"]), Tree("", ["a"]), Tree("N(P", ["a"]), Tree("S", [""])):
        with pytest.raises(ValueError, match="cannot write"):
            bad.to_string()


def test_write_and_read_treebank_files(tmp_path):
    trees = T.parse_trees(MRG)
    for name, pretty in (("out.txt", False), ("out.mrg.gz", True), ("out.txt.gz", False)):
        T.write_treebank(trees, tmp_path / name, pretty=pretty)
        assert T.read_treebank(tmp_path / name) == trees
        assert list(T.iter_treebank(tmp_path / name)) == trees


def test_deep_trees_do_not_recurse():
    depth = 20_000
    text = "(X " * depth + "(NN w)" + ")" * depth
    tree = T.parse(text)
    assert tree.to_string() == text
    assert tree == T.parse(text) and tree != T.parse(text.replace("(NN w)", "(NN v)"))
    assert T.unbinarise(T.binarise(tree)) == tree
    assert T.expand_unary(T.collapse_unary(tree)) == tree
    assert T.strip_preterminals(tree).leaves() == ["w"]
    assert T.parse(tree.to_pretty_string(indent=1)) == tree


# ---------------------------------------------------------------------------
# Transforms: hand-worked
# ---------------------------------------------------------------------------


def test_binarise_by_hand():
    tree = T.parse("(NP (DT the) (JJ big) (JJ red) (NN dog))")
    assert T.binarise(tree, "right").to_string() == "(NP (DT the) (@NP (JJ big) (@NP (JJ red) (NN dog))))"
    assert T.binarise(tree, "left").to_string() == "(NP (@NP (@NP (DT the) (JJ big)) (JJ red)) (NN dog))"
    sentence = T.parse(DOG)
    assert T.binarise(sentence).to_string() == (
        "(S (NP (DT the) (@NP (JJ big) (NN dog))) (@S (VP (VBZ barks) (PP (IN at) (NP (PRP me)))) (. .)))"
    )
    assert T.unbinarise(T.binarise(sentence, "left")) == sentence
    with pytest.raises(ValueError, match="starting with '@'"):
        T.binarise(T.parse("(S (@X (NN a)) (NN b))"))
    with pytest.raises(ValueError, match="direction"):
        T.binarise(tree, "up")


def test_unary_chains_by_hand():
    tree = T.parse("(S (VP (VP (VB go))) (NP (NN home)))")
    assert T.collapse_unary(tree).to_string() == "(S (VP+VP (VB go)) (NP (NN home)))"
    assert T.collapse_unary(tree, collapse_preterminals=True).to_string() == "(S (VP+VP+VB go) (NP+NN home))"
    assert T.expand_unary(T.collapse_unary(tree, collapse_preterminals=True)) == tree
    with pytest.raises(ValueError, match="joiner"):
        T.collapse_unary(T.parse("(S+X (NN a))"))


def test_words_tags_and_preterminals_by_hand():
    tree = T.parse(DOG)
    assert T.words(tree) == ["the", "big", "dog", "barks", "at", "me", "."]
    assert T.pos_tags(tree) == ["DT", "JJ", "NN", "VBZ", "IN", "PRP", "."]
    assert T.tagged_words(tree)[:2] == [("the", "DT"), ("big", "JJ")]
    assert T.strip_preterminals(tree).to_string() == "(S (NP the big dog) (VP barks (PP at (NP me))) .)"
    assert T.strip_preterminals(T.parse("(UH hello)")).to_string() == "(UH hello)"
    with pytest.raises(ValueError, match="no POS"):
        T.pos_tags(T.parse("(S (NP the dog))"))


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------

any_tree = st.one_of(random_trees(max_depth=5, max_children=4), random_bare_trees(max_depth=5, max_children=4))


def max_branching(tree: Tree) -> int:
    widest, stack = 0, [tree]
    while stack:
        node = stack.pop()
        widest = max(widest, len(node.children))
        stack.extend(c for c in node.children if isinstance(c, Tree))
    return widest


@settings(deadline=None)
@given(any_tree)
def test_write_then_parse_is_identity(tree):
    assert T.parse(tree.to_string()) == tree
    assert T.parse(tree.to_string(), normalise=False) == tree
    assert T.parse(tree.to_pretty_string()) == tree
    assert T.normalise(tree) == tree


@settings(deadline=None)
@given(st.lists(random_trees(max_depth=3), min_size=1, max_size=5), st.booleans())
def test_many_trees_round_trip(tree_list, pretty):
    text = "\n".join(t.to_pretty_string() if pretty else t.to_string() for t in tree_list)
    assert T.parse_trees(text) == tree_list


@settings(deadline=None)
@given(any_tree, st.sampled_from(["right", "left"]))
def test_binarise_round_trip(tree, direction):
    binary = T.binarise(tree, direction)
    assert max_branching(binary) <= 2
    assert binary.leaves() == tree.leaves()
    assert T.unbinarise(binary) == tree


@settings(deadline=None)
@given(any_tree, st.booleans())
def test_unary_collapse_round_trip(tree, preterminals):
    collapsed = T.collapse_unary(tree, collapse_preterminals=preterminals)
    assert T.expand_unary(collapsed) == tree
    assert collapsed.leaves() == tree.leaves()


@settings(deadline=None)
@given(random_trees())
def test_strip_preterminals_keeps_words(tree):
    stripped = T.strip_preterminals(tree)
    assert stripped.leaves() == tree.leaves() == [w for w, _ in T.tagged_words(tree)]
    assert len(T.pos_tags(tree)) == len(tree.leaves())


# ---------------------------------------------------------------------------
# Real data beside the repository
# ---------------------------------------------------------------------------


def test_tale_of_two_cities_reads_and_round_trips():
    data = shared_data_dir()
    if data is None or not (data / "tale_of_two_cities" / "train.txt").exists():
        pytest.skip("shared/data/tale_of_two_cities/train.txt is absent")
    path = data / "tale_of_two_cities" / "train.txt"
    start = time.perf_counter()
    trees = T.read_treebank(path)
    seconds = time.perf_counter() - start
    print(f"\nread {len(trees)} trees from {path.name} in {seconds:.2f}s: {len(trees) / seconds:,.0f} trees/s")
    assert len(trees) == 6904
    # The file is in canonical one-line form, so writing gives back each line,
    # and with it parse(write(t)) == t for every tree.
    lines = path.read_text().splitlines()
    assert [t.to_string() for t in trees] == lines
    assert T.parse(lines[0]).leaves()[:6] == ["It", "was", "the", "best", "of", "times"]
    _, report = T.read_treebank(path, on_error="skip")
    assert (report.num_trees, report.num_skipped) == (6904, 0)
    for split, count in (("valid", 346), ("test", 293)):
        assert len(T.read_treebank(data / "tale_of_two_cities" / f"{split}.txt")) == count


CRAFT_FIRST = (
    "(TITLE (FRAG (NP (NP (NML (NN Complex) (NN trait)) (NN analysis)) (PP (IN of) (NP (DT the) (NN mouse)"
    " (NN striatum)))) (: :) (S (NP (JJ independent) (NNS QTLs)) (VP (VBP modulate) (NP (NP (NN volume))"
    " (CC and) (NP (NN neuron) (NN number)))))))"
)
CRAFT_FOURTH = (
    "(S (NP (DT The) (NN striatum)) (VP (VBZ plays) (NP (DT a) (JJ pivotal) (NN role)) (PP (IN in) (S (VP"
    " (VBG modulating) (NP (NP (NN motor) (NN activity)) (CC and) (NP (JJR higher) (JJ cognitive)"
    " (NN function))))))) (. .))"
)


def test_craft_treebank_reads_gold_ptb_style_files(tmp_path):
    data = shared_data_dir()
    penn = data / "craft_treebank" / "penn" if data is not None else None
    if penn is None or not (penn / "11319941.tree").exists():
        pytest.skip("shared/data/craft_treebank/penn is absent")
    first = T.read_treebank(penn / "11319941.tree")
    assert first[0].to_string() == CRAFT_FIRST
    assert first[3].to_string() == CRAFT_FOURTH
    for path in (penn / "11319941.tree", penn / "14624252.tree"):  # the second has a blank line
        trees = T.read_treebank(path)
        assert len(trees) == sum(1 for line in path.read_text().splitlines() if line.strip())
        labels = {node.label for tree in trees for node in _nodes(tree)}
        assert T.EMPTY_ELEMENT not in labels
        assert all(T.strip_function_tag(label) == label for label in labels)
        assert {"-LRB-", "-RRB-"} <= labels
        # The fused normalisation of the reader is the explicit `normalise`.
        raw = T.read_treebank(path, normalise=False)
        assert [T.normalise(t) for t in raw] == trees
        # Multi-line layout: the same trees pretty-printed read back identically.
        T.write_treebank(trees, tmp_path / "pretty.mrg", pretty=True)
        assert T.read_treebank(tmp_path / "pretty.mrg") == trees


def _nodes(tree: Tree):
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.children if isinstance(c, Tree))
