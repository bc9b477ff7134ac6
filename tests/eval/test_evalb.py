"""EVALB: hand-counted sentences and corpora, EVALB's output layout, the CLI, and an oracle on real trees.

Every expected number below was counted by hand from the rules in
`tgjax/eval/evalb.py`'s docstring (which follow evalb.c); the comments give
the brackets as label[start,end) over the words that remain after deletion.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import shared_data_dir
from tgjax.eval import evalb as E
from tgjax.eval.evalb import COLLINS, KEEP_PUNCT, EvalbError, evalb, evalb_files, main_f1, right_branching
from tgjax.syntax import trees as T

# (gold, pred) pairs; see the per-row expectations in ROWS_COLLINS / ROWS_KEEP_PUNCT.
SENTENCES = [
    # A. TOP, function tags + index, a -NONE- object, PRT vs ADVP, final period.
    #    gold: TOP deleted; S[0,4) NP[0,2) VP[2,4) PRT[3,4); NP over -NONE- spans nothing -> removed.
    #    pred: S[0,4) NP[0,2) VP[2,4) ADVP[3,4) -> 4 matches (ADVP = PRT); tag RP vs RB wrong.
    #    Length: The dog ran off . = 5 (punctuation counts, -NONE- does not).
    ("(TOP (S (NP-SBJ-1 (DT The) (NN dog)) (VP (VBD ran) (PRT (RP off)) (NP (-NONE- *T*-1))) (. .)))",
     "(S (NP (DT The) (NN dog)) (VP (VBD ran) (ADVP (RB off))) (. .))"),
    # B. Unary chains count with multiplicity: gold S NP NP VP (4), pred S NP VP VP VP (5);
    #    matches S, one NP, one VP = 3.
    ("(S (NP (NP (DT a) (NN b))) (VP (VBZ c)))",
     "(S (NP (DT a) (NN b)) (VP (VP (VP (VBZ c)))))"),
    # C. gold S[0,4) NP[0,2) VP[2,4) NP[3,4); pred S[0,4) X[0,3) NP[3,4): 2 matches;
    #    X[0,3) crosses VP[2,4) -> 1 crossing.
    ("(S (NP (DT a) (NN b)) (VP (VBZ c) (NP (NN d))))",
     "(S (X (DT a) (NN b) (VBZ c)) (NP (NN d)))"),
    # D. Same spans, swapped labels: only S matches (1 of 3); unlabelled: 3 of 3.
    ("(S (NP (NN a)) (VP (VB b)))",
     "(S (VP (NN a)) (NP (VB b)))"),
    # E. Punctuation attached differently. COLLINS: both S[0,2) NP[0,1) VP[1,2) -> 3/3.
    #    keep_punct: gold S[0,4) NP[0,1) VP[2,3), pred S[0,4) NP[0,2) VP[2,4) -> 1/3, no crossing.
    ("(S (NP (NNP John)) (, ,) (VP (VBD left)) (. .))",
     "(S (NP (NNP John) (, ,)) (VP (VBD left) (. .)))"),
    # F. No parse: a skip sentence.
    ("(S (NN a) (NN b))", ""),
    # G. The period tagged NN in the prediction: COLLINS deletes it from gold only ->
    #    Length unmatch (1|2), an error. keep_punct: valid, S 1/1, tags 1 of 2.
    ("(S (NN a) (. .))",
     "(S (NN a) (NN .))"),
]

# (length, status, matched, gold, test, crossing, words, correct tags)
ROWS_COLLINS = [
    (5, 0, 4, 4, 4, 0, 4, 3),
    (3, 0, 3, 4, 5, 0, 3, 3),
    (4, 0, 2, 4, 3, 1, 4, 4),
    (2, 0, 1, 3, 3, 0, 2, 2),
    (4, 0, 3, 3, 3, 0, 2, 2),
    (2, 2, 0, 0, 0, 0, 0, 0),
    (2, 1, 0, 0, 0, 0, 0, 0),
]
ROWS_KEEP_PUNCT = [
    (5, 0, 4, 4, 4, 0, 5, 4),
    (3, 0, 3, 4, 5, 0, 3, 3),
    (4, 0, 2, 4, 3, 1, 4, 4),
    (2, 0, 1, 3, 3, 0, 2, 2),
    (4, 0, 1, 3, 3, 0, 4, 4),
    (2, 2, 0, 0, 0, 0, 0, 0),
    (2, 0, 1, 1, 1, 0, 2, 1),
]


def _row_tuple(row: E.SentenceResult):
    return (row.length, row.status, row.matched, row.gold_brackets, row.test_brackets, row.crossing,
            row.words, row.correct_tags)


def _block(title, n, err, skip, valid, r, p, f, cm, ac, nc, two, tag):
    return "\n".join([
        f"-- {title} --",
        f"Number of sentence        = {n:6d}",
        f"Number of Error sentence  = {err:6d}",
        f"Number of Skip  sentence  = {skip:6d}",
        f"Number of Valid sentence  = {valid:6d}",
        f"Bracketing Recall         = {r}",
        f"Bracketing Precision      = {p}",
        f"Bracketing FMeasure       = {f}",
        f"Complete match            = {cm}",
        f"Average crossing          = {ac}",
        f"No crossing               = {nc}",
        f"2 or less crossing        = {two}",
        f"Tagging accuracy          = {tag}",
    ])


def test_collins_rows_hand_counted():
    gold, pred = zip(*SENTENCES)
    result = evalb(gold, pred)
    assert [_row_tuple(r) for r in result.sentences] == ROWS_COLLINS
    assert [r.id for r in result.sentences] == list(range(1, 8))
    assert result.sentences[5].message == "test sentence is empty (skipped)"
    assert result.sentences[6].message == "Length unmatch (1|2)"
    # Row layout, exactly as evalb.c's printf formats give it.
    assert [result.sentences[i].format_row() for i in (0, 2, 5)] == [
        "   1    5    0  100.00 100.00     4      4    4      0      4     3    75.00",
        "   3    4    0   50.00  66.67     2      4    3      1      4     4   100.00",
        "   6    2    2    0.00   0.00     0      0    0      0      0     0     0.00",
    ]


def test_collins_summary_hand_counted():
    # Valid A-E: matched 4+3+2+1+3 = 13, gold 4+4+4+3+3 = 18, test 4+5+3+3+3 = 18 -> 72.22 each.
    # Complete match: A and E of 5 (40%); crossings 1 (0.20 per sentence, 4/5 without);
    # tags 3+3+4+2+2 = 14 of 4+3+4+2+2 = 15 words (93.33%).
    gold, pred = zip(*SENTENCES)
    result = evalb(gold, pred, "collins")
    a = result.all
    assert (a.num_sentences, a.num_error_sentences, a.num_skip_sentences, a.num_valid_sentences) == (7, 1, 1, 5)
    assert (a.matched_brackets, a.gold_brackets, a.test_brackets) == (13, 18, 18)
    assert a.bracketing_recall == pytest.approx(100 * 13 / 18)
    assert a.bracketing_precision == pytest.approx(100 * 13 / 18)
    assert a.bracketing_fmeasure == pytest.approx(100 * 13 / 18)
    assert result.f1 == a.bracketing_fmeasure
    assert a.complete_match == pytest.approx(40.0)
    assert a.average_crossing == pytest.approx(0.2)
    assert a.no_crossing == pytest.approx(80.0)
    assert a.two_or_less_crossing == pytest.approx(100.0)
    assert a.tagging_accuracy == pytest.approx(100 * 14 / 15)
    block = _block("All", 7, 1, 1, 5, " 72.22", " 72.22", " 72.22", " 40.00", "  0.20", " 80.00", "100.00", " 93.33")
    block40 = block.replace("-- All --", "-- len<=40 --")
    assert result.summary() == f"=== Summary ===\n\n{block}\n\n{block40}\n"
    assert result.len40 == dataclasses.replace(result.all, title="len<=40")
    # The totals line under the rows.
    assert result.totals_line() == "                 72.22  72.22     13    18    18      1     15    14    93.33"
    full = result.format().splitlines()
    assert full[0].startswith("  Sent.") and full[3] == result.sentences[0].format_row()
    assert full[10] == "=" * 76 and full[11] == result.totals_line() and full[12] == "=== Summary ==="
    assert len(result.errors) == 2 and "gold #6" in result.errors[0] and "Length unmatch (1|2)" in result.errors[1]


def test_keep_punct_hand_counted():
    # matched 4+3+2+1+1+1 = 12, gold and test 4+4+4+3+3+1 = 19 -> 63.16; G becomes valid;
    # complete A and G of 6; crossing 1/6 = 0.17; tags 4+3+4+2+4+1 = 18 of 5+3+4+2+4+2 = 20.
    gold, pred = zip(*SENTENCES)
    result = evalb(gold, pred, "keep_punct")
    assert [_row_tuple(r) for r in result.sentences] == ROWS_KEEP_PUNCT
    block = _block("All", 7, 0, 1, 6, " 63.16", " 63.16", " 63.16", " 33.33", "  0.17", " 83.33", "100.00", " 90.00")
    assert result.all.format() == block
    assert result.params is KEEP_PUNCT


def test_unlabeled_counts_spans_only():
    # B keeps 3 (the second NP[0,2) still has no partner), D rises to 3: 4+3+2+3+3 = 15 of 18.
    gold, pred = zip(*SENTENCES)
    result = evalb(gold, pred, unlabeled=True)
    assert [r.matched for r in result.sentences[:5]] == [4, 3, 2, 3, 3]
    assert result.all.bracketing_recall == pytest.approx(100 * 15 / 18)
    assert result.params == dataclasses.replace(COLLINS, labeled=False)


def test_trees_score_like_their_strings():
    # `parse` drops -NONE- and function tags itself; EVALB's numbers do not change.
    gold, pred = zip(*SENTENCES)
    as_trees = evalb([T.parse(g) for g in gold], [T.parse(p) if p else None for p in pred])
    assert [_row_tuple(r) for r in as_trees.sentences] == ROWS_COLLINS


def test_crossing_counts_test_brackets():
    # One test bracket C[1,3) crossing both gold A[0,2) and B[2,4) is one crossing ...
    one = evalb(["(S (A (X a) (X b)) (B (X c) (X d)))"], ["(S (X a) (C (X b) (X c)) (X d))"])
    assert one.sentences[0].crossing == 1
    # ... and two test brackets crossing the same gold bracket are two.
    two = evalb(["(S (X a) (C (X b) (X c)) (X d))"], ["(S (A (X a) (X b)) (B (X c) (X d)))"])
    assert two.sentences[0].crossing == 2
    assert two.all.no_crossing == 0.0 and two.all.two_or_less_crossing == 100.0


def test_brackets_over_nothing_and_label_tails():
    # NP over -NONE- spans nothing and is removed on the gold side: S[0,1) VP[0,1) both sides.
    empty = evalb(["(S (NP-SBJ (-NONE- *)) (VP (VB go)))"], ["(S (VP (VB go)))"]).sentences[0]
    assert (empty.matched, empty.gold_brackets, empty.test_brackets, empty.length) == (2, 2, 2, 1)
    # '=' starts a tail too; tags are not cut (NN-X vs NN is a tagging error).
    tails = evalb(["(S (PP=2 (IN in) (NN-X x)) (VB go))"], ["(S (PP (IN in) (NN x)) (VB go))"]).sentences[0]
    assert (tails.matched, tails.gold_brackets, tails.correct_tags, tails.words) == (2, 2, 2, 3)
    # A bracket labelled with a deleted label goes, its children stay: (, ...) here.
    comma = evalb(["(S (, (NN a) (NN b)))"], ["(S (NN a) (NN b))"]).sentences[0]
    assert (comma.matched, comma.gold_brackets, comma.test_brackets) == (1, 1, 1)


def test_unlabelled_ptb_wrapper_is_a_bracket():
    # evalb.c reads `( (S ...) )` as a bracket labelled "" over the whole sentence.
    one_side = evalb(["( (S (NN a) (NN b)) )"], ["(S (NN a) (NN b))"]).sentences[0]
    assert (one_side.matched, one_side.gold_brackets, one_side.test_brackets) == (1, 2, 1)
    both = evalb(["( (S (NN a) (NN b)) )"], ["( (S (NN a) (NN b)) )"]).sentences[0]
    assert (both.matched, both.gold_brackets, both.test_brackets) == (2, 2, 2)
    # `parse` unwraps it, so parsed trees have no such bracket.
    parsed = evalb([T.parse("( (S (NN a) (NN b)) )")], ["(S (NN a) (NN b))"]).sentences[0]
    assert (parsed.matched, parsed.gold_brackets) == (1, 1)


def test_length_cutoff():
    nouns = " ".join(f"(NN w{i})" for i in range(40))
    gold = [f"(S {nouns} (. .))",            # length 41: punctuation counts -> not in len<=40
            f"(S {nouns} (-NONE- *))",       # length 40: -NONE- does not count
            "(S (NP (NN a)) (VP (VB b)))"]   # 1 match of 3 gold, 1 test
    pred = [f"(S {nouns} (. .))", f"(S {nouns})", "(S (NN a) (VB b))"]
    result = evalb(gold, pred)
    assert [r.length for r in result.sentences] == [41, 40, 2]
    assert [r.words for r in result.sentences] == [40, 40, 2]
    assert (result.all.num_sentences, result.len40.num_sentences) == (3, 2)
    assert result.all.bracketing_recall == pytest.approx(60.0) and result.all.bracketing_precision == 100.0
    assert result.all.bracketing_fmeasure == pytest.approx(75.0)
    assert result.len40.bracketing_recall == pytest.approx(50.0)
    assert result.len40.bracketing_fmeasure == pytest.approx(200 / 3)
    assert result.len40.title == "len<=40"
    wider = evalb(gold, pred, dataclasses.replace(COLLINS, cutoff_len=41))
    assert wider.len40.title == "len<=41" and wider.len40.num_sentences == 3


def test_errors_and_skips():
    gold = ["(S (NN a) (NN b))"] * 5
    pred = ["(S (NN a) (NN c))",     # Words unmatch
            None,                    # skip
            "(S (NN a) b)",          # a word outside a pre-terminal
            "(S (NN a) (NN b)",      # unbalanced
            "(S (. .))"]             # every word deleted: nothing left -> skip
    result = evalb(gold, pred)
    assert [r.status for r in result.sentences] == [1, 2, 1, 1, 2]
    assert result.sentences[0].message == "Words unmatch (b|c)"
    assert "outside a pre-terminal" in result.sentences[2].message
    assert "unbalanced" in result.sentences[3].message
    assert result.all.num_valid_sentences == 0
    assert result.all.bracketing_recall == 0.0 and math.isnan(result.all.bracketing_fmeasure)
    assert result.all.complete_match == 0.0 and result.all.tagging_accuracy == 0.0
    assert "Bracketing FMeasure       =    nan" in result.summary()


def test_no_test_brackets_gives_nan_fmeasure():
    # A valid sentence whose prediction has no bracket: P = R = 0, F = 2PR/(P+R) is NaN.
    result = evalb(["(S (NN a) (NN b))"], ["(NN a) (NN b)"])
    row = result.sentences[0]
    assert (row.status, row.matched, row.gold_brackets, row.test_brackets) == (0, 0, 1, 0)
    assert math.isnan(result.all.bracketing_fmeasure)
    assert result.totals_line() == "      2     2   100.00"  # evalb.c omits the bracket columns


def test_max_errors_stops_where_evalb_exits():
    gold = ["(S (NN a))"] * 4
    pred = ["(S (NN b))"] * 4                    # four Words unmatch errors
    assert evalb(gold, pred, max_errors=3).all.num_error_sentences == 4
    with pytest.raises(EvalbError, match="^4 errors, more than max_errors=2"):
        evalb(gold, pred, max_errors=2)          # evalb -e 2 exits at its 4th error
    with pytest.raises(EvalbError, match="^3 errors, more than max_errors=1"):
        evalb(gold, pred, max_errors=1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="2 gold trees but 1 predicted"):
        evalb(["(S (NN a))"] * 2, ["(S (NN a))"])
    with pytest.raises(EvalbError, match="params must be"):
        evalb(["(S (NN a))"], ["(S (NN a))"], "no-such-setting")
    with pytest.raises(TypeError, match="got int"):
        evalb([3], ["(S (NN a))"])


def test_binarised_unlabelled_hand_counted():
    gold = "(S (NP (DT the) (JJ big) (NN dog)) (VP (VBZ barks)) (. .))"
    # Right-binarised, unaries and pre-terminals collapsed:
    #   S[0,5) NP[0,3) @NP[1,3) @S[3,5)  (VP is a unary over "barks"; punctuation kept).
    words = ["the", "big", "dog", "barks", "."]
    rb = right_branching(words)           # X[0,5) X[1,5) X[2,5) X[3,5): matches [0,5) and [3,5)
    same = "(X (X the (X big dog)) (X barks .))"
    result = evalb([gold, gold], [rb, same], binarised=True)
    assert [(r.matched, r.gold_brackets, r.test_brackets) for r in result.sentences] == [(2, 4, 4), (4, 4, 4)]
    assert result.all.bracketing_fmeasure == pytest.approx(75.0)
    assert result.all.tagging_accuracy == 100.0            # dummy tags
    assert result.params.labeled is False and result.params.delete_labels == ()
    # A unary chain is one span; a one-word sentence has none (and is a complete match).
    unary = evalb(["(S (VP (VB go) (NP (NP (NN home)))))", "(S (VP (VB go)))"],
                  ["(X go home)", "(X go)"], binarised=True)
    assert [(r.matched, r.gold_brackets, r.test_brackets) for r in unary.sentences] == [(1, 1, 1), (0, 0, 0)]
    assert unary.all.complete_match == 100.0
    # Bad binarised input is an error sentence naming the problem.
    bad = evalb([gold], ["(X the big"], binarised=True)
    assert bad.sentences[0].status == 1 and "expected ')'" in bad.sentences[0].message


def test_right_branching():
    assert right_branching("a b c d".split()).to_string() == "(X a (X b (X c d)))"
    assert right_branching(["a", "b"], label="S", tags="XX").to_string() == "(S (XX a) (XX b))"
    assert right_branching(["a", "b", "c"], tags=["DT", "NN", "VBZ"]).to_string() == \
        "(X (DT a) (X (NN b) (VBZ c)))"
    assert right_branching(["a"]).to_string() == "(X a)"
    with pytest.raises(ValueError, match="at least one word"):
        right_branching([])
    with pytest.raises(ValueError, match="2 words but 1 tags"):
        right_branching(["a", "b"], tags=["NN"])
    # Against gold with tags: the sentence C above gets only the top bracket.
    scored = evalb(["(S (NP (DT a) (NN b)) (VP (VBZ c) (NP (NN d))))"],
                   [right_branching(list("abcd"), label="S", tags=["DT", "NN", "VBZ", "NN"])])
    row = scored.sentences[0]
    assert (row.matched, row.gold_brackets, row.test_brackets, row.crossing, row.correct_tags) == (1, 4, 3, 1, 4)


def test_files_and_cli(tmp_path, capsys):
    gold, pred = zip(*SENTENCES)
    gold_file, pred_file = tmp_path / "gold.txt", tmp_path / "pred.txt"
    gold_file.write_text("\n".join(gold) + "\n")
    pred_file.write_text("\n".join(pred) + "\n")
    result = evalb_files(gold_file, pred_file)
    assert [_row_tuple(r) for r in result.sentences] == ROWS_COLLINS
    assert result.errors[0].startswith(f"sentence 6 ({gold_file}:6, {pred_file}:6)")

    assert main_f1(["--gold", str(gold_file), "--pred", str(pred_file)]) == 0
    out, err = capsys.readouterr()
    assert out == result.summary()
    assert f"{pred_file}:7): Length unmatch (1|2)" in err
    files = ["--gold", str(gold_file), "--pred", str(pred_file)]
    assert main_f1([*files, "--params", "keep_punct", "--per-sentence"]) == 0
    out, _ = capsys.readouterr()
    assert out == evalb(gold, pred, "keep_punct").format()
    assert main_f1(["--gold", str(gold_file), "--pred", str(pred_file), "--unlabeled"]) == 0
    assert "Bracketing Recall         =  83.33" in capsys.readouterr()[0]
    assert main_f1(["--gold", str(gold_file), "--pred", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr()[1]

    # A shorter test file: the common prefix is scored and the mismatch reported first.
    pred_file.write_text("\n".join(pred[:5]) + "\n")
    short = evalb_files(gold_file, pred_file)
    assert short.all.num_sentences == 5
    assert short.errors[0].startswith("Number of lines unmatch (too many lines in gold file)")


def test_multi_line_files(tmp_path):
    mrg = tmp_path / "gold.mrg"
    mrg.write_text(
        "( (S\n    (NP-SBJ (DT The) (NN dog))\n    (VP (VBZ barks))\n    (. .)))\n\n"
        "( (S (NP (PRP It)) (VP (VBD left)) (. .)))\n"
    )
    assert E.read_evalb_file(mrg) == [
        (1, "( (S (NP-SBJ (DT The) (NN dog)) (VP (VBZ barks)) (. .)))"),
        (6, "( (S (NP (PRP It)) (VP (VBD left)) (. .)))"),
    ]
    one_per_line = tmp_path / "pred.txt"
    one_per_line.write_text("(S (NN a))\n\n  (S (NN b))\r\n")    # indented, CRLF: still one per line
    assert E.read_evalb_file(one_per_line) == [(1, "(S (NN a))"), (2, ""), (3, "  (S (NN b))\r")]
    assert [r.status for r in evalb_files(one_per_line, one_per_line).sentences] == [0, 2, 0]
    # An unclosed tree ends where a line starts with '(' in column 1.
    mrg.write_text("( (S\n  (NN a)\n( (S\n  (NN b)))\n")
    assert E.read_evalb_file(mrg) == [(1, "( (S (NN a)"), (3, "( (S (NN b)))")]
    assert [r.status for r in evalb_files(mrg, mrg).sentences] == [1, 0]


def test_read_prm(tmp_path):
    prm = tmp_path / "COLLINS.prm"
    prm.write_text(
        "##----##\n## comment\nDEBUG 0\nMAX_ERROR 10\nCUTOFF_LEN 40\nLABELED 1\n"
        "DELETE_LABEL TOP\nDELETE_LABEL -NONE-\nDELETE_LABEL ,\nDELETE_LABEL :\nDELETE_LABEL ``\n"
        "DELETE_LABEL ''\nDELETE_LABEL .\n\nDELETE_LABEL_FOR_LENGTH -NONE-\nEQ_LABEL ADVP PRT\n\n"
        "# EQ_WORD  Example example\n"
    )
    assert E.read_prm(prm) == COLLINS
    gold, pred = zip(*SENTENCES)
    assert evalb(gold, pred, prm).summary() == evalb(gold, pred, "collins").summary()
    prm.write_text("QUOTE_LABEL ''\n")
    with pytest.raises(EvalbError, match=r"COLLINS.prm:1: unknown or unsupported keyword 'QUOTE_LABEL'"):
        E.read_prm(prm)
    prm.write_text("EQ_LABEL ADVP\n")
    with pytest.raises(EvalbError, match="EQ_LABEL expects two values"):
        E.read_prm(prm)


def test_eq_word_and_eq_label_params():
    params = dataclasses.replace(COLLINS, eq_words=(("This", "this"),), eq_labels=(("T", "TT"),))
    row = evalb(["(S (A (P This)) (B (T test)))"], ["(S (A (P this)) (B (TT test)))"], params).sentences[0]
    assert (row.status, row.matched, row.correct_tags) == (0, 3, 2)


# ---------------------------------------------------------------------------
# Real trees against an independent oracle (multiset intersection of spans)
# ---------------------------------------------------------------------------

_PUNCT = {",", ":", "``", "''", "."}


def _oracle_brackets(tree: T.Tree, labeled: bool) -> Counter:
    """COLLINS.prm brackets by a different route: a recursive walk and a Counter (ADVP = PRT by renaming)."""
    brackets: Counter = Counter()
    position = 0

    def walk(node: T.Tree) -> None:
        nonlocal position
        if node.is_preterminal():
            position += node.label not in _PUNCT and node.label != "-NONE-"
            return
        start = position
        for child in node.children:
            walk(child)
        label = re.split(r"[-=]", node.label)[0]
        if position > start and label not in _PUNCT | {"TOP", ""}:
            brackets[({"PRT": "ADVP"}.get(label, label) if labeled else "", start, position)] += 1

    walk(tree)
    return brackets


def _oracle(gold_trees, pred_trees, labeled=True):
    matched = gold_total = test_total = crossing = 0
    for g, p in zip(gold_trees, pred_trees):
        gb, pb = _oracle_brackets(g, labeled), _oracle_brackets(p, labeled)
        matched += sum((gb & pb).values())
        gold_total += sum(gb.values())
        test_total += sum(pb.values())
        for (_, ts, te), count in pb.items():
            if any(gs < ts < ge < te or ts < gs < te < ge for _, gs, ge in gb):
                crossing += count
    return matched, gold_total, test_total, crossing


@pytest.fixture(scope="module")
def tale_test():
    data = shared_data_dir()
    if data is None or not (data / "tale_of_two_cities" / "test.txt").exists():
        pytest.skip("../shared/data/tale_of_two_cities/test.txt is absent")
    return T.read_treebank(data / "tale_of_two_cities" / "test.txt")


def test_tale_of_two_cities_against_oracle(tale_test):
    gold = tale_test
    self_score = evalb(gold, gold)
    assert self_score.all.num_valid_sentences == len(gold) == 293
    assert self_score.all.bracketing_fmeasure == 100.0 and self_score.all.complete_match == 100.0
    assert self_score.all.tagging_accuracy == 100.0 and self_score.all.crossing_brackets == 0

    predictions = {
        "collapsed unaries": [T.collapse_unary(t) for t in gold],
        "binarised": [T.binarise(t) for t in gold],
        "right-branching": [right_branching(T.words(t), label="S", tags=T.pos_tags(t)) for t in gold],
    }
    for name, pred in predictions.items():
        for labeled in (True, False):
            result = evalb(gold, pred, unlabeled=not labeled)
            a = result.all
            assert a.num_error_sentences == a.num_skip_sentences == 0, name
            got = (a.matched_brackets, a.gold_brackets, a.test_brackets, a.crossing_brackets)
            assert got == _oracle(gold, pred, labeled), (name, labeled)
            assert 0 < a.matched_brackets < a.gold_brackets or name != "right-branching"


def test_binarised_mode_on_real_trees(tale_test):
    gold = tale_test[:100]
    # A tree scored against itself: P = R = F1 = 100 and n - 1 brackets per sentence of n >= 2 words.
    result = evalb(gold, gold, binarised=True)
    assert result.all.bracketing_fmeasure == 100.0
    for tree, row in zip(gold, result.sentences):
        n = len(T.words(tree))
        assert row.gold_brackets == row.test_brackets == max(n - 1, 0)
    rb = evalb(gold, [right_branching(T.words(t)) for t in gold], binarised=True)
    assert rb.all.bracketing_precision == pytest.approx(rb.all.bracketing_recall)
    assert 0 < rb.all.bracketing_fmeasure < 100


def test_no_jax_import():
    code = ("import sys; import tgjax.eval.evalb, tgjax.eval.syntaxgym, tgjax.eval.blimp; "
            "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_craft_multi_line_gold_file():
    data = shared_data_dir()
    files = sorted((data / "craft_treebank" / "penn").glob("*.tree")) if data else []
    if not files:
        pytest.skip("../shared/data/craft_treebank is absent")
    path = files[0]
    raw = evalb_files(path, path)            # multi-line trees, ( ... ) wrappers, -NONE-, function tags
    parsed = T.read_treebank(path)           # normalised, wrapper removed
    assert raw.all.num_sentences == raw.all.num_valid_sentences == len(parsed)
    assert raw.all.bracketing_fmeasure == 100.0
    # The only difference from the parsed trees: evalb's bracket for each unlabelled wrapper.
    assert raw.all.gold_brackets == evalb(parsed, parsed).all.gold_brackets + len(parsed)
    assert raw.all.words == evalb(parsed, parsed).all.words
