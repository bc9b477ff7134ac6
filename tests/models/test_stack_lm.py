"""The CFL set-up of the stack-attention language models against the paper and the authors' release.

What configs/stack_cfl.py builds (through the trainer's own resolve_model_config
and the CFL vocabulary of tgjax.data.cfl) has Table 5's parameter counts; the
softmax covers EOS and the symbols only; PAD embeds as zero; the two
initialisation schemes draw what their documentation says.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tgjax.data.cfl import cfl_task
from tgjax.data.vocab import BOS_ID, EOS_ID, PAD_ID
from tgjax.models import count_parameters
from tgjax.models.stack_lm import (
    CFL_SPECIAL_IDS,
    EXCLUDED_LOGIT,
    StackLMConfig,
    StackTransformerLM,
    sinusoidal_positions,
    stack_cfl_config,
)
from tgjax.train.cfl import resolve_model_config
from tgjax.train.config import load_config

# Table 5 (DuSell & Chiang 2024), Hardest CFL row.
TABLE_5_HARDEST_CFL = {"tf": 43_304, "tf_sup": 41_224, "tf_nd": 36_861}


def _count(model_cfg: StackLMConfig) -> int:
    return count_parameters(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("model", sorted(TABLE_5_HARDEST_CFL))
def test_config_file_builds_table_5_parameter_counts(model):
    config = load_config("configs/stack_cfl.py", ["task=hardest_cfl", f"model={model}"])
    task = cfl_task("hardest_cfl")
    model_cfg = resolve_model_config(config, task.vocabulary.size)
    assert _count(model_cfg) == TABLE_5_HARDEST_CFL[model]
    # The whole id space in and out (tgjax's earlier default): 2 more embedding rows and 2 more classes.
    whole = stack_cfl_config("hardest_cfl", model.replace("_", "+"), task.vocabulary.size,
                             input_ids=None, output_ids=None)
    assert _count(whole) == TABLE_5_HARDEST_CFL[model] + 2 * model_cfg.d_model + 2 * (model_cfg.d_model + 1)


def test_special_ids_agree_with_the_cfl_vocabulary():
    assert CFL_SPECIAL_IDS == {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID}
    vocab = cfl_task("dyck").vocabulary
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (PAD_ID, BOS_ID, EOS_ID)
    symbols = [vocab.id_of(s) for s in vocab.symbols]
    assert symbols == list(range(max(PAD_ID, BOS_ID, EOS_ID) + 1, vocab.size))  # symbols after the specials
    cfg = stack_cfl_config("dyck", "tf", vocab.size)
    assert cfg.input_ids == (BOS_ID, *symbols) and cfg.output_ids == (EOS_ID, *symbols)


@pytest.fixture(scope="module")
def small_model():
    cfg = stack_cfl_config("dyck", "tf", cfl_task("dyck").vocabulary.size, num_layers=2)
    # eager, not jitted: the models built later share its parameter shapes, so its small programs are reused
    model = StackTransformerLM(cfg, rngs=nnx.Rngs(params=3, dropout=0))
    model.eval()
    return model


# The model's pieces run jitted: one compiled program per shape, not each operation compiled on its own.
_logits = nnx.jit(lambda model, tokens: model(tokens))
_positions = jax.jit(sinusoidal_positions, static_argnums=(0, 1))


@nnx.jit
def _layers_from_embedding(model, x):
    """The layers, the final layer norm and the output layer over the embedded input x [B, T, d]: (the last
    layer's output, the final layer norm's output, the output layer's logits)."""
    for layer in model.layers:
        x = layer(x)
    normed = model.final_norm(x)
    return x, normed, model.output(normed)


def test_softmax_covers_eos_and_symbols_only(small_model):
    cfg = small_model.config
    tokens = jnp.array([[BOS_ID, 3, 4, 5, 6, 3]])
    logits = np.asarray(_logits(small_model, tokens), np.float64)
    assert logits.shape == (1, 6, cfg.input_vocab_size)
    # By hand: the output layer's |Σ| + 1 logits, from the final layer norm's output.
    hidden = _hidden(small_model, tokens)
    kernel = np.asarray(small_model.output.kernel[...], np.float64)
    bias = np.asarray(small_model.output.bias[...], np.float64)
    assert kernel.shape[1] == len(cfg.output_ids) == cfg.input_vocab_size - 2
    own = np.asarray(hidden, np.float64) @ kernel + bias
    np.testing.assert_allclose(logits[..., list(cfg.output_ids)], own, rtol=1e-5, atol=1e-5)
    assert np.all(logits[..., [PAD_ID, BOS_ID]] == EXCLUDED_LOGIT)
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1))
    assert np.all(probs[..., [PAD_ID, BOS_ID]] == 0.0)  # exactly, in float32
    np.testing.assert_allclose(probs[..., list(cfg.output_ids)].sum(-1), 1.0, rtol=1e-6)
    want = own - np.log(np.exp(own).sum(-1, keepdims=True))  # log-softmax over the |Σ| + 1 classes
    log_probs = np.asarray(jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1))
    np.testing.assert_allclose(log_probs[..., list(cfg.output_ids)], want, atol=1e-5)


