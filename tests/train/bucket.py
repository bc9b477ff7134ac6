"""A local stand-in for a `gs://` bucket, for the tests of bucket workdirs (no network, no credentials).

    with fake_bucket(tmp_path, monkeypatch) as root:   # gs://bucket/run/x is root/bucket/run/x
        train(config, "gs://bucket/run")

Inside, `gs://BUCKET/PATH` is the local file `root/BUCKET/PATH` for the two
ways a workdir on a bucket is reached:

* `etils.epath` (our manifests, metrics, vocabulary and sidecar files, and
  orbax's own directory operations): its backends are swapped for
  `etils.epath.testing.mock_epath`'s, whose every operation maps the URL to
  the local file (and paths it returns back to URLs), and writing a file
  makes its directory, as a bucket has none;
* TensorStore, which orbax hands a `gs://` path as a `gcs` kvstore (its
  network driver): orbax's `get_kvstore_for_gcs` gives the local `file`
  driver on the same file instead, and the hierarchical-namespace probe (the
  Cloud Storage client) says no.

Everything else of orbax is its real code for a `gs://` path: it sees a
bucket (`is_gcs_path`), so it commits a step by writing `commit_success.txt`
last, in place, instead of renaming a temporary directory, and lists only the
steps that have that file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def fake_bucket(root: Path, monkeypatch) -> Iterator[Path]:
    """`gs://...` kept under `root` (see the module docstring) while the context is open; yields `root`."""
    from etils.epath import gpath
    from etils.epath import testing as epath_testing
    from orbax.checkpoint._src.path import gcs_utils

    root = Path(root)

    def local(path) -> str:
        text = os.fspath(path)
        return str(root / text[len("gs://"):]) if text.startswith("gs://") else text

    def back(text) -> str:
        text = os.fspath(text)
        return "gs://" + os.path.relpath(text, root) if text == str(root) or text.startswith(f"{root}/") else text

    def one(fn, path, *args, **kwargs):
        return fn(local(path), *args, **kwargs)

    def two(fn, path, dst, *args, **kwargs):
        return fn(local(path), local(dst), *args, **kwargs)

    def open_(fn, path, mode):
        if "r" not in mode:  # a bucket has no directories: an object is written under any name
            os.makedirs(os.path.dirname(local(path)), exist_ok=True)
        return fn(local(path), mode)

    def glob(fn, pattern):
        return [back(p) for p in fn(local(pattern))]

    def walk(fn, path, *args, **kwargs):
        for top, dirs, files in fn(local(path), *args, **kwargs):
            yield back(top), dirs, files

    # With TensorFlow installed epath would take tf.io.gfile for gs:// whatever the mock says.
    monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)
    monkeypatch.setattr(gcs_utils, "get_kvstore_for_gcs",
                        lambda path: {"driver": "file", "path": local(path)})
    monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
    with epath_testing.mock_epath(open=open_, exists=one, isdir=one, listdir=one, makedirs=one, mkdir=one,
                                  remove=one, rmtree=one, stat=one, glob=glob, walk=walk, rename=two,
                                  replace=two, copy=two):
        yield root
