"""Shared by benchmarks/compile_memory.py and benchmarks/mfu.py: a TG train step as the trainer builds it.

`trainer_step(model_config, batch_size)` returns the trainer's own jitted
train step (`tgjax.train.tasks.treebank_lm.state.make_train_step`: Adam after clipping,
dropout on, memory carried), its initial state and `rest`, on a one-device
mesh; `synthetic_batch` gives full segments (every one of the T positions a
real action, a full memory) of random bracketings, in the pipeline's compact
fields, so that no data file is needed (the GPU machine has none).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from ml_collections import ConfigDict  # noqa: E402

from tgjax.models import ModelConfig  # noqa: E402
from tgjax.models.parts import model_parts  # noqa: E402
from tgjax.syntax import masks  # noqa: E402
from tgjax.syntax import token_types as tt  # noqa: E402
from tgjax.train import sharding as shd  # noqa: E402
from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES, default_config  # noqa: E402
from tgjax.train.optimizer import make_optimizer  # noqa: E402
from tgjax.train.tasks.treebank_lm import state as st  # noqa: E402


def random_actions(rng: np.random.Generator, length: int, vocab_size: int):
    """A random well-formed action sequence of at least `length` actions (BOS, ONT / T / CNT), ids in [4, V)."""
    types, depth = [tt.BOS], 0
    while len(types) < length or depth:
        choice = rng.integers(3)
        if choice == 0 and len(types) < length and depth < 20:
            types.append(tt.OPENING_NT)
            depth += 1
        elif (choice == 1 and len(types) < length) or types[-1] == tt.OPENING_NT:  # no empty constituent
            types.append(tt.TERMINAL)
        elif depth and types[-1] != tt.OPENING_NT:
            types.append(tt.CLOSING_NT)
            depth -= 1
    types = np.array(types)
    ids = rng.integers(4, vocab_size, len(types))
    ids[0] = 1
    return ids, types, np.append(ids[1:], 0), np.append(types[1:], tt.PAD)


def synthetic_batch(config: ModelConfig, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`[B, T]` (and `[B, M]`) compact fields: each row the second segment of a long random sequence (full)."""
    T, M = config.sequence_length, config.memory_length
    rule = masks.TGMasking(T, M) if config.tg else masks.TXLMasking(T, M)
    rng = np.random.default_rng(seed)
    rows = [rule.compact_chunks(*random_actions(rng, 3 * T, config.vocab_size))[1] for _ in range(batch_size)]
    return dict(masks.stack_batch(rows)._asdict())


def training_config(batch_size: int) -> ConfigDict:
    config = default_config()
    config.training.batch_size = batch_size
    return config


def trainer_step(model_config: ModelConfig, batch_size: int, device=None, seed: int = 0):
    """(jitted train step, state, rest, device batch) of the trainer, on one device."""
    device = device or jax.devices()[0]
    mesh = shd.make_mesh(1, 1, devices=[device])
    parts = model_parts(model_config)
    tx, schedule = make_optimizer(training_config(batch_size).training)
    rules = DEFAULT_LOGICAL_AXIS_RULES
    state, rest, shardings = st.init_train_state(parts, tx, mesh, rules, seed=seed, batch_size=batch_size)
    step = st.make_train_step(parts, tx, schedule, shardings)
    batch = shd.global_batch(synthetic_batch(model_config, batch_size, seed), mesh)
    return step, state, rest, batch


def abstract_trainer_step(model_config: ModelConfig, batch_size: int, device=None):
    """(jitted train step, abstract state, rest, abstract batch): for lowering and compiling without arrays."""
    device = device or jax.devices()[0]
    mesh = shd.make_mesh(1, 1, devices=[device])
    parts = model_parts(model_config)
    tx, schedule = make_optimizer(training_config(batch_size).training)
    shardings = st.state_shardings(parts, tx, mesh, DEFAULT_LOGICAL_AXIS_RULES)
    step = st.make_train_step(parts, tx, schedule, shardings)
    state = st.abstract_train_state(parts, tx, shardings, batch_size)
    rest = jax.eval_shape(lambda: st.init_rest(parts, shardings, 0))
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings.batch)
             for k, v in synthetic_batch(model_config, batch_size).items()}
    return step, state, rest, batch