def _hidden(model, tokens):
    """The final layer norm's output, recomputed from the model's parts (embedding rows by hand, in NumPy)."""
    cfg = model.config
    rows = np.asarray([cfg.input_ids.index(int(t)) for t in np.asarray(tokens).ravel()]).reshape(tokens.shape)
    x = (np.asarray(model.embedding.embedding[...])[rows] * np.sqrt(cfg.d_model)
         + np.asarray(_positions(tokens.shape[1], cfg.d_model))[None])
    return _layers_from_embedding(model, jnp.asarray(x, jnp.float32))[1]


def test_pad_embeds_as_zero_and_only_bos_and_symbols_have_rows(small_model):
    assert small_model.embedding.embedding[...].shape[0] == small_model.config.input_vocab_size - 2
    base = jnp.array([[BOS_ID, 3, 4, PAD_ID]])
    as_eos = base.at[0, 3].set(EOS_ID)  # another id without a row: the same zero vector
    as_symbol = base.at[0, 3].set(5)
    out = [np.asarray(_logits(small_model, t)) for t in (base, as_eos, as_symbol)]
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0][:, :3], out[2][:, :3])  # causal: earlier positions unchanged
    assert not np.allclose(out[0][:, 3], out[2][:, 3])
    # Zero embedding: the PAD position's input is the positional encoding alone.
    cfg = small_model.config
    rows = np.asarray([[0, cfg.input_ids.index(3), cfg.input_ids.index(4), 0]])
    x = np.asarray(small_model.embedding.embedding[...])[rows] * np.sqrt(cfg.d_model)  # the rows by hand, in NumPy
    x[0, 3] = 0.0
    x = x + np.asarray(_positions(4, cfg.d_model))[None]
    want = _layers_from_embedding(small_model, jnp.asarray(x, jnp.float32))[2]
    np.testing.assert_allclose(out[0][..., list(cfg.output_ids)], want, rtol=1e-5, atol=1e-5)


def _params(model):
    return {".".join(map(str, path)): np.asarray(v[...]) for path, v in nnx.iter_graph(model)
            if isinstance(v, nnx.Param)}


