"""The layout of a training workdir, which the trainer writes and inference reads.

Both `tgjax.train` (writer) and `tgjax.infer` (reader) import this module; it
imports neither (nor JAX), so the arrows stay `workdir` <- `train`, `infer`.

    WORKDIR/checkpoints/<step>/{state,pipeline,meta}   one orbax step (`CHECKPOINT_ITEMS`)
    WORKDIR/checkpoint_manifests/<step>.json           sizes and sha256 sums of a step's files
    WORKDIR/vocab.json  or  WORKDIR/vocab.model (+ .json sidecar)   the run's vocabulary

Facts of that layout held here: the workdir as a path object that reads and
writes it, an absolute local path or, for a bucket URL (`gs://bucket/run`), an
`etils.epath.Path` (`workdir_path`), which training writes and evaluation
reads alike; the steps whose save finished, as orbax decides it (a step
renamed into place on a disk, one with `COMMIT_MARKER` on a bucket:
`committed_steps`, and what an unfinished one lacks, `uncommitted_step`); a
word list read from either kind of path (`read_lines_of`); where the
vocabulary is (`vocabulary_file_name`,
`saved_vocabulary_path`), the integrity check of one step directory against
its manifest (`directory_manifest`, `check_step`), a failed orbax read said
in one line (`orbax_read`, `restore_failure`), several workdirs named in
one comma-separated value (`split_workdirs`), and the vocabulary's
fingerprint that a checkpoint records as `vocab_sha256` with the error raised
when a vocabulary differs from it (`vocabulary_fingerprint`,
`VocabularyMismatch`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tgjax.data.vocab import Vocabulary, WordDictionary

CHECKPOINT_ITEMS = ("state", "pipeline", "meta")
WORD_DICTIONARY_FILE = "vocab.json"
SENTENCEPIECE_FILE = "vocab.model"
VOCABULARY_FILE_NAMES = (WORD_DICTIONARY_FILE, SENTENCEPIECE_FILE)
# The plain word list of the word-level families (ON-LSTM LM, UDGN): one word per line, id = line number.
WORD_LIST_FILE = "vocab.txt"


class VocabularyMismatch(ValueError):
    """The vocabulary a run would use differs from the one its checkpoints were trained with."""


def is_url(workdir: str | os.PathLike) -> bool:
    """`gs://bucket/run` and the like (anything with a scheme)."""
    return "://" in os.fspath(workdir)


def workdir_path(workdir: str | os.PathLike) -> Any:
    """A workdir (or a path in one) as an object whose own methods read and write it.

    For a URL (`gs://bucket/run`) an `etils.epath.Path`: files are objects on
    the bucket (through `tf.io.gfile` when TensorFlow is installed, else
    `gcsfs`), and orbax writes its checkpoints there directly. Otherwise an
    absolute local `pathlib.Path` (orbax wants absolute paths; a relative
    `--workdir runs/x` is taken from the current directory): local files are
    exactly what they were. Whatever writes a workdir (checkpoints and their
    manifests, metrics, TensorBoard, the vocabulary and the families' other
    files) uses only what both kinds of path have (`/`, `open`, `read_text`,
    `write_text`, `exists`, `is_dir`, `mkdir`, `glob`, `replace`, `unlink`),
    never `open(str(path))` or `os.*`, and so has one code path for both;
    `pathlib` alone would quietly turn `gs://bucket/run` into a relative
    directory `gs:/bucket/run`.
    """
    if isinstance(workdir, Path):
        return workdir.absolute()
    if is_url(workdir):
        from etils import epath  # only URL workdirs need it

        return epath.Path(os.fspath(workdir))
    return Path(os.fspath(workdir)).absolute()


def make_workdir(workdir: str | os.PathLike) -> Any:
    """`workdir_path(workdir)`, created (with its parents) for a run to write into. A local folder that cannot be
    (a file in the way, a read-only parent) is a `tgjax.outputs.OutputError` naming `--workdir`, before any work."""
    if is_url(workdir):
        path = workdir_path(workdir)
        path.mkdir(parents=True, exist_ok=True)
        return path
    from tgjax.outputs import make_output_folder

    make_output_folder(workdir, option="--workdir")  # creates it; the message names the path as the user gave it
    return workdir_path(workdir)


# The file orbax writes last into a step it saves on a bucket, where it commits the step in place (a rename would
# copy every object); on any other path it commits by renaming `<step>.orbax-checkpoint-tmp-<time>` to `<step>`
# (with the marker already inside, in the orbax this project pins).
COMMIT_MARKER = "commit_success.txt"
TEMPORARY_STEP_SUFFIX = ".orbax-checkpoint-tmp"


def commits_in_place(workdir) -> bool:
    """Whether orbax commits a step of `workdir` by writing `COMMIT_MARKER` last (a `gs://` bucket, as orbax's
    `is_gcs_path` says) rather than by renaming a temporary directory (anywhere else)."""
    return os.fspath(workdir).startswith("gs://")


def _step_dirs(workdir) -> dict[int, Any]:
    """step -> directory of every directory under `workdir/checkpoints` named by a step number."""
    directory = workdir / "checkpoints"
    if not directory.is_dir():
        return {}
    return {int(p.name): p for p in directory.iterdir() if p.name.isdigit()}


def _unmarked(workdir, step_dirs: dict[int, Any]) -> tuple[list[int], bool]:
    """(the steps of `step_dirs` without `COMMIT_MARKER`, whether that means unfinished): on a bucket always;
    on a local path when another step has the marker, i.e. a bucket's run read through a mount (gcsfuse), where
    a save in progress is in place too; a local run of an orbax that writes no marker has none at all."""
    marked = {step for step, path in step_dirs.items() if (path / COMMIT_MARKER).exists()}
    unmarked = sorted(set(step_dirs) - marked)
    return unmarked, commits_in_place(workdir) or bool(marked)


def committed_steps(workdir) -> list[int]:
    """The steps under `workdir/checkpoints` whose save finished, as orbax lists them: a directory named by its
    step (orbax renames a finished one into place), which on a bucket also holds `COMMIT_MARKER` (orbax writes
    it last), as it does on a mounted bucket (`_unmarked`). `workdir` is a `workdir_path` (local or bucket)."""
    step_dirs = _step_dirs(workdir)
    if not commits_in_place(workdir):
        step_dirs = {step: path for step, path in step_dirs.items() if path.is_dir()}
    unmarked, unfinished = _unmarked(workdir, step_dirs)
    return sorted(set(step_dirs) - set(unmarked)) if unfinished else sorted(step_dirs)


def uncommitted_step(workdir, step: int) -> str | None:
    """What a save of `step` that never finished lacks, in words (its commit marker on a bucket, the rename of
    its temporary directory on a disk); None when the step is committed or nothing of it is there. `workdir` is
    a `workdir_path`."""
    directory = workdir / "checkpoints"
    step_dir = directory / str(step)
    if step_dir.is_dir():
        unmarked, unfinished = _unmarked(workdir, _step_dirs(workdir))
        if unfinished and step in unmarked:
            return f"{step_dir / COMMIT_MARKER} is missing (orbax writes it last, once every item is written)"
        return None
    if commits_in_place(workdir) or not directory.is_dir():
        return None
    temporary = sorted(directory.glob(f"{step}{TEMPORARY_STEP_SUFFIX}*"))
    if temporary:
        return f"{temporary[-1]} was never renamed to {step_dir}"
    return None


def read_lines_of(path) -> list[str]:
    """The lines of a UTF-8 text file of a workdir (a local `Path` or an `etils.epath.Path` on a bucket), as
    `tgjax.data.text_files.read_lines` reads a local one: bad bytes raise an error naming file:line:column."""
    from tgjax.data.text_files import decode_line, read_lines

    if isinstance(path, Path):
        return read_lines(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for number, raw in enumerate(data.split(b"\n"), start=1):
            decode_line(raw, os.fspath(path), number)  # raises, naming the line of the first bad byte
        raise
    return text.removeprefix("\ufeff").splitlines()


def split_workdirs(value) -> list[str]:
    """Several workdirs named in one comma-separated value (`rl.options_workdir=W1,W2`, `--workdir W1,W2`),
    each stripped, empty entries dropped."""
    return [w.strip() for w in str(value).split(",") if w.strip()]


# -----------------------------------------------------------------------------
# Checkpoint integrity.


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# (path, size, mtime, inode) -> sha256 of a checkpoint file this process has verified: loading a model checks its
# step once in `tgjax.load` and again in the family's loader, and hashing reads every byte (over the network, for
# a bucket's objects).
_VERIFIED: dict[tuple, str] = {}


def _verified_sha256(path) -> str:
    """`_sha256`, remembered for a file that has not changed since (any write changes its mtime; a bucket's
    object, which is replaced rather than written, its time of creation)."""
    status = path.stat()
    if isinstance(path, Path):
        key: tuple = (str(path), status.st_size, status.st_mtime_ns, status.st_ino)
    else:
        key = (str(path), status.length, status.mtime)
    if key not in _VERIFIED:
        _VERIFIED[key] = _sha256(path)
    return _VERIFIED[key]


def _size(path) -> int:
    """Bytes in a file (`pathlib` calls it st_size, `etils.epath` length)."""
    status = path.stat()
    return status.st_size if hasattr(status, "st_size") else status.length


def _files_under(directory) -> dict[str, object]:
    """relative path -> path of every file under `directory` (local `Path` or `etils.epath.Path`)."""
    walk = os.walk(directory) if isinstance(directory, Path) else directory.walk()
    files = {}
    for root, _, names in walk:
        for name in sorted(names):
            path = type(directory)(root) / name
            files[str(path.relative_to(directory))] = path
    return files


def directory_manifest(directory, *, hashes: bool = True) -> dict[str, list]:
    """relative path -> [size, sha256] for every file under `directory`; [size, None] without `hashes`.

    Sizes cost one stat per file; hashes read every byte (3 GB for a 252M-parameter model with Adam).
    """
    return {name: [_size(path), _sha256(path) if hashes else None] for name, path in _files_under(directory).items()}


def check_step(workdir, step: int, *, checksums: bool = True) -> str | None:
    """Why checkpoint step `step` of `workdir` cannot be trusted, or None.

    Items missing from `checkpoints/<step>`, or files missing from it or of
    another size than its manifest in `checkpoint_manifests/` says (cheap:
    one stat per file), or (with `checksums`, the default, when the manifest
    has sums: training writes them unless `checkpointing.checksums=false`)
    files whose sha256 differs, so that a flipped byte is caught. A step
    without a manifest (its run stopped before writing it) passes: orbax's
    restore is then the check. `workdir` is a local path or an
    `etils.epath.Path` (`workdir_path`). On a bucket a step without orbax's
    `COMMIT_MARKER` is refused too: its save never finished.
    """
    if isinstance(workdir, str):
        workdir = workdir_path(workdir)
    step_dir = workdir / "checkpoints" / str(step)
    missing = [item for item in CHECKPOINT_ITEMS if not (step_dir / item).is_dir()]
    if missing:
        return f"item(s) {missing} missing from {step_dir}"
    if commits_in_place(workdir) and not (step_dir / COMMIT_MARKER).exists():
        return f"{step_dir / COMMIT_MARKER} is missing: its save did not finish"
    manifest_path = workdir / "checkpoint_manifests" / f"{step}.json"
    if not manifest_path.exists():
        return None
    try:
        expected = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        return f"manifest {manifest_path} unreadable: {e}"
    actual = _files_under(step_dir)
    for name, (size, digest) in sorted(expected.items()):
        if name not in actual:
            return f"file {step_dir / name} is missing"
        actual_size = _size(actual[name])
        if actual_size != size:
            return f"file {step_dir / name} has {actual_size} bytes, expected {size}"
        if checksums and digest is not None and _verified_sha256(actual[name]) != digest:
            return f"file {step_dir / name} does not match its sha256 in {manifest_path}"
    return None


# -----------------------------------------------------------------------------
# A failed orbax read, in one line.
#
# orbax reads a checkpoint's arrays with many coroutines on an event loop of its own, and TensorStore's reads
# call back into that loop from TensorStore's threads. When one read fails (a truncated or deleted file), orbax
# raises at once and closes the loop: the other coroutines are finalised later with their own errors, and reads
# still in flight call back into the closed loop. Python prints each of those as "Exception ignored in ..."
# with a traceback, and a coroutine that never started as a RuntimeWarning "coroutine ... was never awaited":
# hundreds of lines after the one line that says what is wrong.


def _orbax_teardown(unraisable) -> bool:
    """Whether an unraisable exception is the teardown of a failed orbax read (see above)."""
    code = getattr(unraisable.object, "cr_code", None)  # a coroutine finalised with its read's error
    if code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
        return True
    error = unraisable.exc_value
    return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


class _DropOrbaxTeardown:
    """A `sys.unraisablehook` that drops `_orbax_teardown` and hands everything else to the hook it replaced."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        if not _orbax_teardown(unraisable):
            self.previous(unraisable)


