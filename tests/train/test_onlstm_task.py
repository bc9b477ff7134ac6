"""The ON-LSTM LM task (trainer="onlstm_lm"): BPTT plan, update rule, NT-ASGD, epoch validation, resume."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tgjax.data.word_stream import batchify, build_vocabulary, encode, read_sentences
from tgjax.models.onlstm_lm import OnLSTMLM, OnLSTMLMConfig, activation_penalties
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train
from tgjax.train.params_state import ParamsState
from tgjax.train.tasks import make_task
from tgjax.train.tasks.onlstm_lm import (
    BPTTSettings,
    OnLSTMLMTask,
    Recipe,
    _hidden_dict,
    bptt_batches,
    epoch_plan,
    initial_average,
    make_step,
    nt_asgd_triggered,
    optimizer,
)

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


REPO = Path(__file__).resolve().parents[2]
TOTC = REPO.parent / "shared" / "data" / "tale_of_two_cities"


def tiny_config(**changes):
    """configs/onlstm_tiny.py shrunk to a test: 2 layers of 16, 60 sentences, batch 4, BPTT ~8."""
    config = load_config(str(REPO / "configs" / "onlstm_tiny.py"))
    sizes = {"model.embedding_size": 16, "model.hidden_size": 16, "model.num_layers": 2, "model.chunk_size": 4,
             "data.num_train_sentences": 60, "data.num_valid_sentences": 12, "training.batch_size": 4,
             "training.bptt": 8, "training.bptt_std": 2.0, "training.min_seq_len": 2, "training.length_bucket": 16,
             "evaluation.batch_size": 2, "evaluation.bptt": 16, "checkpointing.interval_steps": 4,
             "checkpointing.max_to_keep": 20, "logging.interval_steps": 1, "checkpointing.async_save": False}
    sizes.update(changes)
    for dotted, value in sizes.items():
        section, key = dotted.split(".")
        config[section][key] = value
    return config


# -----------------------------------------------------------------------------
# Data and the BPTT plan.


def test_words_eos_vocabulary_and_batchify_by_hand():
    sentences = [["a", "b"], [], ["b", "c"]]
    words = build_vocabulary(sentences)
    assert words == ["a", "b", "<eos>", "c", "<unk>"]  # first appearance; an empty line is a lone <eos>
    index = {w: i for i, w in enumerate(words)}
    ids, unknown = encode([["a", "z"], ["c"]], index)
    assert ids.tolist() == [0, 4, 2, 3, 2] and unknown == 1
    data, dropped = batchify(np.arange(11), 3)
    assert data.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]] and dropped == 2  # contiguous columns


def _release_lengths(u, z, bptt, std, min_len):
    """The release's two lines, one draw at a time, in plain Python."""
    out = []
    for uk, zk in zip(u, z):
        base = bptt if uk < 0.95 else bptt / 2.0
        out.append(max(min_len, int(base + std * zk)))
    return out


def test_seq_len_draws_follow_the_release_formula_and_distribution():
    settings = BPTTSettings(bptt=70)
    rng = np.random.default_rng(5)
    lengths = settings.sample(rng, 20000)
    rng = np.random.default_rng(5)
    u, z = rng.random(20000), rng.standard_normal(20000)
    assert lengths.tolist() == _release_lengths(u, z, 70, 5.0, 5)
    short = lengths < 53  # base 35: N(35, 5) stays far below 53; base 70 stays above
    assert abs(short.mean() - 0.05) < 0.006
    # int() truncates towards 0: the mean is base - ~0.5
    assert abs(lengths[~short].mean() - 69.5) < 0.15 and abs(lengths[short].mean() - 34.5) < 0.7
    tiny = BPTTSettings(bptt=4, std=5.0, min_length=5).sample(np.random.default_rng(0), 1000)
    assert tiny.min() == 5  # the release's floor


def _release_plan(rows, draws):
    """main.py's loop: `while i < rows - 1 - 1`, segment [i, i + min(seq_len, rows - 1 - i)), i += seq_len."""
    i, k, starts, lengths = 0, 0, [], []
    while i < rows - 1 - 1:
        seq_len = draws[k]
        starts.append(i)
        lengths.append(min(seq_len, rows - 1 - i))
        i += seq_len
        k += 1
    return starts, lengths, draws[:k]