@pytest.mark.parametrize("model_name", ["tf+sup", "tf+nd"])
def test_released_initialisation(model_name):
    cfg = stack_cfl_config("dyck", model_name, cfl_task("dyck").vocabulary.size)
    assert cfg.init == "released" and cfg.pushed_vectors == "released"  # the defaults
    params = _params(StackTransformerLM(cfg, rngs=nnx.Rngs(params=1, dropout=0)))
    stack_layer = f"layers.{cfg.resolved_stack_layer}."
    sdpa = {k: v for k, v in params.items() if k.startswith("layers.") and not k.startswith(stack_layer)
            and ("attention.function.attention" in k or "feedforward.function" in k)}
    assert len(sdpa) == 4 * 12  # 4 SDPA layers: q, k, v, out and 2 feedforward maps, kernel + bias each
    for name, value in sdpa.items():  # U[-0.1, 0.1], weights and biases alike
        assert np.abs(value).max() <= 0.1 and np.abs(value).max() > 0.05 and value.std() > 0.04, name
    ff = {k: v for k, v in params.items() if k.startswith(stack_layer + "feedforward.function")}
    assert sorted(k.rsplit(".", 1)[1] for k in ff) == ["bias", "bias", "kernel", "kernel"]
    for name, value in ff.items():
        if name.endswith("bias"):
            assert np.all(value == 0.0), name  # the release's own layers: bias 0
        else:  # Xavier: bound sqrt(6 / (fan_in + fan_out)), well above 0.1 here
            bound = np.sqrt(6.0 / sum(value.shape))
            assert np.abs(value).max() <= bound and np.abs(value).max() > 0.9 * bound > 0.2, name
    assert np.all(params["output.bias"] == 0.0)
    assert np.abs(params["output.kernel"]).max() > 0.2  # Xavier, not U[-0.1, 0.1]
    assert 0.09 < np.abs(params["embedding.embedding"]).max() <= 0.1
    for name, value in params.items():  # layer norms: scale 1, bias 0
        if "norm.scale" in name:
            assert np.all(value == 1.0), name
        elif "norm.bias" in name:
            assert np.all(value == 0.0), name


def test_xavier_initialisation_switch():
    cfg = stack_cfl_config("dyck", "tf", cfl_task("dyck").vocabulary.size, init="xavier")
    params = _params(StackTransformerLM(cfg, rngs=nnx.Rngs(params=1, dropout=0)))
    query = params["layers.0.attention.function.attention.query.kernel"]
    assert np.abs(query).max() > 0.2  # Xavier over (d, heads * head size): bound ~0.31
    assert np.all(params["layers.0.attention.function.attention.query.bias"] == 0.0)
    ff_bias = params["layers.0.feedforward.function.hidden.bias"]
    assert 0.05 < np.abs(ff_bias).max() <= 0.1
    assert 0.05 < np.abs(params["output.bias"]).max() <= 0.1
    with pytest.raises(ValueError, match="init must be"):
        StackLMConfig(input_vocab_size=5, init="normal")


def test_id_lists_are_checked():
    with pytest.raises(ValueError, match="output_ids must be distinct ids in 0..4"):
        StackLMConfig(input_vocab_size=5, output_ids=(2, 5))
    with pytest.raises(ValueError, match="input_ids must be distinct"):
        StackLMConfig(input_vocab_size=5, input_ids=(1, 1))
    with pytest.raises(ValueError, match="at least one symbol"):
        stack_cfl_config("dyck", "tf", 3)
    assert StackLMConfig(input_vocab_size=5, output_ids=[np.int64(2), 3]).output_ids == (2, 3)


def test_nd_num_blocks_changes_no_logit_and_is_checked(monkeypatch):
    """Tf+Nd with the dVPDA scan in 1 static block equals the kernel's default (3 blocks at n = 24)."""
    import tgjax.ops.nondeterministic as nd

    seen = []  # the block counts the kernel's scan was cut into
    monkeypatch.setattr(nd, "_blocks", lambda T, k, f=nd._blocks: seen.append(k) or f(T, k))
    vocab = cfl_task("dyck").vocabulary.size
    n = 24
    symbols = np.random.default_rng(0).integers(BOS_ID + 2, vocab, (2, n - 1))  # ids past PAD, BOS, EOS
    tokens = jnp.asarray(np.concatenate([np.full((2, 1), BOS_ID), symbols], axis=1))
    logits = {}
    for blocks in (None, 1):
        cfg = stack_cfl_config("dyck", "tf+nd", vocab, num_layers=1, nd_num_blocks=blocks)
        model = StackTransformerLM(cfg, rngs=nnx.Rngs(params=5, dropout=0))
        model.eval()
        logits[blocks] = np.asarray(nnx.jit(lambda model: model(tokens))(model))  # one program, not op by op
    assert set(seen) == {nd.default_num_blocks(n), 1} and nd.default_num_blocks(n) > 1, seen
    np.testing.assert_allclose(logits[1], logits[None], rtol=1e-5, atol=1e-5)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="nd_num_blocks"):
            stack_cfl_config("dyck", "tf+nd", vocab, nd_num_blocks=bad)
