"""configs/stack_cfl.py and the CFL trials on the shared trainer (tgjax.train.cfl_trials, tasks.cfl, cfl):
the paper's set-up, a tiny run, trials, resume, errors."""

import json
import math

import numpy as np
import pytest
from flax import nnx

from tgjax import cli
from tgjax.data.cfl import TASK_NAMES, cfl_task
from tgjax.data.cfl_metric import cross_entropy_difference, string_log_probs
from tgjax.models.stack_lm import StackTransformerLM
from tgjax.train.cfl import (
    MODEL_NAMES,
    check_config,
    count_stack_lm_parameters,
    load_model,
    make_batches,
    make_steps,
    resolve_model_config,
    shuffled_batches,
    string_log_probs_of,
)
from tgjax.train.cfl_trials import train_cfl
from tgjax.train.config import ConfigError, load_config
from tgjax.train.schedules import Plateau

from .helpers import read_metrics

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


CONFIG = "configs/stack_cfl.py"

# §6: d_model, m, |Q|, |Γ| per task and model (5 layers, 4 heads, feedforward 2·d_model, dropout 0.1 for all).
PAPER_SIZES = {
    "tf": dict(d_model=32),
    "tf_sup": dict(d_model=32, stack_embedding_size=32),
    "tf_nd": dict(d_model=28, stack_embedding_size=5),
}
PAPER_PDA = {"marked_reversal": (2, 3), "unmarked_reversal": (2, 3), "dyck": (2, 3),
             "padded_reversal": (3, 3), "hardest_cfl": (3, 3)}
# Table 5: parameter counts with the authors' vocabularies (|Σ| + 1 ids in and out).
TABLE_5 = {
    "marked_reversal": (4, {"tf": 43_044, "tf_sup": 40_964, "tf_nd": 33_273}),
    "unmarked_reversal": (3, {"tf": 42_979, "tf_sup": 40_899, "tf_nd": 33_216}),
    "padded_reversal": (3, {"tf": 42_979, "tf_sup": 40_899, "tf_nd": 36_576}),
    "dyck": (5, {"tf": 43_109, "tf_sup": 41_029, "tf_nd": 33_330}),
    "hardest_cfl": (8, {"tf": 43_304, "tf_sup": 41_224, "tf_nd": 36_861}),
}

