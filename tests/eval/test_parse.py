"""Drivers on the beam: parsing with EVALB, SyntaxGym and BLiMP on tiny synthetic data, sharding and merging."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest

from tests.infer.test_beam import LABELS, get_model, tiny_vocab
from tgjax.eval import parse, shards
from tgjax.eval import syntaxgym as sg
from tgjax.eval.blimp import BlimpPair, words_of
from tgjax.eval.evalb import evalb, right_branching
from tgjax.infer.api import LoadedModel
from tgjax.infer.beam import BeamConfig, TerminalScorer, WordSynchronousBeamSearch
from tgjax.infer.loading import from_model
from tgjax.syntax import trees as trees_lib
from tgjax.syntax.trees import Tree

CONFIG = BeamConfig(word_beam=3, action_beam=6, fast_track=1, max_open_nts=4, max_consecutive_opens=2,
                    min_batch=64, max_batch=64)
BEAM_ARGS = ["--word-beam", "3", "--action-beam", "6", "--fast-track", "1", "--max-open-nts", "4",
             "--max-consecutive-opens", "2"]
# The model's vocabulary (`tiny_vocab`) has the words a, b, c and the labels A, B: the gold trees' labels
# need not be the model's, and other words are unknown (UNK), as in real data.
GOLD = [
    "(S (NP (DT a) (NN b)) (VP (VBZ c)) (. .))",
    "(S (NP (DT a) (NN c)) (VP (VBZ b) (NP (DT a) (NN dog))) (. .))",
    "(S (VP (VBZ c)))",
    "(NP (DT b) (NN a))",
    "(S (NP (NN c)) (VP (VBZ b) (NP (DT a) (NN a))) (. .))",
]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocab()


@pytest.fixture
def fake_load(monkeypatch, vocab):
    """`parse._load` (`tgjax.load`) giving a random-init TG / TXL model in memory of the asked kind (the workdir
    names it)."""

    def load(name, step):
        return LoadedModel.in_memory("lm", from_model(get_model(name, vocab.size), vocab, name), workdir=name)

    monkeypatch.setattr(parse, "_load", load)


def test_with_preterminals():
    tree = trees_lib.parse("(S (NP the dog) barks)")
    assert parse.with_preterminals(tree, ["DT", "NN", "VBZ"]).to_string() == \
        "(S (NP (DT the) (NN dog)) (VBZ barks))"
    with pytest.raises(ValueError, match="2 tags"):
        parse.with_preterminals(tree, ["DT", "NN"])


def test_parse_treebank_scores_parses_and_the_baseline(vocab):
    gold = [trees_lib.parse(t) for t in GOLD]
    search = WordSynchronousBeamSearch(get_model("tg", vocab.size), vocab, "tg", CONFIG)
    report = parse.parse_treebank(search, gold)
    for g, p, r in zip(gold, report.predicted, report.results):
        assert trees_lib.tagged_words(p) == trees_lib.tagged_words(g)  # gold words and tags under the parse
        assert parse.with_preterminals(r.best_tree, trees_lib.pos_tags(g)) == p
    labeled = evalb(gold, report.predicted).all.bracketing_fmeasure  # nan when nothing matches (evalb.c)...
    assert report.labeled_f1 == pytest.approx(0.0 if np.isnan(labeled) else labeled)  # ... which is an F1 of 0
    assert report.unlabeled_f1 == pytest.approx(evalb(gold, report.predicted, unlabeled=True).all.bracketing_fmeasure)
    baseline = [right_branching(trees_lib.words(g), tags=trees_lib.pos_tags(g)) for g in gold]
    assert report.baseline_unlabeled_f1 == pytest.approx(
        evalb(gold, baseline, unlabeled=True).all.bracketing_fmeasure)
    assert report.unknown.tokens == 4 and report.unknown.total == sum(len(g.leaves()) for g in gold)  # ".", "dog"
    text = report.format()
    assert "right-branching" in text and "sentences/s" in text


def unlabelled_spans(tree: Tree) -> Counter:
    """The oracle's gold constituents: (start, end) over the words left after deleting `.`, with counts."""
    found = Counter()

    def walk(node: Tree, start: int) -> int:
        if node.is_preterminal():
            return start + (node.label != ".")
        end = start
        for child in node.children:
            end = walk(child, end)
        if end > start:
            found[(start, end)] += 1
        return end

    walk(tree, 0)
    return found


