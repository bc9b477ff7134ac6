"""Families whose train step is the trainer's one step (`tgjax.train.step`) train to the same losses as their own
steps did before (pinned in tests/train/loss_pins.json by `python -m tests.train.loss_pins record`)."""

import json

import numpy as np
import pytest

from tests.train.loss_pins import FAMILIES, PINS, losses

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


@pytest.mark.parametrize("family", FAMILIES)
def test_the_first_steps_losses_are_the_pinned_ones(family):
    np.testing.assert_allclose(losses(family), json.loads(PINS.read_text())[family], rtol=1e-5)
