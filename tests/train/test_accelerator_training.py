"""The accelerator knobs through the trainer: a scanned bf16 run checkpoints, resumes and loads for inference."""

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tgjax
from tgjax.models import transformer_lm as tlm
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train

from ..models.test_accelerator_knobs import batch_for
from .helpers import small_config

KNOBS = ("model.scan_layers=true", "model.remat=true", "model.dtype=bfloat16")


@pytest.fixture(scope="module")
def scanned_bf16_run(tmp_path_factory):
    """(result, the parameters after the last step) of a 4-step run with KNOBS, checkpointed and validated at 4."""
    final = {}
    config = small_config("training.num_steps=4", "checkpointing.interval_steps=4", "evaluation.interval_steps=4",
                          *KNOBS)
    result = train(config, tmp_path_factory.mktemp("scanned_bf16"), quiet=True,
                   callback=lambda step, state, metrics: final.update(params=jax.device_get(state.params)))
    return result, final


def test_scanned_bf16_checkpoint_loads_unstacked_and_scores_as_the_scanned_model(scanned_bf16_run):
    result, final = scanned_bf16_run
    assert np.isfinite(list(result.losses.values())).all() and np.isfinite(result.valid_losses[4])
    assert final["params"]["layers"]["feed_forward"]["w_in"].shape[0] == 2  # stacked [K, ...]
    assert final["params"]["layers"]["feed_forward"]["w_in"].dtype == np.float32  # fp32 parameters under bf16

    loaded = tgjax.load(result.workdir, step="latest").restore()
    assert not loaded.model_config.scan_layers and loaded.model_config.dtype == "float32"
    assert len(loaded.model.layers) == 2

    # The oracle: the scanned model of the run's config holding the trained (stacked) parameters, in float32.
    # (Built and run under nnx.jit, as the loaded model is run: one program each, not an eager op at a time.)
    scanned_config = tlm.dataclasses.replace(loaded.model_config, scan_layers=True)
    scanned = nnx.jit(lambda: tlm.TransformerLM(scanned_config, rngs=nnx.Rngs(params=0, dropout=0)))()
    params = nnx.state(scanned, nnx.Param)
    nnx.replace_by_pure_dict(params, final["params"])
    nnx.update(scanned, params)
    batch = batch_for("tg", scanned.config)
    memory = scanned.init_memory(batch["inputs"].shape[0])
    forward = nnx.jit(lambda model, batch, memory: model(batch, memory)[0])
    expected = forward(scanned, batch, memory)
    got = forward(loaded.model, batch, memory)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), atol=1e-5)
    assert float(jnp.abs(expected).max()) > 0


def test_resume_may_change_dtype_and_remat_but_not_the_layer_layout(tmp_path, scanned_bf16_run):
    # A copy of the scanned bf16 run with remat (checkpoint 4), resumed in float32 without remat.
    workdir = Path(shutil.copytree(scanned_bf16_run[0].workdir, tmp_path / "run"))
    # dtype and remat change no array: the run resumes.
    resumed = train(small_config("training.num_steps=5", "checkpointing.interval_steps=4",
                                 "evaluation.interval_steps=0", "model.scan_layers=true", "model.remat=none",
                                 "model.dtype=float32"), workdir, quiet=True)
    assert resumed.start_step == 4 and resumed.final_step == 5
    # scan_layers changes the parameters' layout: refused, naming the key.
    with pytest.raises(ConfigError, match=r"model.scan_layers: True in the checkpoint, False now"):
        train(small_config("training.num_steps=6", "evaluation.interval_steps=0"), workdir, quiet=True)


@pytest.mark.parametrize("config, family, knob", [("onlstm_tiny", "onlstm_lm", "scan_layers=true"),
                                                  ("onlstm_tiny", "onlstm_lm", "remat=true"),
                                                  ("pushdown_tiny", "pushdown_lm", "dtype=bfloat16")])
def test_knobs_on_a_family_without_them_name_the_family(config, family, knob):
    with pytest.raises(ConfigError, match=rf"model.{knob.split('=')[0]}': the '{family}' family .* does not "
                                          rf"support it yet"):
        load_config(f"configs/{config}.py", [f"model.{knob}"])
    if config == "pushdown_tiny":  # it has the other two
        load_config(f"configs/{config}.py", ["model.scan_layers=true", "model.remat=true"])


def test_unknown_dtype_is_a_config_error():
    from tgjax.train.tasks.treebank_lm import validate_config

    with pytest.raises(ConfigError, match=r"model.dtype='float64': expected one of float32, bfloat16, float16"):
        validate_config(small_config("model.dtype=float64"))
