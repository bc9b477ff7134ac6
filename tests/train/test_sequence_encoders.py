"""The same-size baselines of the classification task (`model.encoder`: tgjax.models.sequence_encoders): each
encoder's forward against an oracle written from its equations, padding that changes nothing, sizes matched to
Ordered Memory's, short training runs that learn, the default left as it was, checkpoints refused across
encoders, and the om-listops recipe judging Ordered Memory against its best baseline."""

from __future__ import annotations

import functools
import json

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.train.loss_pins import PINS
from tests.train.loss_pins import family_config as pinned_config
from tests.train.test_classification_task import write_toy_logic
from tgjax import cli
from tgjax.models import sequence_encoders
from tgjax.models.ordered_memory import OMClassifierConfig
from tgjax.models.sequence_encoders import (
    SIZE_TOLERANCE,
    BaselineClassifier,
    BaselineClassifierConfig,
    LSTMEncoder,
    TransformerEncoder,
    baseline_config,
    matched_hidden_size,
    parameter_count,
)
from tgjax.reproduce.recipes import om_listops
from tgjax.reproduce.runner import RunProgress, summarise
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train
from tgjax.train.tasks.classification import describe, evaluate_best_checkpoint, model_config, om_model_config

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


@nnx.jit
def run_encoder(encoder, x, valid):
    return encoder(x, valid)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _padded_batch(rng, lengths, width, features):
    """x [B, T, F] with garbage (large values) on padded positions; rows alternately left- and right-padded."""
    x = rng.normal(size=(len(lengths), width, features)) * 5.0  # the garbage
    valid = np.zeros((len(lengths), width), bool)
    for row, n in enumerate(lengths):
        start = width - n if row % 2 else 0  # odd rows left-padded (ListOps' side), even rows right-padded
        valid[row, start:start + n] = True
        x[row, start:start + n] = rng.normal(size=(n, features))
    return x.astype(np.float32), valid


# -- the LSTM ---------------------------------------------------------------------------------


