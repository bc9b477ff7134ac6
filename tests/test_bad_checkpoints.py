"""Bad checkpoints, as a user meets them: a step cut short, a flipped byte.

* A step truncated before its manifest was written (files of `state/`
  deleted, no `checkpoint_manifests/<step>.json`) passes the manifest check;
  orbax's read then fails. The command must say so in ONE line naming the
  step and the directory, not follow it with orbax's teardown (hundreds of
  "Exception ignored in ..." and "Event loop is closed" tracebacks from the
  other reads of the failed restore, printed when they are finalised). It
  runs in a process of its own, through `tgjax.cli.main`, a few times over,
  with a garbage collection at the end: how much of the teardown reaches
  stderr is a race, and before the fix this printed hundreds of lines.
* A flipped byte keeps every file's size: only the sha256 sums that training
  writes by default see it, and loading for inference checks them.

One tiny run (3 layers: orbax reads one array per parameter, and more arrays
in flight make the teardown noise near certain without the fix) is trained
once per session (`trained_run`, shared with `tests/test_bad_input_flags.py`)
and copied before it is damaged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tgjax import cli
from tgjax.train.config import TRAINERS

REPO = Path(__file__).resolve().parents[1]
GOOD = "(S (NP (DT the) (NN fox)) (VP (VBZ watches)) (. .))"
TRAIN = ["--config.model.d_model=16", "--config.model.num_layers=3", "--config.model.num_heads=2",
         "--config.model.ffw_hidden_size=32", "--config.model.sequence_length=16", "--config.model.memory_length=16",
         "--config.training.batch_size=4", "--config.evaluation.batch_size=4", "--config.training.num_steps=2",
         "--config.evaluation.interval_steps=2", "--config.checkpointing.interval_steps=2",
         "--config.checkpointing.async_save=false", "--config.logging.tensorboard=false",
         "--config.training.lr_schedule.kwargs.warmup_steps=1",
         "--config.training.lr_schedule.kwargs.cosine_cycle_length=1", "--config.data.num_train_sentences=32",
         "--config.data.num_valid_sentences=8", "--quiet"]
STEP = 2
_TRAINED: dict[str, Path] = {}


def env() -> dict:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}


def trained_run(tmp_path_factory) -> Path:
    """A tiny TG run (2 steps on the built-in treebank, checkpoint at step 2), trained once per session."""
    if "run" not in _TRAINED:
        workdir = tmp_path_factory.mktemp("tiny_run") / "run"
        done = subprocess.run([sys.executable, "-m", "tgjax.cli", "train", "--workdir", str(workdir), *TRAIN],
                              capture_output=True, text=True, cwd=REPO, env=env(), timeout=300)
        assert done.returncode == 0, done.stderr
        _TRAINED["run"] = workdir
    return _TRAINED["run"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return trained_run(tmp_path_factory)


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "good.txt"
    path.write_text(GOOD + "\n")
    return path


def _copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(run, tmp_path / name))


def _truncate(workdir: Path) -> Path:
    """The step as a save cut short leaves it: the state's top-level OCDBT manifest gone, and no manifest of
    the step's files (written after the save, so the size check has nothing to compare with)."""
    state = workdir / "checkpoints" / str(STEP) / "state"
    (state / "manifest.ocdbt").unlink()
    (workdir / "checkpoint_manifests" / f"{STEP}.json").unlink()
    return state


def _params_file(workdir: Path) -> Path:
    """The largest array data file of the step's state (the embedding's, among others)."""
    files = list((workdir / "checkpoints" / str(STEP) / "state").rglob("d/*"))
    return max(files, key=lambda p: p.stat().st_size)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# `tgjax.cli.main(argv)` REPEAT times in one process, then what a longer process would do next: collect.
REPEAT = 4
DRIVER = """
import gc, sys, time
from tgjax.cli import main

for _ in range(int(sys.argv[1])):
    main(sys.argv[2:])
gc.collect(); time.sleep(0.2); gc.collect()
"""


def _cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tgjax.cli", *argv], capture_output=True, text=True, cwd=REPO,
                          env=env(), timeout=timeout)


# -----------------------------------------------------------------------------
# A truncated step: one line, no orbax teardown


def test_a_truncated_checkpoint_is_one_line_naming_the_step_and_its_state(run, tmp_path, good):
    copy = _copy(run, tmp_path)
    state = _truncate(copy)
    done = subprocess.run([sys.executable, "-c", DRIVER, str(REPEAT), "eval", "score", "--workdir", str(copy),
                           "--input", str(good)], capture_output=True, text=True, cwd=REPO, env=env(), timeout=300)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == REPEAT, f"{len(lines)} lines:\n{done.stderr[-3000:]}"
    for line in lines:  # which array's read fails first is a race: each names the one it found missing
        assert line.startswith(f"tgjax eval score: error: checkpoint step {STEP} in {copy}: cannot restore its "
                               f"parameters from {state} (ValueError: NOT_FOUND: "), line
        assert "/.zarray\" in OCDBT database at local file" in line and "does not exist" in line, line
        assert line.endswith("the step is incomplete or corrupt: give another --step, or train again"), line
        assert "tensorstore_spec" not in line


