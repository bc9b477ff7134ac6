"""A train step over a batch with no prediction events changes neither parameters nor optimiser state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import jax
import numpy as np

from tgjax.models.parts import model_parts
from tgjax.train.optimizer import make_optimizer
from tgjax.train.sharding import make_mesh
from tgjax.train.tasks.treebank_lm import inputs, model_batch, resolve_model_config
from tgjax.train.tasks.treebank_lm import state as st

from .helpers import small_config


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_a_batch_without_prediction_events_moves_nothing_but_memory_and_step():
    config = small_config()
    data = inputs.make_training_data(config, lambda v: resolve_model_config(config, v), Path(tempfile.mkdtemp()),
                                     resuming=False)
    parts = model_parts(resolve_model_config(config, data.vocab.size))
    tx, schedule = make_optimizer(config.training)
    rules = tuple(tuple(rule) for rule in config.mesh.logical_axis_rules)
    state, rest, shardings = st.init_train_state(parts, tx, make_mesh(1, 1, jax.devices()[:1]), rules, seed=0,
                                                 batch_size=config.training.batch_size)
    train_step = st.make_train_step(parts, tx, schedule, shardings)
    batch = data.train.epoch_source(0)[0]

    # One real step first, so that Adam's moments are non-zero: a momentum-only update would move parameters.
    state, metrics = train_step(state, rest, model_batch(batch))
    assert int(metrics["num_events"]) > 0
    before_params, before_opt = _leaves(state.params), _leaves(state.opt_state)
    before_memory = np.asarray(state.carry)

    no_events = dict(batch, labels=np.zeros_like(batch["labels"]),
                     labels_ttypes=np.zeros_like(batch["labels_ttypes"]))
    state, metrics = train_step(state, rest, model_batch(no_events))
    assert int(metrics["num_events"]) == 0
    assert int(state.step) == 2
    for old, new in zip(before_params, _leaves(state.params)):
        np.testing.assert_array_equal(old, new)
    for old, new in zip(before_opt, _leaves(state.opt_state)):
        np.testing.assert_array_equal(old, new)
    assert not np.array_equal(before_memory, np.asarray(state.carry))  # the segment was still read

    # The same batch with its events does move the parameters (the guard is not a no-op).
    state, metrics = train_step(state, rest, model_batch(batch))
    assert any(not np.array_equal(old, new) for old, new in zip(before_params, _leaves(state.params)))
