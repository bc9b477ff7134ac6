"""An installed tgjax: configs found by name from any directory, optional extras, dependency bounds.

The fast tests check name resolution and the extras' errors; the slow one
builds the wheel, installs it into a fresh virtual environment and trains
`--config tiny` from another directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tgjax.extras import MissingExtra, require_extra
from tgjax.reproduce.claims import SHIPPED_PACKAGE
from tgjax.train import config as config_lib
from tgjax.train.config import ConfigError, load_config, resolve_config_path

REPO = Path(__file__).resolve().parents[1]


def test_bare_names_and_config_paths_resolve_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    shipped = config_lib.shipped_config_dir()  # the checkout's configs/, or an installed tgjax_configs
    assert (shipped / "tiny.py").read_text() == (REPO / "configs" / "tiny.py").read_text()
    assert resolve_config_path("tiny") == (shipped / "tiny.py", None)
    assert resolve_config_path("stack_cfl:dyck,tf_nd") == (shipped / "stack_cfl.py", "dyck,tf_nd")
    # The README's `--config configs/NAME.py` works outside the checkout too.
    assert resolve_config_path("configs/tg_ptb.py:a.txt,b.txt") == (shipped / "tg_ptb.py", "a.txt,b.txt")
    assert load_config("tiny", ["training.num_steps=7"]).training.num_steps == 7
    names = config_lib.shipped_config_names()
    assert {"tiny", "onlstm_tiny", "stack_cfl", "tg_bllip"} <= set(names) and not any(n.startswith("_") for n in names)


def test_a_file_in_the_current_directory_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.py").write_text("def get_config():\n    return {'training': {'num_steps': 3}}\n")
    assert resolve_config_path("configs/tiny.py")[0] == Path("configs/tiny.py")
    assert load_config("configs/tiny.py").training.num_steps == 3
    assert load_config("tiny").training.num_steps != 3  # the bare name is the shipped one


def test_an_unknown_name_lists_the_shipped_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"'tinny' not found.*did you mean 'tiny'\?.*one of: .*onlstm_tiny.*tiny"):
        resolve_config_path("tinny")
    with pytest.raises(ConfigError, match=r"'elsewhere/tiny.py' not found"):
        resolve_config_path("elsewhere/tiny.py")  # only a configs/ directory falls back to the shipped file


def test_the_installed_configs_package_is_preferred(tmp_path, monkeypatch):
    """What a wheel install sees: `tgjax_configs` on sys.path (setup.py maps configs/ to it)."""
    package = tmp_path / "site" / config_lib.SHIPPED_CONFIGS_PACKAGE
    package.mkdir(parents=True)
    (package / "only_installed.py").write_text("def get_config():\n    return {'model': {'d_model': 24}}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    assert config_lib.shipped_config_dir() == package
    assert config_lib.shipped_config_names() == ["only_installed"]
    assert load_config("only_installed").model.d_model == 24


def test_setup_maps_configs_into_the_wheel():
    text = (REPO / "setup.py").read_text()
    assert '"tgjax_configs": "configs"' in text and config_lib.SHIPPED_CONFIGS_PACKAGE == "tgjax_configs"


def test_an_installed_tgjax_keeps_a_claims_record_beside_its_pack_and_needs_o_for_the_ledger(tmp_path,
                                                                                              monkeypatch, capsys):
    from tgjax.reproduce import claims, command, results

    assert claims.in_checkout()  # these tests run from the checkout
    assert results.default_results_file(tmp_path / "out") == REPO / "reproduction" / "runs.jsonl"
    monkeypatch.setattr(claims, "REPO_ROOT", tmp_path / "site")  # what an installed wheel sees
    assert not claims.in_checkout()
    assert results.default_results_file(tmp_path / "out") == tmp_path / "out" / "runs.jsonl"
    assert command.main(["--ledger"]) == 2 and "give -o PAGE.md" in capsys.readouterr().err


def test_setup_ships_the_claims_and_records():
    text = (REPO / "setup.py").read_text()
    assert '"tgjax_reproduction": "reproduction"' in text and SHIPPED_PACKAGE == "tgjax_reproduction"
    assert '"tgjax_reproduction": ["claims.json", "runs.jsonl"]' in text


def test_a_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    with pytest.raises(MissingExtra,
                       match=r"drawing needs the Python package 'matplotlib'.*pip install 'tgjax\[plots\]'"):
        require_extra("matplotlib", extra="plots", purpose="drawing")
    from tgjax import viz
    from tgjax.syntax import trees

    with pytest.raises(MissingExtra, match=r"tgjax\[plots\]"):
        viz.draw_mask(trees.parse("(S (NP the dog) (VP barks))"), "unused.png", pos_tags=False)


def _fake_tfp_user(tmp_path, monkeypatch, name: str) -> None:
    """A package that, like TFP's JAX substrate, imports TensorFlow when it can and records whether it did."""
    (tmp_path / f"{name}.py").write_text(
        "try:\n    import tensorflow\n    SAW_TENSORFLOW = True\nexcept ImportError:\n    SAW_TENSORFLOW = False\n")
    (tmp_path / "tensorflow.py").write_text("")  # an importable stand-in, so "absent" can only mean "hidden"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_rl_libraries_import_with_tensorflow_hidden_and_leave_it_as_it_was(tmp_path, monkeypatch):
    from tgjax.extras import rl_library

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    _fake_tfp_user(tmp_path, monkeypatch, "fake_rl_library")
    assert rl_library("fake_rl_library").SAW_TENSORFLOW is False
    assert "tensorflow" not in sys.modules  # no blocking sentinel left behind
    import tensorflow  # the stand-in: importable again afterwards

    _fake_tfp_user(tmp_path, monkeypatch, "fake_rl_library_2")  # TensorFlow already loaded: hidden all the same
    assert rl_library("fake_rl_library_2").SAW_TENSORFLOW is False
    assert sys.modules["tensorflow"] is tensorflow  # and put back
    monkeypatch.setitem(sys.modules, "rlax", None)
    with pytest.raises(MissingExtra, match=r"'rlax'.*pip install 'tgjax\[rl\]'"):
        rl_library("rlax")