# One epoch on 50 strings, scored on 20 validation strings and the test lengths 41 and 43 (w#wᴿ has odd
# lengths only); one padded width (88) for every batch, so each model compiles one train and one score step; one
# layer (with a stack, the stack layer), so that they compile fast (the paper's five are trained in CI by
# tests/train/test_loss_pins.py's cfl case).
TINY = ["training.epochs=1", "data.train_size=50", "data.valid_size=20", "data.test_lengths=41,43",
        "data.test_per_length=20", "data.length_bucket=88", "evaluation.batch_size=20",
        "logging.interval_steps=2", "architecture.num_layers=1"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_config_is_the_papers_setup_for_every_task_and_model(task):
    _, counts = TABLE_5[task]
    for model in MODEL_NAMES:
        config = load_config(CONFIG, [f"task={task}", f"model={model}"])
        assert check_config(config) == (task, model)
        cfg = resolve_model_config(config, cfl_task(task).vocabulary.size)
        assert (cfg.num_layers, cfg.num_heads, cfg.dropout_rate) == (5, 4, 0.1)
        assert cfg.feedforward_size == 2 * cfg.d_model
        assert cfg.stack == {"tf": "none", "tf_sup": "superposition", "tf_nd": "nondeterministic"}[model]
        assert cfg.resolved_stack_layer == 2  # the third of five layers
        for key, value in PAPER_SIZES[model].items():
            assert getattr(cfg, key) == value, (task, model, key)
        if model == "tf_nd":
            assert (cfg.num_states, cfg.stack_alphabet_size) == PAPER_PDA[task]
        # The CFL vocabulary (PAD, BOS, EOS, symbols) with the authors' embedding (BOS + symbols) and
        # softmax (EOS + symbols): the parameter count is Table 5's.
        assert count_stack_lm_parameters(cfg) == counts[model], (task, model)
    t, d = config.training, config.data
    assert (t.batch_size, t.clip_grad_norm, t.learning_rate) == (10, 5.0, None)
    assert tuple(t.learning_rate_range) == (5e-4, 1e-2)
    assert (t.epochs, t.lr_decay, t.lr_patience, t.early_stopping_patience) == (200, 0.9, 5, 10)
    assert (d.train_size, d.valid_size, d.test_per_length, d.test_lengths) == (10_000, 1_000, 100, None)


def test_config_argument_and_architecture_overrides():
    config = load_config(f"{CONFIG}:dyck,tf_nd", ["architecture.num_states=4", "data.test_lengths=(40, 42)"])
    assert (config.task, config.model) == ("dyck", "tf_nd")
    cfg = resolve_model_config(config, 7)
    assert (cfg.d_model, cfg.num_states, cfg.stack_alphabet_size) == (28, 4, 3)
    assert tuple(config.data.test_lengths) == (40, 42)
    assert check_config(load_config(CONFIG, ["task=hardest-cfl", "model=tf+sup"])) == ("hardest_cfl", "tf_sup")
    # The fidelity switches reach the model; None keeps the release's defaults.
    assert (cfg.init, cfg.pushed_vectors) == ("released", "released")
    switched = resolve_model_config(load_config(CONFIG, ["architecture.init=xavier",
                                                         "architecture.pushed_vectors=paper"]), 7)
    assert (switched.init, switched.pushed_vectors) == ("xavier", "paper")
    with pytest.raises(ConfigError, match="architecture"):
        check_config(load_config(CONFIG, ["architecture.init=normal"]))
    with pytest.raises(ConfigError, match="lr_threshold"):
        check_config(load_config(CONFIG, ["training.lr_threshold=-0.1"]))


def test_unknown_task_model_or_key_is_named_with_the_choices(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"config key 'task': unknown CFL task 'dyck3'; expected one of "
                                          r"marked_reversal, unmarked_reversal, padded_reversal, dyck, hardest_cfl"):
        check_config(load_config(CONFIG, ["task=dyck3"]))
    with pytest.raises(ConfigError, match=r"config key 'model': unknown model 'lstm'; "
                                          r"expected one of tf, tf_sup, tf_nd"):
        check_config(load_config(CONFIG, ["model=lstm"]))
    with pytest.raises(ConfigError, match=r"'data.test_lengths': \[40, 42\] are not lengths of marked_reversal"):
        check_config(load_config(CONFIG, ["data.test_lengths=40,42"]))
    with pytest.raises(ConfigError, match=r"'training.epochs' must be an integer >= 1, got 0"):
        check_config(load_config(CONFIG, ["training.epochs=0"]))
    with pytest.raises(ConfigError, match=r"'training.epoch' does not exist \(did you mean 'training.epochs'\?\)"):
        load_config(CONFIG, ["training.epoch=3"])
    # From the command line: exit 2 with the message, nothing trained.
    assert cli.main(["train", "--config", CONFIG, "--workdir", str(tmp_path / "w"), "--config.model=tf_lstm"]) == 2
    err = capsys.readouterr().err
    assert "config key 'model': unknown model 'tf_lstm'; expected one of tf, tf_sup, tf_nd" in err
    assert not (tmp_path / "w" / "metrics.jsonl").exists()


def test_tg_configs_still_get_the_lm_trainer():
    from tgjax.train.config import trainer_of

    assert trainer_of(load_config("tiny")) == "lm"
    assert trainer_of(load_config(CONFIG)) == "cfl"


def test_plateau_decays_then_stops_as_appendix_d3():
    plateau = Plateau(lr_patience=2, early_stopping_patience=5)
    events = [plateau.update(v) for v in [3.0, 2.0, 2.5, 2.4, 2.2, 2.1, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5]]
    improved = [e[0] for e in events]
    decays = [i for i, e in enumerate(events) if e[1]]
    stops = [i for i, e in enumerate(events) if e[2]]
    assert improved == [True, True, False, False, False, False, True, False, False, False, False, False]
    assert decays == [3, 5, 8, 10] and stops == [11]


def test_batches_are_one_length_and_padding_changes_no_log_prob():
    task = cfl_task("marked_reversal")
    strings = task.sample_split("train", seed=3, size=25)  # groups of 10, 10, 5 (one length each)
    batches = make_batches(task, strings, 10, length_bucket=8)
    assert [int((b["index"] >= 0).sum()) for b in batches] == [10, 10, 5]
    for b in batches:
        real = b["index"][b["index"] >= 0]
        assert len({len(strings[i]) for i in real}) == 1 and b["inputs"].shape == (10, b["inputs"].shape[1])
        assert b["inputs"].shape[1] % 8 == 0 and b["weights"][b["index"] < 0].sum() == 0
    # Scoring: the same numbers with widths padded to 48 and to 96 (the models are causal, stacks included).
    test = task.sample_split("test", size=2)
    few = [s for s in test if len(s) <= 47][:4]
    assert len(few) == 4
    for model in ("tf_sup", "tf_nd"):  # one layer: the stack layer
        config = load_config(CONFIG, [f"model={model}", "architecture.num_layers=1"])
        model_cfg = resolve_model_config(config, task.vocabulary.size)
        steps = make_steps(model_cfg, config.training)
        # Built in one compiled program, not op by op (a few dozen small programs).
        model = nnx.jit(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0)))()
        _, params, rest = nnx.split(model, nnx.Param, ...)
        scores = [string_log_probs_of(steps, params, rest,
                                      make_batches(task, few, 4, length_bucket=width, same_length=False), len(few))
                  for width in (48, 96)]
        np.testing.assert_allclose(scores[1], scores[0], rtol=1e-5, err_msg=model)
        assert np.all(scores[0] < 0)


