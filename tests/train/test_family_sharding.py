"""Every family's parameters are placed by their logical axes: on a data=4 x model=2 mesh of 8 CPU devices,
parameters (and their Adam moments) are really split over "model", and the losses equal the 1-device run's.

TG / TXL have their own, finer test (tests/train/test_sharding.py); this one runs the other trainers'
test-sized configs in one subprocess (`tests.train.family_sharding_run`: XLA_FLAGS must be set before JAX
starts).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.train.family_sharding_run import STEPS
from tests.train.loss_pins import PINS
from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ("pushdown_lm", "mlm", "onlstm_lm", "classification", "craft_bc", "cfl", "ppo_actions", "ppo_options",
            "stack_lm")
# A parameter each family's metadata marks for "model" (so the split is checked by name, not just counted).
MARKED = {"mlm": "['embedding']", "onlstm_lm": "['embedding']", "pushdown_lm": "['layers'][0]['w_in']",
          "classification": "['encoder']['w_1']", "craft_bc": "['options']['w_h']",
          "cfl": "['layers'][0]['feedforward']['function']['hidden']['kernel']",
          "ppo_actions": "['policy']['w_out']", "ppo_options": "['cell']['w_h']",
          "stack_lm": "['layers'][0]['feedforward']['function']['hidden']['kernel']"}


@pytest.fixture
def run_family(tmp_path, compilation_cache):
    """(family, layouts) -> those runs of the family ({layout: run}), in a subprocess."""

    def run(family, layouts=("1x1", "4x2")):
        env = {**os.environ, "XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=8"),
               "JAX_PLATFORMS": "cpu", **compilation_cache}
        done = subprocess.run([sys.executable, "-m", "tests.train.family_sharding_run", str(tmp_path),
                               f"{family}:{','.join(layouts)}"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])[family]

    return run


# One family in CI (the pod-scale Pushdown-LM; tests/train/test_toy_family.py runs a plug-in family the same way);
# the rest with -m slow.
@pytest.mark.parametrize("family", [
    "pushdown_lm", *(pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES[1:])])
def test_a_family_is_split_over_model_and_trains_as_on_one_device(run_family, family):
    if family == "pushdown_lm":
        # Its config is its loss pin's (tests/train/family_sharding_run.py): the one-device losses are the pinned
        # ones (tests/train/loss_pins.json, which tests/train/test_loss_pins.py checks against a one-device run).
        sharded = run_family(family, ("4x2",))["4x2"]
        one = {"losses": json.loads(PINS.read_text())[family][:STEPS]}
    else:
        runs = run_family(family)
        one, sharded = runs["1x1"], runs["4x2"]
    assert MARKED[family] in sharded["split"], sharded["split"]
    if family != "onlstm_lm":  # ON-LSTM's recipe is SGD / ASGD: no optimiser moments
        assert sharded["moments_split"] >= 1
    assert len(one["losses"]) == len(sharded["losses"]) == 3
    np.testing.assert_allclose(sharded["losses"], one["losses"], rtol=1e-5, atol=1e-5)
