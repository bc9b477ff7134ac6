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


@pytest.fixture(scope="module")
def run_family(tmp_path_factory, compilation_cache):
    """family -> its two runs (1x1 and 4x2), each family's subprocess started on first use."""
    runs = {}

    def run(family):
        if family not in runs:
            env = {**os.environ, "XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=8"),
                   "JAX_PLATFORMS": "cpu", **compilation_cache}
            done = subprocess.run([sys.executable, "-m", "tests.train.family_sharding_run",
                                   str(tmp_path_factory.mktemp(family)), family],
                                  cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, done.stderr[-3000:]
            runs[family] = json.loads(done.stdout.strip().splitlines()[-1])[family]
        return runs[family]

    return run


# One family in CI (the pod-scale Pushdown-LM; tests/train/test_toy_family.py runs a plug-in family the same way);
# the rest with -m slow.
@pytest.mark.parametrize("family", [
    "pushdown_lm", *(pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES[1:])])
def test_a_family_is_split_over_model_and_trains_as_on_one_device(run_family, family):
    one, sharded = run_family(family)["1x1"], run_family(family)["4x2"]
    assert MARKED[family] in sharded["split"], sharded["split"]
    if family != "onlstm_lm":  # ON-LSTM's recipe is SGD / ASGD: no optimiser moments
        assert sharded["moments_split"] >= 1
    assert len(one["losses"]) == len(sharded["losses"]) == 3
    np.testing.assert_allclose(sharded["losses"], one["losses"], rtol=1e-5, atol=1e-5)
