"""Bad input, second round: length limits that bound memory, another family's workdir, one bad-record policy.

A 5 MB sentence (one line, written at test time) goes through every command
that reads sentences, in ONE child process whose address space is capped
(`RLIMIT_AS`): each command must refuse it with one line naming file:line,
found while reading, rather than be killed or raise MemoryError. A normal run
of these commands (JAX imported, the built-in treebank read) reserves about
2.5 GB of address space (more with more cores: a thread stack each); the cap
leaves margin above that and is below what the huge sentence asks for without
the limits (with them lifted: an array of 4.8 GiB in `data stats`, 77 GiB in
`train`; at 10 MB, 19 GB and more).

The rest runs in process (`tgjax.cli.main`): workdirs of other families
(only the files the check reads: a checkpoint's meta) refused in one line by
the treebank commands; malformed records stopping at the first by default and
skipped and counted with `--on-bad-tree skip`; `viz mask` on a 2,000-deep tree.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_bad_input import DRIVER  # one driver runs a batch of commands in one process
from tgjax import cli
from tgjax.syntax import trees

REPO = Path(__file__).resolve().parents[1]
GOOD = "(S (NP (DT the) (NN fox)) (VP (VBZ watches)) (. .))"
HUGE_WORDS = 575_000  # "(NN fox) " is 9 characters: a line of about 5 MB
ADDRESS_SPACE_CAP = 6 << 30  # bytes; a normal run of the commands below reserves about 2.5 GB (2 cores)
TRAIN_SIZES = ["--config.model.d_model=16", "--config.model.num_layers=1", "--config.model.num_heads=2",
               "--config.model.ffw_hidden_size=32", "--config.model.sequence_length=16",
               "--config.model.memory_length=16", "--config.training.batch_size=4", "--config.training.num_steps=1",
               "--config.logging.tensorboard=false", "--quiet"]



def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def _huge_sentence() -> str:
    return "(S " + " ".join("(NN fox)" for _ in range(HUGE_WORDS)) + " (. .))"


@pytest.fixture(scope="module")
def huge(tmp_path_factory) -> dict[str, Path]:
    """The 5 MB sentence on line 2 of a treebank, and as sentence_good on line 2 of a BLiMP file."""
    directory = tmp_path_factory.mktemp("huge")
    sentence = _huge_sentence()
    treebank = directory / "huge.txt"
    treebank.write_text(f"{GOOD}\n{sentence}\n{GOOD}\n")
    pair = {"sentence_good": "the fox watches .", "sentence_bad": "the fox watch .", "UID": "agreement",
            "field": "syntax", "linguistics_term": "agreement", "pairID": "0"}
    blimp = directory / "huge.jsonl"
    words = " ".join(["fox"] * HUGE_WORDS)
    blimp.write_text(json.dumps(pair) + "\n" + json.dumps({**pair, "sentence_good": words}) + "\n")
    return {"treebank": treebank, "blimp": blimp, "directory": directory}


def _cases(huge: dict[str, Path]) -> dict[str, list[str]]:
    f, scratch = str(huge["treebank"]), huge["directory"]
    none = str(scratch / "no-workdir")  # the sentence is refused before any model is looked for
    return {
        "data stats": ["data", "stats", "--corpus", f],
        "data deps": ["data", "deps", "--treebank", f, "-o", str(scratch / "deps.conllu")],
        "train": ["train", "--workdir", str(scratch / "train"), *TRAIN_SIZES, f"--config.data.train_path={f}",
                  "--config.data.valid_path="],
        "eval score": ["eval", "score", "--workdir", none, "--input", f, "-o", str(scratch / "score.jsonl")],
        "eval ppl": ["eval", "ppl", "--workdir", none, "--proposals", f, "-o", str(scratch / "ppl.jsonl")],
        "eval rerank": ["eval", "rerank", "--workdir", none, "--proposals", f, "-o", str(scratch / "rerank.jsonl")],
        "eval parse": ["eval", "parse", "--workdir", none, "--treebank", f],
        "eval unsupervised-parse": ["eval", "unsupervised-parse", "--baselines-only", "--treebank", f],
        "eval dependency": ["eval", "dependency", "--baselines-only", "--treebank", f],
        "eval blimp": ["eval", "blimp", "--workdir", none, "--data", str(huge["blimp"])],
    }


@pytest.fixture(scope="module")
def capped_runs(huge) -> dict[str, dict]:
    cases = _cases(huge)
    plan = huge["directory"] / "plan.json"
    plan.write_text(json.dumps(list(cases.items())))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(plan)], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=300, preexec_fn=_cap_address_space)
    runs = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            run = json.loads(line)
            runs[run["name"]] = run
    assert set(runs) == set(cases), f"the capped process ended early (status {done.returncode}):\n{done.stderr}"
    return runs


@pytest.mark.parametrize("command", list(_cases({"treebank": Path("f"), "blimp": Path("b"), "directory": Path()})))
def test_a_5_mb_sentence_is_refused_in_one_line_within_a_memory_cap(capped_runs, huge, command):
    run = capped_runs[command]
    lines = run["stderr"].strip().splitlines()
    assert run["status"] == 2 and len(lines) == 1, run
    path = huge["blimp"] if command == "eval blimp" else huge["treebank"]
    assert f"{path}:2:1: " in lines[0] and "expected a sentence of at most" in lines[0], lines[0]
    assert "--max-words" in lines[0]


def test_the_reader_refuses_a_huge_tree_having_built_no_more_than_the_limit(monkeypatch):
    """Words are counted as read: of the huge tree, no more nodes than the limit's words are ever built."""
    built = []
    real_tree = trees.Tree
    monkeypatch.setattr(trees, "Tree", lambda *a, **k: built.append(1) or real_tree(*a, **k))
    with pytest.raises(trees.SentenceTooLong) as caught:
        list(trees.iter_trees(f"{GOOD}\n{_huge_sentence()}\n", source="bank.txt", max_words=300))
    assert str(caught.value).startswith("bank.txt:2:1: expected a sentence of at most 300 words")
    assert len(built) == 7 + 300  # GOOD's 7 nodes, then the huge tree's first 300 (NN fox): not its 575,000


