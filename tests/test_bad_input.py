"""Bad input, tried as a new user would: malformed treebanks through every command that reads trees.

Each file of a corpus of malformed treebanks (written at test time) goes
through `tgjax data stats`, `train`, `eval score`, `eval ppl`, `eval rerank`,
`eval parse` and `eval f1`. Either the command works (a 2,000-deep tree and a
5,000-word sentence must, with what was left out counted), or it exits with
status 2 and ONE line on stderr naming file:line:column and what was
expected; never a traceback.

Importing JAX costs seconds per process, so the matrix runs in one child
process (`DRIVER`) that calls the real entry point, `tgjax.cli.main`, once per
case and records its exit status, stdout and stderr; a few cases also run as
`python -m tgjax.cli` in processes of their own, as a user would.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tgjax.syntax import trees

REPO = Path(__file__).resolve().parents[1]
GOOD = "(S (NP (DT the) (NN fox)) (VP (VBZ watches)) (. .))"  # 51 characters; the built-in corpus's labels
DEEP = 2000  # nesting depth of the deep tree (Python's recursion limit is 1,000)
LONG = 5000  # words of the long sentence (over MAX_ACTIONS and eval parse's --max-words by itself)

# The malformed files, and where and what the tree readers report: (line, column, message).
# Positions are counted by hand: e.g. "(S (NP (DT the) (NN caf\xe9" is 23 characters, so the bad byte is column 24.
MALFORMED = {
    "unclosed": (GOOD + "\n(S (NP (DT the) (NN fox)) (VP (VBZ watches))\n",
                 2, 45, "expected ')' to close '(S' opened at 2:1, found end of file"),
    "extra_close": (GOOD + ")\n", 1, 52, "expected '(' to start a tree, found ')'"),
    "empty_node": ("(S () (VP (VBZ watches)))\n", 1, 4, "found an empty tree '()'"),
    "wrapper_two": (f"( {GOOD} {GOOD} )\n", 1, 1, "expected one tree inside the unlabelled '( ... )' wrapper, found 2"),
    "bare_word": ("hello\n", 1, 1, "expected '(' to start a tree, found 'hello'"),
    # Bytes 0-9 are line 1; line 2 starts at byte 11, so byte 0x80 (128) is its column 118.
    "garbage": (bytes(range(256)) * 3, 2, 118, "expected utf-8 text, found the byte 0x80"),
    "latin1": ("(S (NP (DT the) (NN caf\xe9)) (VP (VBZ watches)))\n".encode("latin-1"),
               1, 24, "expected utf-8 text, found the byte 0xe9"),
    "good_then_bad": (GOOD + "\n(S (NP (DT the) (NN fox)) ( (VBZ watches)))\n",
                      2, 27, "expected a label after '(', found '(VBZ'"),
}
ENCODING = ("garbage", "latin1")  # the whole file's problem, found before any tree is read
EMPTY = {"empty": "", "blank": "\n\n   \n\n"}
# Files that must work: a huge tree between two ordinary ones.
HUGE = {
    "deep": "(S " * DEEP + "(NN fox)" + ")" * DEEP,
    "long": "(S " + " ".join("(NN fox)" for _ in range(LONG)) + " (. .))",
}
# Every command stops at the first malformed tree by default (--on-bad-tree skip skips and counts them).
SKIPPED_BY_PARSE = ()

TRAIN_SIZES = ["--config.model.d_model=16", "--config.model.num_layers=1", "--config.model.num_heads=2",
               "--config.model.ffw_hidden_size=32", "--config.model.sequence_length=16",
               "--config.model.memory_length=16", "--config.training.batch_size=4",
               "--config.evaluation.batch_size=4", "--config.training.num_steps=2",
               "--config.evaluation.interval_steps=2", "--config.checkpointing.interval_steps=2",
               "--config.checkpointing.async_save=false", "--config.logging.tensorboard=false",
               "--config.training.lr_schedule.kwargs.warmup_steps=1",
               "--config.training.lr_schedule.kwargs.cosine_cycle_length=1", "--quiet"]
# Sequences longer than this are skipped and counted where a command takes a limit (data stats, train).
MAX_ACTIONS = 2000

DRIVER = """
import contextlib, io, json, logging, sys, traceback
from tgjax.cli import main

