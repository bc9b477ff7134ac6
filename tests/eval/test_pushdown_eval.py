"""Pushdown-LM workdirs through `tgjax.load` and the evaluation commands (`tgjax.eval.pushdown`).

One tiny run (a few steps on the built-in treebank) is trained once; then:
the loaded model reproduces the trainer's own validation loss (so the
parameters, vocabulary and tape are the run's, not a fresh model's); `eval
parse` prints the Table-4 F1 equal to a recomputation from its written trees;
`eval score`'s gold joint is one of the trees the wide beam sums, so the
beam's log p(x) is at least it; `eval blimp` runs; bad workdirs are refused
with the reason.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tgjax
from tgjax.data.pushdown import encode_tree
from tgjax.eval import parse as parse_eval
from tgjax.eval.commands import main_score
from tgjax.eval.pushdown import table4_f1
from tgjax.infer.pushdown_search import teacher_forced_log_probs
from tgjax.syntax import trees as trees_lib
from tgjax.train.config import load_config
from tgjax.train.loop import train
from tgjax.workdir import VocabularyMismatch

STEPS = 6
TINY = ["model.d_model=16", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=32",
        "model.sequence_length=32", "data.num_train_sentences=64", "data.num_valid_sentences=8",
        "training.batch_size=8", "evaluation.batch_size=8", f"training.num_steps={STEPS}",
        "training.lr_schedule.kwargs.warmup_steps=2", f"training.lr_schedule.kwargs.cosine_cycle_length={STEPS - 2}",
        f"evaluation.interval_steps={STEPS}", f"checkpointing.interval_steps={STEPS}", "logging.interval_steps=3"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pushdown_eval")
    train(load_config("configs/pushdown_tiny.py", TINY), path, quiet=True)
    return path


def test_loaded_model_reproduces_the_trainers_validation_loss(workdir):
    from tgjax.data.corpora import get_corpus

    model = tgjax.load(workdir)
    assert (model.family, model.step, model.capabilities) == ("pushdown_lm", STEPS, ("scorer", "parser", "sampler"))
    loaded = model.restore()
    assert loaded.step == STEPS
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    expected = [r for r in records if r.get("split") == "valid"][-1]["loss"]
    total, count = 0.0, 0
    for i, tree in enumerate(get_corpus("builtin", "valid")[:8]):
        sentence = encode_tree(tree, loaded.vocab, name=f"valid {i}")
        log_probs = teacher_forced_log_probs(loaded.model, sentence.tokens, sentence.attach)
        total -= log_probs[np.arange(len(sentence) - 1), sentence.tokens[1:]].sum()
        count += len(sentence) - 1
    assert abs(total / count - expected) < 1e-4


def test_eval_parse_prints_table4_f1_of_its_trees(workdir, tmp_path, capsys):
    out = tmp_path / "pred.txt"
    status = parse_eval.main_parse(["--workdir", str(workdir), "--limit", "4", "--beam-size", "4",
                                    "--output", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    line = next(x for x in printed.splitlines() if "Table 4" in x)
    beam_f1 = float(line.split("beam ")[1].split(",")[0])
    from tgjax.data.corpora import get_corpus

    gold = get_corpus("builtin", "test")[:4]
    predicted = [trees_lib.parse(x) for x in out.read_text().splitlines()]
    assert [t.leaves() for t in predicted] == [t.leaves() for t in gold]
    assert abs(beam_f1 - table4_f1(gold, predicted)) < 0.01
    assert "beam: 4 (token, attachment) hypotheses" in printed


def test_eval_score_gold_joint_is_below_the_wide_beams_marginal(workdir, tmp_path, capsys):
    trees = tmp_path / "trees.txt"
    trees.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))\n(S (NP (NNS dogs)) (VP (VBP bark)))\n")
    status = main_score(["--workdir", str(workdir), "--input", str(trees), "--surprisal", "--beam-size", "8",
                         "--quiet"])
    assert status == 0
    records = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["num_words"] for r in records] == [3, 2]
    for r in records:  # 3 words: Catalan(3) = 5 trees <= 8, the beam keeps them all
        assert math.isfinite(r["logp"]) and r["logp_marginal"] >= r["logp"] - 1e-4
        assert len(r["surprisals"]) == r["num_words"]
        assert all(s > 0 for s in r["surprisals"]) and r["end_surprisal"] > 0


def test_eval_blimp_on_a_pushdown_workdir(workdir, tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"sentence_good": good, "sentence_bad": bad, "UID": "agr", "field": "syntax",
                                        "linguistics_term": "agreement", "pairID": str(i)}) + "\n"
                            for i, (good, bad) in enumerate([("The dog barks.", "The dog bark."),
                                                             ("The dogs bark.", "The dogs barks.")])))
    status = parse_eval.main_blimp(["--workdir", str(workdir), "--data", str(data), "--beam-size", "4"])
    printed = capsys.readouterr().out
    assert status == 0 and "beam-marginal log p(x)" in printed and "2 pairs" in printed


def test_bad_workdirs_are_refused(workdir, tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tgjax.load(tmp_path / "nothing")
    broken = tmp_path / "copy"
    import shutil

    shutil.copytree(workdir, broken)
    vocab = broken / "vocab.txt"
    vocab.write_text(vocab.read_text().replace("\n", "\nextra\n", 1))
    with pytest.raises(VocabularyMismatch, match="vocab.txt"):
        tgjax.load(broken).restore()
    status = parse_eval.main_parse(["--workdir", str(workdir), "--workdir", str(workdir), "--limit", "1"])
    assert status == 2 and "searched alone" in capsys.readouterr().err


def test_tgjax_sample_draws_through_the_sampler_capability(workdir, tmp_path, capsys):
    from tgjax.eval.sample_command import main_sample

    out = tmp_path / "samples.jsonl"
    assert main_sample(["--workdir", str(workdir), "--num-samples", "2", "--max-actions", "12", "--json",
                        "-o", str(out)]) == 0
    assert "2 samples from pushdown_lm" in capsys.readouterr().err
    samples = tgjax.load(workdir).sampler(max_length=12).sample(2, seed=0)  # the command's seed 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["ids"] for r in records] == [s.ids.tolist() for s in samples]
    assert [r["attachments"] for r in records] == [s.attach.tolist() for s in samples]
    assert [r["tree"] for r in records] == [s.tree.to_string() for s in samples]
    assert main_sample(["--workdir", str(workdir), "--prompt", "(S the"]) == 2
    assert "a Pushdown-LM samples whole sentences" in capsys.readouterr().err
