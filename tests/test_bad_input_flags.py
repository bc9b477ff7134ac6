"""One policy for malformed records, and the prompt's length limit.

* `--on-bad-tree`, the one flag every reader command takes: stop at the first
  malformed record (default: one line, file:line:column, before any model is
  loaded), or `--on-bad-tree skip`: left out, the rest scored, and after the
  summary on stderr the count and the first one's file:line:column. Here for
  `eval score`, `eval ppl`, `eval rerank` (proposal files) and `eval blimp`
  (JSON lines); `tests/test_bad_input_limits.py` has the others.
* `tgjax sample --prompt` is held to the same limits as the sentences of the
  other commands: `--max-words` (words) and `--max-actions` (tokens: a sample
  holds its prompt), refused in one line before any model is loaded.

The commands run in process (`tgjax.cli.main`) on the tiny run that
`tests/test_bad_checkpoints.py` trains once per session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_bad_checkpoints import GOOD, trained_run
from tgjax import cli

BAD = "(S (NP (DT the) (NN fox)) ( (VBZ watches)))"  # column 27: "(VBZ" where a label belongs
WHAT = "expected a label after '(', found '(VBZ'"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return trained_run(tmp_path_factory)


def _pair(pair_id: str, **changes) -> str:
    pair = {"sentence_good": "the fox watches .", "sentence_bad": "the fox watch .", "UID": "agreement",
            "field": "morphology", "linguistics_term": "agreement", "pairID": pair_id}
    return json.dumps({**pair, **changes})


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """Each file's second record is malformed; the others are good."""
    texts = {
        "treebank.txt": f"{GOOD}\n{BAD}\n{GOOD}\n",
        # blocks 0 and 2 are good; block 1 holds one good proposal and (line 4) the bad one
        "proposals.txt": f"{GOOD}\n\n{GOOD}\n{BAD}\n\n{GOOD}\n",
        "gold.txt": f"{GOOD}\n{GOOD}\n{GOOD}\n",
        "pairs.jsonl": f"{_pair('0')}\n{{\"sentence_good\": \n{_pair('1')}\n",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


def _argv(command: str, workdir: Path, files: dict[str, Path], tmp_path: Path) -> list[str]:
    w, out = str(workdir), str(tmp_path / "out.jsonl")
    return {
        "score": ["eval", "score", "--workdir", w, "--input", str(files["treebank.txt"]), "-o", out],
        "ppl": ["eval", "ppl", "--workdir", w, "--proposals", str(files["proposals.txt"]), "-o", out],
        "rerank": ["eval", "rerank", "--workdir", w, "--proposals", str(files["proposals.txt"]), "--gold",
                   str(files["gold.txt"]), "-o", out],
        # the host search with small beams: the records read and skipped are the point, not the search (the
        # device engine's one compiled loop costs several times more to compile)
        "blimp": ["eval", "blimp", "--workdir", w, "--data", str(files["pairs.jsonl"]), "--search", "host",
                  "--word-beam", "2", "--action-beam", "8", "--fast-track", "1"],
    }[command]


def _where(command: str, files: dict[str, Path]) -> str:
    """The first malformed record as the command names it."""
    if command == "score":
        return f"{files['treebank.txt']}:2:27: {WHAT}"
    if command in ("ppl", "rerank"):
        return f"{files['proposals.txt']}:4:27: block 1: {WHAT}"
    return f"{files['pairs.jsonl']}:2: expected a JSON object, found invalid JSON"


COMMANDS = ("score", "ppl", "rerank", "blimp")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_malformed_record_stops_the_command_by_default(tmp_path, files, capsys, command):
    """Before any model is looked for: the workdir does not even exist."""
    assert cli.main(_argv(command, tmp_path / "no-run", files, tmp_path)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"tgjax eval {command}: error: {_where(command, files)}"), lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_on_bad_tree_skip_leaves_them_out_and_reports_them_at_the_end(run, tmp_path, files, capsys, command):
    assert cli.main([*_argv(command, run, files, tmp_path), "--on-bad-tree", "skip"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    noun, source = {"score": ("trees", "treebank.txt"), "ppl": ("proposals", "proposals.txt"),
                    "rerank": ("proposals", "proposals.txt"), "blimp": ("pairs", "pairs.jsonl")}[command]
    kept = 3 if noun == "proposals" else 2  # proposals: blocks 0 and 2, and block 1's good one
    assert captured.err.endswith(f"{files[source]}: read {kept} {noun}, skipped 1\n  {_where(command, files)}"
                                 + (" (Expecting value)\n" if command == "blimp" else "\n")), captured.err
    if command == "blimp":
        assert "; 2 pairs;" in captured.out.splitlines()[0], captured.out
        return
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == ([0, 1] if command == "score" else [0, 1, 2])
    if command in ("ppl", "rerank"):
        assert [r["num_proposals"] for r in records] == [1, 1, 1]
    if command == "rerank":  # F1 over the three sentences, block 1 from its good proposal
        assert "f1                               100" in captured.err


def test_a_block_of_malformed_proposals_only_is_left_out_and_f1_skips_its_gold_tree(run, tmp_path, files, capsys):
    """Block 1 has no good proposal: sentences 0 and 2 are reranked, against gold trees 0 and 2."""
    files["proposals.txt"].write_text(f"{GOOD}\n\n{BAD}\n\n{GOOD}\n")
    files["gold.txt"].write_text(f"{GOOD}\n(S (NP (DT a) (NN b)))\n{GOOD}\n")  # gold 1: other words, unused
    assert cli.main([*_argv("rerank", run, files, tmp_path), "--on-bad-tree", "skip"]) == 0
    err = capsys.readouterr().err
    assert "f1                               100" in err and "read 2 proposals, skipped 1" in err, err
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 2]


def test_a_file_of_malformed_records_only_is_an_error_even_when_skipping(run, tmp_path, files, capsys):
    files["treebank.txt"].write_text(f"{BAD}\n{BAD}\n")
    assert cli.main([*_argv("score", run, files, tmp_path), "--on-bad-tree", "skip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tgjax eval score: error: {files['treebank.txt']}: no sentences left: every tree is malformed "
                   f"(2 skipped; the first: {files['treebank.txt']}:1:27: {WHAT})"]


# -----------------------------------------------------------------------------
# tgjax sample --prompt


@pytest.mark.parametrize(("words", "flags", "refused"), [
    (11, ["--max-words", "10"], "expected a prompt of at most 10 words (the command's length limit: --max-words "
                                "raises it), found 11"),
    (25_001, ["--max-actions", "100000"], "expected a prompt of at most 25,000 words"),  # the default limit
    (300, [], "expected at most 256 actions, found 302 (a sample holds its prompt: --max-actions raises the limit)"),
])
def test_sample_refuses_a_prompt_over_the_limits_before_any_model_is_loaded(tmp_path, capsys, words, flags,
                                                                            refused):
    prompt = "(S (NP " + " ".join(["fox"] * words)
    assert cli.main(["sample", "--workdir", str(tmp_path / "no-run"), "--prompt", prompt, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tgjax sample: error: --prompt: {refused}"), err


def test_sample_takes_a_prompt_within_raised_limits(run, capsys):
    """--max-words and --max-actions raise the limits: the prompt is then read, and continued."""
    prompt = "(S (NP " + " ".join(["fox"] * 12)
    assert cli.main(["sample", "--workdir", str(run), "--prompt", prompt, "--max-words", "10"]) == 2
    capsys.readouterr()
    assert cli.main(["sample", "--workdir", str(run), "--prompt", prompt, "--max-words", "12", "--num-samples",
                     "1", "--max-actions", "40"]) == 0
    assert capsys.readouterr().out.startswith("(S (NP fox fox")