def test_epoch_plan_is_the_release_loop():
    settings = BPTTSettings(bptt=10, std=3.0, min_length=5)
    ends_at_rows_minus_2 = 0
    for rows in range(3, 160):  # every way the last segment can end, including a start at exactly rows - 2
        plan = epoch_plan(rows, settings, seed=3, epoch=2)
        rng = np.random.default_rng([0x0B77, 3, 2])
        n = rows // 5 + 2
        draws = _release_lengths(rng.random(n), rng.standard_normal(n), 10, 3.0, 5)
        starts, lengths, sampled = _release_plan(rows, draws)
        assert plan.starts.tolist() == starts and plan.lengths.tolist() == lengths, rows
        assert plan.sampled.tolist() == sampled
        assert plan.starts[-1] + plan.lengths[-1] <= rows - 1
        ends_at_rows_minus_2 += int(np.sum(np.cumsum(sampled)) == rows - 2)
    assert ends_at_rows_minus_2 > 0  # the boundary case occurred
    # Another epoch draws other lengths.
    assert (epoch_plan(97, settings, seed=3, epoch=3).sampled.tolist()
            != epoch_plan(97, settings, seed=3, epoch=2).sampled.tolist())
    with pytest.raises(ValueError, match="at least 3 are needed"):
        epoch_plan(2, settings, seed=0, epoch=0)


def test_batches_cover_the_stream_and_resume_from_a_position():
    data = np.arange(4 * 50).reshape(4, 50)
    settings = BPTTSettings(bptt=6, std=2.0, min_length=2)
    plans = lambda e: epoch_plan(50, settings, 0, e)  # noqa: E731
    batches = bptt_batches(data, plans, settings, 8, None)
    seen, positions = [], []
    for _ in range(len(plans(0)) + 3):
        batch = next(batches)
        positions.append(batches.get_state())
        seen.append(batch)
    first_epoch = seen[:len(plans(0))]
    assert first_epoch[0]["reset"].all() and not any(b["reset"].any() for b in first_epoch[1:])
    assert seen[len(plans(0))]["reset"].all()  # the next epoch restarts the state
    # Inputs of epoch 0, unpadded and joined, are rows 0..rows-2 of each column; targets are shifted by one.
    inputs = np.concatenate([b["inputs"][:, b["mask"][0] > 0] for b in first_epoch], axis=1)
    targets = np.concatenate([b["targets"][:, b["mask"][0] > 0] for b in first_epoch], axis=1)
    last = plans(0).starts[-1] + plans(0).lengths[-1]
    np.testing.assert_array_equal(inputs, data[:, :last])
    np.testing.assert_array_equal(targets, data[:, 1:last + 1])
    assert all(b["inputs"].shape[1] % 8 == 0 for b in seen)
    sampled = np.concatenate([plans(0).sampled, plans(1).sampled])
    for k in range(len(seen)):  # lr_scale = sampled seq_len / bptt; previous_lr_scale: the segment before's
        assert seen[k]["lr_scale"][0] == np.float32(sampled[k] / 6)
        assert seen[k]["previous_lr_scale"][0] == np.float32(sampled[max(k - 1, 0)] / 6)
    # Starting from a saved position gives the same batches.
    resumed = bptt_batches(data, plans, settings, 8, positions[4])
    for k in range(5, len(seen)):
        batch = next(resumed)
        for name in batch:
            np.testing.assert_array_equal(batch[name], seen[k][name])
    # Two processes: each reads its half of the rows of the same batches.
    halves = [bptt_batches(data, plans, settings, 8, positions[1], p, 2) for p in range(2)]
    for k in range(2, len(seen)):
        parts = [next(h) for h in halves]
        for name in seen[k]:
            np.testing.assert_array_equal(np.concatenate([part[name] for part in parts]), seen[k][name])


# -----------------------------------------------------------------------------
# The update rule.


CFG = OnLSTMLMConfig(vocab_size=20, embedding_size=8, hidden_size=8, num_layers=2, chunk_size=4, dropout=0.2,
                     dropout_hidden=0.1, dropout_input=0.2, dropout_embedding=0.1, weight_drop=0.3)


def _recipe(released: bool) -> Recipe:
    """The one recipe of the step tests (each ASGD rule's step compiled once): SGD at rate 4 times the segment's
    scale, the clip at 0.05 (active on these batches), decay 0.02, AR 2, TAR 1."""
    return Recipe(lr=4.0, weight_decay=0.02, clip=0.05, alpha=2.0, beta=1.0, asgd_as_released=released)