class _DropAsyncioTeardown(logging.Filter):
    """asyncio's log records of tasks a closed loop left behind (a failed orbax read's other reads)."""

    PREFIXES = ("Task was destroyed but it is pending", "Task exception was never retrieved",
                "Future exception was never retrieved")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.PREFIXES)


def quiet_orbax_teardown() -> None:
    """Drops the teardown noise of a failed orbax read (see above) for the rest of the process.

    Called once a read has failed: its coroutines are finalised, and
    TensorStore's reads in flight end, after the error has been reported.
    Any other ignored exception is still printed by the hook that was there;
    the warning that a coroutine was never awaited is then dropped for any
    coroutine (a warning names the coroutine, not its package).
    """
    if not isinstance(sys.unraisablehook, _DropOrbaxTeardown):
        sys.unraisablehook = _DropOrbaxTeardown(sys.unraisablehook)
    warnings.filterwarnings("ignore", message=r"coroutine '[\w.<>]+' was never awaited", category=RuntimeWarning)
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _DropAsyncioTeardown) for f in asyncio_log.filters):
        asyncio_log.addFilter(_DropAsyncioTeardown())


@contextlib.contextmanager
def orbax_read() -> Iterator[None]:
    """Around an orbax restore: its teardown noise is dropped while it runs and, if it fails, from then on
    (`quiet_orbax_teardown`); after a read that succeeds the process's hook is as it was."""
    previous = sys.unraisablehook
    installed = not isinstance(previous, _DropOrbaxTeardown)
    if installed:
        sys.unraisablehook = _DropOrbaxTeardown(previous)
    try:
        yield
    except BaseException:
        quiet_orbax_teardown()
        raise
    if installed and isinstance(sys.unraisablehook, _DropOrbaxTeardown):
        sys.unraisablehook = previous


