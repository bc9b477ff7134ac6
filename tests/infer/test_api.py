"""`tgjax.load`: one loader for every workdir, the family read from the checkpoint, capabilities; any sentence
scorer (here an ON-LSTM LM) through `tgjax eval blimp` and `tgjax eval sg`, with verdicts that are the
comparison of the two sentences' log p computed apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tgjax
from tests.conftest import shared_data_dir
from tgjax.cli import main as cli
from tgjax.eval.blimp import words_of
from tgjax.infer.api import CapabilityError, LoadedModel, checkpoint_family, describe_scorer, sentence_scorer
from tgjax.infer.loading import CheckpointError
from tgjax.train.config import load_config
from tgjax.train.loop import train

ONLSTM_TINY = {"model.embedding_size": 16, "model.hidden_size": 16, "model.num_layers": 2, "model.chunk_size": 4,
               "data.num_train_sentences": 40, "data.num_valid_sentences": 20, "training.batch_size": 4,
               "training.bptt": 8, "training.min_seq_len": 2, "training.length_bucket": 16,
               "training.num_epochs": 1, "evaluation.batch_size": 2, "evaluation.bptt": 16,
               "checkpointing.interval_steps": 1000, "logging.interval_steps": 10,
               "logging.tensorboard": False, "checkpointing.async_save": False}

# Agreement pairs in the built-in treebank's vocabulary (good first), as BLiMP JSON lines.
PAIRS = [("every fox watches those goats .", "every fox watch those goats ."),
         ("the dogs watch a fox .", "the dogs watches a fox ."),
         ("those goats sleep .", "those goats sleeps .")]


_TRAINED: dict[str, Path] = {}


@pytest.fixture(scope="module")
def onlstm_workdir(tmp_path_factory):
    """A tiny ON-LSTM LM (one epoch of 40 built-in sentences), trained once per process: the modules that import
    this fixture (tests/infer/test_word_scorers.py) read the same run, which no test changes."""
    if "onlstm" not in _TRAINED:
        config = load_config("configs/onlstm_tiny.py", [f"{k}={v}" for k, v in ONLSTM_TINY.items()])
        workdir = tmp_path_factory.mktemp("onlstm")
        train(config, workdir, quiet=True)
        _TRAINED["onlstm"] = workdir
    return _TRAINED["onlstm"]


def test_the_family_is_read_from_the_checkpoint_and_capabilities_follow(onlstm_workdir):
    model = tgjax.load(onlstm_workdir)
    assert model.family == "onlstm_lm"
    assert model.capabilities == ("scorer", "parser")
    with pytest.raises(CapabilityError, match=r"an ON-LSTM run \(family 'onlstm_lm'\).*no sampler.*"
                                              r"offers: scorer, parser"):
        model.require("sampler")
    (result,) = model.scorer().search([["every", "fox", "watches", "those", "goats", "."]])
    assert np.isfinite(result.log_prob) and result.log_prob < 0


def test_the_readme_snippet_runs_as_written(onlstm_workdir):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "tgjax.load(" in b]
    namespace: dict = {}
    exec(compile(block.replace('"runs/onlstm_tiny"', repr(str(onlstm_workdir))), "README.md", "exec"), namespace)
    assert (namespace["model"].family, namespace["model"].capabilities) == ("onlstm_lm", ("scorer", "parser"))
    assert namespace["result"].surprisals.shape == (4,) and namespace["result"].log_prob < 0


def test_a_checkpoint_without_a_recorded_family_is_one_clear_error():
    assert checkpoint_family({"family": "mlm"}, "here") == "mlm"
    assert checkpoint_family({"config": {"model": {}}}, "here") == "lm"  # runs from before: their config's trainer
    with pytest.raises(CheckpointError, match="records no family.*add \"family\""):
        checkpoint_family({"model": {}}, "checkpoint step 3 in W")


def write_blimp_pairs(path, pairs=PAIRS):
    """`pairs` [(good, bad)] as a BLiMP .jsonl file of one paradigm ("agreement") at `path`; `path`."""
    path.write_text("".join(json.dumps({"sentence_good": good, "sentence_bad": bad, "UID": "agreement",
                                        "field": "morphology", "linguistics_term": "s-v_agreement",
                                        "pairID": str(i)}) + "\n" for i, (good, bad) in enumerate(pairs)))
    return path


def test_blimp_on_an_onlstm_is_the_comparison_of_log_probs_computed_apart(onlstm_workdir, tmp_path, capsys):
    data = write_blimp_pairs(tmp_path / "agreement.jsonl")
    output = tmp_path / "scores.jsonl"
    assert cli(["eval", "blimp", "--workdir", str(onlstm_workdir), "--data", str(data), "-o", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "exact log p(x)" in printed
    scorer = tgjax.load(onlstm_workdir).scorer()
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == len(PAIRS)
    right = 0
    for record in records:
        (good,), (bad,) = (scorer.search([words_of(record[key])]) for key in ("sentence_good", "sentence_bad"))
        assert record["log_prob_good"] == pytest.approx(good.log_prob, abs=1e-5)
        assert record["log_prob_bad"] == pytest.approx(bad.log_prob, abs=1e-5)
        right += good.log_prob > bad.log_prob
    assert f"{100 * right / len(PAIRS):.2f}" in printed


def test_syntaxgym_runs_on_an_onlstm(onlstm_workdir, capsys):
    suites = shared_data_dir()
    if suites is None:
        pytest.skip("../shared/data (beside the repository) is absent")
    code = cli(["eval", "sg", "--workdir", str(onlstm_workdir), "--suites", str(suites / "sg_test_suites"),
                "--suite", "number_prep"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "number_prep" in printed.out and "unknown words" in printed.out


def test_families_without_a_scorer_are_refused_by_name(tmp_path, capsys):
    workdir = tmp_path / "udgn"
    config = load_config("configs/udgn_tiny.py", [
        "model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
        "model.parser_hidden=8", "data.num_train_sentences=40", "data.num_valid_sentences=8",
        # one step: a loadable checkpoint is all this needs (a second step's batch shape compiles the step again)
        "training.token_budget=128", "training.num_steps=1", "evaluation.interval_steps=1", "evaluation.runs=1",
        "checkpointing.interval_steps=1", "logging.tensorboard=false", "checkpointing.async_save=false"])
    train(config, workdir, quiet=True)
    model = tgjax.load(workdir)
    assert model.capabilities == ("parser",)
    assert model.parser(parses="heads", batch_size=4).describe().startswith("UDGN from")
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"sentence_good": "a b", "sentence_bad": "b a", "UID": "u", "field": "f",
                                "linguistics_term": "t", "pairID": "0"}) + "\n")
    assert cli(["eval", "blimp", "--workdir", str(workdir), "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "UDGN" in err[0] and "eval dependency" in err[0], err


def test_parsers_say_what_they_give_and_which_command_reads_another(onlstm_workdir):
    model = tgjax.load(onlstm_workdir)
    parser = model.parser(parses="distances", batch_size=2)
    assert parser.num_layers == 2 and model.restore(batch_size=2) is parser  # restored once per options
    with pytest.raises(CapabilityError, match=r"^\S+ holds .*whose parser gives distances, not trees "
                                              r"\(`tgjax eval parse` reads trees\): "
                                              r"use `tgjax eval unsupervised-parse`$"):
        model.parser(command="tgjax eval parse", parses="trees")
    with pytest.raises(CapabilityError, match="no tree_scorer; it offers: scorer, parser"):
        model.tree_scorer()
    with pytest.raises(CapabilityError, match="family 'onlstm_lm'\\); `tgjax eval dyck` reads Dyck runs$"):
        model.require_family("pushdown_lm", command="tgjax eval dyck", reads="Dyck runs")
    with pytest.raises(ValueError, match="an ensemble mixes TG / TXL models only.*searched alone"):
        sentence_scorer([model, model])
    assert describe_scorer([model]).startswith("ON-LSTM from")


def test_a_model_in_memory_has_the_capabilities_of_its_family():
    from tests.infer.test_beam import get_model, tiny_vocab
    from tgjax.infer.loading import from_model

    vocab = tiny_vocab()
    words_only = LoadedModel.in_memory("lm", from_model(get_model("txl_terminals", vocab.size), vocab,
                                                        "txl_terminals"))
    assert (words_only.capabilities, words_only.rule, words_only.step) == (("scorer", "tree_scorer"),
                                                                          "txl_terminals", -1)
    with pytest.raises(CapabilityError, match="no parser; it offers: scorer, tree_scorer"):
        words_only.parser()
    with pytest.raises(ValueError, match="a model in memory has no checkpoint"):
        words_only.restore(sequence_length=8)
    assert words_only.tree_scorer(batch_size=4).loaded is words_only.restore()