def spans_of_actions(actions: list[str], kept: list[bool]) -> Counter:
    """The oracle's predicted constituents, read off the Choe–Charniak actions; `kept[i]`: word i is not `.`."""
    openings, closings = {f"({label}" for label in LABELS}, {f"{label})" for label in LABELS}
    found, starts, words, position = Counter(), [], 0, 0
    for action in actions:
        if action in openings:
            starts.append(position)
        elif action in closings:
            start = starts.pop()
            if position > start:
                found[(start, position)] += 1
        else:
            position += kept[words]
            words += 1
    assert words == len(kept) and not starts
    return found


class _FixedParses:
    """A stand-in for the beam: its best parse of sentence i is `actions[i]` (words from the sentence)."""

    def __init__(self, space, actions: list[list[str]]):
        self.space, self.actions = space, actions

    def search(self, sentences):
        from tgjax.infer.beam import BeamResult

        zero = np.zeros(0)
        return [BeamResult(words=list(words), prefix_log_probs=zero, surprisals=zero, log_prob=0.0, end_surprisal=0.0,
                           best_actions=self.actions[GOLD_WORDS.index(list(words))]) for words in sentences]


GOLD_WORDS = [trees_lib.parse(t).leaves() for t in GOLD]


def relabelled_actions(tree: Tree, label: str = "A") -> list[str]:
    """The tree's bracketing as actions, every phrase labelled `label` (pre-terminals are not phrases)."""
    if tree.is_preterminal():
        return list(tree.children)
    return [f"({label}"] + [a for child in tree.children for a in relabelled_actions(child, label)] + [f"{label})"]


def right_branching_actions(words: list[str]) -> list[str]:
    """(A w1 (A w2 ... (A wn-1 wn))) as actions."""
    if len(words) <= 2:
        return ["(A", *words, "A)"]
    return ["(A", words[0], *right_branching_actions(words[1:]), "A)"]


def test_parse_f1_equals_brackets_counted_by_hand(vocab):
    """Parse F1 against gold trees written independently of the parses: by hand, then by an oracle count."""
    gold = [trees_lib.parse(t) for t in GOLD]
    search = WordSynchronousBeamSearch(get_model("tg", vocab.size), vocab, "tg",
                                       dataclasses.replace(CONFIG, max_open_nts=1))
    # One open constituent at most: every parse is flat, (A w1 ... wn A) or (B ...), one bracket over the words
    # (the `.` deleted). By hand, the gold trees have 3 + 4 + 2 + 1 + 4 = 14 brackets and each sentence's
    # whole span is one of them: 5 matched of 14 gold and 5 predicted (none labelled A or B).
    report = parse.parse_treebank(search, gold)
    assert report.unlabeled_f1 == pytest.approx(100 * 2 * 5 / (14 + 5), abs=0.01)
    assert report.labeled_f1 == 0.0
    # The gold bracketing itself, relabelled: every span kept intact through the parse's tree and tags.
    same = parse.parse_treebank(_FixedParses(search.space, [relabelled_actions(g) for g in gold]), gold)
    assert same.unlabeled_f1 == 100.0 and same.labeled_f1 == 0.0
    # Right-branching parses, against spans counted here from their actions. By hand (the `.` deleted), sentence
    # by sentence: matched 2 + 3 + 1 + 1 + 3 of 3 + 4 + 2 + 1 + 4 gold, 3 + 5 + 1 + 1 + 4 predicted.
    actions = [right_branching_actions(words) for words in GOLD_WORDS]
    report = parse.parse_treebank(_FixedParses(search.space, actions), gold)
    matched = num_gold = num_predicted = 0
    for g, a in zip(gold, actions):
        predicted = spans_of_actions(a, [tag != "." for tag in trees_lib.pos_tags(g)])
        reference = unlabelled_spans(g)
        matched += sum((predicted & reference).values())
        num_gold += sum(reference.values())
        num_predicted += sum(predicted.values())
    assert (matched, num_gold, num_predicted) == (10, 14, 14)
    assert report.unlabeled_f1 == pytest.approx(100 * 2 * 10 / (14 + 14), abs=0.01)


