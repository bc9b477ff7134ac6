"""The CFL trainer's numbers against a plain loop written here from the paper's recipe (Appendix D.3).

The reference: sample the trial's training and validation strings, one batch
per group of 10 strings of one length, batch order shuffled each epoch;
Adam on the cross-entropy summed over time (mean over the batch's strings)
after clipping the gradient norm; after each epoch Δ on validation, the
learning rate halved after one epoch without improvement, the best epoch's
parameters scored on test. It shares with the CFL trials on the shared
trainer (`tgjax.train.cfl_trials`, `tgjax.train.tasks.cfl`) only the model,
the task's sampling and the metric, and pins what the move onto the shared
trainer had to keep: the per-epoch validation Δ, the best epoch, the final
learning rate and the test Δ on the same seed.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tgjax.data.cfl import cfl_task
from tgjax.data.cfl_metric import cross_entropy_difference, string_log_probs
from tgjax.models.stack_lm import StackTransformerLM
from tgjax.train.cfl import resolve_model_config
from tgjax.train.cfl_trials import train_cfl
from tgjax.train.config import load_config

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


# One layer, two batches an epoch, five epochs: on this seed the rate is high enough (0.1) for two epochs without
# improvement (3 and 5: two decays), and the best epoch (4) is not the last, so the test Δ is of earlier parameters.
# Every batch padded to one width (64: the strings are shorter), so that each side compiles one train and one
# score program.
SETTINGS = ["task=dyck", "model=tf", "architecture.num_layers=1", "training.epochs=5", "data.train_size=20",
            "data.valid_size=20", "data.test_lengths=40,42", "data.test_per_length=10", "data.length_bucket=64",
            "training.learning_rate=0.1", "training.lr_decay=0.5", "training.lr_patience=1",
            "training.early_stopping_patience=3", "training.seed=24", "logging.tensorboard=false"]


def _reference(config):
    """(validation Δ per epoch, best epoch, final learning rate, test Δ of the best epoch's parameters)."""
    t = config.training
    task = cfl_task("dyck")
    seed = int(t.seed)
    train_strings = task.sample_split("train", seed=seed, size=config.data.train_size)
    valid_strings = task.sample_split("valid", seed=seed, size=config.data.valid_size)
    test_strings = [s for s in task.sample_split("test", size=config.data.test_per_length) if len(s) in (40, 42)]
    batches = []
    for start in range(0, len(train_strings), 10):  # groups of 10 of one length, in sampled order
        group = train_strings[start:start + 10]
        assert len({len(s) for s in group}) == 1
        # The time axis padded to a multiple of data.length_bucket, as the trainer's: dropout's masks are
        # drawn for the padded shape, so the padding must match even though it changes no log-probability.
        bucket = config.data.length_bucket
        batches.append(task.encode(group, pad_to=-(-(len(group[0]) + 1) // bucket) * bucket))

    param_key, dropout_key = jax.random.split(jax.random.key(seed))
    model = StackTransformerLM(resolve_model_config(config, task.vocabulary.size),
                               rngs=nnx.Rngs(params=param_key, dropout=0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    clip = optax.clip_by_global_norm(t.clip_grad_norm)
    adam = optax.scale_by_adam(b1=t.adam.b1, b2=t.adam.b2, eps=t.adam.eps)
    clip_state, adam_state = clip.init(params), adam.init(params)

    @jax.jit
    def gradient(params, rest, inputs, targets, weights, key):
        def loss(p):
            m = nnx.merge(graphdef, p, jax.tree.map(lambda x: x, rest))  # fresh RNG variables in this trace
            m.train()
            nnx.reseed(m, dropout=key)
            log_p = jax.nn.log_softmax(m(inputs).astype(jnp.float32), axis=-1)
            picked = jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
            return -jnp.sum(jnp.where(weights > 0, picked, 0.0)) / inputs.shape[0]
        return jax.grad(loss)(params)

    @jax.jit
    def update(params, clip_state, adam_state, grads, lr):
        """Clip, Adam's direction, the step at rate lr (one compiled program rather than op by op)."""
        grads, clip_state = clip.update(grads, clip_state)
        updates, adam_state = adam.update(grads, adam_state)
        return jax.tree.map(lambda p, u: p - lr * u, params, updates), clip_state, adam_state

    @jax.jit
    def logits_of(params, inputs):
        m = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))
        m.eval()
        return m(inputs)

    def log_probs(params, strings):
        enc = task.encode(strings)
        return string_log_probs(logits_of(params, enc["inputs"]), enc["targets"], enc["weights"])

    lr, history, best, since_best, since_decay, step = float(t.learning_rate), [], (math.inf, 0, None), 0, 0, 0
    order_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3,)))
    for epoch in range(1, t.epochs + 1):
        for b in order_rng.permutation(len(batches)):
            step += 1
            grads = gradient(params, rest, batches[b]["inputs"], batches[b]["targets"], batches[b]["weights"],
                             jax.random.fold_in(dropout_key, step))
            params, clip_state, adam_state = update(params, clip_state, adam_state, grads, jnp.float32(lr))
        delta = cross_entropy_difference(log_probs(params, valid_strings), valid_strings, task, "valid").difference
        history.append(delta)
        if delta < best[0]:
            best, since_best, since_decay = (delta, epoch, params), 0, 0
            continue
        since_best, since_decay = since_best + 1, since_decay + 1
        if since_best >= t.early_stopping_patience:
            break
        if since_decay >= t.lr_patience:
            lr, since_decay = lr * t.lr_decay, 0
    test = cross_entropy_difference(log_probs(best[2], test_strings), test_strings, task, "test").difference
    return history, best[1], lr, test


def test_cfl_trainer_matches_a_plain_loop(tmp_path):
    config = load_config("configs/stack_cfl.py", SETTINGS)
    history, best_epoch, final_lr, test = _reference(config)
    result = train_cfl(config, tmp_path, quiet=True).best
    assert final_lr == pytest.approx(0.025)  # the run decays the rate twice, so the plateau path is compared too
    assert best_epoch < len(history) == 5 and (result.epochs_run, result.best_epoch) == (len(history), best_epoch)
    np.testing.assert_allclose(result.valid_history, history, rtol=1e-4)
    assert result.final_learning_rate == pytest.approx(final_lr)
    assert result.test["cross_entropy_difference"] == pytest.approx(test, rel=1e-4)
