"""Inference never reaches up into evaluation: importing all of `tgjax.infer` loads no `tgjax.eval` module."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import tgjax.infer


def test_infer_imports_no_eval_module():
    modules = sorted(f"tgjax.infer.{m.name}" for m in pkgutil.iter_modules(tgjax.infer.__path__))
    assert {"tgjax.infer.beam", "tgjax.infer.loading", "tgjax.infer.scoring"} <= set(modules)
    # A fresh interpreter: this test process has imported eval modules already.
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m == 'tgjax.eval' or m.startswith('tgjax.eval.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