@functools.cache
def _fresh_model(batch_size=3):
    """(graphdef, params, zero hidden state) of CFG's model, built once (the arrays are immutable)."""
    model = OnLSTMLM(CFG, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    return graphdef, nnx.to_pure_dict(params), _hidden_dict(model.initial_state(batch_size))


def _fresh_state(recipe, batch_size=3):
    graphdef, params, carry = _fresh_model(batch_size)
    state = ParamsState(params=params, opt_state=optimizer(recipe).init(params), step=jnp.zeros((), jnp.int32),
                        rng=jax.random.key_data(jax.random.key(1)), carry=carry, average=initial_average(params))
    return graphdef, state


@functools.cache
def _step_fn(released: bool):
    """The task's step for `_recipe(released)`, jitted once for the module."""
    return jax.jit(make_step(_fresh_model()[0], _recipe(released)))


def _objective(graphdef, params, hidden, batch, key):
    """The oracle's objective, written here: mean CE over the real tokens + 2 AR + 1 TAR of the top layer's raw
    outputs, the model run from `hidden` with dropout drawn from `key`; and the hidden state it ends in."""
    model = nnx.merge(graphdef, params)
    state_list = [(hidden[f"layer_{layer}"]["h"], hidden[f"layer_{layer}"]["c"]) for layer in range(2)]
    logits, new_hidden, aux = model(batch["inputs"], state_list, deterministic=False, key=key, mask=batch["mask"])
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)[..., 0]
    ce = jnp.sum(nll * batch["mask"]) / jnp.sum(batch["mask"])
    ar, tar = activation_penalties(aux["raw_outputs"][-1], batch["mask"])
    return ce + 2.0 * ar + 1.0 * tar, _hidden_dict(new_hidden)


@functools.partial(jax.jit, static_argnums=0)  # one compiled program for every oracle step of the module
def _oracle_gradient(graphdef, params, hidden, batch, key):
    """(d objective / d params, the hidden state the forward ends in)."""
    return jax.grad(lambda p: _objective(graphdef, p, hidden, batch, key), has_aux=True)(params)


def _batch(seed, lr_scale, length=6, padded=8, batch_size=3, previous_lr_scale=1.0):
    rng = np.random.default_rng(seed)
    inputs = np.zeros((batch_size, padded), np.int32)
    targets = np.zeros((batch_size, padded), np.int32)
    inputs[:, :length] = rng.integers(0, 20, (batch_size, length))
    targets[:, :length] = rng.integers(0, 20, (batch_size, length))
    mask = np.zeros((batch_size, padded), np.float32)
    mask[:, :length] = 1
    return {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets), "mask": jnp.asarray(mask),
            "lr_scale": jnp.full((batch_size,), lr_scale, jnp.float32),
            "previous_lr_scale": jnp.full((batch_size,), previous_lr_scale, jnp.float32),
            "reset": jnp.zeros((batch_size,), bool)}


def test_one_step_is_clipped_sgd_with_weight_decay_at_the_rescaled_rate():
    graphdef, state = _fresh_state(_recipe(False))
    # A carried state from a previous segment: the step must start from it.
    hidden0 = jax.tree.map(lambda a: a + 0.3, state.carry)
    state = dataclasses.replace(state, carry=hidden0)
    batch = _batch(0, lr_scale=63 / 70)
    params0 = jax.tree.map(np.asarray, state.params)
    new_state, metrics = _step_fn(False)(state, None, batch, jnp.asarray(False))

    # Independently: the same loss (same dropout key), PyTorch's clip, decay added after the clip, lr * 63/70.
    key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), 0)
    # The carried state: where this segment's last real step left it (same dropout masks, pre-update weights).
    grads, want_hidden = jax.tree.map(np.asarray, _oracle_gradient(graphdef, state.params, hidden0, batch, key))
    norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in jax.tree.leaves(grads)))
    assert norm > 0.05  # so the clip is active
    scale = 0.05 / (norm + 1e-6)
    lr = 4.0 * 63 / 70
    expected = jax.tree.map(lambda p, g: p - lr * (g * scale + 0.02 * p), params0, grads)
    for got, want in zip(jax.tree.leaves(new_state.params), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6)
    assert float(metrics["learning_rate"]) == pytest.approx(lr)
    assert float(metrics["grad_norm"]) == pytest.approx(norm, rel=1e-4)
    assert int(new_state.average["count"]) == 0 and int(new_state.step) == 1
    for layer in range(2):
        for part in ("h", "c"):
            np.testing.assert_allclose(np.asarray(new_state.carry[f"layer_{layer}"][part]),
                                       want_hidden[f"layer_{layer}"][part], rtol=1e-5, atol=1e-6)
    # Before ASGD the average is untouched.
    assert all(not np.asarray(a).any() for a in jax.tree.leaves(new_state.average["params"]))


