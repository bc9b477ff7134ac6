"""SyntaxGym: formula parsing and errors, a hand-worked suite, an independent evaluator on the real suites, circuits."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.conftest import shared_data_dir
from tgjax.eval import syntaxgym as SG
from tgjax.eval.syntaxgym import FormulaError, SuiteResult, parse_formula

# A three-item suite worked by hand with surprisal = number of characters of each word.
#   item 1: verb match "barks" 5, mismatch "bark" 4;             rest 7 vs 7
#   item 2: verb match "bark" 4,  mismatch "barks" 5;            rest 7 vs 7
#   item 3: verb match "purr" 4,  mismatch "purrs" 5; rest "loudly ." 7 vs "very loudly ." 11
# prediction 0, (2;match) < (2;mismatch):                        F, T, T
# prediction 1, [(2;mm) - (2;m)] + [(3;mm) - (3;m)] > 1:         -1 F, 1 F, 5 T
TINY = {
    "meta": {"name": "tiny", "metric": "sum"},
    "region_meta": {"1": "subject", "2": "verb", "3": "rest"},
    "predictions": [
        {"type": "formula", "formula": "(2;%match%) < (2;%mismatch%)"},
        {"type": "formula", "formula": "[(2;%mismatch%) - (2;%match%)] + [(3;%mismatch%) - (3;%match%)] > 1"},
    ],
    "items": [
        {"item_number": n, "conditions": [
            {"condition_name": "match", "regions": [
                {"region_number": 1, "content": subject}, {"region_number": 2, "content": good},
                {"region_number": 3, "content": "loudly ."}]},
            {"condition_name": "mismatch", "regions": [
                {"region_number": 1, "content": subject}, {"region_number": 2, "content": bad},
                {"region_number": 3, "content": rest}]},
        ]}
        for n, subject, good, bad, rest in [
            (1, "The dog", "barks", "bark", "loudly ."),
            (2, "The dogs", "bark", "barks", "loudly ."),
            (3, " The cats ", "purr", "purrs", "very loudly ."),
        ]
    ],
}


def char_surprisals(batch: list[list[str]]) -> list[list[float]]:
    return [[float(len(word)) for word in words] for words in batch]


def test_tiny_suite_hand_worked():
    suite = SG.suite_from_dict(TINY)
    assert suite.name == "tiny" and suite.metric == "sum" and suite.num_sentences == 6
    sentences = list(suite.sentences())
    item, condition, regions = sentences[4]
    assert (item, condition, regions) == (3, "match", ("The cats", "purr", "loudly ."))
    assert sentences[4].text == "The cats purr loudly ."
    assert sentences[5].words == ["The", "cats", "purrs", "very", "loudly", "."]
    assert sentences[5].region_surprisals([3, 4, 5, 4, 6, 1]) == {1: 7.0, 2: 5.0, 3: 11.0}

    result = SG.score_suite(suite, char_surprisals, unit="bits")
    assert result.outcomes.tolist() == [[False, False], [True, False], [True, True]]
    assert result.prediction_accuracies.tolist() == pytest.approx([2 / 3, 1 / 3])
    assert result.accuracy == pytest.approx(0.5)
    assert result.all_predictions_accuracy == pytest.approx(1 / 3)
    assert result.item_numbers == (1, 2, 3)
    # The same through evaluate_suite, regions given as mappings or in region order.
    by_number = {(n, c): {1: 7.0, 2: float(v), 3: 7.0} for (n, c), v in
                 {(1, "match"): 5, (1, "mismatch"): 4, (2, "match"): 4, (2, "mismatch"): 5,
                  (3, "match"): 4}.items()}
    by_number[3, "mismatch"] = [7.0, 5.0, 11.0]
    assert SG.evaluate_suite(suite, by_number, unit="bits").outcomes.tolist() == result.outcomes.tolist()
    # Batching does not change anything.
    batched = SG.score_suite(suite, char_surprisals, unit="bits", batch_size=4)
    assert batched.outcomes.tolist() == result.outcomes.tolist()


def test_mean_metric_and_empty_regions():
    data = json.loads(json.dumps(TINY))
    data["meta"]["metric"] = "mean"
    suite = SG.suite_from_dict(data)
    sentence = next(suite.sentences())
    assert sentence.region_surprisals([3, 3, 5, 6, 1], suite.metric) == {1: 3.0, 2: 5.0, 3: 3.5}
    outcomes = SG.score_suite(suite, char_surprisals, unit="bits").outcomes.tolist()
    assert outcomes == [[False, False], [True, False], [True, True]]
    empty = SG.SuiteSentence(1, "c", ("a", ""), (1, 2))
    assert empty.region_surprisals([2.0]) == {1: 2.0, 2: 0.0}
    assert math.isnan(empty.region_surprisals([2.0], "max")[2])
    with pytest.raises(ValueError, match=r"item 1, condition 'c': got \(2,\) surprisals for 1 words"):
        empty.region_surprisals([1.0, 2.0])


def test_evaluate_suite_errors():
    suite = SG.suite_from_dict(TINY)
    with pytest.raises(ValueError, match="suite tiny: no region surprisals for item 1, condition 'match'"):
        SG.evaluate_suite(suite, {}, unit="nats")
    partial = {(n, c): [1.0, 2.0] for n in (1, 2, 3) for c in ("match", "mismatch")}
    with pytest.raises(ValueError, match="2 region surprisals for 3 regions"):
        SG.evaluate_suite(suite, partial, unit="nats")


def test_equality_tolerance_is_in_bits():
    # SyntaxGym's `=` holds when |x - y| <= 1e-3 + 1e-5·|y| in bits. Surprisals 10 and 10.0009 nats differ by
    # 0.0009 nats, inside that tolerance read as nats (0.0009 <= 0.0011), but 0.0009 / ln 2 = 0.0012984 bits,
    # outside it in bits (1e-3 + 1e-5 · 14.43 = 0.0011443): in nats the pair is not equal.
    data = {"meta": {"name": "eq", "metric": "sum"},
            "predictions": [{"type": "formula", "formula": "(1;%a%) = (1;%b%)"}],
            "items": [{"item_number": 1, "conditions": [
                {"condition_name": c, "regions": [{"region_number": 1, "content": "w"}]} for c in "ab"]}]}
    suite = SG.suite_from_dict(data)
    close = {(1, "a"): [10.0], (1, "b"): [10.0009]}
    assert SG.evaluate_suite(suite, close, unit="nats").outcomes.tolist() == [[False]]
    assert SG.evaluate_suite(suite, close, unit="bits").outcomes.tolist() == [[True]]
    # 0.0007 nats = 0.00101 bits, inside 1e-3 + 1e-5 · 14.43 bits: equal either way.
    closer = {(1, "a"): [10.0], (1, "b"): [10.0007]}
    assert SG.evaluate_suite(suite, closer, unit="nats").outcomes.tolist() == [[True]]
    # score_suite converts the same way.
    surprisals = {"a": 10.0, "b": 10.0009}
    conditions = iter("ab")
    assert SG.score_suite(suite, lambda batch: [[surprisals[next(conditions)]] for _ in batch],
                          unit="nats").outcomes.tolist() == [[False]]
    with pytest.raises(ValueError, match="surprisal unit: expected one of bits, nats, got 'log10'"):
        SG.evaluate_suite(suite, close, unit="log10")


VALUES = {"a": {1: 10.0, 2: 3.0}, "b": {1: 12.0, 2: 1.0}}


@pytest.mark.parametrize("formula, expected", [
    ("(1;%a%) < (1;%b%)", True),
    ("(1;%a%) > (1;%b%)", False),
    ("(*;%a%) > (*;%b%)", False),                      # 13 vs 13: not strictly greater
    ("(*;%a%) = (*;%b%)", True),
    ("1 - 2 + 3 > 1", True),                          # left-associative: (1 - 2) + 3 = 2
    ("2 * 3 - 1 = 5", True),
    ("(1;%b%) / (2;%a%) = 4", True),
    ("-1 < 0", True),
    ("[1 + 1] = (2)", True),
    ("2 > 1 | 1 > 2 & 1 > 2", False),                 # one level, left to right: (T | F) & F
    ("1 > 2 & 1 > 2 | 2 > 1", True),                  # (F & F) | T
    ("[(1;%a%) > 0] & [ (1;%b%) - (1;%a%) > 1.5 ]", True),
    ("10 = 10.0009", True),                           # |d| <= 1e-3 + 1e-5 * |rhs|
    ("10 = 10.0012", False),
    ("1e3 > 999.5", True),
])
def test_formula_semantics(formula, expected):
    assert parse_formula(formula).evaluate(VALUES) is expected


def test_formula_str_and_references():
    f = parse_formula("[(7;%m-1%) < (7;%x_y%)] & [(*;%z%) > 0]")
    assert str(f) == "(((7;%m-1%) < (7;%x_y%)) & ((*;%z%) > 0.0))"
    assert f.references() == [("m-1", 7, 2), ("x_y", 7, 14), ("z", None, 28)]


@pytest.mark.parametrize("formula, column, reason", [
    ("(7;%match% < 3", 1, "expected a region reference '(N;%condition%)', found a malformed one"),
    ("(1;%a%) < (1;%b%) < 2", 19, "chained comparisons are not allowed"),
    ("(1;%a%) + (1;%b%)", 9, "expected a comparison (true/false) as the whole formula, found a number"),
    ("[(1;%a%) < 2)", 13, "expected ']' to close '[' at column 1, found ')'"),
    ("(1;%a%) & (1;%b%) < 2", 1, "expected a comparison (true/false) left of '&', found a number"),
    ("(1;%a%) ≤ 2", 9, "unexpected character '≤'"),
    ("(1;%a%) < ", 11, "expected a region reference '(N;%condition%)', a number, '(' or '[', found the end"),
    ("(1;%a b%) < 2", 1, "expected a condition name of letters, digits, '_' or '-', found 'a b'"),
    ("(1 < 2) 3", 9, "expected an operator or the end of the formula, found '3'"),
    ("[1 < 2] + 1 > 0", 1, "expected a number (surprisal) left of '+', found a comparison"),
])
def test_malformed_formulas(formula, column, reason):
    with pytest.raises(FormulaError) as info:
        parse_formula(formula, suite="demo", prediction=2)
    err = info.value
    assert (err.suite, err.prediction, err.column) == ("demo", 2, column)
    assert reason in err.reason
    text = str(err)
    assert text.startswith(f"suite demo, prediction 2, column {column}: ")
    assert text.endswith(f"\n  {formula}\n  {' ' * (column - 1)}^")


def test_bad_suites_name_the_problem(tmp_path):
    data = json.loads(json.dumps(TINY))
    data["predictions"][1]["formula"] = "(2;%match%) < (2;%mismach%)"
    with pytest.raises(FormulaError, match=r"suite tiny, prediction 1, column 15: condition 'mismach' is not in item"):
        SG.suite_from_dict(data)
    data["predictions"][1]["formula"] = "(4;%match%) < 1"
    with pytest.raises(FormulaError, match="region 4 is not in condition 'match' of item 1"):
        SG.suite_from_dict(data)
    data = json.loads(json.dumps(TINY))
    del data["items"][1]["conditions"][0]["regions"][2]["content"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    where = r"broken.json: items\[1\].conditions\[0\].regions\[2\]"
    with pytest.raises(ValueError, match=where + ": expected a field 'content'"):
        SG.load_suite(path)
    path.write_text('{"items": [}')
    with pytest.raises(ValueError, match=r"broken.json:1:12: invalid JSON"):
        SG.load_suite(path)


def test_sg_report_hand_worked():
    def result(name, outcomes):
        return SuiteResult(name, ("f",), tuple(range(len(outcomes))), np.array(outcomes, dtype=bool)[:, None])

    results = [result("s1", [1, 0]), result("s2", [1, 1]), result("s3", [1, 0, 0, 0]),
               result("s4", [0]), result("s5", [1, 1, 1, 0])]
    circuits = SG.Circuits({"A": ("s1", "s2"), "B": ("s3", "centre")}, excluded=("s4",))
    report = SG.sg_report(results, circuits)
    assert report.suites == {"s1": 0.5, "s2": 1.0, "s3": 0.25, "s4": 0.0, "s5": 0.75}
    assert report.circuits["A"].score == pytest.approx(0.75)
    assert report.circuits["B"].score == pytest.approx(0.25) and report.circuits["B"].missing == ("centre",)
    assert report.sg_score == pytest.approx((0.5 + 1.0 + 0.25 + 0.75) / 4)
    assert report.excluded == ("s4",) and report.uncategorised == ("s5",)
    assert SG.sg_report(results, circuits, exclude=()).sg_score == pytest.approx(2.5 / 5)
    text = report.format()
    assert text.startswith("SG score  62.50  (mean over 4 suites; excluded: s4)")
    assert "(missing: centre)" in text and "s4         0.00  (excluded)" in text
    with pytest.raises(ValueError, match="two results for suite 's1'"):
        SG.sg_report(results + [results[0]])


# ---------------------------------------------------------------------------
# The shared suites
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sg_dir():
    data = shared_data_dir()
    if data is None or not (data / "sg_test_suites").is_dir():
        pytest.skip("../shared/data/sg_test_suites is absent")
    return data / "sg_test_suites"


def test_every_shared_formula_parses(sg_dir):
    suites = SG.load_suites(sg_dir)          # parses and checks every prediction against its items
    files = sorted(p.stem for p in sg_dir.glob("*.json") if p.name != "circuits.json")
    assert [s.name for s in suites] == files
    assert (len(suites), sum(len(s.items) for s in suites), sum(s.num_sentences for s in suites)) == (32, 786, 3192)
    assert sum(len(s.predictions) for s in suites) == 34       # fgd_hierarchy and nn-nv-rpl have two
    assert all(s.metric == "sum" for s in suites)
    cleft = next(s for s in suites if s.name == "cleft")
    first = next(cleft.sentences())
    assert first.regions == ("What", "he", "did", "was", "", "the meal")
    assert first.words == ["What", "he", "did", "was", "the", "meal"]


def _python_oracle(formula: str, values: dict[tuple[str, int], float]) -> bool:
    """Evaluates a formula by rewriting it as Python (independent of the parser under test)."""
    assert not ("&" in formula and "|" in formula)  # Python's `and` binds tighter than `or`
    text = re.sub(r"\((\d+);%([\w-]+)%\)", lambda m: repr(values[m.group(2), int(m.group(1))]), formula)
    text = re.sub(r"([-\d.e]+)\s*=\s*([-\d.e]+)", r"_close(\1, \2)", text)
    assert "=" not in text.replace("_close", "")
    text = text.replace("[", "(").replace("]", ")").replace("&", " and ").replace("|", " or ")
    return bool(eval(text, {"_close": lambda a, b: abs(a - b) <= 1e-3 + 1e-5 * abs(b)}))


def test_shared_suites_against_python_oracle(sg_dir):
    rng = np.random.default_rng(0)
    suites = SG.load_suites(sg_dir)
    circuits = SG.load_circuits(sg_dir / "circuits.json")
    assert circuits.excluded == ("fgd-embed3", "fgd-embed4", "nn-nv-rpl")
    assert len(circuits.circuits) == 6
    results = []
    for suite in suites:
        scored: list[np.ndarray] = []  # in the order of suite.sentences()

        def scorer(batch, scored=scored):
            out = [rng.gamma(2.0, 2.0, size=len(words)) for words in batch]
            scored.extend(out)
            return out

        result = SG.score_suite(suite, scorer, unit="bits")
        results.append(result)
        # Recompute region sums from the words and evaluate each formula independently.
        sentences = iter(zip(suite.sentences(), scored))
        for row, item in enumerate(suite.items):
            values = {}
            for condition in item.conditions:
                sentence, surprisals = next(sentences)
                assert (sentence.item, sentence.condition) == (item.number, condition.name)
                offset = 0
                for number, words in zip(condition.region_numbers, sentence.region_words):
                    values[condition.name, number] = float(sum(surprisals[offset:offset + len(words)]))
                    offset += len(words)
                assert offset == len(surprisals)
            for col, prediction in enumerate(suite.predictions):
                assert result.outcomes[row, col] == _python_oracle(prediction.text, values), (suite.name, item.number)
    report = SG.sg_report(results, circuits)
    counted = [r.accuracy for r in results if r.suite not in circuits.excluded]
    assert len(report.included) == 29 and report.sg_score == pytest.approx(np.mean(counted))
    assert report.circuits["Center Embedding"].missing == ("center_embed", "center_embed_mod")
    assert math.isnan(report.circuits["Center Embedding"].score)
    assert report.circuits["Agreement"].score == pytest.approx(
        np.mean([r.accuracy for r in results if r.suite.startswith("number_")]))
    assert report.uncategorised == ()