def test_training_without_tensorboardx_keeps_metrics_jsonl(tmp_path, monkeypatch, capsys):
    from tgjax.train.metrics import MetricsWriter

    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    writer = MetricsWriter(tmp_path, tensorboard=True)
    writer.write({"split": "train", "step": 1, "loss": 2.5})
    writer.close()
    assert '"loss": 2.5' in (tmp_path / "metrics.jsonl").read_text()
    assert not (tmp_path / "tensorboard").exists()
    assert "pip install 'tgjax[tensorboard]'" in capsys.readouterr().err


def _lower_bounds() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    bounds = {}
    for requirement in project["dependencies"]:
        name, _, version = requirement.partition(">=")
        bounds[name.split("[")[0].strip()] = version.strip()
    return bounds


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def test_dependency_lower_bounds_are_not_below_the_apis_used():
    """Each bound is at least the first release with an API tgjax calls (see pyproject's comments)."""
    from importlib.metadata import version

    first_with_api = {"flax": "0.12.0",  # nnx.List, nnx.Dict
                      "optax": "0.2.5",  # optax.tree.norm
                      # BestN(keep_checkpoints_without_metrics=) is in 0.11.15; 0.11.17 is the first to import
                      # with jax 0.7.1 (0.11.15-16 read jax.experimental.layout.DeviceLocalLayout, gone there)
                      "orbax-checkpoint": "0.11.17",
                      "jax": "0.7.1"}  # flax 0.12.0's own requirement
    bounds = _lower_bounds()
    for name, first in first_with_api.items():
        assert _version_tuple(bounds[name]) >= _version_tuple(first), (name, bounds[name], first)
        assert _version_tuple(version(name)) >= _version_tuple(bounds[name])  # this environment satisfies it
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "matplotlib" not in core and "tensorboardX" not in core  # extras, imported lazily
    assert "chex" not in core and "chex" in " ".join(project["optional-dependencies"]["test"])  # tests only
    assert set(project["optional-dependencies"]) >= {"plots", "tensorboard"}


@pytest.mark.slow
def test_the_wheel_installs_and_trains_tiny_from_another_directory(tmp_path):
    """Builds the wheel from the working tree, installs it (no deps: they come from this environment
    through a .pth file placed after the new site-packages), and trains from an empty directory."""
    source = tmp_path / "source"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.split()
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(wheels)],
                   check=True, capture_output=True, text=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (wheel,) = wheels.glob("tgjax-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True)
    here_site = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "jax").is_dir())
    (site / "zz_dependencies.pth").write_text(here_site + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([python, "-c", "import tgjax, tgjax_configs; print(tgjax.__file__)"], cwd=elsewhere,
                           check=True, capture_output=True, text=True, env=env).stdout
    assert where.startswith(str(site))
    for spec, run in (("tiny", "a"), ("configs/tiny.py", "b")):
        result = subprocess.run([python, "-m", "tgjax.cli", "train", "--config", spec, "--workdir", run,
                                 "--config.training.num_steps=2", "--config.checkpointing.interval_steps=2",
                                 "--config.evaluation.interval_steps=2", "--config.data.num_train_sentences=40",
                                 "--config.data.num_valid_sentences=8"],
                                cwd=elsewhere, capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert (elsewhere / run / "metrics.jsonl").exists() and (elsewhere / run / "checkpoints" / "2").is_dir()
    # `tgjax reproduce` from the wheel: the shipped claims listed, a claim's record kept beside its pack (the
    # shipped records are read-only), the ledger only where -o says.
    reproduce = [python, "-m", "tgjax.cli", "reproduce"]
    listing = subprocess.run([*reproduce, "--help"], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert "om-listops" in listing.stdout and "could not be read" not in listing.stdout, listing.stdout[-2000:]
    ledger = subprocess.run([*reproduce, "--ledger"], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert ledger.returncode == 2 and "give -o PAGE.md" in ledger.stderr
    page = subprocess.run([*reproduce, "--ledger", "-o", "page.md"], cwd=elsewhere, capture_output=True, text=True,
                          env=env)
    assert page.returncode == 0 and "`om-listops`" in (elsewhere / "page.md").read_text(), page.stderr[-2000:]
    claim = subprocess.run([*reproduce, "stack-ptb-table2", "--tiny", "--quiet", "--budget-s", "300", "--output",
                            "packed"], cwd=elsewhere, capture_output=True, text=True, env=env)
    assert claim.returncode == 0, claim.stderr[-3000:]
    (record,) = [json.loads(line) for line in (elsewhere / "packed" / "runs.jsonl").read_text().splitlines()]
    assert record["claim"] == "stack-ptb-table2" and record["complete"]
