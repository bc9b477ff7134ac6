"""tgjax.models.onlstm_lm: the ON-LSTM LM against a NumPy oracle, its regularisers against direct formulas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.ops.onlstm_oracle import onlstm_oracle
from tgjax.models.onlstm_lm import (
    OnLSTMLM,
    OnLSTMLMConfig,
    activation_penalties,
    embedding_dropout_mask,
    locked_dropout_mask,
    syntactic_distances,
    weight_drop,
)

V, E, H, L, C = 13, 8, 12, 3, 4


def small_config(**dropouts) -> OnLSTMLMConfig:
    rates = dict(dropout=0.0, dropout_hidden=0.0, dropout_input=0.0, dropout_embedding=0.0, weight_drop=0.0)
    rates.update(dropouts)
    return OnLSTMLMConfig(vocab_size=V, embedding_size=E, hidden_size=H, num_layers=L, chunk_size=C, **rates)


def release_state_dict(rng) -> dict[str, np.ndarray]:
    """Random tensors named and shaped as the release's model.pt ([out, in] weights, tied decoder)."""
    sd = {"encoder.weight": rng.uniform(-0.1, 0.1, (V, E)).astype(np.float32),
          "decoder.bias": rng.normal(size=V).astype(np.float32) * 0.1}
    sd["decoder.weight"] = sd["encoder.weight"]
    for layer, (d_in, d_out) in enumerate(zip([E, H, H], [H, H, E])):
        G = 2 * (d_out // C) + 4 * d_out
        prefix = f"rnn.cells.{layer}."
        sd[prefix + "ih.0.weight"] = rng.normal(size=(G, d_in)).astype(np.float32) * 0.4
        sd[prefix + "ih.0.bias"] = rng.normal(size=G).astype(np.float32) * 0.4
        sd[prefix + "hh.weight"] = rng.normal(size=(G, d_out)).astype(np.float32) * 0.4
        sd[prefix + "hh.bias"] = rng.normal(size=G).astype(np.float32) * 0.4
    return sd


def oracle_lm(sd, tokens, *, hh_scale=(1.0, 1.0, 1.0), masks=None):
    """The release's forward in NumPy float64 from its own tensors.

    `hh_scale[l]`: a scalar or a [G, H] array multiplying layer l's hh.weight
    (eval: 1 - wdrop; train: the DropConnect mask). `masks` (train): dict with
    "embedding" [V, 1], "input" [B, 1, E], "hidden" (a list of [B, 1, H] for
    layers 0..L-2), "output" [B, 1, E], each already scaled.
    Returns (logits [B, T, V], raw outputs per layer, master forget per layer).
    """
    masks = masks or {}
    encoder = np.asarray(sd["encoder.weight"], np.float64)
    lookup = encoder * masks.get("embedding", 1.0)
    x = lookup[np.asarray(tokens)] * masks.get("input", 1.0)
    B = x.shape[0]
    raw, forgets = [], []
    for layer in range(L):
        prefix = f"rnn.cells.{layer}."
        d_out = sd[prefix + "hh.weight"].shape[1]
        zeros = np.zeros((B, d_out))
        hs, _, _, mf, _ = onlstm_oracle(x, zeros, zeros, sd[prefix + "ih.0.weight"], sd[prefix + "ih.0.bias"],
                                        np.asarray(sd[prefix + "hh.weight"], np.float64) * hh_scale[layer],
                                        sd[prefix + "hh.bias"], C)
        raw.append(hs)
        forgets.append(mf)
        x = hs * (masks["hidden"][layer] if "hidden" in masks and layer < L - 1 else 1.0)
    x = x * masks.get("output", 1.0)
    return x @ encoder.T + sd["decoder.bias"], raw, forgets


@pytest.fixture(scope="module")
def released():
    rng = np.random.default_rng(3)
    sd = release_state_dict(rng)
    tokens = rng.integers(0, V, (2, 7))
    return sd, tokens


def test_released_checkpoint_loads_and_eval_forward_matches_the_oracle(released):
    sd, tokens = released
    wdrop = 0.45
    model = OnLSTMLM(small_config(weight_drop=wdrop, dropout=0.4, dropout_hidden=0.3, dropout_input=0.5,
                                  dropout_embedding=0.1), rngs=nnx.Rngs(0))
    model.load_released(sd)
    logits, state, aux = model(jnp.asarray(tokens), deterministic=True)
    # Evaluation: no dropout anywhere; W_hh scaled by 1 - wdrop (LinearDropConnect's eval branch).
    want_logits, want_raw, want_forget = oracle_lm(sd, tokens, hh_scale=(1 - wdrop,) * L)
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-4, atol=2e-5)
    for layer in range(L):
        np.testing.assert_allclose(np.asarray(aux["raw_outputs"][layer]), want_raw[layer], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(aux["master_forget"][layer]), want_forget[layer], rtol=1e-4,
                                   atol=1e-5)
        np.testing.assert_allclose(np.asarray(state[layer][0]), want_raw[layer][:, -1], rtol=1e-4, atol=1e-5)
    assert [f.shape for f in aux["master_forget"]] == [(2, 7, H // C), (2, 7, H // C), (2, 7, E // C)]
    np.testing.assert_allclose(np.asarray(syntactic_distances(aux["master_forget"][1])),
                               1 - want_forget[1].mean(-1), rtol=1e-4, atol=1e-5)


def test_load_released_refuses_untied_decoder_and_wrong_shapes(released):
    sd, _ = released
    model = OnLSTMLM(small_config(), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="decoder.weight differs"):
        model.load_released({**sd, "decoder.weight": sd["encoder.weight"] + 1})
    with pytest.raises(ValueError, match=r"encoder.weight: the checkpoint has shape \(13, 9\)"):
        model.load_released({**sd, "encoder.weight": np.zeros((V, 9), np.float32), "decoder.weight":
                             np.zeros((V, 9), np.float32)})
    with pytest.raises(KeyError, match="rnn.cells.2.hh.weight"):
        model.load_released({k: v for k, v in sd.items() if k != "rnn.cells.2.hh.weight"})


def test_train_forward_applies_every_dropout_as_the_release(released):
    """All five regularisers on, masks drawn from the documented key order, against the oracle."""
    sd, tokens = released
    rates = dict(dropout=0.4, dropout_hidden=0.3, dropout_input=0.5, dropout_embedding=0.2, weight_drop=0.45)
    model = OnLSTMLM(small_config(**rates), rngs=nnx.Rngs(0))
    model.load_released(sd)
    key = jax.random.key(7)
    logits, _, aux = model(jnp.asarray(tokens), deterministic=False, key=key)

    keys = jax.random.split(key, 2 * L + 3)
    B = tokens.shape[0]
    drop_connect = [np.asarray(jax.random.bernoulli(keys[2 + 2 * layer], 1 - rates["weight_drop"],
                                                    (sd[f"rnn.cells.{layer}.hh.weight"].shape[::-1])))
                    for layer in range(L)]
    masks = {
        "embedding": np.asarray(embedding_dropout_mask(keys[0], V, rates["dropout_embedding"])),
        "input": np.asarray(locked_dropout_mask(keys[1], B, E, rates["dropout_input"])),
        "hidden": [np.asarray(locked_dropout_mask(keys[3 + 2 * layer], B, H, rates["dropout_hidden"]))
                   for layer in range(L - 1)],
        "output": np.asarray(locked_dropout_mask(keys[2 * L + 1], B, E, rates["dropout"])),
    }
    # Our W_hh is [H, G]; the release's mask is on hh.weight [G, H]: transpose.
    want_logits, want_raw, _ = oracle_lm(sd, tokens, hh_scale=[m.T for m in drop_connect], masks=masks)
    np.testing.assert_allclose(np.asarray(logits), want_logits, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(np.asarray(aux["raw_outputs"][-1]), want_raw[-1], rtol=1e-4, atol=1e-5)
    # The dropouts did something: the train logits are not the eval ones.
    eval_logits, _, _ = model(jnp.asarray(tokens), deterministic=True)
    assert np.abs(np.asarray(eval_logits) - np.asarray(logits)).max() > 1e-2


def test_weight_drop_train_zeroes_without_rescale_and_eval_scales():
    w = jnp.arange(1.0, 7.0).reshape(2, 3)
    key = jax.random.key(0)
    dropped = np.asarray(weight_drop(w, 0.5, key=key, deterministic=False))
    keep = np.asarray(jax.random.bernoulli(key, 0.5, (2, 3)))
    np.testing.assert_array_equal(dropped, np.where(keep, np.asarray(w), 0.0))  # kept entries unscaled
    np.testing.assert_allclose(np.asarray(weight_drop(w, 0.5, deterministic=True)), np.asarray(w) * 0.5)
    np.testing.assert_array_equal(np.asarray(weight_drop(w, 0.0, deterministic=False)), np.asarray(w))


def test_locked_dropout_mask_is_shared_over_time_and_embedding_dropout_drops_whole_rows():
    mask = np.asarray(locked_dropout_mask(jax.random.key(1), 64, 32, 0.25))
    assert mask.shape == (64, 1, 32)
    assert set(np.unique(mask)) == {0.0, np.float32(1 / 0.75)}
    assert 0.2 < (mask == 0).mean() < 0.3
    rows = np.asarray(embedding_dropout_mask(jax.random.key(2), 4000, 0.1))
    assert rows.shape == (4000, 1) and set(np.unique(rows)) == {0.0, np.float32(1 / 0.9)}
    assert 0.08 < (rows == 0).mean() < 0.12


def test_activation_penalties_match_direct_formulas():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(3, 6, 5))
    ar, tar = activation_penalties(jnp.asarray(h))
    np.testing.assert_allclose(float(ar), (h**2).mean(), rtol=1e-6)
    np.testing.assert_allclose(float(tar), ((h[:, 1:] - h[:, :-1]) ** 2).mean(), rtol=1e-6)
    # Padding at the end of rows: only real steps, and only pairs of real steps.
    lengths = [6, 4, 2]
    mask = np.array([[1.0] * n + [0.0] * (6 - n) for n in lengths])
    ar_m, tar_m = activation_penalties(jnp.asarray(h), jnp.asarray(mask))
    squares = [h[b, t] ** 2 for b in range(3) for t in range(lengths[b])]
    steps = [(h[b, t] - h[b, t - 1]) ** 2 for b in range(3) for t in range(1, lengths[b])]
    np.testing.assert_allclose(float(ar_m), np.mean(squares), rtol=1e-6)
    np.testing.assert_allclose(float(tar_m), np.mean(steps), rtol=1e-6)


def test_padding_at_the_end_keeps_the_state_of_the_last_real_step():
    model = OnLSTMLM(small_config(), rngs=nnx.Rngs(1))
    # One compiled program per shape (op by op, every op of every shape compiles anew).
    forward = nnx.jit(lambda model, tokens, state=None, mask=None: model(tokens, state, mask=mask)[:2])
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, V, (2, 9))
    lengths = [9, 5]
    mask = np.array([[1] * n + [0] * (9 - n) for n in lengths])
    logits, state = forward(model, jnp.asarray(tokens), mask=jnp.asarray(mask))
    # Each row unpadded: the first 5 tokens (row 1's), then the rest from the carried state (row 0's 9).
    first, mid_state = forward(model, jnp.asarray(tokens[:, :5]))
    second, _ = forward(model, jnp.asarray(tokens[:, 5:]), mid_state)
    whole, whole_state = forward(model, jnp.asarray(tokens))
    for row, (row_logits, row_state) in enumerate([(whole, whole_state), (first, mid_state)]):
        n = lengths[row]
        np.testing.assert_allclose(np.asarray(logits[row, :n]), np.asarray(row_logits[row]), rtol=1e-5, atol=1e-6)
        for layer in range(L):
            for part in range(2):  # h and c
                np.testing.assert_allclose(np.asarray(state[layer][part][row]),
                                           np.asarray(row_state[layer][part][row]), rtol=1e-5, atol=1e-6)
    # A carried state continues the sequence: two halves equal the whole.
    np.testing.assert_allclose(np.asarray(jnp.concatenate([first, second], 1)), np.asarray(whole), rtol=1e-5,
                               atol=1e-6)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="chunk_size 5 does not divide the hidden size 12"):
        OnLSTMLMConfig(vocab_size=V, embedding_size=10, hidden_size=12, chunk_size=5)
    with pytest.raises(ValueError, match=r"OnLSTMLMConfig.weight_drop must be in \[0, 1\)"):
        OnLSTMLMConfig(vocab_size=V, weight_drop=1.0)
    with pytest.raises(ValueError, match="needs a dropout key"):
        OnLSTMLM(small_config(), rngs=nnx.Rngs(0))(jnp.zeros((1, 2), jnp.int32), deterministic=False)


def test_paper_sizes():
    config = OnLSTMLMConfig(vocab_size=10000)
    assert config.layer_inputs() == [400, 1150, 1150] and config.layer_sizes() == [1150, 1150, 400]
    model = nnx.eval_shape(lambda: OnLSTMLM(config, rngs=nnx.Rngs(0)))
    count = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    # The thesis: 25M parameters (1M more than AWD-LSTM's 24M).
    assert 24.5e6 < count < 26e6, count