for name, argv in json.load(open(sys.argv[1])):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code
        except BaseException:
            traceback.print_exc()
            status = "raised"
    logging.root.handlers.clear()  # `tgjax train` binds a handler to this case's stderr
    print(json.dumps({"name": name, "status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}),
          flush=True)
"""


def _env() -> dict:
    # TF_CPP_MIN_LOG_LEVEL: the C++ runtime's start-up notes ("could not find cuda drivers") are not ours.
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}


def _write_corpus(directory: Path) -> dict[str, Path]:
    paths = {}
    texts = {**{name: case[0] for name, case in MALFORMED.items()}, **EMPTY,
             **{name: f"{GOOD}\n\n{tree}\n\n{GOOD}\n" for name, tree in HUGE.items()}}  # proposals: 3 blocks
    for name, text in texts.items():
        path = directory / f"{name}.txt"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        paths[name] = path
    paths["good"] = directory / "good.txt"
    paths["good"].write_text(GOOD + "\n")
    # Both huge trees in one training file, between ordinary ones: the run the eval commands load (`runs`).
    paths["huge"] = directory / "huge.txt"
    paths["huge"].write_text("".join(f"{GOOD}\n\n{tree}\n\n" for tree in HUGE.values()) + f"{GOOD}\n")
    return paths


def _commands(path: Path, good: Path, workdir: Path, scratch: Path) -> dict[str, list[str]]:
    """Every command that reads trees, reading `path` (f1: as gold and as parses)."""
    f, w, out = str(path), str(workdir), str(scratch / f"{path.stem}.jsonl")
    return {
        "stats": ["data", "stats", "--corpus", f, "--max-actions", str(MAX_ACTIONS), "--on-too-long", "skip"],
        "train": ["train", "--workdir", str(scratch / f"train-{path.stem}"), *TRAIN_SIZES,
                  f"--config.data.train_path={f}", f"--config.data.valid_path={f}",
                  f"--config.data.max_actions={MAX_ACTIONS}", "--config.data.on_too_long=skip"],
        "score": ["eval", "score", "--workdir", w, "--input", f, "-o", out],
        "ppl": ["eval", "ppl", "--workdir", w, "--proposals", f, "-o", out],
        "rerank": ["eval", "rerank", "--workdir", w, "--proposals", f, "--gold", f, "-o", out],
        # The host engine: the device one compiles seconds longer for the one file that gets to the search (deep's
        # one word); what is tried here is the reading of the gold trees.
        "parse": ["eval", "parse", "--workdir", w, "--treebank", f, "--word-beam", "2", "--action-beam", "4",
                  "--search", "host"],
        "f1_gold": ["eval", "f1", "--gold", f, "--pred", str(good)],
        "f1_pred": ["eval", "f1", "--gold", str(good), "--pred", f],
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return _write_corpus(tmp_path_factory.mktemp("bad_input"))


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict[str, dict]:
    """Runs every (file, command) case in one child process; `name -> {status, stdout, stderr}`.

    The first case, `train` of the file with both huge trees (`huge.txt`, which it must train on, skipping
    them), is the tiny model that the eval commands load: 2 steps, one training run for the whole matrix.
    """
    scratch = tmp_path_factory.mktemp("bad_input_runs")
    workdir = scratch / "train-huge"  # where `_commands` trains on huge.txt
    cases = [["model", _commands(corpus["huge"], corpus["good"], workdir, scratch)["train"]]]
    for name in [*MALFORMED, *EMPTY, *HUGE]:
        for command, argv in _commands(corpus[name], corpus["good"], workdir, scratch).items():
            if not (name in HUGE and command == "train"):  # the huge trees' training run is the model's
                cases.append([f"{name}/{command}", argv])
    for name in HUGE:  # EVALB on the huge trees themselves (bracket matching over 2,000 levels, 5,000 words)
        cases.append([f"{name}/f1_self", ["eval", "f1", "--gold", str(corpus[name]), "--pred", str(corpus[name])]])
    # A new user's first try: their own training file, the validation set left at the default (built-in).
    cases.append(["own_train_file/train", ["train", "--workdir", str(scratch / "own"), *TRAIN_SIZES,
                                           f"--config.data.train_path={corpus['good']}"]])
    (scratch / "cases.json").write_text(json.dumps(cases))
    (scratch / "driver.py").write_text(DRIVER)
    done = subprocess.run([sys.executable, str(scratch / "driver.py"), str(scratch / "cases.json")],
                          capture_output=True, text=True, cwd=REPO, env=_env(), timeout=600)
    results = {r["name"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert len(results) == len(cases), f"the driver stopped after {len(results)} cases:\n{done.stderr[-3000:]}"
    assert results["model"]["status"] == 0, results["model"]["stderr"]
    return results


def _error_line(run: dict) -> str:
    """The one line a refused command prints (exit status 2, nothing else on stderr)."""
    assert "Traceback" not in run["stderr"], run["stderr"]
    assert run["status"] == 2, f"exit status {run['status']}:\n{run['stderr']}"
    lines = run["stderr"].splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{run['stderr']}"
    assert re.match(r"tgjax( eval \w+)?: error: ", lines[0]), lines[0]
    return lines[0]


def _worked(run: dict) -> str:
    assert "Traceback" not in run["stderr"], run["stderr"]
    assert run["status"] == 0, f"exit status {run['status']}:\n{run['stderr']}"
    return run["stderr"]


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("command", ("stats", "train", "score", "ppl", "rerank", "parse"))
def test_a_malformed_file_is_one_line_naming_file_line_column(runs, corpus, name, command):
    _, line, column, message = MALFORMED[name]
    # Proposal files (ppl, rerank) are read one tree per line in blocks: these all are in block 0.
    block = "block 0: " if command in ("ppl", "rerank") and name not in ENCODING else ""
    where = f"{corpus[name]}:{line}:{column}: {block}{message}"
    run = runs[f"{name}/{command}"]
    if command == "parse" and name in SKIPPED_BY_PARSE:
        # A gold file with good trees left: the bad one is skipped, counted and located; the good one parsed.
        stderr = _worked(run)
        assert f"{corpus[name]}: read 1 trees, skipped 1\n  {where}" in stderr
        assert "labelled F1" in run["stdout"]
        return
    assert where in _error_line(run)


@pytest.mark.parametrize("name", list(EMPTY))
@pytest.mark.parametrize("command", ("stats", "train", "score", "ppl", "rerank", "parse"))
def test_an_empty_file_is_one_line_naming_it(runs, corpus, name, command):
    line = _error_line(runs[f"{name}/{command}"])
    assert str(corpus[name]) in line and "empty" in line


@pytest.mark.parametrize("command", ("f1_gold", "f1_pred"))
def test_eval_f1_of_an_empty_file_is_one_line_naming_it(runs, corpus, command):
    """No sentence to compare: no F-measure (not `nan`), an error naming the file."""
    assert str(corpus["empty"]) in _error_line(runs[f"empty/{command}"])


@pytest.mark.parametrize("name", [*MALFORMED, "blank", *HUGE])
@pytest.mark.parametrize("command", ("f1_gold", "f1_pred"))
def test_eval_f1_scores_bad_trees_as_evalb_error_sentences(runs, corpus, name, command):
    """EVALB's rules: a sentence that cannot be read or matched is an error sentence, counted and named."""
    run = runs[f"{name}/{command}"]
    stderr = _worked(run)
    assert "Number of sentence" in run["stdout"]
    if name == "blank" and command == "f1_pred":
        assert "test sentence is empty (skipped)" in stderr  # evalb.c's message for a blank line
    elif name not in ("deep", "long"):
        assert str(corpus[name]) in stderr  # the bad sentence (or the line counts) named with the file


@pytest.mark.parametrize("name", list(HUGE))
@pytest.mark.parametrize("command", ("score", "ppl", "rerank"))
def test_huge_trees_are_scored(runs, name, command):
    """A 2,000-deep tree and a 5,000-word sentence are scored (no recursion limit); the memory overflow is counted."""
    stderr = _worked(runs[f"{name}/{command}"])
    assert re.search(r"sentences +3\n", stderr), stderr
    assert re.search(r"warning: .* \d+ stack entries in 1 sequences did not fit in the memory", stderr), stderr


@pytest.mark.parametrize("name", list(HUGE))
def test_huge_trees_over_max_actions_are_skipped_and_counted(runs, name):
    stats = runs[f"{name}/stats"]
    _worked(stats)
    assert "sequences         2 kept, 1 skipped as too long" in stats["stdout"]


def test_training_skips_and_counts_the_huge_trees(runs):
    """`train` on a file of three ordinary trees and both huge ones (deep, then long): the two are skipped, counted
    (the run the eval commands load)."""
    train = runs["model"]
    assert f"skipped 2 of 5 sequences longer than max_actions={MAX_ACTIONS}" in _worked(train)


@pytest.mark.parametrize("name", list(HUGE))
def test_evalb_reads_huge_trees(runs, name):
    """Each file has 5 lines to EVALB: a tree, a blank line (a skipped sentence), the huge tree, a blank, a tree."""
    run = runs[f"{name}/f1_self"]
    _worked(run)
    summary = run["stdout"].split("-- len<=40 --")[0]
    for line in ("Number of sentence        =      5", "Number of Skip  sentence  =      2",
                 "Number of Valid sentence  =      3", "Bracketing FMeasure       = 100.00"):
        assert line in summary, summary


def test_eval_parse_refuses_a_sentence_over_max_words_naming_its_line(runs, corpus):
    assert (f"{corpus['long']}:3:1: expected a sentence of at most 300 words (the command's length limit: "
            "--max-words") in _error_line(runs["long/parse"])
    _worked(runs["deep/parse"])  # one word under 2,000 brackets: parsed


def test_a_validation_tree_the_vocabulary_cannot_encode_is_named(runs):
    """The vocabulary comes from the training file; the built-in validation trees have labels it lacks."""
    line = _error_line(runs["own_train_file/train"])
    assert line.startswith("tgjax: error: data.valid_path: builtin: tree 0: token 7: unknown non-terminal '(SBAR'; "
                           "this vocabulary has 3 labels: (NP (S (VP")  # GOOD's; its tags are not labels


@pytest.mark.parametrize(("argv", "name"), [
    (["train", "--workdir", "{scratch}/w", *TRAIN_SIZES, "--config.data.train_path={file}"], "unclosed"),
    (["data", "stats", "--corpus", "{file}"], "latin1"),
    (["eval", "rerank", "--workdir", "{scratch}/none", "--proposals", "{file}"], "garbage"),
])
def test_as_its_own_process(corpus, tmp_path, argv, name):
    """The same as a user runs it: `python -m tgjax.cli ...`, one process, exit status 2, one line."""
    argv = [a.format(file=corpus[name], scratch=tmp_path) for a in argv]
    done = subprocess.run([sys.executable, "-m", "tgjax.cli", *argv], capture_output=True, text=True, cwd=REPO,
                          env=_env(), timeout=300)
    _, line, column, message = MALFORMED[name]
    error = _error_line({"status": done.returncode, "stderr": done.stderr})
    assert f"{corpus[name]}:{line}:{column}: {message}" in error


# -----------------------------------------------------------------------------
# The pieces, in process


def test_tree_syntax_error_survives_pickling():
    """Grain's worker processes send errors back pickled: the error must be rebuilt whole."""
    error = trees.TreeSyntaxError("bank.txt", 3, 7, "expected ')'")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.source, copy.line, copy.column, copy.reason) == (
        trees.TreeSyntaxError, "bank.txt:3:7: expected ')'", "bank.txt", 3, 7, "expected ')'")


def test_training_data_errors_name_the_config_key_and_the_position(tmp_path):
    from tgjax.data import pipeline as pl
    from tgjax.train.tasks.treebank_lm import inputs

    bank = tmp_path / "bank.txt"
    bank.write_text(MALFORMED["unclosed"][0])
    with pytest.raises(ValueError) as caught:
        inputs.load_trees(pl.PipelineConfig(corpus=str(bank)), "data.train_path")
    assert str(caught.value) == f"data.train_path: {bank}:2:45: {MALFORMED['unclosed'][3]}"


@pytest.mark.parametrize("gz", [False, True])
def test_text_that_is_not_utf8_is_located(tmp_path, gz):
    # Line 3 is " (NN na\xefve))": \xef starts a 3-byte sequence that "v" breaks, at column 8.
    data = b"(S (NP (DT a)\n  (NN caf\xc3\xa9))\n (NN na\xefve))\n"
    path = tmp_path / ("bank.txt.gz" if gz else "bank.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(trees.TreeSyntaxError) as caught:
        trees.read_treebank(path)
    assert (caught.value.line, caught.value.column) == (3, 8)
    assert caught.value.reason.startswith("expected utf-8 text, found the byte 0xef")
    with pytest.raises(trees.TreeSyntaxError, match=r":3:8: expected utf-8"):
        trees.read_treebank(path, on_error="skip")  # the file's encoding, not one tree: skip mode raises too
    ok = tmp_path / "ok.txt"
    ok.write_bytes("\ufeff(S caf\xe9)\n(S b)".encode("utf-8"))
    assert list(trees.text_lines(ok)) == ["(S caf\xe9)\n", "(S b)"]  # the byte-order mark dropped


def test_a_bad_proposal_is_located_on_its_own_line(tmp_path):
    from tgjax.infer.perplexity import ProposalError, read_proposals

    path = tmp_path / "proposals.txt"
    path.write_text(f"{GOOD}\n\n{GOOD}\n(S (NP (DT the) (NN fox))\n")
    with pytest.raises(ProposalError) as caught:
        list(read_proposals(path))
    assert str(caught.value) == (f"{path}:4:26: block 1: expected ')' to close '(S' opened at 4:1, found end of "
                                 "file (proposal files hold one tree per line)")


def test_every_reader_of_a_words_or_proposal_file_locates_bad_bytes(tmp_path):
    from tgjax.infer.perplexity import read_proposals
    from tgjax.infer.scoring import read_sentences

    path = tmp_path / "words.txt"
    path.write_bytes(b"the fox\nthe caf\xe9 watches\n")  # line 2: "the caf" is 7 characters
    readers = {"words": lambda: list(read_sentences(path, "words")), "trees": lambda: list(read_sentences(path)),
               "proposals": lambda: list(read_proposals(path))}
    for _what, read in readers.items():
        with pytest.raises(trees.TreeSyntaxError, match=rf"{path}:2:8: expected utf-8 text, found the byte 0xe9"):
            read()


def test_an_indented_bad_proposal_keeps_its_column(tmp_path):
    from tgjax.infer.perplexity import ProposalError, read_proposals

    path = tmp_path / "proposals.txt"
    path.write_text("    (S (NP (DT the) (NN fox)) ()\n")  # '()' after 4 blanks and 26 characters: column 31
    for pos_tags in ("auto", "no"):  # "auto" reads every tree first to decide; "no" reads them only once
        with pytest.raises(ProposalError, match=rf"{path}:1:31: block 0: found an empty tree"):
            list(read_proposals(path, pos_tags=pos_tags))
