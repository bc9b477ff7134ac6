"""The layout of a training workdir, which the trainer writes and inference reads.

Both `tgjax.train` (writer) and `tgjax.infer` (reader) import this module; it
imports neither (nor JAX), so the arrows stay `workdir` <- `train`, `infer`.

    WORKDIR/checkpoints/<step>/{state,pipeline,meta}   one orbax step (`CHECKPOINT_ITEMS`)
    WORKDIR/checkpoint_manifests/<step>.json           sha256 sums of a finished step's files
    WORKDIR/vocab.json  or  WORKDIR/vocab.model (+ .json sidecar)   the run's vocabulary

Facts of that layout held here: the workdir as an absolute local path
(`local_workdir`), where the vocabulary is (`vocabulary_file_name`,
`saved_vocabulary_path`), the integrity check of one step directory against
its manifest (`directory_manifest`, `check_step`), and the vocabulary's
fingerprint that a checkpoint records as `vocab_sha256` with the error raised
when a vocabulary differs from it (`vocabulary_fingerprint`,
`VocabularyMismatch`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from tgjax.data.vocab import Vocabulary, WordDictionary

CHECKPOINT_ITEMS = ("state", "pipeline", "meta")
WORD_DICTIONARY_FILE = "vocab.json"
SENTENCEPIECE_FILE = "vocab.model"
VOCABULARY_FILE_NAMES = (WORD_DICTIONARY_FILE, SENTENCEPIECE_FILE)


class VocabularyMismatch(ValueError):
    """The vocabulary a run would use differs from the one its checkpoints were trained with."""


def local_workdir(workdir: str | os.PathLike) -> Path:
    """A workdir as an absolute local path (orbax wants absolute paths); a URL is refused.

    Everything in a workdir besides orbax's arrays (metrics.jsonl appended line
    by line, TensorBoard events, the vocabulary, checkpoint manifests and
    checksums) is written with local file operations, and `pathlib` would
    quietly turn `gs://bucket/run` into a relative directory `gs:/bucket/run`.
    A bucket is used through a mount (gcsfuse), as `launch/` does.
    """
    text = os.fspath(workdir)
    if "://" in text:
        raise ValueError(
            f"workdir {text!r} is a URL, but a workdir is written with local file operations: mount the bucket "
            f"(e.g. `gcsfuse --implicit-dirs BUCKET ~/gcs/BUCKET`, as launch/host_train.sh does for gs:// "
            f"WORKDIRs) and give the mounted path")
    return Path(text).absolute()


# -----------------------------------------------------------------------------
# Checkpoint integrity.


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def directory_manifest(directory: Path) -> dict[str, list]:
    """relative path -> [size, sha256] for every file under `directory`."""
    manifest = {}
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            path = Path(root) / name
            manifest[str(path.relative_to(directory))] = [path.stat().st_size, _sha256(path)]
    return manifest


def check_step(workdir: Path, step: int, *, checksums: bool = True) -> str | None:
    """Why checkpoint step `step` of `workdir` cannot be trusted, or None.

    Items missing from `checkpoints/<step>`, or (with `checksums`) files that
    do not match the step's manifest in `checkpoint_manifests/`. A step
    without a manifest (its run stopped before writing it) passes: orbax's
    restore is then the check.
    """
    step_dir = Path(workdir) / "checkpoints" / str(step)
    missing = [item for item in CHECKPOINT_ITEMS if not (step_dir / item).is_dir()]
    if missing:
        return f"item(s) {missing} missing from {step_dir}"
    if not checksums:
        return None
    manifest_path = Path(workdir) / "checkpoint_manifests" / f"{step}.json"
    if not manifest_path.exists():
        return None
    try:
        expected = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        return f"manifest {manifest_path} unreadable: {e}"
    actual = directory_manifest(step_dir)
    for name, (size, digest) in sorted(expected.items()):
        if name not in actual:
            return f"file {step_dir / name} is missing"
        if actual[name][0] != size:
            return f"file {step_dir / name} has {actual[name][0]} bytes, expected {size}"
        if actual[name][1] != digest:
            return f"file {step_dir / name} does not match its sha256 in {manifest_path}"
    return None


# -----------------------------------------------------------------------------
# The vocabulary.


def vocabulary_file_name(vocab: Vocabulary) -> str:
    """The name a vocabulary is saved under in a workdir (by its kind)."""
    return WORD_DICTIONARY_FILE if isinstance(vocab, WordDictionary) else SENTENCEPIECE_FILE


def saved_vocabulary_path(workdir: Path) -> Path | None:
    """The workdir's vocabulary file, or None if it holds none."""
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


__all__ = ["CHECKPOINT_ITEMS", "VOCABULARY_FILE_NAMES", "VocabularyMismatch", "check_step", "directory_manifest",
           "local_workdir", "saved_vocabulary_path", "vocabulary_file_name", "vocabulary_fingerprint"]
