"""Families are found through the entry-point group `tgjax.families`: an installed package adds one (and may
not take a name tgjax uses) without any file of tgjax changed."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tgjax.train.config import BUILTIN_FAMILIES, FAMILY_ENTRY_POINTS, registered_families

REPO = Path(__file__).resolve().parents[2]


def _install(site: Path, entry_points: str) -> None:
    """A distribution `toyfamily` in `site` (a directory put on PYTHONPATH): its metadata, its entry points, and
    a module whose task is the UDGN masked-LM task under another name."""
    info = site / "toyfamily-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfamily\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{FAMILY_ENTRY_POINTS}]\n{entry_points}\n")
    (site / "toyfamily.py").write_text(textwrap.dedent("""
        from tgjax.train.tasks.mlm import MLMTask, describe  # noqa: F401  (describe: what `tgjax info` reads)

        class ToyTask(MLMTask):
            name = "toy"
    """))


def _run(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "tgjax.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_tgjax_registers_its_own_families_as_entry_points():
    assert {name: registered_families()[name] for name in BUILTIN_FAMILIES} == BUILTIN_FAMILIES


def test_an_installed_package_adds_a_family_that_info_resolves(tmp_path):
    site = tmp_path / "site"
    _install(site, "toy = toyfamily:ToyTask")
    config = tmp_path / "toy.py"
    config.write_text("import ml_collections\n\ndef get_config():\n"
                      "    return ml_collections.ConfigDict(dict(trainer='toy', model=dict(d_model=16)))\n")
    done = _run(site, "info", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert '"model_name": "udgn_mlm"' in done.stdout and '"d_model": 16' in done.stdout
    # Its defaults are its task's: an unknown key is refused as for tgjax's own families.
    refused = _run(site, "info", "--config", str(config), "--config.training.warmup_steps=3")
    assert refused.returncode != 0 and "training.warmup_steps" in refused.stderr


@pytest.mark.parametrize("entry", ["mlm = toyfamily:ToyTask"])
def test_a_package_cannot_take_the_name_of_a_family_of_tgjax(tmp_path, entry):
    site = tmp_path / "site"
    _install(site, entry)
    done = _run(site, "info", "--config", "configs/udgn_tiny.py")
    assert done.returncode != 0
    assert "toyfamily" in done.stderr and "register it under another name" in done.stderr
    assert "Traceback" not in done.stderr