@pytest.mark.slow
def test_resuming_from_a_truncated_checkpoint_reports_it_in_one_line(run, tmp_path):
    """The trainer sets the step aside and starts again; the warning is one line (orbax's teardown dropped)."""
    copy = _copy(run, tmp_path)
    state = copy / "checkpoints" / str(STEP) / "state"
    shutil.rmtree(state / "ocdbt.process_0")  # the arrays' data: orbax wraps TensorStore's error in its own
    (copy / "checkpoint_manifests" / f"{STEP}.json").unlink()
    done = _cli("train", "--workdir", str(copy), *[a for a in TRAIN if a != "--quiet"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if f"checkpoint step {STEP} is corrupt" in line]
    assert len(warnings) == 1, done.stderr[-3000:]
    # TensorStore's own error, naming the array and the directory; not orbax's wrapper and its spec
    assert "(restore failed: ValueError: " in warnings[0] and f'in OCDBT database at local file "{state}/"' \
        in warnings[0], warnings[0]
    assert "TensorStore details" not in warnings[0] and "tensorstore_spec" not in warnings[0]
    assert (copy / "checkpoints_corrupt").is_dir() and (copy / "checkpoints" / str(STEP)).is_dir()


def test_restore_failure_is_the_innermost_cause_without_the_tensorstore_spec():
    from tgjax.workdir import restore_failure

    cause = ValueError('FAILED_PRECONDITION: Error reading "params.embedding/0.0" in OCDBT database at local file '
                       '"/w/checkpoints/2/state/": Truncated Zstd-compressed stream [tensorstore_spec=\'{"base": 1}\']')
    try:
        try:
            raise cause
        except ValueError as e:
            raise Exception("Encountered error while reading array index: (slice(0, 160, 1),). See full "
                            "TensorStore details: <bound method spec of TensorStore({\n  'base': {...") from e
    except Exception as error:  # noqa: BLE001 - what orbax raises
        text = restore_failure(error)
    assert text == ('ValueError: FAILED_PRECONDITION: Error reading "params.embedding/0.0" in OCDBT database at '
                    'local file "/w/checkpoints/2/state/": Truncated Zstd-compressed stream')


def _unraisable(obj, error: BaseException):
    return types.SimpleNamespace(exc_type=type(error), exc_value=error, exc_traceback=None, err_msg=None,
                                 object=obj)


def test_orbax_read_drops_only_the_teardown_of_a_failed_read(monkeypatch):
    """Inside the read and, once it failed, after: orbax's coroutines and the closed loop's callbacks are
    dropped; any other ignored exception still reaches the hook that was there. After a read that succeeds
    the hook is the one that was there."""
    from tgjax import workdir

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    orbax_code = compile("async def read(): pass", os.path.join("site-packages", "orbax", "serialization.py"), "exec")
    namespace: dict = {}
    exec(orbax_code, namespace)  # noqa: S102 - a coroutine whose code lives in an orbax file
    coroutine = namespace["read"]()
    coroutine.close()
    teardown = [_unraisable(coroutine, Exception("Encountered error while reading array index")),
                _unraisable(None, RuntimeError("Event loop is closed"))]
    other = _unraisable(None, RuntimeError("something else"))

    with workdir.orbax_read():
        for u in [*teardown, other]:
            sys.unraisablehook(u)
    assert seen == [other] and sys.unraisablehook == seen.append  # a read that worked: the hook as it was

    with pytest.raises(ValueError), workdir.orbax_read():
        raise ValueError("NOT_FOUND")
    for u in [*teardown, other]:  # after the failure: still dropped (they arrive after the error is reported)
        sys.unraisablehook(u)
    assert seen == [other, other]
    assert sys.unraisablehook.previous == seen.append


# -----------------------------------------------------------------------------
# A flipped byte: the sha256 sums that training writes by default, checked on load


def test_training_writes_sha256_sums_by_default(run):
    manifest = json.loads((run / "checkpoint_manifests" / f"{STEP}.json").read_text())
    assert manifest and all(isinstance(digest, str) and len(digest) == 64 for _, digest in manifest.values())


def test_a_flipped_byte_is_refused_on_load_naming_the_step_and_the_file(run, tmp_path, good, capsys):
    import tgjax
    from tgjax.infer.loading import CheckpointError

    copy = _copy(run, tmp_path)
    damaged = _params_file(copy)
    size = damaged.stat().st_size
    _flip_a_byte(damaged)
    assert damaged.stat().st_size == size
    expected = (f"checkpoint step {STEP} in {copy} is corrupt or incomplete: file {damaged} does not match its "
                f"sha256 in {copy / 'checkpoint_manifests' / f'{STEP}.json'}")

    assert cli.main(["eval", "score", "--workdir", str(copy), "--input", str(good)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"tgjax eval score: error: {expected}"] and captured.out == ""
    with pytest.raises(CheckpointError) as caught:
        tgjax.load(copy)
    assert str(caught.value) == expected

    # The same step undamaged loads and scores.
    assert tgjax.load(run).family == "lm"
    assert cli.main(["eval", "score", "--workdir", str(run), "--input", str(good), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["index"] == 0


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_family_writes_checksums_by_default(trainer):
    from tgjax.train.config import family_defaults

    assert family_defaults(trainer).checkpointing.checksums is True
