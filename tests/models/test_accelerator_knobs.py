"""The TG / TXL accelerator knobs: remat and scan change no value; bf16 stays close; partition metadata.

Oracle: the default model (float32, layers in a list, no remat) with the same
parameters. Scanned models hold the same numbers stacked `[K, ...]`
(`stack_layer_params`), and their gradients are compared after unstacking.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from tgjax.models import build_model, model_config, sequence_loss
from tgjax.models import transformer_lm as tlm
from tgjax.models.parts import model_parts
from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES
from tgjax.train.sharding import logical_to_spec, make_mesh
from tgjax.train.tasks.treebank_lm.state import state_shardings

from .test_transformer_lm import SMALL, as_batch, forward, random_sequence, rule_for

VOCAB = 30


def batch_for(name, config, seed=0, rows=3):
    rng = np.random.default_rng(seed)
    compact, _ = rule_for(name, config).compact_chunks_many([random_sequence(rng, 5, VOCAB) for _ in range(rows)])
    return as_batch(compact)


def with_params_of(source: tlm.TransformerLM, **switches) -> tlm.TransformerLM:
    """A model of `source`'s config with `switches`, holding `source`'s parameters (stacked if scanned)."""
    model = tlm.TransformerLM(dataclasses.replace(source.config, **switches), rngs=nnx.Rngs(params=9, dropout=9))
    pure = nnx.to_pure_dict(nnx.state(source, nnx.Param))
    if model.config.scan_layers:
        pure = jax.jit(tlm.stack_layer_params)(pure)  # one compiled program, not a stack per parameter shape
    params = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params, jax.tree.map(lambda a, v: jnp.asarray(a, v.dtype), pure,
                                                  nnx.to_pure_dict(params)))
    nnx.update(model, params)
    return model


@nnx.jit(static_argnames="deterministic")
def _value_and_grad(model, batch, memory, deterministic):
    """One compiled program per model config (op by op, every op of a new shape compiles anew)."""
    def loss_fn(model):
        logits, new_memory = model(batch, memory, deterministic=deterministic)
        total, events = sequence_loss(logits, batch)
        return total / events, new_memory

    return nnx.value_and_grad(loss_fn, has_aux=True)(model)


def loss_and_grads(model, batch, memory, *, deterministic=True):
    """Mean NLL, the next memory and the gradient as a list-layout pure dict."""
    (loss, new_memory), grads = _value_and_grad(model, batch, memory, deterministic)
    grads = jax.tree.map(np.asarray, nnx.to_pure_dict(grads))  # NumPy: unstacked and read without compiling
    if model.config.scan_layers:
        grads = tlm.unstack_layer_params(grads, model.config.num_layers)
    return loss, new_memory, grads


def assert_trees_close(a, b, atol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32),
                                                         atol=atol, rtol=atol), a, b)


REMAT, SCAN, BOTH = dict(remat=True), dict(scan_layers=True), dict(scan_layers=True, remat=True)


# The hybrids take the scanned path's per-layer / per-head mask selection; distinct_mha a second attention.
# Each switch alone, and TXL (CC), with -m slow: "tg" with both switches composed covers them in CI.
# SMALL's two layers (the layer hybrid: one TG layer under one unrestricted one): "tg"'s default model is the
# one the half-precision tests compile too.
@pytest.mark.parametrize("name, switches", [
    pytest.param("tg", REMAT, marks=pytest.mark.slow), pytest.param("tg", SCAN, marks=pytest.mark.slow),
    ("tg", BOTH), pytest.param("txl_cc", SCAN, marks=pytest.mark.slow), ("tg_layer_hybrid", BOTH),
    ("tg_head_hybrid", SCAN), ("tg_distinct_mha", SCAN),
], ids=lambda v: "+".join(v) if isinstance(v, dict) else v)
def test_remat_and_scan_give_the_default_loss_memory_and_gradients(name, switches):
    base = build_model(name, VOCAB, rngs=nnx.Rngs(0), sequence_length=8, memory_length=8, **SMALL)
    batch = batch_for(name, base.config)
    memory = jax.random.normal(jax.random.key(1), (SMALL["num_layers"], batch["inputs"].shape[0], 8,
                                                   SMALL["d_model"]))
    loss, new_memory, grads = loss_and_grads(base, batch, memory)
    loss2, new_memory2, grads2 = loss_and_grads(with_params_of(base, **switches), batch, memory)
    np.testing.assert_allclose(float(loss2), float(loss), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_memory2), np.asarray(new_memory), atol=1e-6)
    assert max(float(np.abs(g).max()) for g in jax.tree.leaves(grads)) > 1e-3
    assert_trees_close(grads2, grads, atol=1e-6)


def test_remat_keeps_the_dropout_masks():
    """With dropout on, the recomputed forward pass draws the masks of the first one (same loss and gradients)."""
    base = build_model("tg", VOCAB, rngs=nnx.Rngs(params=0, dropout=5), sequence_length=8, memory_length=8,
                       **{**SMALL, "core_dropout": 0.3, "embedding_dropout": 0.3})
    batch = batch_for("tg", base.config)
    memory = base.init_memory(batch["inputs"].shape[0])
    remat = with_params_of(base, remat=True)
    nnx.reseed(base, dropout=11)
    nnx.reseed(remat, dropout=11)
    loss, _, grads = loss_and_grads(base, batch, memory, deterministic=False)
    loss2, _, grads2 = loss_and_grads(remat, batch, memory, deterministic=False)
    nnx.reseed(base, dropout=12)
    other_masks, _, _ = loss_and_grads(base, batch, memory, deterministic=False)  # the same program, new masks
    assert abs(float(loss) - float(other_masks)) > 1e-3  # dropout really is on
    np.testing.assert_allclose(float(loss2), float(loss), rtol=1e-6)
    assert_trees_close(grads2, grads, atol=1e-6)


def test_scanned_layers_draw_their_own_dropout_masks():
    """Stacked dropout streams: each layer gets its own key (reseeded with match_shape), so layers differ."""
    model = build_model("tg", VOCAB, rngs=nnx.Rngs(params=0, dropout=5), sequence_length=8, memory_length=8,
                        **{**SMALL, "core_dropout": 0.5, "scan_layers": True})
    nnx.reseed(model, policy="match_shape", dropout=3)
    keys = model.layers.dropout.rngs.key[...]
    assert keys.shape == (SMALL["num_layers"],)
    data = jax.random.key_data(keys)
    assert not np.array_equal(np.asarray(data[0]), np.asarray(data[1]))
    batch = batch_for("tg", model.config)
    memory = model.init_memory(batch["inputs"].shape[0])
    forward = nnx.jit(lambda model: model(batch, memory, deterministic=False)[0])
    first = forward(model)
    second = forward(model)  # the streams advanced: new masks
    assert float(np.abs(np.asarray(first) - np.asarray(second)).max()) > 1e-3


def equations(jaxpr, primitive: str):
    """Every equation of `primitive` in a jaxpr and the jaxprs nested in it (einsum, pjit, custom_jvp)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            yield eqn
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else [value]:
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    yield from equations(inner, primitive)