@pytest.mark.parametrize("model", [pytest.param("tf", marks=pytest.mark.slow), "tf_sup"])  # tf_sup: the stack too
def test_tiny_run_writes_metrics_results_and_plot(model, tmp_path, capsys):
    workdir = tmp_path / model
    args = ["train", "--config", CONFIG, "--workdir", str(workdir), "--config.task=marked_reversal",
            f"--config.model={model}", *[f"--config.{o}" for o in TINY], "--config.training.learning_rate=0.003"]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "steps/s" in err and "loss" in err and "ETA" in err and "epoch 1: validation cross-entropy difference" in err

    records = read_metrics(workdir / "trial_0")
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [2, 4, 5] and all(math.isfinite(r["loss"]) for r in train)
    (valid,) = [r for r in records if r["split"] == "valid"]
    assert valid["epoch"] == 1 and valid["best"] and valid["step"] == 5
    assert sorted(r["step"] for r in records if r["split"] == "test_by_length") == [41, 43]
    assert (workdir / "trial_0" / "tensorboard").is_dir()

    results = json.loads((workdir / "results.json").read_text())
    assert (results["task"], results["model"], results["best_epoch"], results["epochs_run"]) == (
        "marked_reversal", model, 1, 1)
    assert results["learning_rate"] == 0.003
    assert sorted(results["test"]["bins"]) == ["41", "43"]
    assert [results["test"]["bins"][k]["num_strings"] for k in ("41", "43")] == [20, 20]
    assert results["test"]["num_strings"] == 40 and results["valid"]["num_strings"] == 20
    assert results["test"]["min_length"] == 41 and results["test"]["max_length"] == 43
    assert results["valid_history"] == [pytest.approx(valid["cross_entropy_difference"])]
    # A model cannot beat the source distribution beyond sampling noise.
    differences = [results["test"]["cross_entropy_difference"], results["valid"]["cross_entropy_difference"],
                   *(b["cross_entropy_difference"] for b in results["test"]["bins"].values())]
    assert all(math.isfinite(x) and x >= -0.05 for x in differences), differences
    png = (workdir / "cross_entropy_difference.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # The best epoch's checkpoint reproduces the reported validation number.
    loaded, task = load_model(workdir)
    assert count_stack_lm_parameters(loaded.config) == results["num_parameters"]
    valid_strings = task.sample_split("valid", seed=1, size=20)
    enc = task.encode(valid_strings)
    logits = nnx.jit(lambda model, inputs: model(inputs))(loaded, enc["inputs"])  # one program, not op by op
    log_probs = string_log_probs(logits, enc["targets"], enc["weights"])
    again = cross_entropy_difference(log_probs, valid_strings, task, "valid").difference
    assert again == pytest.approx(results["valid"]["cross_entropy_difference"], abs=1e-4)


def test_trials_report_the_best_by_validation(tmp_path):
    config = load_config(CONFIG, [*TINY, "model=tf", "training.num_trials=2",
                                  "data.train_size=20", "data.test_lengths=(41,)"])
    result = train_cfl(config, tmp_path, quiet=True)
    assert len(result.trials) == 2 and {r.seed for r in result.trials} == {1, 2}
    assert result.trials[0].learning_rate != result.trials[1].learning_rate
    assert all(5e-4 <= r.learning_rate <= 1e-2 for r in result.trials)
    assert result.best.best_valid_difference == min(r.best_valid_difference for r in result.trials)
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["trials"]) == 2 and results["best_trial_workdir"] == str(result.best.workdir)
    for k in range(2):
        assert (tmp_path / f"trial_{k}" / "results.json").exists()
        assert (tmp_path / f"trial_{k}" / "metrics.jsonl").exists()
    assert (tmp_path / "cross_entropy_difference.png").exists()
    # Only the best trial is tested.
    tested = [t["test_cross_entropy_difference"] is not None for t in results["trials"]]
    assert tested == [r is result.best for r in result.trials]
    assert results["test_cross_entropy_difference"] == result.best.test["cross_entropy_difference"]