def restore_failure(error: BaseException) -> str:
    """A failed orbax read in one short line: its innermost cause (TensorStore's, which names the array and the
    file, e.g. `ValueError: NOT_FOUND: ... "params.embedding/.zarray" in OCDBT database at local file "..."
    does not exist`), without the TensorStore spec that orbax appends (thousands of characters)."""
    root, seen = error, set()
    while root.__cause__ is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__
    lines = str(root).strip().splitlines()
    text = lines[0] if lines else ""
    for cut in (" [tensorstore_spec", " See full TensorStore details", " tensorstore_spec="):
        text = text.split(cut)[0]
    text = text if len(text) <= 400 else text[:400] + "..."
    return f"{type(root).__name__}: {text}" if text else type(root).__name__


# -----------------------------------------------------------------------------
# The family a workdir holds, read from its files (no orbax, no JAX): each command that takes a workdir
# refuses one of another family up front, in one line, rather than failing deep inside its loader.


@dataclasses.dataclass(frozen=True)
class Family:
    """What a workdir's run is: its trainer (`lm`, `pushdown_lm`, `onlstm_lm`, `mlm`, ...) and, for the
    families that read several kinds of data, the data source (`dyck`, `treebank`, `builtin`, ...)."""

    trainer: str
    source: str | None = None
    model: str | None = None

    @property
    def is_treebank_lm(self) -> bool:
        """A run that scores, parses and samples trees: TG / TXL, or Pushdown-LM on trees (not on Dyck)."""
        return self.trainer == "lm" or (self.trainer == "pushdown_lm" and self.source != "dyck")

    def describe(self) -> str:
        what = FAMILY_NAMES.get(self.trainer, self.trainer)
        details = [f"model {self.model}"] if self.model else []
        details += [f"data {self.source}"] if self.source else []
        return f"{what} run ({', '.join(details)})" if details else f"{what} run"

    def commands(self) -> str:
        """The commands that take a run of this family."""
        if self.trainer == "pushdown_lm" and self.source == "dyck":
            return "tgjax eval dyck"
        return FAMILY_COMMANDS.get(self.trainer, "tgjax viz curves (its metrics.jsonl)")