@pytest.mark.parametrize("compute", ["bfloat16", "float16"])
def test_half_precision_compute_keeps_float32_parameters_and_stays_close(compute):
    base = build_model("tg", VOCAB, rngs=nnx.Rngs(0), sequence_length=8, memory_length=8, **SMALL)
    batch = batch_for("tg", base.config)
    memory = base.init_memory(batch["inputs"].shape[0])
    half = with_params_of(base, dtype=compute)
    assert {v.dtype for v in jax.tree.leaves(nnx.state(half, nnx.Param))} == {jnp.dtype(jnp.float32)}
    logits, new_memory = nnx.eval_shape(lambda model: model(batch, memory), half)  # dtypes: nothing compiled
    assert logits.dtype == jnp.dtype(compute) and new_memory.dtype == jnp.float32
    # Every matrix product of the forward pass (projections, scores, FFN, output) runs in the compute dtype.
    dots = list(equations(jax.make_jaxpr(lambda: half(batch, memory))().jaxpr, "dot_general"))
    assert len(dots) == 2 * 10 + 1  # per layer: q, k, v, scores, position keys, position scores, weights.v, out, 2 FFN
    assert {str(v.aval.dtype) for e in dots for v in e.invars} == {compute}
    loss, _, grads = loss_and_grads(base, batch, memory)
    loss2, _, grads2 = loss_and_grads(half, batch, memory)
    assert {g.dtype for g in jax.tree.leaves(grads2)} == {jnp.dtype(jnp.float32)}
    # bf16 keeps 8 bits of mantissa (~0.4% per rounding); the loss of a fresh model (~log 30) moves by less than 1%.
    np.testing.assert_allclose(float(loss2), float(loss), rtol=1e-2)
    assert float(jnp.abs(loss2 - loss)) > 0  # and it really computed in half precision
    cosine = lambda a, b: float(np.vdot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))  # in NumPy: nothing
    flat = lambda tree: np.concatenate([g.ravel() for g in jax.tree.leaves(tree)])         # compiled
    assert cosine(flat(grads2), flat(grads)) > 0.99


