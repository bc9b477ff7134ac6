"""A work folder as a few size-capped files, and back: tar + gzip, split into parts, with a manifest.

    parts = pack(work_dir, output_dir, meta={...}, leave_out=["runs/a/checkpoints"])   # .000, ..., manifest.json
    meta = unpack(output_dir, fresh_dir)              # checks every part's size and sha256 first

Parts are at most `PART_BYTES` (16 MiB) and the whole at most `TOTAL_BYTES` (64 MiB), the size of what a
session can carry between machines; a larger state is refused in one line (`PackTooLarge`) and nothing of the
attempt is left in the output folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

MIB = 1 << 20
PART_BYTES = 16 * MIB
TOTAL_BYTES = 64 * MIB
MANIFEST = "manifest.json"
PART_PREFIX = "state.tar.gz."
# The work folder's cache of compiled programs (`tgjax.reproduce.runner.use_compilation_cache`).
COMPILATION_CACHE = ".xla_cache"
# Left out of a pack: TensorBoard events are for people, and a resumed run does not read them; compiled programs
# belong to the machine that compiled them.
SKIPPED_NAMES = frozenset({"tensorboard", COMPILATION_CACHE})


class PackTooLarge(ValueError):
    """The packed state is over the cap; the message is one line."""


class PackError(ValueError):
    """A pack that cannot be read back (missing or damaged part, no manifest); the message is one line."""


def _filter(leave_out: Collection[str]) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
    """The tar filter that drops `SKIPPED_NAMES` anywhere and the folders `leave_out` (relative paths)."""
    left_out = [Path(path).parts for path in leave_out]

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts  # "./runs/a/..." reads as ("runs", "a", ...)
        if SKIPPED_NAMES & set(parts) or any(parts[:len(prefix)] == prefix for prefix in left_out):
            return None
        return info

    return keep


def pack(source: str | Path, output: str | Path, *, meta: dict | None = None, part_bytes: int = PART_BYTES,
         total_bytes: int = TOTAL_BYTES, leave_out: Collection[str] = ()) -> list[Path]:
    """Packs the folder `source` into `output` (created), less the folders `leave_out` (paths relative to `source`);
    returns the part files, manifest last."""
    source, output = Path(source), Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=output) as archive:
        with tarfile.open(fileobj=archive, mode="w:gz", compresslevel=6) as tar:
            tar.add(source, arcname=".", filter=_filter(leave_out))
        size = archive.tell()
        if size > total_bytes:
            raise PackTooLarge(f"the packed state is {size / MIB:.1f} MiB, over the {total_bytes / MIB:.0f} MiB cap "
                               f"({source}); nothing was written")
        archive.seek(0)
        _remove_old_pack(output)
        parts = []
        for index in range(max(1, -(-size // part_bytes))):
            chunk = archive.read(part_bytes)
            part = output / f"{PART_PREFIX}{index:03d}"
            _write_atomic(part, chunk)
            parts.append({"file": part.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"format": "tar.gz split", "total_bytes": size, "parts": parts, "meta": meta or {}}
    _write_atomic(output / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return [output / p["file"] for p in parts] + [output / MANIFEST]


def read_manifest(folder: str | Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise PackError(f"{path}: no manifest; --resume-from takes the --output folder of an earlier run")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise PackError(f"{path}: not JSON ({error})") from None


def unpack(folder: str | Path, destination: str | Path) -> dict:
    """Checks and extracts a pack into `destination` (created, must be empty); returns the manifest's meta."""
    folder, destination = Path(folder), Path(destination)
    manifest = read_manifest(folder)
    data = io.BytesIO()
    for part in manifest["parts"]:
        path = folder / part["file"]
        if not path.is_file():
            raise PackError(f"{path}: missing part of the pack")
        chunk = path.read_bytes()
        if len(chunk) != part["bytes"] or hashlib.sha256(chunk).hexdigest() != part["sha256"]:
            raise PackError(f"{path}: damaged part (size or sha256 differs from the manifest)")
        data.write(chunk)
    destination.mkdir(parents=True, exist_ok=True)
    if any(destination.iterdir()):
        raise PackError(f"{destination}: not empty; unpacking needs a fresh folder")
    data.seek(0)
    with tarfile.open(fileobj=data, mode="r:gz") as tar:
        tar.extractall(destination, filter="data")
    return manifest.get("meta", {})


def _remove_old_pack(output: Path) -> None:
    """The parts of an earlier pack in the same folder (a new pack may have fewer)."""
    for path in output.glob(f"{PART_PREFIX}*"):
        path.unlink()
    (output / MANIFEST).unlink(missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.partial")
    temporary.write_bytes(data)
    os.replace(temporary, path)