FAMILY_NAMES = {"lm": "a TG/TXL", "pushdown_lm": "a Pushdown-LM", "onlstm_lm": "an ON-LSTM", "mlm": "a UDGN",
                "classification": "an Ordered Memory (ListOps / logic)", "cfl": "a stack-attention CFL",
                "craft_bc": "a Craft behaviour-cloning", "ppo_options": "a Craft PPO (options)",
                "ppo_actions": "a Craft PPO (actions)", "stack_lm": "a stack-attention LM"}
_TREEBANK_COMMANDS = ("tgjax eval score / ppl / rerank / parse / sg / blimp, tgjax sample")
FAMILY_COMMANDS = {"lm": _TREEBANK_COMMANDS, "pushdown_lm": "tgjax eval score / parse / sg / blimp, tgjax sample",
                   "onlstm_lm": "tgjax eval unsupervised-parse / score / ppl / sg / blimp",
                   "mlm": "tgjax eval dependency", "stack_lm": "tgjax eval score / ppl / sg / blimp",
                   "craft_bc": "tgjax eval craft", "ppo_options": "tgjax eval craft", "ppo_actions": "tgjax eval craft"}


def _newest_meta(workdir) -> dict | None:
    """The newest checkpoint step's meta (orbax writes the JSON item as `meta/metadata`), or None."""
    for step in reversed(committed_steps(workdir)):
        try:
            meta = json.loads((workdir / "checkpoints" / str(step) / "meta" / "metadata").read_text())
        except (OSError, ValueError):
            continue  # a step cut short: an older one may say
        if isinstance(meta, dict):
            return meta
    return None