def lstm_oracle(encoder: LSTMEncoder, x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The stacked LSTM in float64 from the equations, each row's real tokens alone, from the zero state:
    i = s(x Wii + h Whi + bhi), f = s(x Wif + h Whf + bhf), g = tanh(x Wig + h Whg + bhg),
    o = s(x Wio + h Who + bho), c' = f c + i g, h' = o tanh(c'); the top layer's last h."""
    out = []
    for row in range(x.shape[0]):
        steps = x[row][valid[row]].astype(np.float64)
        for cell in encoder.cells:
            w = {name: np.asarray(getattr(cell, name).kernel[...], np.float64)
                 for name in ("ii", "if_", "ig", "io", "hi", "hf", "hg", "ho")}
            b = {name: np.asarray(getattr(cell, name).bias[...], np.float64) for name in ("hi", "hf", "hg", "ho")}
            h = np.zeros(encoder.hidden_size)
            c = np.zeros(encoder.hidden_size)
            outputs = []
            for x_t in steps:
                i = _sigmoid(x_t @ w["ii"] + h @ w["hi"] + b["hi"])
                f = _sigmoid(x_t @ w["if_"] + h @ w["hf"] + b["hf"])
                g = np.tanh(x_t @ w["ig"] + h @ w["hg"] + b["hg"])
                o = _sigmoid(x_t @ w["io"] + h @ w["ho"] + b["ho"])
                c = f * c + i * g
                h = o * np.tanh(c)
                outputs.append(h)
            steps = np.array(outputs)
        out.append(h)
    return np.array(out)


def test_lstm_encoder_is_the_recurrence_written_out_whatever_the_padding():
    rng = np.random.default_rng(0)
    encoder = LSTMEncoder(5, 6, 2, rngs=nnx.Rngs(1))
    x, valid = _padded_batch(rng, [7, 3, 5, 1], width=7, features=5)
    got = np.asarray(run_encoder(encoder, jnp.asarray(x), jnp.asarray(valid)))
    assert got.shape == (4, 6)
    np.testing.assert_allclose(got, lstm_oracle(encoder, x, valid), atol=1e-5, rtol=1e-5)


# -- the Transformer ----------------------------------------------------------------------------


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    scale, bias = (np.asarray(norm.scale[...], np.float64), np.asarray(norm.bias[...], np.float64))
    return (x - mean) / np.sqrt(variance + norm.epsilon) * scale + bias


def _dense(x, layer):
    return x @ np.asarray(layer.kernel[...], np.float64) + np.asarray(layer.bias[...], np.float64)


def transformer_oracle(encoder: TransformerEncoder, x: np.ndarray) -> np.ndarray:
    """One unpadded sentence x [n, D_in] in float64: h = x W + b + PE(0..n-1) (sin on the first half of the
    features, cos on the second); per block h += MHA(LN(h)), h += W2 relu(W1 LN(h)); the mean of LN(h)."""
    n, d = x.shape[0], encoder.d_model
    frequencies = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d)
    angles = np.arange(n)[:, None] * frequencies[None, :]
    h = _dense(x.astype(np.float64), encoder.input) + np.concatenate([np.sin(angles), np.cos(angles)], -1)
    for block in encoder.blocks:
        heads = block.num_heads
        y = _layer_norm(h, block.attention_norm)
        q, k, v = (_dense(y, layer).reshape(n, heads, d // heads) for layer in (block.query, block.key, block.value))
        scores = np.einsum("qhc,khc->hqk", q, k) / np.sqrt(d // heads)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        h = h + _dense(np.einsum("hqk,khc->qhc", weights, v).reshape(n, d), block.attention_out)
        hidden = np.maximum(_dense(_layer_norm(h, block.feedforward_norm), block.feedforward_in), 0.0)
        h = h + _dense(hidden, block.feedforward_out)
    return _layer_norm(h, encoder.final_norm).mean(0)


@functools.cache
def _transformer_encoder() -> TransformerEncoder:
    """The Transformer tests' one encoder (2 blocks of width 8, 2 heads, feed-forward 12), built once: its forward
    is compiled once per input shape for the module (the oracle test's sentence is as long as a padded batch's
    row alone)."""
    return TransformerEncoder(5, 8, 2, 2, 12, rngs=nnx.Rngs(2))


def test_transformer_encoder_is_the_pre_ln_stack_written_out():
    rng = np.random.default_rng(1)
    encoder = _transformer_encoder()
    x = rng.normal(size=(1, 5, 5)).astype(np.float32)
    got = np.asarray(run_encoder(encoder, jnp.asarray(x), jnp.ones((1, 5), bool)))
    np.testing.assert_allclose(got[0], transformer_oracle(encoder, x[0]), atol=1e-5, rtol=1e-5)


def test_transformer_encoder_ignores_padded_positions_and_equals_each_row_alone():
    rng = np.random.default_rng(2)
    encoder = _transformer_encoder()
    lengths = [7, 3, 5, 1]
    x, valid = _padded_batch(rng, lengths, width=7, features=5)
    got = np.asarray(run_encoder(encoder, jnp.asarray(x), jnp.asarray(valid)))
    other = x.copy()
    other[~valid] = rng.normal(size=(int((~valid).sum()), 5)) * 100.0  # other garbage in the padded positions
    np.testing.assert_allclose(np.asarray(run_encoder(encoder, jnp.asarray(other), jnp.asarray(valid))), got,
                               atol=1e-6)
    for row, n in enumerate(lengths):
        alone = x[row][valid[row]][None]
        want = np.asarray(run_encoder(encoder, jnp.asarray(alone), jnp.ones((1, n), bool)))[0]
        np.testing.assert_allclose(got[row], want, atol=1e-5, rtol=1e-5)


# -- the classifier: Ordered Memory's heads ----------------------------------------------------------


def _elu(z):
    return np.where(z > 0, z, np.expm1(np.minimum(z, 0)))


def test_a_baseline_classifier_uses_the_siamese_head_and_has_no_pointers():
    config = BaselineClassifierConfig(kind="pair", vocab_size=12, num_classes=7, pad_id=11, encoder="lstm",
                                      embedding_size=6, hidden_size=5, num_layers=1, mlp_hidden_size=4)
    model = BaselineClassifier(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(3)
    left, right = (rng.integers(0, 11, size=(3, 5)).astype(np.int32) for _ in range(2))
    left[1, 2:] = right[0, 3:] = 11
    logits, pointers = nnx.jit(lambda m, *a: m(*a))(model, (left, right), (left != 11, right != 11))
    assert pointers is None
    table = np.asarray(model.embedding[...])
    u, v = (np.asarray(run_encoder(model.encoder, jnp.asarray(table[ids]), ids != 11), np.float64)
            for ids in (left, right))
    features = np.concatenate([u, v, u * v, np.abs(u - v)], axis=1)
    hidden = _elu(features @ np.asarray(model.w_hidden[...]) + np.asarray(model.b_hidden[...]))
    want = hidden @ np.asarray(model.w_out[...]) + np.asarray(model.b_out[...])
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-4, atol=1e-5)


# -- sizes ------------------------------------------------------------------------------------------


_parameter_count_once = functools.cache(parameter_count)  # the module's counts, each config's once


@pytest.fixture
def counted_once(monkeypatch):
    """`parameter_count` (each call an abstract build of the model: ~0.1 s) remembered per config for the module,
    for `matched_hidden_size`'s search and the tests' own counts alike (Ordered Memory's count is every encoder's
    target)."""
    monkeypatch.setattr(sequence_encoders, "parameter_count", _parameter_count_once)
    return sequence_encoders.parameter_count


# The thesis-sized configs (ListOps' is the recipe's; there a width step moves the count the most against the 10%
# bound) in CI, a sequence and a pair classifier; the release-sized ones (longer searches) with -m slow.
@pytest.mark.parametrize("path", ["configs/om_listops.py:cpu,thesis",
                                  pytest.param("configs/om_listops.py", marks=pytest.mark.slow),
                                  "configs/om_logic.py:cpu_long,thesis",
                                  pytest.param("configs/om_logic.py", marks=pytest.mark.slow)])
@pytest.mark.parametrize("encoder", ["lstm", "transformer"])
def test_the_matched_width_is_the_closest_and_within_ten_percent(path, encoder, counted_once):
    om = om_model_config(load_config(path))
    target = counted_once(om)
    unit = 4 if encoder == "transformer" else 1
    width = matched_hidden_size(om, encoder)

    def gap(hidden: int) -> int:
        return abs(counted_once(baseline_config(om, encoder, hidden_size=hidden)) - target)

    assert gap(width) <= SIZE_TOLERANCE * target
    assert gap(width) <= gap(width - unit) and gap(width) <= gap(width + unit)


def test_describe_prints_the_baselines_count_beside_ordered_memorys(capsys):
    assert cli.main(["info", "--config", "configs/om_listops.py:cpu,thesis",
                     "--config.model.encoder=transformer"]) == 0
    out = capsys.readouterr().out
    om = parameter_count(om_model_config(load_config("configs/om_listops.py:cpu,thesis")))
    assert "transformer_listops: " in out and f"against {om:,} for the Ordered Memory of this config" in out
    assert "no parse F1" in out


# -- the default is Ordered Memory, unchanged --------------------------------------------------------


def test_the_default_is_ordered_memory_with_its_pinned_size(tmp_path):
    for path, count in (("configs/om_listops.py", 448_523), ("configs/om_logic.py", 1_247_608)):
        config = load_config(path)
        assert config.model.encoder == "ordered_memory"
        assert isinstance(model_config(config), OMClassifierConfig)
        info = describe(config)
        assert info.num_parameters == count and not info.note
    # The pinned config (tests/train/test_loss_pins.py trains it to its pinned losses in CI) is Ordered Memory's.
    assert pinned_config("classification", tmp_path).model.encoder == "ordered_memory"


@pytest.mark.slow  # in CI: tests/train/test_loss_pins.py's classification case trains the same config, 12 steps
def test_the_default_trains_to_the_pinned_first_losses(tmp_path):
    config = pinned_config("classification", tmp_path)
    assert config.model.encoder == "ordered_memory"
    first = train(config, tmp_path / "run", quiet=True, stop_after_step=2).losses  # stopped: nothing validated
    pinned = json.loads(PINS.read_text())["classification"]
    np.testing.assert_allclose([first[1], first[2]], pinned[:2], rtol=1e-6)


# -- training through the trainer -----------------------------------------------------------------


STEPS = 20
SMALL = ["model.embedding_size=16", "model.slot_size=16", "model.mlp_hidden_size=16", "model.n_slots=4",
         "model.test_n_slots=4", "model.num_heads=2", "training.batch_size=16", "training.learning_rate=0.005",
         f"training.num_steps={STEPS}", "evaluation.batch_size=32", f"evaluation.interval_steps={STEPS}",
         f"checkpointing.interval_steps={STEPS}", "logging.interval_steps=1", "logging.tensorboard=false"]


def small_config(dataset: str, encoder: str, data_dir, *extra: str):
    if dataset == "logic":
        return load_config("configs/om_logic.py", [*SMALL, f"model.encoder={encoder}",
                                                   f"data.logic_dir={data_dir}", *extra])
    # ListOps is not learnt in 20 steps: 32 trees without dropout, 10 epochs of them, are to be fitted.
    return load_config("configs/om_listops.py", [
        *SMALL, f"model.encoder={encoder}", "data.train_size=32", "data.valid_size=16", "data.max_train_tokens=20",
        "data.length_bucket=32", "data.test_path=", "model.embedding_dropout=0", "model.output_dropout=0",
        "model.attention_dropout=0", "model.cell_dropout=0", "training.learning_rate=0.01", *extra])


@pytest.fixture(scope="module")
def toy_logic(tmp_path_factory):
    return write_toy_logic(tmp_path_factory.mktemp("toy_logic"))


@pytest.fixture(scope="module")
def lstm_logic_run(tmp_path_factory, toy_logic):
    workdir = tmp_path_factory.mktemp("lstm_logic")
    return train(small_config("logic", "lstm", toy_logic), workdir, quiet=True)


def _assert_learns(result):
    losses = result.losses
    assert sorted(losses) == list(range(1, STEPS + 1))
    early, late = np.mean([losses[s] for s in range(1, 6)]), np.mean([losses[s] for s in range(STEPS - 4, STEPS + 1)])
    assert late < 0.8 * early, (early, late)


def test_lstm_learns_logic(lstm_logic_run):
    _assert_learns(lstm_logic_run)


# With lstm_logic_run (test_lstm_learns_logic), each encoder learns and each kind (pairs, sequences) is learnt in CI;
# the other two pairs with -m slow.
@pytest.mark.parametrize("dataset, encoder", [pytest.param("logic", "transformer", marks=pytest.mark.slow),
                                              pytest.param("listops", "lstm", marks=pytest.mark.slow),
                                              ("listops", "transformer")])
def test_twenty_steps_lower_the_loss(tmp_path, toy_logic, dataset, encoder):
    # Stopped after its 20 steps (of 21, validated at 21): the losses alone are read, so nothing is validated or
    # tested.
    config = small_config(dataset, encoder, toy_logic, f"training.num_steps={STEPS + 1}",
                          f"evaluation.interval_steps={STEPS + 1}")
    _assert_learns(train(config, tmp_path, quiet=True, stop_after_step=STEPS))


# -- checkpoints, scoring and `tgjax eval` ------------------------------------------------------------


def test_a_baseline_run_reports_accuracy_and_no_parse_f1(lstm_logic_run, toy_logic):
    report = json.loads((lstm_logic_run.workdir / "test_results.json").read_text())
    assert report["encoder"] == "lstm" and "no parse F1" in report["note"]
    assert report["test"]["ops7"]["count"] == 2 and "parse_f1" not in report["test"]["ops7"]
    # A stopped run is scored the same way, by the config of its own encoder.
    lines = evaluate_best_checkpoint(small_config("logic", "lstm", toy_logic), lstm_logic_run.workdir,
                                     say=lambda text: None)
    assert "ops7: accuracy" in lines and "parse F1" not in lines


@pytest.mark.parametrize("encoder", ["ordered_memory", "transformer"])
def test_a_checkpoint_of_one_encoder_is_refused_by_another_in_one_line(lstm_logic_run, toy_logic, encoder, capsys):
    config = small_config("logic", encoder, toy_logic)
    with pytest.raises(ConfigError, match=f"holds a model.encoder=lstm classifier, the config asks for "
                                          f"model.encoder={encoder}"):
        evaluate_best_checkpoint(config, lstm_logic_run.workdir, say=lambda text: None)
    code = cli.main(["train", "--config", "configs/om_logic.py", "--workdir", str(lstm_logic_run.workdir),
                     *(f"--config.{o}" for o in small_config_overrides(encoder, toy_logic))])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--config.model.encoder=lstm" in err


def small_config_overrides(encoder: str, logic_dir) -> list[str]:
    return [*SMALL, f"model.encoder={encoder}", f"data.logic_dir={logic_dir}", f"training.num_steps={STEPS + 5}"]


def test_tgjax_eval_refuses_a_baseline_run_in_one_line(lstm_logic_run, capsys):
    assert cli.main(["eval", "parse", "--workdir", str(lstm_logic_run.workdir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lstm baseline" in err and "tgjax viz curves" in err


# -- the om-listops recipe ------------------------------------------------------------------------------


def test_the_recipe_trains_three_seeds_of_each_encoder_on_one_config():
    full = om_listops.RECIPE.runs(False)
    groups = {spec.group: [s for s in full if s.group == spec.group] for spec in full}
    assert sorted(groups) == ["", "lstm", "transformer"] and all(len(specs) == 3 for specs in groups.values())
    for spec in full:
        assert spec.config == om_listops.CONFIG
        encoder = [o for o in spec.overrides if o.startswith("model.encoder=")]
        assert spec.role == ("model" if not spec.group else "baseline")
        assert encoder == ([] if spec.role == "model" else [f"model.encoder={spec.group}"])
        steps = [o for o in spec.overrides if o.startswith("training.num_steps")]
        assert steps == []  # the config's 1,500 steps for every run
    tiny = om_listops.RECIPE.runs(True)
    assert len(tiny) == 3 and all(set(om_listops.TINY) <= set(spec.overrides) for spec in tiny)


def _scored(spec, accuracy: float, majority: float | None = None):
    scores = {"accuracy": accuracy, **({"majority": majority} if majority is not None else {})}
    return spec, RunProgress(step=1500, num_steps=1500, finished=True, train_seconds=900.0), scores


def test_the_comparison_judges_ordered_memory_against_the_best_baseline_and_reports_the_majority():
    specs = om_listops.RECIPE.runs(False)
    numbers = {"": [60.0, 61.0, 59.0], "lstm": [50.0, 51.0, 49.0], "transformer": [57.0, 58.0, 56.0]}
    scored = [_scored(spec, numbers[spec.group][i % 3], 11.41 if spec.role == "model" else None)
              for i, spec in enumerate(specs)]
    summary = summarise(om_listops.RECIPE, scored)
    assert summary["baseline_name"] == "transformer"
    assert summary["baseline"]["mean"] == pytest.approx(57.0) and summary["model"]["mean"] == pytest.approx(60.0)
    assert summary["baselines"]["lstm"]["mean"] == pytest.approx(50.0)
    assert summary["verdict"] == "in direction" and "the best of 2 baselines: transformer" in summary["why"]
    assert summary["reference"]["mean"] == pytest.approx(11.41) and summary["reference_label"] == "majority class"
    # A baseline ahead of Ordered Memory by more than the spread contradicts the claim.
    numbers["lstm"] = [70.0, 71.0, 69.0]
    scored = [_scored(spec, numbers[spec.group][i % 3]) for i, spec in enumerate(specs)]
    assert summarise(om_listops.RECIPE, scored)["verdict"] == "contradicted"