def test_sentences_over_the_limit_are_skipped_and_counted_with_file_and_line(tmp_path, capsys):
    bank = tmp_path / "bank.txt"
    bank.write_text(f"{GOOD}\n(S (NP (DT a) (NN b) (NN c) (NN d) (NN e) (NN f)))\n{GOOD}\n")
    assert cli.main(["data", "stats", "--corpus", str(bank), "--max-words", "5", "--on-too-long", "skip",
                     "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "0 malformed trees skipped, 1 over --max-words 5" in out and f"{bank}:2:1: expected a sentence" in out
    assert "sequences         2 kept, 1 skipped as too long" in out
    assert cli.main(["data", "stats", "--corpus", str(bank), "--max-words", "5"]) == 2
    assert f"{bank}:2:1: expected a sentence of at most 5 words" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# Another family's workdir


def _fake_run(directory: Path, config: dict, family: str) -> Path:
    """A workdir with what the family check reads: one checkpoint step's meta (as orbax writes it)."""
    meta = directory / "checkpoints" / "2" / "meta"
    meta.mkdir(parents=True)
    (meta / "metadata").write_text(json.dumps({"family": family, "config": config, "best_step": 2}))
    return directory


FAMILIES = {
    "pushdown_dyck": ({"trainer": "pushdown_lm", "data": {"source": "dyck"}}, "pushdown_lm",
                      "holds a Pushdown-LM run (data dyck)", "for this run use: tgjax eval dyck"),
    "onlstm": ({"trainer": "onlstm_lm", "data": {"source": "text"}}, "onlstm_lm",
               "holds an ON-LSTM run (data text)",
               "for this run use: tgjax eval unsupervised-parse / score / ppl / sg / blimp"),
    "stack_lm": ({"trainer": "stack_lm", "data": {"source": "builtin"}}, "stack_lm",
                 "holds a stack-attention LM run (data builtin)",
                 "for this run use: tgjax eval score / ppl / sg / blimp"),
    "udgn": ({"trainer": "mlm", "data": {"source": "builtin"}}, "mlm", "holds a UDGN run (data builtin)",
             "for this run use: tgjax eval dependency"),
    "listops": ({"trainer": "classification", "data": {"source": "listops"}}, "classification",
                "holds an Ordered Memory (ListOps / logic) run (data listops)", "for this run use: tgjax viz curves"),
}
TREEBANK_COMMANDS = {
    "eval parse": ["eval", "parse", "--workdir", "{w}"],
    "eval score": ["eval", "score", "--workdir", "{w}", "--input", "{good}"],
    "eval blimp": ["eval", "blimp", "--workdir", "{w}", "--data", "{good}"],
    "sample": ["sample", "--workdir", "{w}"],
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_workdir_of_another_family_is_refused_in_one_line(tmp_path, capsys, family):
    config, trainer, holds, use = FAMILIES[family]
    workdir = _fake_run(tmp_path / family, config, trainer)
    good = tmp_path / "good.txt"
    good.write_text(GOOD + "\n")
    for command, argv in TREEBANK_COMMANDS.items():
        word_scorer = command in ("eval score", "eval blimp")  # they take the runs that score words alone too
        if family in ("onlstm", "stack_lm") and word_scorer:
            continue
        status = cli.main([a.format(w=workdir, good=good) for a in argv])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and "Traceback" not in err, (command, err)
        takes = ("TG/TXL, Pushdown treebank, ON-LSTM and stack-attention LM runs" if word_scorer
                 else "TG/TXL and Pushdown treebank runs")
        assert f"{workdir} {holds}; `tgjax {command}` takes {takes}; {use}" in lines[0]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_into_a_workdir_of_another_family_is_refused_in_one_line(tmp_path, capsys, family):
    config, trainer, _, _ = FAMILIES[family]
    workdir = _fake_run(tmp_path / family, config, trainer)
    status = cli.main(["train", "--config", "tiny", "--workdir", str(workdir)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"--workdir {workdir} holds " in lines[0] and f"(trainer {trainer!r})" in lines[0]
    assert "this config trains a TG/TXL model (trainer 'lm'); give another --workdir" in lines[0]


def test_family_of_reads_the_newest_meta_or_config_json(tmp_path):
    from tgjax.workdir import Family, family_of

    assert family_of(tmp_path / "nothing") is None
    run = _fake_run(tmp_path / "pd", {"trainer": "pushdown_lm", "data": {"source": "treebank"}}, "pushdown_lm")
    assert family_of(run) == Family("pushdown_lm", "treebank") and family_of(run).is_treebank_lm
    (tmp_path / "cfl").mkdir()
    (tmp_path / "cfl" / "config.json").write_text(json.dumps({"trainer": "cfl"}))
    assert family_of(tmp_path / "cfl") == Family("cfl")


# -----------------------------------------------------------------------------
# Malformed records: one flag, stop at the first by default


def test_malformed_trees_stop_by_default_and_are_counted_with_on_bad_tree_skip(tmp_path, capsys):
    bank = tmp_path / "bank.txt"
    bank.write_text(f"{GOOD}\n(S (NP (DT the) (NN fox)) ( (VBZ watches)))\n{GOOD}\n")
    where = f"{bank}:2:27: expected a label after '(', found '(VBZ'"
    for argv in (["eval", "parse", "--workdir", str(tmp_path / "none"), "--treebank", str(bank)],
                 ["eval", "unsupervised-parse", "--baselines-only", "--treebank", str(bank)],
                 ["eval", "dependency", "--baselines-only", "--treebank", str(bank)],
                 ["data", "deps", "--treebank", str(bank), "-o", str(tmp_path / "d.conllu")]):
        assert cli.main(argv) == 2, argv
        assert where in capsys.readouterr().err, argv
    assert cli.main(["eval", "dependency", "--baselines-only", "--treebank", str(bank), "--on-bad-tree", "skip"]) == 0
    assert f"{bank}: read 2 trees, skipped 1\n  {where}" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# Smaller ones


def test_viz_mask_refuses_a_2000_deep_tree_before_parsing_it(tmp_path, capsys):
    deep = "(S " * 2000 + "(NN fox)" + ")" * 2000
    assert cli.main(["viz", "mask", deep, "-o", str(tmp_path / "mask.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the tree has 2,001 nodes; tgjax viz mask takes at most 1,000" in err[0]
    assert not (tmp_path / "mask.png").exists()


def test_a_directory_as_a_treebank_file_is_one_line(tmp_path, capsys):
    assert cli.main(["data", "stats", "--corpus", str(tmp_path)]) == 2
    assert f"corpus: {str(tmp_path)!r} is a directory" in capsys.readouterr().err
    from tgjax.train.tasks.treebank_lm import inputs

    with pytest.raises(ValueError, match="data.valid_path: .* is a directory; give a treebank file"):
        inputs._check_file("data.valid_path", str(tmp_path))


def test_a_syntaxgym_item_over_the_limit_is_refused_before_any_model_is_loaded(tmp_path, capsys):
    from tests.eval.test_syntaxgym import TINY

    suites = tmp_path / "suites"
    suites.mkdir()
    long_item = json.loads(json.dumps(TINY))
    long_item["items"][1]["conditions"][1]["regions"][2]["content"] = " ".join(["very"] * 250) + " loudly ."
    (suites / "tiny.json").write_text(json.dumps(long_item))
    code = cli.main(["eval", "sg", "--workdir", str(tmp_path / "no_run"), "--suites", str(suites)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "tiny.json: item 2, condition 'mismatch'" in err[0] and "at most 200 words" in err[0]
    # Raised, the same suite goes on to the model (here: the missing workdir).
    assert cli.main(["eval", "sg", "--workdir", str(tmp_path / "no_run"), "--suites", str(suites),
                     "--max-words", "300"]) == 2
    assert "does not exist" in capsys.readouterr().err