def test_shuffled_batches_resume_where_they_stopped():
    batches = [{"id": np.array([i, i]), "other": np.array([0, 1])} for i in range(5)]
    whole = shuffled_batches(batches, seed=7)
    seen = [int(next(whole)["id"][0]) for _ in range(17)]  # 3 epochs and 2 batches
    # Each epoch is a permutation of the 5 batches, the e-th draw of the trial's shuffle stream.
    rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(3,)))
    assert seen[:15] == [int(b) for _ in range(3) for b in rng.permutation(5)]
    assert whole.get_state() == {"epoch": 3, "step": 2}
    for stop in (0, 3, 5, 11):
        first = shuffled_batches(batches, seed=7)
        for _ in range(stop):
            next(first)
        again = shuffled_batches(batches, seed=7, position=first.get_state())
        assert [int(next(again)["id"][0]) for _ in range(17 - stop)] == seen[stop:], stop
    # A process's share: its row of the chosen fields.
    second = shuffled_batches(batches, seed=7, position={"epoch": 2, "step": 1}, fields=("id",), process_index=1,
                              process_count=2)
    assert [b["id"].tolist() for b in (next(second) for _ in range(6))] == [[i] for i in seen[11:]]
    assert set(next(second)) == {"id"}


def test_time_budget_stops_after_the_epoch_that_passes_it():
    """training.max_train_seconds: the plateau's verdict, or a stop once the clock passes the budget (no decay)."""
    from tgjax.train.tasks.cfl import _BudgetedPlateau

    clock = iter([1.0, 5.0, 9.0, 12.0])
    plateau = _BudgetedPlateau(1, 5, budget_s=10.0, elapsed=lambda: next(clock))
    events = [plateau.update(v) for v in [3.0, 2.0, 2.5, 2.6]]  # epoch 4 is bad (a decay) and past the budget
    assert [e[2] for e in events] == [False, False, False, True] and plateau.budget_stopped
    assert [e[1] for e in events] == [False, False, True, False]
    assert plateau.stop_reason == "time budget: training.max_train_seconds=10"  # the trainer's stop message
    unlimited = _BudgetedPlateau(1, 2, budget_s=None, elapsed=lambda: 1e9)
    assert [unlimited.update(v)[2] for v in [1.0, 2.0, 2.0]] == [False, False, True]
    assert not unlimited.budget_stopped  # stopped by the plateau, not by time
    assert unlimited.stop_reason == "no improvement: early stopping"


def test_time_budget_ends_a_trial_and_is_reported(tmp_path):
    config = load_config(CONFIG, [*TINY, "model=tf", "training.epochs=5", "data.train_size=20",
                                  "data.test_lengths=(41,)", "training.learning_rate=0.003",
                                  "training.max_train_seconds=1e-6"])
    result = train_cfl(config, tmp_path, quiet=True)
    (trial,) = result.trials
    assert trial.epochs_run == 1 and trial.stopped_early and trial.stopped_by_budget
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["trials"][0]["stopped_by_budget"] and results["epochs_run"] == 1
    with pytest.raises(ConfigError, match="max_train_seconds"):
        check_config(load_config(CONFIG, ["training.max_train_seconds=0"]))