def test_reset_flag_restarts_the_carried_state_from_zero():
    graphdef, state = _fresh_state(_recipe(False))
    step_fn = _step_fn(False)
    batch = _batch(1, 1.0)
    carried = dataclasses.replace(state, carry=jax.tree.map(lambda a: a + 0.5, state.carry))
    _, from_zero = step_fn(state, None, batch, jnp.asarray(False))
    _, from_carried = step_fn(carried, None, batch, jnp.asarray(False))
    _, reset = step_fn(carried, None, {**batch, "reset": jnp.ones((3,), bool)}, jnp.asarray(False))
    assert float(reset["loss"]) == float(from_zero["loss"]) != float(from_carried["loss"])


def test_nt_asgd_trigger_on_a_hand_made_validation_sequence():
    # nonmono = 2: switch when more than 2 earlier validations exist and this one is worse than the best of all
    # but the last 2. 8.5: history [10, 9, 8], best of [10] is 10 -> no. 9.5: best of [10, 9] is 9 -> switch.
    values = [10.0, 9.0, 8.0, 8.5, 9.5, 7.0]
    history, switched_at = [], None
    for k, value in enumerate(values):
        if nt_asgd_triggered(history, value, 2):
            switched_at = k
            break
        history.append(value)
    assert switched_at == 4
    assert not nt_asgd_triggered([5.0, 6.0, 7.0], 8.0, 3)  # not more than nonmono validations yet
    assert nt_asgd_triggered([5.0, 6.0, 7.0, 7.5], 5.5, 3)  # 5.5 > min([5.0])


