"""A stack-attention LM trained on words (`trainer="stack_lm"`) through `tgjax.load` and the LM evaluations, beside
the ON-LSTM LM: its scorer's log p(x) against a plain forward of the model; BLiMP verdicts that are the comparison
of `tgjax eval score --input-format words` log-probabilities computed apart; SyntaxGym outcomes against the
scorer's surprisals; `eval ppl`; and what `eval score` does by capability, with one-line refusals."""

from __future__ import annotations

import functools
import json
import math

import jax
import numpy as np
import pytest
from flax import nnx

import tgjax
from tests.conftest import shared_data_dir
from tests.infer.test_api import PAIRS, onlstm_workdir, write_blimp_pairs  # noqa: F401  (the ON-LSTM fixture, trained here too)
from tgjax.cli import main as cli
from tgjax.data.corpora import builtin_treebank
from tgjax.eval.blimp import words_of
from tgjax.infer.api import CapabilityError, LoadedModel
from tgjax.train.config import load_config
from tgjax.train.loop import train

STACK_TINY = {"model.num_layers": 1, "model.d_model": 16, "model.num_heads": 2, "model.feedforward_size": 32,
              "model.stack_embedding_size": 8, "data.num_train_sentences": 64, "data.num_valid_sentences": 16,
              "training.batch_size": 8, "training.num_steps": 4, "training.length_bucket": 32,
              "evaluation.interval_steps": 4, "evaluation.batch_size": 16, "checkpointing.interval_steps": 4,
              "checkpointing.async_save": False, "logging.interval_steps": 2}
SENTENCES = [["every", "fox", "watches", "those", "goats", "."], ["the", "dogs", "watch", "a", "zebra", "."], []]

# A SyntaxGym suite in the built-in treebank's words: the verb agrees with the subject (surprisal lower).
SUITE = {
    "meta": {"name": "agreement_builtin", "metric": "sum"},
    "region_meta": {"1": "subject", "2": "verb", "3": "rest"},
    "predictions": [{"type": "formula", "formula": "(2;%match%) < (2;%mismatch%)"}],
    "items": [{"item_number": n, "conditions": [
        {"condition_name": "match", "regions": [{"region_number": 1, "content": subject},
                                                {"region_number": 2, "content": good},
                                                {"region_number": 3, "content": "a fox ."}]},
        {"condition_name": "mismatch", "regions": [{"region_number": 1, "content": subject},
                                                   {"region_number": 2, "content": bad},
                                                   {"region_number": 3, "content": "a fox ."}]}]}
        for n, (subject, good, bad) in enumerate([("every dog", "watches", "watch"),
                                                  ("those goats", "watch", "watches"), ("the cat", "sees", "see")],
                                                 start=1)],
}


@pytest.fixture(scope="module")
def stack_workdir(tmp_path_factory):
    config = load_config("configs/stack_lm_tiny.py", [f"{k}={v}" for k, v in STACK_TINY.items()])
    workdir = tmp_path_factory.mktemp("stack_lm")
    train(config, workdir, quiet=True)
    return workdir


@functools.partial(jax.jit, static_argnums=0)
def _logits(graphdef, state, ids):
    """The model's logits, jitted: one compilation per length, not one per operation of an eager call."""
    return nnx.merge(graphdef, state)(ids)


def plain_log_prob(model, words: list[str], vocabulary: list[str]) -> float:
    """log p(words <eos> | <bos>): one unpadded forward of the sentence alone, log-softmax in float64."""
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [index.get(w, index["<unk>"]) for w in words]
    inputs = jax.numpy.asarray([[index["<bos>"], *ids]])
    logits = np.asarray(_logits(*nnx.split(model), inputs), np.float64)[0]  # [n + 1, V]
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return float(sum(log_probs[t, target] for t, target in enumerate([*ids, index["<eos>"]])))


