"""Bad input, tried as a user would: output paths, metrics over nothing, and ordinary mistakes in input files.

Every refused case goes through the real entry point, `tgjax.cli.main`, in
this process (no subprocess: JAX is imported once) and must exit non-zero
with exactly ONE line on stderr that names the file (or the option), no
traceback, and leave the directory exactly as it was: no output, no
temporary file, inputs unchanged. Commands that need a trained model are
tried where they fail before loading one (a workdir that does not exist
would be the next error, and it must not be the one reported).
"""

from __future__ import annotations

import gzip
import json
import math
import types
from pathlib import Path

import pytest

from tgjax.cli import main
from tgjax.outputs import OutputError, check_output

GOOD = "(S (NP (DT the) (NN fox)) (VP (VBZ watches)) (. .))\n"
LONG = ("(S (NP (DT the) (JJ big) (JJ old) (NN fox)) (VP (VBZ watches) (NP (DT the) (JJ small) (JJ red) (NN hen)) "
        "(PP (IN in) (NP (DT the) (NN yard)))) (. .))\n")  # 13 words: none of <= 10
NO_WORDS = "(S (. .) (, ,))\n"  # punctuation only: no word is kept
BAD_BYTES = b'{"a": "caf\xe9"}\n'  # latin-1, not UTF-8: the byte 0xe9 at line 1, column 11
BAD_BYTES_WHERE = ":1:11: expected utf-8 text, found the byte 0xe9"
NOWHERE = "no_such_workdir"  # a workdir that does not exist: the command must fail on its real problem first


