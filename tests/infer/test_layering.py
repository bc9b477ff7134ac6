"""The import arrows of DESIGN.md, checked on the source and at run time.

`syntax` <- `data`; `ops` <- `nn` <- `models`; `models`, `data` <- `train`,
`infer`; `infer` <- `eval` <- `cli`; `syntax` and `data` never import JAX;
`envs` imports neither `data` nor `train`; the trainer's core (`tgjax.train`
but its families) imports no model family; `tgjax.train` defines no network
(no `nnx.Module` subclass: the networks are `tgjax.models`'). The
source check reads every Import / ImportFrom node of every module with `ast`,
those inside functions included (a function-local import is still an arrow),
with relative imports resolved against the module's package.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import tgjax
import tgjax.infer

PACKAGE_ROOT = Path(tgjax.__file__).parent

# package (or module) -> what it must never import, at module level or inside a function
FORBIDDEN = {
    "tgjax.infer": ("tgjax.train", "tgjax.eval", "tgjax.cli"),
    "tgjax.train": ("tgjax.eval", "tgjax.infer", "tgjax.cli"),
    "tgjax.models": ("tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    "tgjax.nn": ("tgjax.models", "tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    "tgjax.ops": ("tgjax.nn", "tgjax.models", "tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    "tgjax.progress": ("tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli", "jax", "flax", "optax", "orbax"),
    "tgjax.workdir": ("tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli", "jax", "flax", "optax", "orbax"),
    "tgjax.syntax": ("jax", "jaxlib", "flax", "optax", "orbax", "tgjax.data", "tgjax.ops", "tgjax.nn",
                     "tgjax.models", "tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    "tgjax.data": ("jax", "jaxlib", "flax", "optax", "orbax", "tgjax.ops", "tgjax.nn", "tgjax.models",
                   "tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    "tgjax.envs": ("tgjax.data", "tgjax.train", "tgjax.infer", "tgjax.eval", "tgjax.cli"),
    # no circle: `tgjax sample` reaches a Pushdown-LM through its sampler capability, not its evaluation module
    "tgjax.eval.pushdown": ("tgjax.eval.sample_command",),
    "tgjax.eval.sample_command": ("tgjax.eval.pushdown",),
}

# The trainer's core: written once for every family (`tgjax.train.family`, `tgjax.train.step`).
TRAINER_CORE = tuple(f"tgjax.train.{name}" for name in (
    "loop", "step", "params_state", "family", "task", "checkpoint", "config", "sharding", "metrics", "schedules",
    "optimizer"))
# What a family is made of: its task module (or package) under tgjax.train.tasks (the registry,
# tgjax.train.tasks itself, finds them by name), its models and its environments.
FAMILY_MODULES = (*(f"tgjax.train.tasks.{m.name}" for m in pkgutil.iter_modules(
    [str(PACKAGE_ROOT / "train" / "tasks")])), "tgjax.train.cfl", "tgjax.train.cfl_trials", "tgjax.models",
    "tgjax.envs")
FORBIDDEN.update({module: FAMILY_MODULES for module in TRAINER_CORE})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, however deeply nested."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x`, `from ..train import y`
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # `from tgjax import train` imports tgjax.train: name each imported submodule too
            found.append((node.lineno, target))
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
    return found


def violations(path: Path, source: str | None = None) -> list[str]:
    module = module_name(path)
    source = path.read_text() if source is None else source
    rules = [bad for owner, bad in FORBIDDEN.items() if module == owner or module.startswith(owner + ".")]
    out = []
    for line, target in imported_modules(source, module, path.name == "__init__.py"):
        for forbidden in (f for bad in rules for f in bad):
            if target == forbidden or target.startswith(forbidden + "."):
                out.append(f"{path.relative_to(PACKAGE_ROOT.parent)}:{line}: {module} imports {target}")
    return out


def package_files() -> list[Path]:
    return sorted(PACKAGE_ROOT.rglob("*.py"))


def test_no_module_imports_against_the_arrows():
    files = package_files()
    covered = {module_name(p).split(".")[1] for p in files if module_name(p) != "tgjax"}
    assert {"infer", "train", "syntax", "data", "models", "workdir", "envs"} <= covered
    assert set(TRAINER_CORE) <= {module_name(p) for p in files}  # no core module renamed out of the check
    assert {"tgjax.train.tasks.treebank_lm", "tgjax.train.tasks.onlstm_lm"} <= set(FAMILY_MODULES)
    problems = [v for path in files for v in violations(path)]
    assert problems == []


# a class with one of these bases is a network module (flax's, or one built on tgjax's modules and models)
NETWORK_BASES = ("flax.nnx.Module", "flax.linen.Module", "tgjax.nn", "tgjax.models")


def network_classes(path: Path, source: str | None = None) -> list[str]:
    """module:line: class of every class in `path` (or `source` in its place) whose base resolves, through the
    module's imports, to a network (`NETWORK_BASES`); classes inside functions too."""
    tree = ast.parse(path.read_text() if source is None else source)
    module = module_name(path)
    bound = {}  # local name -> the absolute name it was imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update({alias.asname or alias.name.split(".")[0]: alias.name if alias.asname
                          else alias.name.split(".")[0] for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            bound.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                head, _, rest = ast.unparse(base).partition(".")
                name = ".".join(filter(None, (bound.get(head, head), rest)))
                if any(name == b or name.startswith(b + ".") for b in NETWORK_BASES):
                    found.append(f"{module}:{node.lineno}: {node.name}({ast.unparse(base)})")
    return found