def test_the_family_is_recorded_and_its_scorer_is_exact(stack_workdir):
    model = tgjax.load(stack_workdir)
    assert (model.family, model.step, model.capabilities, model.rule) == ("stack_lm", 4, ("scorer",), "stack_lm")
    assert model.scores_exactly and model.scores_input("words") == model.scores_input("trees") == "scorer"
    with pytest.raises(CapabilityError, match=r"a stack-attention LM run \(family 'stack_lm'\), which has no parser; "
                                              r"it offers: scorer"):
        model.parser()
    scorer = model.scorer()
    assert scorer.describe().startswith(f"stack-attention LM Tf+Sup from {stack_workdir} step 4")
    vocabulary = (stack_workdir / "vocab.txt").read_text().splitlines()
    assert vocabulary[-1] == "<bos>" and {"<eos>", "<unk>"} <= set(vocabulary)
    network = model.restore().model
    network.eval()
    results = scorer.search(SENTENCES)
    for words, result in zip(SENTENCES, results):
        assert result.log_prob == pytest.approx(plain_log_prob(network, words, vocabulary), abs=1e-5)
        assert result.surprisals.sum() + result.end_surprisal == pytest.approx(-result.log_prob, abs=1e-9)
    unknown = [sum(w not in vocabulary for w in words) for words in SENTENCES]  # words read as <unk>, counted
    assert [r.num_unknown for r in results] == unknown and unknown[1] >= 1  # zebra at least
    assert scorer.space.encode_word("zebra") == (vocabulary.index("<unk>"), True)
    assert math.isfinite(results[2].log_prob) and results[2].surprisals.shape == (0,)  # <bos> <eos> alone


def test_the_scorer_agrees_with_training_validation(stack_workdir):
    """valid_loss (mean cross-entropy per predicted token) = −Σ log p(x) / Σ (words + <eos>) of the split."""
    valid = [tree.leaves() for tree in builtin_treebank("valid", STACK_TINY["data.num_valid_sentences"])]
    results = tgjax.load(stack_workdir).scorer().search(valid)
    records = [json.loads(line) for line in (stack_workdir / "metrics.jsonl").read_text().splitlines()]
    (validation,) = [r for r in records if r.get("split") == "valid"]
    loss = -math.fsum(r.log_prob for r in results) / sum(len(w) + 1 for w in valid)
    assert loss == pytest.approx(validation["valid_loss"], rel=1e-5)


def _score_words(workdir, sentences: list[str], path) -> list[float]:
    """`tgjax eval score --input-format words` of a file of `sentences`, one per line: each line's log p."""
    path.write_text("".join(s + "\n" for s in sentences))
    output = path.with_suffix(".jsonl")
    assert cli(["eval", "score", "--workdir", str(workdir), "--input", str(path), "--input-format", "words",
                "-o", str(output), "--quiet"]) == 0
    return [json.loads(line)["logp"] for line in output.read_text().splitlines()]


def _score_pairs(workdir, good: list[str], bad: list[str], path) -> tuple[list[float], list[float]]:
    """`_score_words` of the good sentences followed by the bad ones, in one call: (good log p, bad log p)."""
    scores = _score_words(workdir, good + bad, path)
    assert len(scores) == len(good) + len(bad)
    return scores[:len(good)], scores[len(good):]