def test_main_parse_shards_merge_to_the_whole(tmp_path, fake_load, capsys):
    treebank = tmp_path / "gold.txt"
    treebank.write_text("\n".join(GOLD) + "\n")
    whole = tmp_path / "whole.txt"
    assert parse.main_parse(["--workdir", "tg", "--treebank", str(treebank), "-o", str(whole), *BEAM_ARGS]) == 0
    out = capsys.readouterr().out
    assert "beam search" in out and "right-branching" in out
    lines = {}
    for i in range(2):
        assert parse.main_parse(["--workdir", "tg", "--treebank", str(treebank), "-o", str(tmp_path / "p.txt"),
                                 "--shard", f"{i}/2", *BEAM_ARGS]) == 0
    files = [str(tmp_path / f"p.shard-{i:05d}-of-00002.txt") for i in range(2)]
    lines = [open(f).read().split("\n")[:-1] for f in files]
    assert [len(x) for x in lines] == [3, 2]
    merged = tmp_path / "merged.txt"
    capsys.readouterr()
    assert parse.main_parse(["--treebank", str(treebank), "--merge", *files, "-o", str(merged)]) == 0
    assert merged.read_text() == whole.read_text()
    assert "merged 2 shards" in capsys.readouterr().out
    assert parse.main_parse(["--treebank", str(treebank), "--merge", files[0]]) == 2
    capsys.readouterr()
    assert parse.main_parse(["--workdir", "txl_terminals", "--treebank", str(treebank)]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # one line, the command named once as its prefix
    assert len(err) == 1 and err[0].startswith("tgjax eval parse: error: "), err
    assert err[0].split(": error: ")[1].split()[1] == "holds", err
    assert err[0].endswith("has no parser (`tgjax eval parse` needs one); it offers: scorer, tree_scorer"), err


# ---------------------------------------------------------------------------
# SyntaxGym


def tiny_suite(name="agreement"):
    def condition(cname, verb):
        regions = [("a", 1), ("b", 2), (verb, 3), ("c", 4)]
        return {"condition_name": cname, "regions": [{"region_number": n, "content": c} for c, n in regions]}

    return {
        "meta": {"name": name, "metric": "sum"},
        "region_meta": {"1": "det", "2": "noun", "3": "verb", "4": "end"},
        "items": [{"item_number": 1, "conditions": [condition("match", "a"), condition("mismatch", "b")]},
                  {"item_number": 2, "conditions": [condition("match", "c"), condition("mismatch", "zebra")]}],
        "predictions": [{"type": "formula", "formula": "(3;%match%) < (3;%mismatch%)"}],
    }


@pytest.mark.parametrize("name", ["tg", "txl_cc", "txl_terminals"])
def test_sg_region_surprisals_come_from_the_scorer(vocab, name):
    suite = sg.suite_from_dict(tiny_suite())
    model = get_model(name, vocab.size)
    scorer = (TerminalScorer(model, vocab, min_batch=64, batch_size=64) if name == "txl_terminals"
              else WordSynchronousBeamSearch(model, vocab, name, CONFIG))
    run = parse.evaluate_sg(scorer, [suite])
    (result,) = run.results
    expected = {}
    for sentence in suite.sentences():
        (r,) = scorer.search([sentence.words])
        expected[(sentence.item, sentence.condition)] = sentence.region_surprisals(r.surprisals)
    assert np.array_equal(result.outcomes, sg.evaluate_suite(suite, expected, unit="nats").outcomes)
    assert run.report.sg_score == result.accuracy
    assert run.unknown.tokens == 1  # "zebra" is not in the vocabulary (counted once: distinct sentences)


def test_main_sg_with_shards_and_merge(tmp_path, fake_load, capsys):
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in ("agreement", "other"):
        (suites / f"{name}.json").write_text(json.dumps(tiny_suite(name)))
    (suites / "circuits.json").write_text(json.dumps({"circuits": {"Agreement": ["agreement", "other"]}}))
    assert parse.main_sg(["--workdir", "tg", "--suites", str(suites), *BEAM_ARGS,
                          "-o", str(tmp_path / "all.json")]) == 0
    out = capsys.readouterr().out
    assert "SG score" in out and "Agreement" in out and "unknown words (UNK): 1 of" in out
    for i in range(2):
        assert parse.main_sg(["--workdir", "tg", "--suites", str(suites), "--shard", f"{i}/2", *BEAM_ARGS,
                              "-o", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    # Each shard's output is named after it, as in every eval command.
    assert parse.main_sg(["--suites", str(suites), "--merge", str(tmp_path / "s.shard-00000-of-00002.json"),
                          str(tmp_path / "s.shard-00001-of-00002.json")]) == 0
    merged = capsys.readouterr().out
    assert parse.main_sg(["--suites", str(suites), "--merge", str(tmp_path / "all.json")]) == 0
    assert capsys.readouterr().out == merged
    capsys.readouterr()
    # A misspelt suite beside a right one is refused by name, with the suites that are there.
    assert parse.main_sg(["--workdir", "tg", "--suites", str(suites), "--suite", "other", "--suite", "nope"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"tgjax eval sg: error: no suite ['nope'] in {suites}; "
                    "expected a suite name such as: agreement, other")


# ---------------------------------------------------------------------------
# BLiMP


def blimp_file(path):
    rows = []
    for uid, pairs in (("agreement", [("a b c.", "a b a."), ("c a b a.", "c a b b."), ("b b", "b c")]),
                       ("order", [("a b c", "c b a")])):
        for k, (good, bad) in enumerate(pairs):
            rows.append({"sentence_good": good, "sentence_bad": bad, "field": "syntax", "linguistics_term": uid,
                         "UID": uid, "pairID": str(k)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("name", ["tg", "txl_terminals"])
def test_blimp_scores_are_the_scorers_log_probs(vocab, name):
    model = get_model(name, vocab.size)
    scorer = (TerminalScorer(model, vocab, min_batch=64, batch_size=64) if name == "txl_terminals"
              else WordSynchronousBeamSearch(model, vocab, name, CONFIG))
    pairs = [BlimpPair("a b c.", "a b zebra.", "u", "f", "t", "0"), BlimpPair("c a b", "c b a", "u", "f", "t", "1")]
    run = parse.evaluate_blimp_pairs(scorer, pairs)
    for pair, good, bad in zip(pairs, run.result.log_prob_good, run.result.log_prob_bad):
        (g, b) = scorer.search([words_of(pair.sentence_good), words_of(pair.sentence_bad)])
        assert good == pytest.approx(g.log_prob) and bad == pytest.approx(b.log_prob)
    assert run.result.correct.tolist() == (run.result.log_prob_good > run.result.log_prob_bad).tolist()


def test_main_blimp_limit_shards_and_merge(tmp_path, fake_load, capsys):
    data = blimp_file(tmp_path / "blimp.jsonl")
    assert parse.main_blimp(["--workdir", "tg", "--data", str(data), "--limit", "2", *BEAM_ARGS,
                             "-o", str(tmp_path / "all.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "3 pairs" in out and "beam-marginal" in out and "BLiMP: 2 paradigms" in out
    for i in range(2):
        assert parse.main_blimp(["--workdir", "tg", "--data", str(data), "--limit", "2", "--shard", f"{i}/2",
                                 *BEAM_ARGS, "-o", str(tmp_path / "b.jsonl")]) == 0
    capsys.readouterr()
    assert parse.main_blimp(["--merge", str(tmp_path / "b.shard-00000-of-00002.jsonl"),
                             str(tmp_path / "b.shard-00001-of-00002.jsonl")]) == 0
    merged = capsys.readouterr().out
    assert parse.main_blimp(["--merge", str(tmp_path / "all.jsonl")]) == 0
    assert capsys.readouterr().out == merged
    assert parse.main_blimp(["--workdir", "txl_terminals", "--data", str(data), "--paradigm", "order"]) == 0
    assert "exact log p(x)" in capsys.readouterr().out
    assert parse.main_blimp(["--workdir", "tg", "--data", str(data), "--paradigm", "nope"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tgjax eval blimp: error: no paradigm ['nope'] among the pairs read; expected a UID")


def test_select_pairs_and_shards():
    pairs = [BlimpPair("a", "b", uid, "f", "t", str(k)) for uid in ("x", "y") for k in range(3)]
    assert [p.pair_id for p in parse.select_pairs(pairs, limit=2)] == ["0", "1", "0", "1"]
    assert {p.uid for p in parse.select_pairs(pairs, paradigms=["y"])} == {"y"}
    # One paradigm right and one misspelt is refused by name, not scored as the one that matched.
    with pytest.raises(ValueError, match=r"no paradigm \['z'\] among the pairs read; expected a UID such as: x, y$"):
        parse.select_pairs(pairs, paradigms=["y", "z"])
    many = [f"p{k}" for k in range(7)]
    with pytest.raises(ValueError, match=r"no paradigm \['q'\] here; expected a UID such as: "
                                         r"p0, p1, p2, p3, p4, \.\.\. \(7 in all\)$"):
        parse.refuse_unknown(["p6", "q"], many + many, kind="paradigm", where="here", expected="a UID")
    parse.refuse_unknown(["p6"], many, kind="paradigm", where="here", expected="a UID")  # all known: no error
    assert parse.select_shard(list(range(7)), shards.job_shard("1/3")) == [1, 4]
    with pytest.raises(ValueError, match="I/N"):
        shards.job_shard("1")
    assert isinstance(right_branching(["a", "b"]), Tree)


# ---------------------------------------------------------------------------
# Ensembles (one beam over the per-action mixture: tests/infer/test_ensemble.py checks the numbers)


def test_main_sg_and_blimp_take_an_ensemble(tmp_path, fake_load, capsys):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "agreement.json").write_text(json.dumps(tiny_suite("agreement")))
    assert parse.main_sg(["--workdir", "tg", "--workdir", "txl_cc", "--suites", str(suites), *BEAM_ARGS]) == 0
    assert "ensemble (per-action mixture) of tg (tg), txl_cc (txl_cc)" in capsys.readouterr().out
    data = blimp_file(tmp_path / "blimp.jsonl")
    assert parse.main_blimp(["--workdir", "tg", "--workdir", "txl_terminals", "--data", str(data), *BEAM_ARGS]) == 2
    assert "not both" in capsys.readouterr().err


def test_main_parse_takes_an_ensemble(tmp_path, fake_load, capsys):
    treebank = tmp_path / "gold.txt"
    treebank.write_text("\n".join(GOLD) + "\n")
    predicted = tmp_path / "pred.txt"
    assert parse.main_parse(["--workdir", "tg", "--workdir", "txl_cc", "--treebank", str(treebank),
                             "-o", str(predicted), *BEAM_ARGS]) == 0
    assert "ensemble (per-action mixture) of tg (tg), txl_cc (txl_cc)" in capsys.readouterr().out
    trees = [trees_lib.parse(line) for line in predicted.read_text().splitlines()]
    assert [t.leaves() for t in trees] == [trees_lib.parse(g).leaves() for g in GOLD]


def test_ensembles_refuse_members_with_another_vocabulary(tmp_path, fake_load, monkeypatch, capsys):
    load = parse._load

    def load_other(workdir, step):
        loaded = load(workdir, step)
        if workdir == "txl_cc":
            loaded.restore().vocab_fingerprint = "another vocabulary"
        return loaded

    monkeypatch.setattr(parse, "_load", load_other)
    treebank = tmp_path / "gold.txt"
    treebank.write_text(GOLD[0] + "\n")
    assert parse.main_parse(["--workdir", "tg", "--workdir", "txl_cc", "--treebank", str(treebank), *BEAM_ARGS]) == 2
    assert "share one vocabulary: txl_cc (txl_cc) has another than tg (tg)" in capsys.readouterr().err


def test_word_scorer_picks_the_engine(vocab):
    from tgjax.infer.device_beam import DeviceBeamSearch

    tg, terminals = get_model("tg", vocab.size), get_model("txl_terminals", vocab.size)
    assert isinstance(parse.word_scorer(tg, vocab, "tg", CONFIG, "device"), DeviceBeamSearch)
    assert isinstance(parse.word_scorer(tg, vocab, "tg", CONFIG, "host"), WordSynchronousBeamSearch)
    # auto: the device engine, the faster on CPU and on accelerators (benchmarks/beam_search.py).
    assert isinstance(parse.word_scorer(tg, vocab, "tg", CONFIG), DeviceBeamSearch)
    assert isinstance(parse.word_scorer(terminals, vocab, "txl_terminals", CONFIG), TerminalScorer)
    with pytest.raises(ValueError, match="search"):
        parse.word_scorer(tg, vocab, "tg", CONFIG, "gpu")


def test_main_sg_device_and_host_searches_give_the_same_report(tmp_path, fake_load, capsys):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "agreement.json").write_text(json.dumps(tiny_suite("agreement")))
    reports = []
    for search in ("device", "host"):
        assert parse.main_sg(["--workdir", "tg", "--suites", str(suites), *BEAM_ARGS, "--search", search]) == 0
        reports.append(capsys.readouterr().out.split("\n", 1)[1])  # past the first line (it has the time)
    assert "SG score" in reports[0] and reports[0] == reports[1]
