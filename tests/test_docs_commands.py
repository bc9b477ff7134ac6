"""Every `tgjax ...` command in README.md and docs/*.md runs as written, as far as it can be checked without
running it: it parses with the command's own parser, its `--config` names a config that exists, and every
`--config.KEY=VALUE` it sets is a real key of that config (`load_config` raises no `ConfigError`)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from tgjax import cli
from tgjax.train.config import ConfigError, load_config, parse_override_args

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```", re.M | re.S)
NOT_SHELL = {"python", "toml", "json", "yaml"}  # blocks that hold no shell commands
SEPARATORS = {"&&", "||", ";", "|"}
# Config files that stand for the reader's own file (docs/adding-a-family.md's plug-in): parsed, not loaded.
USER_CONFIGS = {"toy_config.py"}
OVERRIDE_COMMANDS = {"train", "info", "demo"}


def _shell_lines(text: str):
    """(line number, command line) of every line of a shell-like code block, continuations joined."""
    for match in FENCE.finditer(text):
        if match.group(1).lower() in NOT_SHELL:
            continue
        first = text.count("\n", 0, match.start(2)) + 1
        pending, start = "", None
        for offset, line in enumerate(match.group(2).splitlines()):
            if start is None:
                start = first + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending, start = "", None


def _tgjax_commands(line: str):
    """The argv (after `tgjax`) of each `tgjax` / `.../bin/tgjax` command on a shell line."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # not shell (an unbalanced quote in output text)
        return
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in SEPARATORS:
            segment.append(token)
            continue
        words = list(segment)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value before a command
            words.pop(0)
        if words and (words[0] == "tgjax" or words[0].endswith("/bin/tgjax")):
            yield words[1:]
        segment = []


def collect() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for number, line in _shell_lines(path.read_text()):
            for argv in _tgjax_commands(line):
                found.append((f"{path.relative_to(REPO)}:{number}", argv))
    return found


COMMANDS = collect()


class _Parsed(BaseException):  # noqa: N818 - a signal, not an error: BaseException so no handler swallows it
    def __init__(self, namespace):
        super().__init__()
        self.namespace = namespace


def parse(argv: list[str], monkeypatch) -> argparse.Namespace:
    """Runs `tgjax ARGV` up to the end of its argument parsing (whichever parser the command hands its argv to)."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        cli.main(list(argv))
    except _Parsed as parsed:
        return parsed.namespace
    except SystemExit as exit:
        if exit.code in (0, None):  # --help
            return argparse.Namespace()
        raise
    raise AssertionError("the command returned without parsing its arguments")


def test_the_docs_hold_commands_to_check():
    files = {where.split(":")[0] for where, _ in COMMANDS}
    assert len(COMMANDS) >= 40 and "README.md" in files, files
    assert {argv[0] for _, argv in COMMANDS} >= {"demo", "train", "info", "eval", "sample"}


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_documented_command_parses_and_its_config_is_real(where, argv, monkeypatch, capsys):
    command = shlex.join(["tgjax", *argv])
    try:
        namespace = parse(argv, monkeypatch)
    except SystemExit:
        pytest.fail(f"{where}: `{command}` does not parse:\n{capsys.readouterr().err}")
    monkeypatch.undo()
    overrides, _ = parse_override_args(argv)
    if overrides:
        assert argv[0] in OVERRIDE_COMMANDS, f"{where}: --config.KEY=VALUE is for train, info and demo: `{command}`"
    spec = getattr(namespace, "config", None) if argv[0] in ("train", "info") else "tiny" if argv[0] == "demo" else None
    if spec is None or spec in USER_CONFIGS:
        return
    try:
        load_config(spec, overrides)
    except ConfigError as error:
        pytest.fail(f"{where}: `{command}`: {error}")