@pytest.mark.parametrize("family", ["stack_lm", "onlstm_lm"])
def test_blimp_verdicts_are_the_signs_of_eval_score_log_probs(family, stack_workdir, onlstm_workdir,  # noqa: F811
                                                               tmp_path, capsys):
    workdir = stack_workdir if family == "stack_lm" else onlstm_workdir
    data = write_blimp_pairs(tmp_path / "agreement.jsonl")
    output = tmp_path / "pairs.jsonl"
    assert cli(["eval", "blimp", "--workdir", str(workdir), "--data", str(data), "-o", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "exact log p(x)" in printed
    records = [json.loads(line) for line in output.read_text().splitlines()]
    # Every good sentence, then every bad one, in one call (one scorer loaded and compiled), each scored alone.
    good, bad = _score_pairs(workdir, [g for g, _ in PAIRS], [b for _, b in PAIRS], tmp_path / "sentences.txt")
    verdicts = [record["log_prob_good"] > record["log_prob_bad"] for record in records]
    assert verdicts == [g > b for g, b in zip(good, bad)]
    np.testing.assert_allclose([r["log_prob_good"] for r in records], good, atol=1e-5)
    np.testing.assert_allclose([r["log_prob_bad"] for r in records], bad, atol=1e-5)
    assert f"{100 * sum(verdicts) / len(PAIRS):.2f}" in printed


def test_syntaxgym_outcomes_are_the_scorers_region_surprisals(stack_workdir, tmp_path, capsys):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "agreement_builtin.json").write_text(json.dumps(SUITE))
    output = tmp_path / "sg.json"
    code = cli(["eval", "sg", "--workdir", str(stack_workdir), "--suites", str(suites), "-o", str(output)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "agreement_builtin" in printed.out and "unknown words" in printed.out
    (result,) = json.loads(output.read_text())["suites"]
    scorer = tgjax.load(stack_workdir).scorer()
    expected = []
    for item in SUITE["items"]:
        verb = {}
        for condition in item["conditions"]:
            subject, word, rest = (region["content"].split() for region in condition["regions"])
            (scored,) = scorer.search([subject + word + rest])
            verb[condition["condition_name"]] = scored.surprisals[len(subject)]
        expected.append([int(verb["match"] < verb["mismatch"])])
    assert result["outcomes"] == expected


def test_eval_score_and_ppl_of_trees_read_their_words(stack_workdir, tmp_path, capsys):
    trees = tmp_path / "trees.txt"
    trees.write_text("(S (NP (DT every) (NN fox)) (VP (VBZ watches) (NP (DT those) (NNS goats))) (. .))\n"
                     "(S (NP (DT the) (NNS dogs)) (VP (VBP watch) (NP (DT a) (NN zebra))) (. .))\n")
    output = tmp_path / "trees.jsonl"
    assert cli(["eval", "score", "--workdir", str(stack_workdir), "--input", str(trees), "-o", str(output),
                "--surprisal"]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    exact = tgjax.load(stack_workdir).scorer().search(SENTENCES[:2])
    np.testing.assert_allclose([r["logp"] for r in records], [r.log_prob for r in exact], atol=1e-5)
    assert [r["num_unk"] for r in records] == [r.num_unknown for r in exact] and records[1]["words"] == SENTENCES[1]
    summary = capsys.readouterr().err
    assert "word_perplexity" in summary and "joint_word_perplexity" not in summary
    proposals = tmp_path / "proposals.txt"
    proposals.write_text(trees.read_text().replace("\n(S (NP (DT the)", "\n\n(S (NP (DT the)"))
    ppl = tmp_path / "ppl.jsonl"
    assert cli(["eval", "ppl", "--workdir", str(stack_workdir), "--proposals", str(proposals), "-o", str(ppl)]) == 0
    np.testing.assert_allclose([json.loads(line)["bound"] for line in ppl.read_text().splitlines()],
                               [r.log_prob for r in exact], atol=1e-5)
    assert "word_perplexity " in capsys.readouterr().err  # exact, not a bound over proposals
    assert cli(["eval", "ppl", "--workdir", str(stack_workdir), "--proposals", str(proposals), "--documents"]) == 2
    assert cli(["eval", "rerank", "--workdir", str(stack_workdir), "--proposals", str(proposals)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and "which scores each sentence alone" in errors[0], errors
    assert "a stack-attention LM run" in errors[1] and "tgjax eval score / ppl / sg / blimp" in errors[1]


def test_what_eval_score_reads_is_chosen_by_capability():
    from tests.infer.test_beam import get_model, tiny_vocab
    from tgjax.infer.loading import from_model

    vocab = tiny_vocab()
    tg = LoadedModel.in_memory("lm", from_model(get_model("tg", vocab.size), vocab, "tg"))
    words_only = LoadedModel.in_memory("lm", from_model(get_model("txl_terminals", vocab.size), vocab,
                                                        "txl_terminals"))
    pushdown, onlstm, udgn = (LoadedModel("w", 1, family) for family in ("pushdown_lm", "onlstm_lm", "mlm"))
    assert [m.scores_input("trees") for m in (tg, words_only, pushdown, onlstm)] == [
        "tree_scorer", "tree_scorer", "gold_joint", "scorer"]
    assert [m.scores_input("words") for m in (words_only, onlstm)] == ["tree_scorer", "scorer"]
    for model in (tg, pushdown):
        with pytest.raises(CapabilityError, match=r"^\S+ holds .*\(`tgjax eval score` reads words\), "
                                                  r"which scores given trees \(log p\(x, y\)\), not words alone"):
            model.scores_input("words", command="tgjax eval score")
    with pytest.raises(CapabilityError, match="a UDGN run .*which has no exact scorer of sentences nor of trees; "
                                              "it offers: parser"):
        udgn.scores_input("trees")


def test_a_model_in_memory_scores_as_the_workdir_does(stack_workdir):
    from tgjax.infer.stack_lm import from_model

    restored = tgjax.load(stack_workdir).restore()
    state = nnx.state(restored.model)
    again = from_model(nnx.merge(nnx.graphdef(restored.model), state), restored.words, batch_size=2,
                       length_bucket=8)
    np.testing.assert_allclose([r.log_prob for r in again.search(SENTENCES)],
                               [r.log_prob for r in restored.search(SENTENCES)], atol=1e-5)


@pytest.mark.parametrize("family", ["stack_lm", "onlstm_lm"])
def test_the_shared_blimp_and_syntaxgym_suites_run_on_both(family, stack_workdir, onlstm_workdir,  # noqa: F811
                                                             tmp_path, capsys):
    """../shared/data's BLiMP (first pairs of one agreement paradigm) and SyntaxGym (number_prep) suites: BLiMP's
    verdicts are the signs of the two sentences' `eval score` log-probabilities computed apart (on the words
    BLiMP's tokenisation gives)."""
    shared = shared_data_dir()
    if shared is None:
        pytest.skip("../shared/data (beside the repository) is absent")
    workdir = stack_workdir if family == "stack_lm" else onlstm_workdir
    paradigm = shared / "blimp" / "regular_plural_subject_verb_agreement_1.jsonl"
    output = tmp_path / "pairs.jsonl"
    assert cli(["eval", "blimp", "--workdir", str(workdir), "--data", str(paradigm), "--limit", "6",
                "-o", str(output)]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    pairs = [json.loads(line) for line in paradigm.read_text().splitlines()[:6]]
    assert len(records) == len(pairs) == 6
    # eval score reads words split at blanks: give it BLiMP's words (Penn Treebank tokenisation, `words_of`)
    tokenised = {key: [" ".join(words_of(p[key])) for p in pairs] for key in ("sentence_good", "sentence_bad")}
    good, bad = _score_pairs(workdir, tokenised["sentence_good"], tokenised["sentence_bad"], tmp_path / "sentences.txt")
    assert [r["log_prob_good"] > r["log_prob_bad"] for r in records] == [g > b for g, b in zip(good, bad)]
    np.testing.assert_allclose([r["log_prob_good"] for r in records], good, atol=1e-5)
    capsys.readouterr()
    assert cli(["eval", "sg", "--workdir", str(workdir), "--suites", str(shared / "sg_test_suites"),
                "--suite", "number_prep"]) == 0
    assert "number_prep" in capsys.readouterr().out