def family_of(workdir: str | os.PathLike) -> Family | None:
    """The family of the run in `workdir`, from its newest checkpoint's meta (its `family` and training
    `config`), or the `config.json` some trainers write; None when the workdir says nothing (the command's
    own loader then says what is missing). A bucket URL is read where it is (`workdir_path`)."""
    directory = workdir_path(workdir)
    meta = _newest_meta(directory)
    config = meta.get("config") if meta else None
    if not isinstance(config, dict) and (directory / "config.json").is_file():
        try:
            config = json.loads((directory / "config.json").read_text())
        except (OSError, ValueError):
            config = None
    if meta is None and not isinstance(config, dict):
        return None
    config = config if isinstance(config, dict) else {}
    trainer = recorded_family(meta, config)
    data, model = config.get("data") or {}, config.get("model") or {}
    source = data.get("source") if isinstance(data, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    if trainer == "classification" and isinstance(model, dict) and model.get("encoder", "ordered_memory") != \
            "ordered_memory":
        name = f"{model['encoder']} baseline"  # Ordered Memory's family, another encoder (model.encoder)
    return Family(str(trainer), source, name)


def recorded_family(meta: dict | None, config: dict | None) -> str:
    """The family a checkpoint records: its meta's `family` (written by the trainer), else (runs from before it)
    its training config's `trainer`, "lm" when the config names none."""
    return (meta or {}).get("family") or (config or {}).get("trainer", "lm")


class WrongFamily(ValueError):
    """A workdir of a family that the command does not take; the message names what it holds and what takes it."""


def check_family(workdir: str | os.PathLike, command: str, takes: str, accepts) -> None:
    """Refuses, in one line, a workdir whose family `accepts(family)` rejects; silent when it cannot tell.

    `takes` says in words what `command` takes (e.g. "TG/TXL and Pushdown treebank runs").
    """
    family = family_of(workdir)
    if family is None or accepts(family):
        return
    raise WrongFamily(f"{os.fspath(workdir)} holds {family.describe()}; `{command}` takes {takes}; for this run "
                      f"use: {family.commands()}")


def check_treebank_lm(workdirs, command: str, *, word_scorers: tuple[str, ...] = ()) -> None:
    """`check_family` for the commands that score, parse or sample trees (TG/TXL and Pushdown on trees), and
    for those that read log p of word strings (eval score, ppl, sg, blimp) the runs of the families in
    `word_scorers` too (trainer names: `tgjax.infer.api.WORD_SCORERS`, the families whose scorer reads words)."""
    kinds = ["TG/TXL", "Pushdown treebank", *(FAMILY_NAMES.get(f, repr(f)).split(" ", 1)[-1] for f in word_scorers)]
    takes = f"{', '.join(kinds[:-1])} and {kinds[-1]} runs"

    def accepts(family: Family) -> bool:
        return family.is_treebank_lm or family.trainer in word_scorers

    for workdir in [workdirs] if isinstance(workdirs, (str, os.PathLike)) else workdirs or ():
        for one in split_workdirs(workdir):
            check_family(one, command, takes, accepts)


# -----------------------------------------------------------------------------
# The vocabulary.


def vocabulary_file_name(vocab: Vocabulary) -> str:
    """The name a vocabulary is saved under in a workdir (by its kind)."""
    return WORD_DICTIONARY_FILE if isinstance(vocab, WordDictionary) else SENTENCEPIECE_FILE


def saved_vocabulary_path(workdir):
    """The workdir's vocabulary file (a path of the workdir's kind: `workdir_path`), or None if it holds none."""
    for name in VOCABULARY_FILE_NAMES:
        if (workdir / name).exists():
            return workdir / name
    return None


def vocabulary_fingerprint(vocab: Vocabulary) -> str:
    """sha256 of the vocabulary as `save` writes it (model and sidecar for SentencePiece).

    What a checkpoint's meta records as `vocab_sha256`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / vocabulary_file_name(vocab)
        vocab.save(path)
        digest = hashlib.sha256(path.read_bytes())
        sidecar = Path(str(path) + ".json")
        if sidecar.exists():
            digest.update(sidecar.read_bytes())
    return digest.hexdigest()


def word_list_fingerprint(words: list[str]) -> str:
    """sha256 of a `WORD_LIST_FILE`'s words joined by newlines: what a run's meta records as `vocab_sha256`."""
    return hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()


__all__ = ["CHECKPOINT_ITEMS", "COMMIT_MARKER", "VOCABULARY_FILE_NAMES", "WORD_LIST_FILE", "Family",
           "VocabularyMismatch", "WrongFamily", "check_family", "check_step", "check_treebank_lm",
           "committed_steps", "commits_in_place", "family_of", "directory_manifest", "is_url", "orbax_read",
           "quiet_orbax_teardown", "read_lines_of", "restore_failure", "saved_vocabulary_path", "uncommitted_step",
           "vocabulary_file_name", "vocabulary_fingerprint", "word_list_fingerprint", "workdir_path"]