@pytest.mark.parametrize("release_average", [False, True])
def test_averaged_parameters_are_the_mean_of_the_iterates_since_the_trigger(release_average):
    graphdef, state = _fresh_state(_recipe(release_average))
    step_fn = _step_fn(release_average)
    iterates, rates = [], []
    scales = [0.9 + 0.05 * k for k in range(6)]
    for k in range(6):
        active = k >= 2  # SGD for 2 steps, then ASGD for 4
        state, metrics = step_fn(state, None, _batch(10 + k, scales[k], previous_lr_scale=scales[max(k - 1, 0)]),
                                 jnp.asarray(active))
        iterates.append(jax.tree.map(lambda p: np.asarray(p, np.float64), state.params))
        rates.append(float(metrics["learning_rate"]))
    # The step size: lr * this segment's scale, except PyTorch's ASGD from its second step: the previous one's.
    used = [scales[k - 1] if release_average and k >= 3 else scales[k] for k in range(6)]
    np.testing.assert_allclose(rates, [4.0 * u for u in used], rtol=1e-6)
    # Paper (AWD Algorithm 1): w_T (the parameters when ASGD began, after step 2) and the 4 ASGD iterates.
    # Release (PyTorch ASGD's lagging mu): the ASGD iterates from the second on.
    averaged = iterates[3:] if release_average else iterates[1:]
    expected = jax.tree.map(lambda *ps: sum(ps) / len(ps), *averaged)
    assert int(state.average["count"]) == (4 if release_average else 5)
    for got, want in zip(jax.tree.leaves(state.average["params"]), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("released", [False, True])
def test_asgd_steps_follow_a_hand_written_oracle(released):
    """3 steps with ASGD on from the first, by hand: p - lr_k * (clip(g) + wd * p) with lr_k the released rule's
    (from the second ASGD step, the previous segment's scale) or this segment's, the hidden state carried from
    step to step, and the mean of the iterates (paper: w_T and every iterate; release: from the second on)."""
    graphdef, state = _fresh_state(_recipe(released))
    params, hidden = jax.tree.map(np.asarray, (state.params, state.carry))
    scales, previous = [0.8, 1.1, 0.95], [1.3, 0.8, 1.1]
    batches = [_batch(20 + k, scales[k], previous_lr_scale=previous[k]) for k in range(3)]
    step_fn = _step_fn(released)
    for batch in batches:
        state, _ = step_fn(state, None, batch, jnp.asarray(True))

    iterates = [params]
    for k, batch in enumerate(batches):
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), k)  # the updates done before step k
        grads, hidden = _oracle_gradient(graphdef, params, hidden, batch, key)
        grads, hidden = jax.tree.map(np.asarray, (grads, hidden))
        norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in jax.tree.leaves(grads)))
        assert norm > 0.05  # so the clip is active
        lr = 4.0 * (previous[k] if released and k >= 1 else scales[k])
        params = jax.tree.map(lambda p, g: p - lr * (g * (0.05 / (norm + 1e-6)) + 0.02 * p), params, grads)
        iterates.append(params)
    averaged = iterates[2:] if released else iterates
    expected = jax.tree.map(lambda *ps: sum(np.asarray(p, np.float64) for p in ps) / len(ps), *averaged)
    for got, want in zip(jax.tree.leaves(state.params), jax.tree.leaves(params)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    for got, want in zip(jax.tree.leaves(state.average["params"]), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    assert int(state.average["count"]) == (3 if released else 4) and int(state.step) == 3
    for got, want in zip(jax.tree.leaves(state.carry), jax.tree.leaves(hidden)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


# -----------------------------------------------------------------------------
# Through the trainer.


def _read(workdir):
    return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """4 epochs of the test-sized config on 80 sentences, validation every epoch, uninterrupted. With nonmono 1
    the validation loss rising at the third validation switches to ASGD: the last one validates the average.
    Checkpoints only where a run validates or stops (about 100 steps: a save every 4 would be 25 more orbax saves
    a run; `resumed_twice` resumes from its stops' checkpoints either way)."""
    workdir = tmp_path_factory.mktemp("onlstm_uninterrupted")
    config = tiny_config(**{"training.num_epochs": 4, "training.nonmono": 1, "data.num_train_sentences": 80,
                            "checkpointing.interval_steps": 1000})
    return config, train(config, workdir, quiet=True)


def test_train_validates_at_every_epoch_end_and_the_loss_goes_down(tiny_run):
    config, result = tiny_run
    task = make_task(config)
    assert isinstance(task, OnLSTMLMTask)
    words = [w for s in read_sentences("builtin", None, "train", num_sentences=80) for w in s + ["<eos>"]]
    rows = len(words) // 4
    settings = BPTTSettings(bptt=8, std=2.0, min_length=2)
    ends = np.cumsum([len(epoch_plan(rows, settings, config.training.seed, e)) for e in range(4)]).tolist()
    assert result.final_step == ends[-1]
    assert sorted(result.valid_losses) == ends
    losses = [result.losses[s] for s in sorted(result.losses)]
    assert losses[0] == pytest.approx(math.log(task_vocab_size(result)), abs=0.15)  # uniform at the start
    assert np.mean(losses[-20:]) < losses[0] - 0.2
    assert (Path(result.workdir) / "vocab.txt").read_text().splitlines()[-1] == "<unk>"


def task_vocab_size(result):
    return result.facts["vocab_size"]  # the task's result_fields


@pytest.fixture(scope="module")
def resumed_twice(tiny_run, tmp_path_factory):
    """tiny_run's config run again in one workdir in three parts: stopped inside epoch 1 (after its first
    validation, on SGD), stopped 4 steps after the ASGD switch, then to the end. -> (stops, [the 3 results],
    workdir)."""
    config, reference = tiny_run
    ends = sorted(reference.valid_losses)
    switched = [r["step"] for r in _read(reference.workdir) if r.get("switched_to_asgd")]
    assert switched, "the tests need a run that switches to ASGD"
    stops = (ends[0] + 2, switched[0] + 4)
    assert stops[0] < switched[0] and stops[1] not in ends  # both inside an epoch, the first before the switch
    workdir = tmp_path_factory.mktemp("onlstm_resumed")
    parts = [train(config, workdir, stop_after_step=stops[0], quiet=True),
             train(config, workdir, stop_after_step=stops[1], quiet=True), train(config, workdir, quiet=True)]
    return stops, parts, workdir


def test_resumed_run_equals_the_uninterrupted_one_bit_for_bit(tiny_run, resumed_twice):
    """Stopped inside epoch 1 after a validation, resumed: every later loss, validation (the ASGD switch
    included: the validation history is restored) and metrics.jsonl record is the uninterrupted run's."""
    _, reference = tiny_run
    (stop, second_stop), (first, second, third), workdir = resumed_twice
    assert first.stopped_early and first.final_step == stop
    assert second.start_step == stop and second.final_step == second_stop
    assert third.start_step == second_stop and third.final_step == reference.final_step
    for step in range(stop + 1, second_stop + 1):
        assert second.losses[step] == reference.losses[step], step  # exact
    assert second.valid_losses == {s: v for s, v in reference.valid_losses.items() if stop < s <= second_stop}
    mine = [(r["step"], r["split"], r["loss"], r.get("switched_to_asgd")) for r in _read(workdir)]
    theirs = [(r["step"], r["split"], r["loss"], r.get("switched_to_asgd")) for r in _read(reference.workdir)]
    assert mine == theirs


def test_resume_after_the_asgd_switch_is_bit_exact(tiny_run, resumed_twice):
    """Stopped 4 steps after the switch (averaging on), resumed: the same losses and averaged validations."""
    _, reference = tiny_run
    (_, stop), (_, _, third), workdir = resumed_twice
    records = _read(reference.workdir)
    switched = [r["step"] for r in records if r.get("switched_to_asgd")]
    averaged = [r["step"] for r in records if r["split"] == "valid" and r["averaged"]]
    assert averaged and min(averaged) == min(s for s in reference.valid_losses if s > switched[0])
    for step in range(stop + 1, reference.final_step + 1):
        assert third.losses[step] == reference.losses[step], step
    assert third.valid_losses == {s: v for s, v in reference.valid_losses.items() if s > stop}
    assert ([(r["step"], r["averaged"]) for r in _read(workdir) if r["split"] == "valid"]
            == [(r["step"], r["averaged"]) for r in records if r["split"] == "valid"])


# -----------------------------------------------------------------------------
# Configs and data.


def test_a_plain_lstm_does_not_resume_an_onlstms_checkpoint(tiny_run, tmp_path):
    config, reference = tiny_run
    workdir = tmp_path / "copy"
    shutil.copytree(reference.workdir, workdir)
    plain = tiny_config(**{"training.num_epochs": 4, "training.nonmono": 1, "data.num_train_sentences": 80,
                           "checkpointing.interval_steps": 1000, "model.ordered": False})
    with pytest.raises(ConfigError, match="model.ordered: True there, False now"):
        train(plain, workdir, quiet=True)


def test_ptb_config_names_the_missing_files(tmp_path):
    config = load_config(str(REPO / "configs" / "onlstm_ptb.py"))
    assert (config.model.hidden_size, config.model.embedding_size, config.model.num_layers,
            config.model.chunk_size) == (1150, 400, 3, 10)
    with pytest.raises(FileNotFoundError, match=r"data.train_path: '' is not a file"):
        train(config, tmp_path / "a", quiet=True)
    config = load_config(f"{REPO / 'configs' / 'onlstm_ptb.py'}:{tmp_path / 'penn'}")
    with pytest.raises(FileNotFoundError, match=r"penn/train.txt' is not a file"):
        train(config, tmp_path / "b", quiet=True)


def test_config_errors():
    config = tiny_config()
    config.training.num_steps = 10
    with pytest.raises(ConfigError, match="exactly one of training.num_epochs"):
        OnLSTMLMTask(config).validate_config(config)
    config = tiny_config(**{"model.chunk_size": 5})
    with pytest.raises(ConfigError, match="chunk_size 5 does not divide the hidden size 16"):
        OnLSTMLMTask(config).validate_config(config)
    config = tiny_config(**{"data.source": "csv"})
    with pytest.raises(ConfigError, match="'data.source': unknown 'csv'"):
        OnLSTMLMTask(config).validate_config(config)


@pytest.mark.skipif(not TOTC.is_dir(), reason=f"Tale of Two Cities not found at {TOTC}")
def test_tale_of_two_cities_words():
    sentences = read_sentences("treebank", str(TOTC / "valid.txt"), "valid")
    assert len(sentences) == 346
    config = load_config(str(REPO / "configs" / "onlstm_totc.py"))
    assert config.data.source == "treebank" and Path(config.data.train_path).is_file()
    first = read_sentences("treebank", config.data.train_path, "train", num_sentences=1)[0]
    assert first[:6] == ["It", "was", "the", "best", "of", "times"]


def test_validation_uses_the_averaged_parameters_once_asgd_runs(tmp_path):
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext

    config = tiny_config(**{"training.num_epochs": 1})
    task = OnLSTMLMTask(config)
    task.validate_config(config)
    task.setup(RunContext(tmp_path, shd.make_mesh(), False, 0, 1, lambda text: None))
    state, rest = task.init_state()
    shifted = jax.jit(lambda params: jax.tree.map(lambda p: p * 0.5 + 0.01, params))(state.params)  # one program
    state = dataclasses.replace(state, average={**state.average, "params": shifted})
    on_params, _ = task.validation_loss(state.params)
    on_average, _ = task.validation_loss(shifted)
    assert on_params != on_average
    sgd = task.evaluate(state, rest)
    assert sgd.values["valid_loss"] == on_params and not sgd.record["averaged"]
    task.asgd_start_step = 5
    asgd = task.evaluate(state, rest)
    assert asgd.values["valid_loss"] == on_average and asgd.record["averaged"]
    assert asgd.values["valid_perplexity"] == pytest.approx(math.exp(on_average))
    assert task.valid_history == [on_params]  # the trigger's history stops growing under ASGD


def test_cli_info_and_train_on_the_tiny_config(tmp_path, capsys):
    from tgjax import cli

    assert cli.main(["info", "--config", "configs/onlstm_tiny.py"]) == 0
    out = capsys.readouterr().out
    config = load_config(str(REPO / "configs" / "onlstm_tiny.py"))
    words = build_vocabulary(read_sentences("builtin", None, "train", num_sentences=2000))
    model = nnx.eval_shape(lambda: OnLSTMLM(OnLSTMLMConfig(
        vocab_size=len(words), **{k: config.model[k] for k in config.model}), rngs=nnx.Rngs(0)))
    count = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert f"onlstm_lm: {count:,} parameters" in out and f"vocabulary   {len(words)} ids" in out
    # One epoch from the command line: its loss goes down from the uniform log(vocabulary size).
    workdir = tmp_path / "run"
    assert cli.main(["train", "--config", "configs/onlstm_tiny.py", "--workdir", str(workdir),
                     "--config.training.num_epochs=1", "--config.logging.interval_steps=1",
                     "--config.data.num_train_sentences=500", "--config.data.num_valid_sentences=50"]) == 0
    err = capsys.readouterr().err
    losses = [r["loss"] for r in _read(workdir) if r["split"] == "train"]
    assert f"validation at step {len(losses)}: perplexity" in err and len(losses) > 15
    vocab_size = len(build_vocabulary(read_sentences("builtin", None, "train", num_sentences=500)))
    assert losses[0] == pytest.approx(math.log(vocab_size), abs=0.1)  # uniform at the start
    assert np.mean(losses[-5:]) < losses[0] - 0.5


CRAFT = REPO.parent / "shared" / "data" / "craft_treebank"


@pytest.mark.skipif(not CRAFT.is_dir(), reason=f"CRAFT not found at {CRAFT}")
def test_craft_config_reads_the_train_and_dev_articles_in_the_release_form(tmp_path):
    from tgjax.data.mlm_corpus import craft_files
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext

    config = load_config(str(REPO / "configs" / "onlstm_craft.py"))
    assert config.data.source == "craft" and Path(config.data.craft_dir) == CRAFT
    dev = read_sentences("craft", config.data.craft_dir, "valid")
    assert len(craft_files(config.data.craft_dir, "valid")) == 7 and len(dev) == 2780
    letters = {ch for s in dev for w in s for ch in w}  # lower-cased; digit runs read as N
    assert "N" in letters and not any(ch.isdigit() or (ch.isupper() and ch != "N") for ch in letters)
    # The task builds its vocabulary and validation stream from those articles (a small slice; the train
    # articles are read once, here).
    config.data.num_train_sentences, config.data.num_valid_sentences = 200, 40
    task = OnLSTMLMTask(config)
    task.validate_config(config)
    task.setup(RunContext(tmp_path, shd.make_mesh(), False, 0, 1, lambda text: None))
    # The first train article's title, punctuation dropped, lower-cased (the eval's --word-form release): the
    # vocabulary's first words, in order of first appearance.
    assert task.words[:6] == ["intraocular", "pressure", "in", "genetically", "distinct", "mice"]
    assert task.valid_data is not None
