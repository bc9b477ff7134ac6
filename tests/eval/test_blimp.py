"""BLiMP: PTB-style words, the loader (synthetic and shared data), an oracle scorer worked by hand, errors."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.conftest import shared_data_dir
from tgjax.eval.blimp import BlimpPair, evaluate_blimp, format_blimp_report, load_blimp, words_of


@pytest.mark.parametrize("sentence, words", [
    ("The dog isn't happy.", ["The", "dog", "is", "n't", "happy", "."]),
    ("I can't and won't go...", ["I", "ca", "n't", "and", "wo", "n't", "go", "..."]),
    ("It's the guests' books, I think?", ["It", "'s", "the", "guests", "'", "books", ",", "I", "think", "?"]),
    ("Mr. Smith left.", ["Mr.", "Smith", "left", "."]),
    ('He said "no."', ["He", "said", '"', "no", ".", '"']),
    ("(See Douglas's ex-wife; she'd know!)",
     ["(", "See", "Douglas", "'s", "ex-wife", ";", "she", "'d", "know", "!", ")"]),
    ("It cost $5, or 10% of 1,214.", ["It", "cost", "$", "5", ",", "or", "10", "%", "of", "1,214", "."]),
    ("They’re here.", ["They", "’re", "here", "."]),
    ("the meal 's n't .", ["the", "meal", "'s", "n't", "."]),   # already split: unchanged
    ("  ", []),
])
def test_words_of(sentence, words):
    assert words_of(sentence) == words


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _record(good, bad, uid, field, term, pair_id):
    return {"sentence_good": good, "sentence_bad": bad, "field": field, "linguistics_term": term,
            "UID": uid, "pairID": str(pair_id), "simple_LM_method": True}


# Oracle: log p(sentence) = -(number of words). Per pair (good words, bad words):
#   p1: "The dog barks." 4 vs "The dog bark loudly." 5  -> right
#       "Dogs bark." 3 vs "Dog." 2                      -> wrong
#   p2: "Who left?" 3 vs "Who left it?" 4               -> right
#       "A b." 3 vs "B a." 3                            -> tie: wrong
#   p3: "No." 2 vs "No no no." 4                        -> right
PARADIGMS = {
    "p1": [("The dog barks.", "The dog bark loudly."), ("Dogs bark.", "Dog.")],
    "p2": [("Who left?", "Who left it?"), ("A b.", "B a.")],
    "p3": [("No.", "No no no.")],
}
META = {"p1": ("syntax", "agreement"), "p2": ("syntax", "island"), "p3": ("semantics", "npi")}


@pytest.fixture
def blimp_dir(tmp_path):
    for uid, pairs in PARADIGMS.items():
        field, term = META[uid]
        _write(tmp_path / f"{uid}.jsonl", [_record(g, b, uid, field, term, i) for i, (g, b) in enumerate(pairs)])
    return tmp_path


def minus_num_words(sentences):
    return np.array([-len(words_of(s)) for s in sentences], dtype=float)


def test_oracle_accuracies_hand_worked(blimp_dir):
    pairs = load_blimp(blimp_dir)
    assert [p.uid for p in pairs] == ["p1", "p1", "p2", "p2", "p3"]
    assert pairs[1] == BlimpPair("Dogs bark.", "Dog.", "p1", "syntax", "agreement", "1", f"{blimp_dir / 'p1.jsonl'}:2")
    result = evaluate_blimp(pairs, minus_num_words)
    assert result.correct.tolist() == [True, False, True, False, True]
    assert result.log_prob_good.tolist() == [-4, -3, -3, -3, -2]
    assert {uid: (a.correct, a.total, a.accuracy) for uid, a in result.per_paradigm.items()} == {
        "p1": (1, 2, 0.5), "p2": (1, 2, 0.5), "p3": (1, 1, 1.0)}
    assert result.accuracy == pytest.approx(2 / 3)            # mean over paradigms
    assert result.pooled_accuracy == pytest.approx(3 / 5)     # all pairs
    syntax = result.per_field["syntax"]
    assert (syntax.accuracy, syntax.pooled, syntax.num_paradigms) == (0.5, 0.5, 2)
    assert result.per_field["semantics"].accuracy == 1.0
    assert {t: a.accuracy for t, a in result.per_term.items()} == {"agreement": 0.5, "island": 0.5, "npi": 1.0}
    report = format_blimp_report(result)
    assert report.splitlines()[:3] == [
        "BLiMP: 3 paradigms, 5 pairs",
        "  accuracy (mean over paradigms)  66.67",
        "  pooled accuracy (all pairs)     60.00",
    ]
    assert "semantics    100.00  100.00          1       1" in report.splitlines()


def test_batching_and_scorer_checks(blimp_dir):
    pairs = load_blimp(blimp_dir)
    calls = []

    def scorer(sentences):
        calls.append(len(sentences))
        return minus_num_words(sentences)

    batched = evaluate_blimp(pairs, scorer, batch_size=2)
    assert calls == [2, 2, 1, 2, 2, 1]
    assert batched.correct.tolist() == evaluate_blimp(pairs, minus_num_words).correct.tolist()
    with pytest.raises(ValueError, match=r"returned shape \(4,\) for 5 good sentences"):
        evaluate_blimp(pairs, lambda s: np.zeros(4))
    with pytest.raises(ValueError, match="NaN for 1 bad sentences, e.g. 'Dog.'"):
        evaluate_blimp(pairs, lambda s: np.array([np.nan if x == "Dog." else 0.0 for x in s]))
    with pytest.raises(ValueError, match="at least one pair"):
        evaluate_blimp([], minus_num_words)


def test_loader_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=rf"{empty}: no BLiMP pairs \(the file is empty\)"):
        load_blimp(empty)
    with pytest.raises(ValueError, match=rf"{empty}: no BLiMP pairs"):
        load_blimp(tmp_path)                                   # a directory holding the empty file
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_record("a.", "b.", "u", "f", "t", 0)) + "\n{not json\n")
    with pytest.raises(ValueError, match=rf"{bad}:2: expected a JSON object, found invalid JSON"):
        load_blimp(bad)
    bad.write_text(json.dumps({"sentence_good": "a.", "sentence_bad": "b.", "UID": "u"}) + "\n")
    with pytest.raises(ValueError, match=rf"{bad}:1: .*missing field, linguistics_term, pairID"):
        load_blimp(bad)
    bad.write_text(json.dumps(_record("", "b.", "u", "f", "t", 0)) + "\n")
    with pytest.raises(ValueError, match="expected sentence_good to be a non-empty string"):
        load_blimp(bad)
    (tmp_path / "none").mkdir()
    with pytest.raises(ValueError, match=r"none: no \*.jsonl files"):
        load_blimp(tmp_path / "none")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_blimp(tmp_path / "missing.jsonl")


def test_shared_blimp_counts():
    data = shared_data_dir()
    if data is None or not (data / "blimp").is_dir():
        pytest.skip("../shared/data/blimp is absent")
    files = sorted((data / "blimp").glob("*.jsonl"))
    pairs = load_blimp(data / "blimp")
    per_uid = Counter(p.uid for p in pairs)
    assert len(per_uid) == len(files) == 57
    assert set(per_uid.values()) == {1000} and len(pairs) == 57_000
    assert {p.uid for p in pairs} == {f.stem for f in files}
    assert {p.field for p in pairs} <= {"morphology", "syntax", "semantics", "syntax_semantics", "syntax/semantics"}
    assert len({(p.uid, p.pair_id) for p in pairs}) == 57_000
    # Two paradigms through the oracle: the pooled accuracy is the plain count.
    some = [p for p in pairs if p.uid in ("adjunct_island", "anaphor_gender_agreement")]
    result = evaluate_blimp(some, minus_num_words)
    expected = np.mean([len(words_of(p.sentence_good)) < len(words_of(p.sentence_bad)) for p in some])
    assert result.pooled_accuracy == pytest.approx(expected)
    assert result.accuracy == pytest.approx(np.mean([a.accuracy for a in result.per_paradigm.values()]))
