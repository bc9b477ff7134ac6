"""The `tgjax` command end to end on the built-in data, and the README/CI contract."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tgjax import cli, viz
from tgjax.syntax import trees

REPO = Path(__file__).resolve().parents[1]
FIG2 = "(S (NP (DT the) (JJ blue) (NN bird)) (VP (VBZ sings)))"


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every command of the tree under `parser`, groups (data, viz, eval) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subcommands(sub, (*path, name))


COMMAND_PATHS = [path for path, _ in _subcommands(cli.build_parser())]


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0, argv
    return capsys.readouterr().out


def test_one_tree_holds_every_command():
    tops = {path[0] for path in COMMAND_PATHS}
    assert tops == {"data", "viz", "train", "info", "eval", "demo", "reproduce", "sample", "bench"}
    for path, _, _ in cli.MODULE_COMMANDS:
        assert path in COMMAND_PATHS
    assert ("eval", "unsupervised-parse") in COMMAND_PATHS and ("data", "craft-demos") in COMMAND_PATHS


def test_tgjax_help_lists_every_command_and_each_group_its_own(capsys):
    tops = [path[0] for path in COMMAND_PATHS if len(path) == 1]
    shown = _help([], capsys)
    assert shown.startswith("usage: tgjax ")
    for name in tops:
        assert re.search(rf"^\s+{re.escape(name)}\s", shown, re.M), name
    for group in ("data", "viz", "eval"):
        shown = _help([group], capsys)
        assert shown.startswith(f"usage: tgjax {group} ")
        for path in COMMAND_PATHS:
            if len(path) == 2 and path[0] == group:
                assert re.search(rf"^\s+{re.escape(path[1])}\s", shown, re.M), path


@pytest.mark.parametrize("path", [p for p in COMMAND_PATHS if p not in (("data",), ("viz",), ("eval",))],
                         ids=" ".join)
def test_every_command_help_is_printed_by_the_one_tree(path, capsys):
    """`tgjax <cmd> --help` exits 0 with its own usage line (`tgjax <cmd>`, not another parser's prog) and its
    description."""
    shown = _help(list(path), capsys)
    assert shown.startswith(f"usage: tgjax {' '.join(path)} "), shown[:200]
    assert "options:" in shown and "-h, --help" in shown
    leaf = dict(_subcommands(cli.build_parser()))[path]
    leaf.format_help()  # a module's arguments come with its description
    assert leaf.description, path


def test_the_tree_is_built_without_jax_and_help_is_fast():
    """`tgjax --help` (and `tgjax eval --help`) import no command module's JAX: modules join the tree lazily."""
    code = ("import sys\nfrom tgjax import cli\n"
            "for argv in ([\"--help\"], [\"eval\", \"--help\"], [\"data\", \"--help\"]):\n"
            "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('jax', 'flax', 'tgjax.eval.parse', 'tgjax.train') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_overrides_are_refused_by_commands_that_take_none(capsys):
    assert cli.main(["eval", "f1", "--gold", "g", "--pred", "p", "--config.training.num_steps=3"]) == 2
    assert "not eval f1" in capsys.readouterr().err


def test_data_show_prints_figure2(capsys):
    assert cli.main(["data", "show", FIG2]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(rows) == 14
    assert rows[6].split() == ["6", "NP)", "CNT1", "COMPOSE", "2", "3", "4", "5", "6"]
    assert rows[12].split() == ["12", "S)", "CNT1", "COMPOSE", "1", "6", "10", "12"]
    assert rows[7].split()[:5] == ["7", "NP)", "CNT2", "STACK", "(VP"]


def test_viz_mask_colours_stack_and_compose(tmp_path):
    tokens, types, mask = viz.tg_mask(trees.parse(FIG2), pos_tags=True)
    assert len(tokens) == 14 and mask.sum() == 54
    out = tmp_path / "mask.png"
    assert cli.main(["viz", "mask", FIG2, "-o", str(out)]) == 0
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"


def test_data_prepare_main_job(tmp_path, capsys):
    workdir = tmp_path / "run"
    code = cli.main(["data", "prepare", "--workdir", str(workdir), "--num-sentences", "80",
                     "--seq-len", "32", "--mem-len", "32", "--batch-size", "4"])
    assert code == 0
    out = capsys.readouterr().out
    assert "80 kept, 0 skipped" in out
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["segments"] >= 80 and summary["steps"] >= 20
    assert (workdir / "mask.png").exists() and (workdir / "vocab.json").exists()
    assert len((workdir / "valid.txt").read_text().splitlines()) == 500


def test_errors_are_reported_not_raised(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert cli.main(["data", "stats", "--corpus", str(empty)]) == 2
    assert str(empty) in capsys.readouterr().err


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, re.S)
    test_command = next(c.strip() for c in commands if "pytest" in c)
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_eval_f1_hand_counted(tmp_path, capsys):
    gold = tmp_path / "gold.txt"
    pred = tmp_path / "pred.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))\n")
    # Punctuation is ignored; of S[0,3] NP[0,2] VP[2,3] only S matches; VP[1,3] crosses NP[0,2].
    pred.write_text("(S (NP (DT the)) (VP (NN dog) (VBZ barks)) (. .))\n")
    assert cli.main(["eval", "f1", "--gold", str(gold), "--pred", str(pred)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"Bracketing FMeasure\s+=\s+33\.33", out)
    assert re.search(r"Average crossing\s+=\s+1\.00", out)


def test_readme_python_example_runs_and_says_what_it_shows():
    """The README's Python block, run as written; its comments' claims checked."""
    readme = (REPO / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "actions.choe_charniak" in b]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["tokens"] == ["(S", "(NP", "the", "blue", "bird", "NP)", "(VP", "sings", "VP)", "S)"]
    (chunk,) = namespace["chunks"]
    assert chunk.attn_mask.shape == (256, 256) and chunk.attn_relpos.shape == (256, 512)
    assert int(chunk.attn_mask.sum()) == 54  # Figure 2's mask, padded to T = 256
    for got, want in zip(namespace["dense_again"], chunk):
        np.testing.assert_array_equal(got, want)
    assert namespace["batch"].inputs.shape == (3, 256) and namespace["seq_index"].tolist() == [0, 1, 2]


def test_viz_curves_reads_metrics_and_counts_unreadable_lines(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"split": "train", "step": s, "loss": 5.0 / s}) for s in (1, 2, 3)]
    lines.insert(2, json.dumps({"split": "valid", "step": 2, "loss": 2.25, "unigram_loss": 4.5}))
    lines.append('{"split": "train", "step": 4, "lo')  # cut short by a crash
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    curves = viz.loss_curves(run)
    assert curves["train"][0].tolist() == [1, 2, 3]
    np.testing.assert_allclose(curves["train"][1], [5.0, 2.5, 5.0 / 3])
    assert curves["valid"][0].tolist() == [2] and curves["valid"][1].tolist() == [2.25]
    assert curves["unigram"] == 4.5 and curves["unreadable"] == [5]
    out = tmp_path / "curves.png"
    assert cli.main(["viz", "curves", "--workdir", str(run), "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert "3 training records (steps 1..3); last validation 2.2500 at step 2" in printed
    assert "1 unreadable line(s) skipped: [5]" in printed
    assert cli.main(["viz", "curves", "--workdir", str(tmp_path / "none")]) == 2
    assert str(tmp_path / "none" / "metrics.jsonl") in capsys.readouterr().err


def test_resuming_drops_a_cut_line_of_metrics_and_says_so(tmp_path, capsys):
    from tgjax.train.metrics import MetricsWriter

    (tmp_path / "metrics.jsonl").write_text('{"split": "train", "step": 1, "loss": 2.0}\n{"split": "tr\n'
                                            '{"split": "train", "step": 3, "loss": 1.0}\n')
    MetricsWriter(tmp_path, start_step=2, tensorboard=False).close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"split": "train", "step": 1, "loss": 2.0}\n'
    assert "dropped 1 line(s) that are not JSON" in capsys.readouterr().err