@pytest.fixture
def files(tmp_path, monkeypatch) -> Path:
    """A directory of small inputs, the working directory of the test."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.txt").write_text(GOOD)
    (tmp_path / "long.txt").write_text(LONG)
    (tmp_path / "punct.txt").write_text(NO_WORDS)
    (tmp_path / "pred.txt").write_text(GOOD)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "truncated.gz").write_bytes(gzip.compress((GOOD * 50).encode())[:40])
    (tmp_path / "latin1.json").write_bytes(BAD_BYTES)
    (tmp_path / "outdir").mkdir()
    run = tmp_path / "run"
    run.mkdir()
    # What a killed run leaves: the last line cut short.
    (run / "metrics.jsonl").write_text('{"step": 1, "split": "valid", "nll": 2.0, "loss": 2.0}\n'
                                       '{"step": 2, "split": "valid", "nll": 1.5, "loss": 1.5}\n{"step": 3, "spl')
    return tmp_path


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` (hidden ones too) and its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def refused(argv: list[str], capsys, directory: Path, *, names: str) -> str:
    """Runs `tgjax ARGV`; asserts the one-line refusal naming `names` and an untouched `directory`."""
    before = snapshot(directory)
    code = main(argv)
    captured = capsys.readouterr()
    assert code != 0, captured.out
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "error: " in lines[0] and names in lines[0], lines[0]
    assert snapshot(directory) == before  # no output, no temporary file, inputs unchanged
    return lines[0]


# -- outputs, checked before the work ----------------------------------------------------------------------------

# Each command with its inputs; "-o OUT" is appended. All would otherwise do their work (or fail on the
# missing workdir) before writing.
COMMANDS = {
    "eval dependency": ["eval", "dependency", "--baselines-only", "--treebank", "good.txt"],
    "eval unsupervised-parse": ["eval", "unsupervised-parse", "--baselines-only", "--treebank", "good.txt"],
    "eval dyck": ["eval", "dyck", "--workdir", NOWHERE],
    "eval parse": ["eval", "parse", "--workdir", NOWHERE, "--treebank", "good.txt", "--shard", "0/1"],
    "eval parse --merge": ["eval", "parse", "--merge", "pred.txt", "--treebank", "good.txt"],
    "eval score": ["eval", "score", "--workdir", NOWHERE, "--input", "good.txt", "--shard", "0/1"],
    "eval sg": ["eval", "sg", "--workdir", NOWHERE, "--suites", "outdir", "--shard", "0/1"],
    "eval blimp": ["eval", "blimp", "--workdir", NOWHERE, "--data", "latin1.json", "--shard", "0/1"],
    "data craft-demos": ["data", "craft-demos", "--task", "A", "--num", "1"],
    "data deps": ["data", "deps", "--treebank", "good.txt"],
    "data export": ["data", "export"],
    "sample": ["sample", "--workdir", NOWHERE],
    "viz tree": ["viz", "tree", "(S (NP a) (VP b))"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_that_is_a_directory_is_refused_first(command, files, capsys):
    line = refused([*COMMANDS[command], "-o", "outdir"], capsys, files, names="outdir")
    assert "is a directory" in line


@pytest.mark.parametrize("command", ["eval dependency", "eval parse --merge", "eval score", "data craft-demos",
                                     "data deps", "eval sg"])
def test_an_output_in_a_missing_directory_is_refused_first(command, files, capsys):
    line = refused([*COMMANDS[command], "-o", "missing/out.json"], capsys, files, names="missing")
    assert "does not exist" in line


@pytest.mark.parametrize("argv", [
    ["eval", "parse", "--merge", "pred.txt", "--treebank", "good.txt", "-o", "pred.txt"],
    ["eval", "dependency", "--baselines-only", "--treebank", "good.txt", "-o", "good.txt"],
    ["data", "deps", "--treebank", "good.txt", "-o", "./good.txt"],
    ["viz", "curves", "--workdir", "run", "-o", "run/metrics.jsonl"],
], ids=["parse-merge", "dependency", "deps", "viz-curves"])
def test_an_output_that_is_an_input_is_refused(argv, files, capsys):
    assert "is also an input" in refused(argv, capsys, files, names=argv[-1])


# Commands that write into a folder, with the option that names it. "good.txt" is a file: a folder cannot be it,
# nor be made under it. Each must say so before any work (a training run, the demo's data, a claim's budget).
FOLDER_COMMANDS = {
    "train": (["train", "--config", "tiny", "--workdir"], "--workdir"),
    "train (CFL trials)": (["train", "--config", "stack_cfl:dyck,tf", "--workdir"], "--workdir"),
    "demo": (["demo", "--workdir"], "--workdir"),
    "data prepare": (["data", "prepare", "--workdir"], "--workdir"),
    "reproduce --output": (["reproduce", "om-listops", "--tiny", "--budget-s", "5", "--output"], "--output"),
    "reproduce --workdir": (["reproduce", "om-listops", "--tiny", "--budget-s", "5", "--output", "packed",
                             "--workdir"], "--workdir"),
}


@pytest.mark.parametrize("command", list(FOLDER_COMMANDS))
@pytest.mark.parametrize("folder", ["good.txt", "good.txt/run"], ids=["a-file", "under-a-file"])
def test_a_folder_output_that_cannot_be_one_is_refused_first(command, folder, files, capsys):
    argv, option = FOLDER_COMMANDS[command]
    line = refused([*argv, folder], capsys, files, names=f"{option} {folder}")
    assert ("is a file" if folder == "good.txt" else "cannot be created") in line


def _write_shard(path: Path, logp: float) -> None:
    """A finished `eval score` shard (results and meta file) with one record, written as a job would."""
    record = {"index": 0, "logp": logp, "num_predictions": 4, "num_words": 3, "num_unk": 0}
    path.write_text(json.dumps(record) + "\n")  # json.dumps writes NaN: what an older tgjax could leave
    meta = {"format": "tgjax.eval.results/1", "command": "score", "shard": [0, 1], "num_records": 1,
            "settings": {"rule": "tg"}, "summary": {}}
    Path(f"{path}.meta.json").write_text(json.dumps(meta))


def test_eval_merge_may_not_overwrite_its_own_shard(files, capsys):
    _write_shard(files / "shard.jsonl", -3.0)
    line = refused(["eval", "merge", "shard.jsonl", "-o", "shard.jsonl"], capsys, files, names="shard.jsonl")
    assert "is also an input" in line
    refused(["eval", "merge", "shard.jsonl", "-o", "shard.jsonl.meta.json"], capsys, files, names="meta.json")


def test_eval_merge_writes_whole_results_or_nothing(files, capsys):
    """A record that is not JSON (NaN) stops the merge naming file and sentence; no results, no temporary."""
    _write_shard(files / "shard.jsonl", math.nan)
    line = refused(["eval", "merge", "shard.jsonl", "-o", "merged.jsonl"], capsys, files, names="merged.jsonl")
    assert "sentence 0: logp is not a finite number" in line
    _write_shard(files / "shard.jsonl", -3.0)
    assert main(["eval", "merge", "shard.jsonl", "-o", "merged.jsonl", "--quiet"]) == 0
    assert json.loads((files / "merged.jsonl").read_text())["logp"] == -3.0
    assert sorted(p.name for p in files.glob(".*")) == []  # no temporary file left


@pytest.mark.parametrize("argv, output", [
    (["viz", "tree", "(S (NP a) (VP b))", "-o", "picture"], "picture"),
    (["viz", "mask", "(S (NP a) (VP b))", "-o", "picture.xyz"], "picture.xyz"),
    (["eval", "craft", "--workdir", "run", "--curves-only", "--plot", "run/curves"], "run/curves"),
], ids=["no-extension", "unknown-extension", "craft-plot"])
def test_a_picture_needs_an_extension_it_keeps(argv, output, files, capsys):
    line = refused(argv, capsys, files, names=output)
    assert ".png" in line or "png" in line


def test_a_picture_is_written_under_the_name_given(files, capsys):
    assert main(["viz", "tree", "(S (NP a) (VP b))", "-o", "outdir/tree.svg"]) == 0
    assert sorted(p.name for p in (files / "outdir").iterdir()) == ["tree.svg"]
    assert (files / "outdir" / "tree.svg").read_bytes().lstrip().startswith(b"<?xml")


def test_check_output_unit(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        check_output(tmp_path)
    assert check_output(tmp_path / "out.json") == tmp_path / "out.json"
    (tmp_path / "a.txt").write_text("")
    with pytest.raises(OutputError, match=r"a.txt/out.json: directory .*a.txt is not a directory"):
        check_output(tmp_path / "a.txt" / "out.json")
    with pytest.raises(OutputError, match="--trees .*: is also an input"):
        check_output(tmp_path / "." / "x.txt", option="--trees", inputs=[tmp_path / "x.txt"])


# -- no number from nothing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--limit", "--mlm-runs", "--random-seeds", "--batch-size"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_eval_dependency_refuses_counts_below_one(option, value, files, capsys):
    argv = [*COMMANDS["eval dependency"], option, value]
    assert f"expected at least 1, got {value}" in refused(argv, capsys, files, names=option)


@pytest.mark.parametrize("command, option", [("eval unsupervised-parse", "--limit"),
                                             ("eval unsupervised-parse", "--max-length"),
                                             ("eval parse --merge", "--limit"), ("eval parse --merge", "--max-words")])
def test_other_counts_below_one_are_refused(command, option, files, capsys):
    assert "expected at least 1, got 0" in refused([*COMMANDS[command], option, "0"], capsys, files, names=option)


def test_eval_dependency_on_a_file_without_words_is_no_table_of_nan(files, capsys):
    argv = ["eval", "dependency", "--baselines-only", "--treebank", "punct.txt", "-o", "out.json"]
    assert "no sentence with words" in refused(argv, capsys, files, names="punct.txt")


def test_eval_dependency_without_a_masked_token_is_no_perplexity(files, capsys):
    from tgjax.eval.dependency import main_dependency

    class NothingMasked:
        def head_probs(self, sentences):
            import numpy as np

            return [np.full((len(s), len(s)), 1.0 / len(s)) for s in sentences]

        def mlm_loss(self, sentences, runs):
            return 0.0, 0

        def describe(self):
            return "a parser that masks nothing"

    code = main_dependency(["--workdir", "W", "--treebank", "good.txt", "-o", "out.json"],
                           load=lambda *a, **k: NothingMasked())
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "no token was masked" in err and "good.txt" in err
    assert not (files / "out.json").exists()


def test_eval_f1_of_an_empty_prediction_file_is_an_error(files, capsys):
    line = refused(["eval", "f1", "--gold", "good.txt", "--pred", "empty.txt"], capsys, files, names="empty.txt")
    assert "no sentence to score" in line


def test_unsupervised_parse_prints_none_scored_not_nan(files, capsys):
    """No sentence of <= 10 words: the short columns are "none" (JSON null), never NaN."""
    assert main(["eval", "unsupervised-parse", "--baselines-only", "--treebank", "long.txt", "-o", "u.json"]) == 0
    printed = capsys.readouterr().out
    assert "nan" not in printed.lower() and "none scored" in printed
    scores = json.loads((files / "u.json").read_text())["scores"]["right-branching"]
    assert scores["sentence_f1_short"] is None and scores["corpus_f1_short"] is None
    assert scores["sentence_f1"] is not None


def test_a_result_writer_leaves_nothing_behind_on_a_non_finite_value(tmp_path):
    from tgjax.eval.shards import ResultWriter, Shard

    with pytest.raises(OutputError, match=r"out.jsonl: sentence 1: logp is not a finite number"):
        with ResultWriter(tmp_path / "out.jsonl", "score", {"rule": "tg"}, Shard(0, 1)) as writer:
            writer.write({"index": 0, "logp": -1.0})
            writer.write({"index": 1, "logp": -math.inf})
    assert list(tmp_path.iterdir()) == []


# -- ordinary mistakes in input files -------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["data", "deps", "--treebank", "truncated.gz", "-o", "out.conllu"],
    ["eval", "score", "--workdir", NOWHERE, "--input", "truncated.gz", "--shard", "0/1"],
    ["eval", "unsupervised-parse", "--baselines-only", "--treebank", "truncated.gz"],
], ids=["deps", "score", "unsupervised-parse"])
def test_a_truncated_gz_is_one_line_naming_it(argv, files, capsys):
    assert "cannot be decompressed" in refused(argv, capsys, files, names="truncated.gz:")


def test_a_malformed_circuits_file_is_one_line(files, capsys):
    (files / "suites").mkdir()
    (files / "suites" / "circuits.json").write_text('{"circuits": [1,')
    argv = ["eval", "sg", "--workdir", NOWHERE, "--suites", "suites", "--shard", "0/1"]
    assert "invalid JSON" in refused(argv, capsys, files, names="circuits.json:1:")


def test_eval_dyck_refuses_batch_size_zero(files, capsys):
    refused(["eval", "dyck", "--workdir", NOWHERE, "--batch-size", "0"], capsys, files, names="--batch-size")


def test_craft_curves_skip_the_line_a_killed_run_cut_short(files, capsys):
    assert main(["eval", "craft", "--workdir", "run", "--curves-only", "--plot", "run/curves.png"]) == 0
    assert "validation curves of nll" in capsys.readouterr().out
    assert (files / "run" / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_metrics_with_bad_bytes_before_the_last_line_name_the_file(files, capsys):
    (files / "run" / "metrics.jsonl").write_bytes(BAD_BYTES + b'{"step": 1, "split": "valid", "nll": 2.0}\n')
    argv = ["eval", "craft", "--workdir", "run", "--curves-only", "--plot", "run/curves.png"]
    refused(argv, capsys, files, names="metrics.jsonl" + BAD_BYTES_WHERE)
    refused(["viz", "curves", "--workdir", "run", "-o", "curves.png"], capsys, files,
            names="metrics.jsonl" + BAD_BYTES_WHERE)


@pytest.mark.parametrize("argv", [
    ["eval", "blimp", "--workdir", NOWHERE, "--data", "latin1.json", "--shard", "0/1"],
    ["eval", "blimp", "--merge", "latin1.json"],
    ["eval", "sg", "--merge", "latin1.json"],
    ["eval", "parse", "--merge", "latin1.json", "--treebank", "good.txt"],
    ["eval", "merge", "latin1.json"],
], ids=["blimp", "blimp-merge", "sg-merge", "parse-merge", "merge"])
def test_bad_bytes_in_a_json_input_name_file_line_column(argv, files, capsys):
    if argv[:2] == ["eval", "merge"]:
        (files / "latin1.json.meta.json").write_text(json.dumps({
            "format": "tgjax.eval.results/1", "command": "score", "shard": [0, 1], "num_records": 1,
            "settings": {"rule": "tg"}, "summary": {}}))
    refused(argv, capsys, files, names="latin1.json" + BAD_BYTES_WHERE)


def test_bad_bytes_in_a_syntaxgym_suite_name_file_line_column(files, capsys):
    (files / "suites").mkdir()
    (files / "suites" / "agreement.json").write_bytes(BAD_BYTES)
    argv = ["eval", "sg", "--workdir", NOWHERE, "--suites", "suites", "--shard", "0/1"]
    refused(argv, capsys, files, names="agreement.json" + BAD_BYTES_WHERE)


def test_bad_bytes_in_a_word_list_name_file_line_column(tmp_path):
    from tgjax.infer.loading import read_word_list

    (tmp_path / "vocab.txt").write_bytes(b"the\nfox\ncaf\xe9\n")
    checkpoint = types.SimpleNamespace(workdir=tmp_path, meta={}, where="step 1")
    with pytest.raises(ValueError, match=r"vocab.txt:3:4: expected utf-8 text, found the byte 0xe9"):
        read_word_list(checkpoint)


def test_a_perplexity_too_large_for_a_float_is_null_not_infinity(tmp_path):
    """A 5,000-deep tree's joint perplexity overflows: the summary says none (null), the results stay JSON."""
    from tgjax.eval.shards import ResultWriter, Shard
    from tgjax.eval.summaries import ScoreSummary

    summary = ScoreSummary("tg")
    record = {"index": 0, "logp": -1e6, "num_predictions": 10001, "num_words": 1, "num_unk": 0}
    summary.add(record)
    result = summary.result()
    assert result["joint_word_perplexity"] is None and math.isfinite(result["nll_per_prediction"])
    with ResultWriter(tmp_path / "out.jsonl", "score", {"rule": "tg"}, Shard(0, 1)) as writer:
        writer.write(record)
        writer.finish(result)
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["summary"]["joint_word_perplexity"] is None