def test_bfloat16_parameters():
    model = nnx.eval_shape(lambda: build_model("tg", VOCAB, rngs=nnx.Rngs(0), sequence_length=8, memory_length=8,
                                               **{**SMALL, "dtype": "bfloat16", "param_dtype": "bfloat16"}))
    assert {v.dtype for v in jax.tree.leaves(nnx.state(model, nnx.Param))} == {jnp.dtype(jnp.bfloat16)}


@pytest.mark.parametrize("key, value", [("dtype", "float64"), ("param_dtype", "int8"), ("dtype", "bf16")])
def test_unknown_dtypes_are_refused(key, value):
    with pytest.raises(ValueError, match=rf"model.{key}='{value}': expected one of float32, bfloat16, float16"):
        build_model("tg", VOCAB, rngs=nnx.Rngs(0), **{**SMALL, key: value})


def test_unscanned_model_gives_the_scanned_logits():
    scanned = build_model("tg_layer_hybrid", VOCAB, rngs=nnx.Rngs(0), sequence_length=8, memory_length=8,
                          **{**SMALL, "scan_layers": True, "num_layers": 3})
    flat = tlm.unscanned(scanned)
    assert not flat.config.scan_layers and len(flat.layers) == 3
    batch = batch_for("tg_layer_hybrid", scanned.config)
    memory = scanned.init_memory(batch["inputs"].shape[0])
    logits, scanned_logits = (np.asarray(forward(m, batch, memory)[0]) for m in (flat, scanned))  # compiled
    np.testing.assert_allclose(logits, scanned_logits, atol=1e-6)
    # Round trip of the layouts.
    pure = nnx.to_pure_dict(nnx.state(flat, nnx.Param))
    round_trip = jax.jit(lambda pure: tlm.unstack_layer_params(tlm.stack_layer_params(pure), 3))  # one program
    assert_trees_close(round_trip(pure), pure, atol=0)


def test_partition_metadata_is_nnx_own_and_names_the_stacked_axis():
    model = nnx.eval_shape(lambda: build_model("tg", VOCAB, rngs=nnx.Rngs(0), **{**SMALL, "scan_layers": True}))
    specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    assert specs["layers"]["attention"]["query"].get_value() == P("layers", "embed", "heads", "kv")
    assert specs["layers"]["feed_forward"]["w_in"].get_value() == P("layers", "embed", "mlp")
    assert specs["embedding"].get_value() == P("vocab", "embed")
    rules = DEFAULT_LOGICAL_AXIS_RULES
    assert logical_to_spec(tuple(specs["layers"]["attention"]["query"].get_value()), rules) == P(None, None, "model",
                                                                                                 None)


def test_train_state_shardings_of_a_scanned_model_come_from_the_metadata():
    """Parameters and both Adam moments of the stacked layers: "model" on the list's axes, "layers" replicated."""
    import optax

    config = model_config("tg", VOCAB, **{**SMALL, "scan_layers": True})
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    mesh = make_mesh(1, 1, devices=jax.devices()[:1])
    shardings = state_shardings(model_parts(config), tx, mesh, DEFAULT_LOGICAL_AXIS_RULES).state
    assert shardings.params["layers"]["feed_forward"]["w_in"].spec == P(None, None, "model")
    assert shardings.params["layers"]["attention"]["out"].spec == P(None, "model", None, None)
    assert shardings.params["embedding"].spec == P("model", None)
    adam = shardings.opt_state[1][0]
    for moment in (adam.mu, adam.nu):
        assert moment["layers"]["feed_forward"]["w_in"].spec == P(None, None, "model")
        assert moment["layers"]["attention"]["query"].spec == P(None, None, "model", None)
    assert adam.count.spec == P()