def test_the_trainer_defines_no_network():
    """Networks (`nnx.Module` subclasses) live in `tgjax.models` (or `tgjax.nn`); the trainer and its families'
    tasks build them from there."""
    files = [p for p in package_files() if module_name(p).startswith("tgjax.train")]
    assert any(module_name(p) == "tgjax.train.tasks.ppo_actions" for p in files)
    assert [c for path in files for c in network_classes(path)] == []
    # the check sees the ways a network class is written
    task = PACKAGE_ROOT / "train" / "tasks" / "ppo_actions.py"
    for source in ("from flax import nnx\nclass A(nnx.Module):\n    pass\n",
                   "import flax.nnx as fn\nclass A(fn.Module):\n    pass\n",
                   "from flax.nnx import Module\ndef f():\n    class A(Module):\n        pass\n",
                   "from tgjax.models.ocn import LSTMPolicy\nclass A(LSTMPolicy):\n    pass\n"):
        assert len(network_classes(task, source)) == 1, source
    assert network_classes(task, "import dataclasses\nclass A(dataclasses.Field):\n    pass\n") == []
    assert network_classes(PACKAGE_ROOT / "models" / "actor_critic.py") != []  # the networks the PPO tasks use


def test_tgjax_load_is_the_one_way_in():
    """No module outside `tgjax.infer` imports a private name of it (the families' loaders are `_restore_*`, behind
    `tgjax.load`'s family table)."""
    problems = []
    for path in package_files():
        module = module_name(path)
        if module == "tgjax.infer" or module.startswith("tgjax.infer."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tgjax.infer"):
                problems += [f"{module}:{node.lineno}: {node.module}.{alias.name}" for alias in node.names
                             if alias.name.startswith("_")]
    assert problems == []


def test_the_check_sees_function_local_and_relative_imports():
    """The check on sources that break the arrows the ways past code did (a planted import each)."""
    loading = PACKAGE_ROOT / "infer" / "loading.py"
    vocab = PACKAGE_ROOT / "data" / "vocab.py"
    checkpoint = PACKAGE_ROOT / "train" / "checkpoint.py"
    cases = [
        (loading, "def load():\n    from tgjax.train.checkpoint import check_step\n", "imports tgjax.train.checkpoint"),
        (loading, "def f():\n    if True:\n        import tgjax.eval.evalb as e\n", "imports tgjax.eval.evalb"),
        (loading, "from tgjax import train\n", "imports tgjax.train"),
        (loading, "from ..eval import summaries\n", "imports tgjax.eval"),
        (vocab, "import jax.numpy as jnp\n", "imports jax.numpy"),
        (vocab, "def f():\n    from jax import lax\n", "imports jax"),
        (checkpoint, "from tgjax.infer.loading import CheckpointError\n", "imports tgjax.infer.loading"),
        (checkpoint, "from ..eval import shards\n", "imports tgjax.eval"),
        (PACKAGE_ROOT / "train" / "loop.py", "from tgjax.train.tasks.treebank_lm import inputs\n",
         "imports tgjax.train.tasks.treebank_lm"),
        (PACKAGE_ROOT / "train" / "step.py", "def f():\n    from tgjax.models import TransformerLM\n",
         "imports tgjax.models"),
        (PACKAGE_ROOT / "envs" / "craft.py", "from tgjax.data import craft_demos\n", "imports tgjax.data"),
    ]
    for path, source, expected in cases:
        found = violations(path, source)
        assert len(found) >= 1 and expected in found[0], (source, found)
    assert violations(loading, "from tgjax.workdir import check_step\nfrom . import scoring\n") == []
    # the registry is not a family: the trainer finds the config's family through it
    assert violations(PACKAGE_ROOT / "train" / "loop.py", "from tgjax.train.tasks import make_task\n") == []


def test_the_old_loading_module_fails_the_check():
    """loading.py as it was before the workdir layout moved out of tgjax.train (function-local imports)."""
    old = subprocess.run(["git", "show", "8867bee:tgjax/infer/loading.py"], cwd=PACKAGE_ROOT.parent,
                         capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip(f"no git history here ({old.stderr.strip()[:200]})")
    found = violations(PACKAGE_ROOT / "infer" / "loading.py", old.stdout)
    assert any("imports tgjax.train.checkpoint" in v for v in found), found
    assert any("imports tgjax.train.state" in v for v in found), found


def test_infer_imports_no_eval_or_train_module():
    modules = sorted(f"tgjax.infer.{m.name}" for m in pkgutil.iter_modules(tgjax.infer.__path__))
    assert {"tgjax.infer.beam", "tgjax.infer.loading", "tgjax.infer.scoring"} <= set(modules)
    # A fresh interpreter: this test process has imported eval modules already.
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['tgjax', 'eval'], ['tgjax', 'train'])))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
