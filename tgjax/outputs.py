"""The files a command writes: checked before any work, then written whole or not at all.

`check_output` is called by every command for each of its output paths
(`-o`, `--output`, `--plot`, ...) before it reads a model or scores a
sentence, and `make_output_folder` for each folder it writes into (a
training run's `--workdir`, `tgjax reproduce --output`): an output that cannot be written (a directory, a missing or
read-only directory, one of the command's own inputs, a picture without a
known extension) is an `OutputError`, one line naming the path, instead of a
traceback after the work is done and lost.

`atomic_write` writes to a temporary file beside the output and renames it
over the output at the end, so a failed run leaves neither a half-written
file nor a temporary one behind. `write_text`, `write_json` and
`save_figure` write through it; `dumps_json` is the one JSON encoder of the
commands' results: a NaN or infinity (not JSON) is an `OutputError` naming
the file and the field, never a `NaN` in the file.

Imports nothing heavy (no JAX, no matplotlib unless a picture is checked or
drawn): `tgjax --help` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


class OutputError(ValueError):
    """An output path that cannot be written, or a result that cannot be written there; names the path."""


def check_output(path: str | os.PathLike, *, option: str = "-o", inputs: Iterable[str | os.PathLike] = (),
                 figure: bool = False) -> Path:
    """`path` as a `Path` if a command may write it; else `OutputError` naming `option` and `path`.

    `inputs`: the files the command reads, which it must not overwrite.
    `figure`: a picture, whose format is its extension (required: matplotlib
    would otherwise add `.png` to the name silently).
    """
    output = Path(path)
    where = f"{option} {os.fspath(path)}"
    if output.is_dir():
        raise OutputError(f"{where}: is a directory; give a file name")
    parent = output.absolute().parent
    if not parent.is_dir():
        missing = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"{where}: directory {parent} {missing}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{where}: directory {parent} is not writable")
    for source in inputs:
        if _same_file(output, Path(source)):
            raise OutputError(f"{where}: is also an input of this command; give another file name")
    if figure:
        _check_figure_format(output, where)
    return output


def make_output_folder(path: str | os.PathLike, *, option: str) -> Path:
    """Creates the folder a command writes into (with its parents), or finds it there and writable; else an
    `OutputError` naming `option` and `path` (a file in the way, a read-only parent, a path under a file)."""
    folder = Path(path)
    where = f"{option} {os.fspath(path)}"
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{where}: is a file; give a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{where}: the folder cannot be created ({error.strerror or error})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{where}: the folder is not writable")
    return folder


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.absolute().resolve() == b.absolute().resolve()


def figure_formats() -> list[str]:
    """The extensions matplotlib can write (png, pdf, svg, ...)."""
    from tgjax.extras import require_extra

    require_extra("matplotlib", extra="plots", purpose="drawing")
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def _check_figure_format(output: Path, where: str) -> None:
    formats = figure_formats()
    extension = output.suffix[1:].lower()
    if not extension:
        raise OutputError(f"{where}: no extension; give the picture's format as one, e.g. {output.name}.png "
                          f"(one of {', '.join(formats)})")
    if extension not in formats:
        raise OutputError(f"{where}: unknown picture format {extension!r}; expected one of {', '.join(formats)}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class AtomicFile:
    """A file written under a temporary name beside `path`: `commit()` renames it to `path`, `discard()`
    removes it. The temporary name is in `path`'s directory (a rename within one file system is atomic) and
    hidden (a dot name)."""

    def __init__(self, path: str | os.PathLike, mode: str = "w", **open_kwargs):
        self.path = Path(path)
        if "b" not in mode:
            open_kwargs.setdefault("encoding", "utf-8")
        fd, self.temporary = tempfile.mkstemp(dir=self.path.absolute().parent, prefix=f".{self.path.name}.",
                                              suffix=".tmp")
        self.file = os.fdopen(fd, mode, **open_kwargs)

    def commit(self) -> None:
        self.file.close()
        os.chmod(self.temporary, 0o666 & ~_umask())  # mkstemp's 0600 would make results private
        os.replace(self.temporary, self.path)

    def discard(self) -> None:
        self.file.close()
        Path(self.temporary).unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """An open file that becomes `path` when the block ends normally; on an error nothing is left behind."""
    atomic = AtomicFile(path, mode, **open_kwargs)
    try:
        yield atomic.file
    except BaseException:
        atomic.discard()
        raise
    atomic.commit()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as handle:
        handle.write(text)


def non_finite_field(value, where: str = "") -> str | None:
    """The path (`scores.layer 1.f1`) of the first NaN or infinity in a JSON-like value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the value"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = non_finite_field(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def dumps_json(value, *, where: str, **kwargs) -> str:
    """`json.dumps` without NaN or infinity (not JSON); `OutputError` names `where` and the field instead."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        field = non_finite_field(value)
        if field is None:
            raise
        raise OutputError(f"{where}: {field} is not a finite number; nothing written") from None


def write_json(path: str | os.PathLike, value, *, indent: int | None = 2) -> None:
    """One JSON object in a file (checked before anything is written)."""
    write_text(path, dumps_json(value, where=os.fspath(path), indent=indent) + "\n")


def save_figure(figure, path: str | os.PathLike, **savefig_kwargs) -> None:
    """A matplotlib figure to `path` (checked with `check_output(figure=True)`), in the format of its extension."""
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format=Path(path).suffix[1:].lower(), **savefig_kwargs)


__all__ = ["AtomicFile", "OutputError", "atomic_write", "check_output", "dumps_json", "figure_formats",
           "make_output_folder", "non_finite_field", "save_figure", "write_json", "write_text"]
