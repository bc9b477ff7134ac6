"""A family is a plug-in: the toy bigram MLP of tests/train/toy_family.py, in a temporary package registered under
the entry-point group `tgjax.families`, is trained by `tgjax train`, resumed bit-exactly and sharded on an
8-device mesh, with no file of tgjax changed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
STEPS = 8
CONFIG = f"""import ml_collections

def get_config():
    return ml_collections.ConfigDict(dict(
        trainer="toy_mlp",
        training=dict(num_steps={STEPS}, batch_size=8, learning_rate=0.02),
        evaluation=dict(interval_steps=4),
        logging=dict(interval_steps=1, tensorboard=False),
        checkpointing=dict(interval_steps=4, async_save=False),
    ))
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A site directory holding the distribution `toyfamily`: the module and its entry point."""
    site = tmp_path_factory.mktemp("site")
    shutil.copy(Path(__file__).with_name("toy_family.py"), site / "toy_family_plugin.py")
    info = site / "toyfamily-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfamily\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tgjax.families]\ntoy_mlp = toy_family_plugin:ToyMLPFamily\n")
    (site / "toy_config.py").write_text(CONFIG)
    return site


# `tgjax ARGS` for each ARGS in turn in one process (starting Python, JAX and tgjax once), as `python -m tgjax.cli`
# would run each; stops at the first that fails. A line MARK ends each command's output on stdout and on stderr.
MARK = "-- end of a tgjax command --"
DRIVER = f"""
import json, sys
from tgjax import cli
for args in json.loads(sys.argv[1]):
    code = cli.main(args)
    print({MARK!r}, flush=True)
    print({MARK!r}, file=sys.stderr, flush=True)
    if code:
        sys.exit(code)
"""


def tgjax(site: Path, *commands: list[str], devices: int = 1) -> list[tuple[str, str]]:
    """(stdout, stderr) of each command (`tgjax ARGS`), run one after another in one subprocess."""
    env = {**os.environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": xla_flags(f"--xla_force_host_platform_device_count={devices}")}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(commands)], cwd=site, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outs, errs = done.stdout.split(MARK + "\n"), done.stderr.split(MARK + "\n")
    assert len(outs) == len(errs) == len(commands) + 1, done.stderr[-3000:]
    return list(zip(outs, errs))


def records(workdir: Path, split: str) -> dict[int, dict]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["split"] == split}


@pytest.fixture(scope="module")
def one_device_runs(package) -> list[tuple[str, str]]:
    """On one device, in one process: the whole run (in `whole`), then the same run in two calls, stopped after
    step 4 and resumed (in `halves`)."""
    train = ["train", "--config", "toy_config.py"]
    return tgjax(package, [*train, "--workdir", "whole", "--quiet"],
                 [*train, "--workdir", "halves", "--config.training.num_steps=4", "--quiet"],
                 [*train, "--workdir", "halves"])


@pytest.fixture(scope="module")
def uninterrupted(package, one_device_runs) -> Path:
    return package / "whole"


def test_tgjax_train_trains_an_outside_family(uninterrupted):
    valid = records(uninterrupted, "valid")
    assert sorted(valid) == [4, STEPS]
    assert valid[STEPS]["valid_loss"] < valid[4]["valid_loss"] - 0.05
    assert sorted(records(uninterrupted, "train")) == list(range(1, STEPS + 1))


def test_it_resumes_bit_exactly(package, uninterrupted, one_device_runs):
    _, resumed_err = one_device_runs[2]
    assert "resuming from step 4" in resumed_err
    whole, halves = records(uninterrupted, "train"), records(package / "halves", "train")
    assert [halves[s]["loss"] for s in range(1, STEPS + 1)] == [whole[s]["loss"] for s in range(1, STEPS + 1)]
    assert records(package / "halves", "valid")[STEPS]["valid_loss"] == records(uninterrupted, "valid")[STEPS][
        "valid_loss"]


def test_it_is_split_over_model_on_eight_devices_and_trains_as_on_one(package, uninterrupted):
    (info_out, _), _ = tgjax(package, ["info", "--config", "toy_config.py", "--config.mesh.model=2", "--json"],
                             ["train", "--config", "toy_config.py", "--workdir", "sharded", "--config.mesh.model=2",
                              "--quiet"], devices=8)[:2]
    info = json.loads(info_out)
    assert info["mesh"] == {"data": 4, "model": 2}
    assert info["partition_specs"]["w_hidden"]["spec"] == "P(None, 'model')"
    whole, sharded = records(uninterrupted, "train"), records(package / "sharded", "train")
    np.testing.assert_allclose([sharded[s]["loss"] for s in range(1, STEPS + 1)],
                               [whole[s]["loss"] for s in range(1, STEPS + 1)], rtol=1e-5, atol=1e-6)
