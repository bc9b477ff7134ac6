"""Stack attention sublayers and the Tf / Tf+Sup / Tf+Nd language models.

Two small oracles live here, written from the paper and sharing no code with
the library: `reference_superposition_stack` (eqs. 5–8, one stack element at
a time) and `reference_nondeterministic_stack` (Appendix B, eqs. 21–29, in
real space, t-ordered loops), itself checked against a brute-force sum over
all runs of the vector PDA (eq. 12). Modules run on the real `tgjax.ops`
kernels (`kernel_or_oracle` falls back to the oracles only where a kernel is
missing), and the sublayers are compared with the oracles worked through by
hand from their weights. Parameter counts are checked against the paper's
Table 5.
"""

from __future__ import annotations

import importlib
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tgjax.models.stack_lm import (
    MODEL_KINDS,
    STACK_CFL_SIZES,
    StackLMConfig,
    StackTransformerLM,
    sinusoidal_positions,
    stack_cfl_config,
)
from tgjax.nn.stack_attention import (
    NondeterministicStackAttention,
    NondeterministicStackFunction,
    SuperpositionStackAttention,
    SuperpositionStackFunction,
)

# ---------------------------------------------------------------------------
# Oracles.


def reference_superposition_stack(actions, pushed, xp=jnp):
    """Joulin & Mikolov's stack, element by element (eqs. 5–8). actions [B, n, 3] = (push, pop, no-op).

    `xp` is jax.numpy (differentiable, for modules) or numpy (fast, for expected values).
    """
    n = pushed.shape[1]
    zero = xp.zeros_like(pushed[:, 0])
    stack: list = []  # V_{t−1}[1..t−1], top first
    readings = []
    for t in range(1, n + 1):
        push, pop, noop = (actions[:, t - 1, k][:, None] for k in range(3))
        new = []
        for i in range(1, t + 1):
            above = pushed[:, t - 1] if i == 1 else stack[i - 2]
            at = stack[i - 1] if i < t else zero
            below = stack[i] if i < t - 1 else zero
            new.append(push * above + noop * at + pop * below)
        stack = new
        readings.append(stack[0])
    return xp.stack(readings, axis=1)


def reference_nondeterministic_stack(push, repl, pop, pushed, bottom, xp=jnp):
    """Lang's algorithm for the dVPDA as in Appendix B, in real space (small inputs only).

    Log-weight inputs with the shapes of `tgjax.ops.nondeterministic_stack`;
    start state q₀ = 0 and bottom symbol ⊥ = 0. Returns [B, n, Q, Γ, m].
    `xp` as in `reference_superposition_stack`.
    """
    push, repl, pop, pushed = (xp.exp(a) for a in (push, repl, pop, pushed))
    batch, n, q, s = push.shape[:4]
    m = pushed.shape[-1]
    v0 = xp.exp(xp.broadcast_to(bottom, (batch, m)))
    one_hot = np.zeros((batch, q, s, q, s))
    one_hot[:, 0, 0, 0, 0] = 1.0
    start = xp.asarray(one_hot)
    gamma = {(-1, 0): start}  # eq. 21
    zeta = {(-1, 0): start[..., None] * v0[:, None, None, None, None, :]}  # eq. 22
    alpha = {-1: start[:, 0, 0]}  # eq. 23: I[r = q0, y = ⊥]
    alpha[0] = xp.einsum("bqx,bqxry->bry", alpha[-1], gamma[-1, 0])
    readings = []
    for t in range(1, n + 1):
        d_push, d_repl, d_pop, v = push[:, t - 1], repl[:, t - 1], pop[:, t - 1], pushed[:, t - 1]
        gamma_pop = {k: xp.einsum("buysz,bszr->buyr", gamma[k, t - 1], d_pop) for k in range(t - 1)}  # eq. 25
        for i in range(-1, t):
            g = xp.zeros((batch, q, s, q, s))
            z = xp.zeros((batch, q, s, q, s, m))
            if i == t - 1:  # push
                g = g + d_push
                z = z + d_push[..., None] * v[:, None, None, None, None, :]
            if i <= t - 2:  # replace
                g = g + xp.einsum("bqxsz,bszry->bqxry", gamma[i, t - 1], d_repl)
                z = z + xp.einsum("bqxszm,bszry->bqxrym", zeta[i, t - 1], d_repl)
            for k in range(i + 1, t - 1):  # pop
                g = g + xp.einsum("bqxuy,buyr->bqxry", gamma[i, k], gamma_pop[k])
                z = z + xp.einsum("bqxuym,buyr->bqxrym", zeta[i, k], gamma_pop[k])
            gamma[i, t], zeta[i, t] = g, z  # eqs. 24, 26
        alpha[t] = sum(xp.einsum("bqx,bqxry->bry", alpha[i], gamma[i, t]) for i in range(-1, t))  # eq. 27
        eta = sum(xp.einsum("bqx,bqxrym->brym", alpha[i], zeta[i, t]) for i in range(-1, t))  # eq. 28
        readings.append(eta / alpha[t].sum(axis=(1, 2))[:, None, None, None])  # eq. 29
    return xp.stack(readings, axis=1)


def enumerate_vpda_runs(push, repl, pop, pushed, bottom):
    """Eq. (12) by brute force for one sequence: every run of the vector PDA, weights multiplied out.

    Inputs are log weights without the batch axis; ⊥ can never be popped.
    """
    push, repl, pop, pushed, v0 = (np.exp(np.asarray(a, np.float64)) for a in (push, repl, pop, pushed, bottom))
    n, q, s = push.shape[:3]
    runs = [(1.0, 0, ((0, v0),))]  # (weight, state, stack of (symbol, vector), top last)
    readings = []
    for t in range(n):
        new = []
        for weight, state, stack in runs:
            x, top = stack[-1]
            for r, y in itertools.product(range(q), range(s)):
                new.append((weight * push[t, state, x, r, y], r, stack + ((y, pushed[t]),)))
                new.append((weight * repl[t, state, x, r, y], r, stack[:-1] + ((y, top),)))
            if len(stack) > 1:
                for r in range(q):
                    new.append((weight * pop[t, state, x, r], r, stack[:-1]))
        runs = new
        reading = np.zeros((q, s, len(v0)))
        for weight, state, stack in runs:
            reading[state, stack[-1][0]] += weight * stack[-1][1]
        readings.append(reading / sum(w for w, _, _ in runs))
    return np.stack(readings)


def real_op(name: str):
    """The `tgjax.ops` kernel, or skip the test while it is not written."""
    op = getattr(importlib.import_module("tgjax.ops"), name, None)
    if op is None:
        pytest.skip(f"tgjax.ops.{name} is not written yet")
    return op


def kernel_or_oracle(kind: str):
    """`stack_op` for a module: None (the default `tgjax.ops` kernel) once it exists, else the JAX oracle."""
    ops = importlib.import_module("tgjax.ops")
    if kind == "superposition":
        return None if hasattr(ops, "superposition_stack") else reference_superposition_stack
    return None if hasattr(ops, "nondeterministic_stack") else reference_nondeterministic_stack


def random_log_weights(seed, batch, n, q, s, m):
    """NumPy inputs for the nondeterministic stack: N(0, 1) transition log weights, log σ(N(0, 1)) vectors."""
    rng = np.random.default_rng(seed)

    def log_sigmoid(a):
        return -np.logaddexp(0.0, -a)

    return (
        rng.normal(size=(batch, n, q, s, q, s)),
        rng.normal(size=(batch, n, q, s, q, s)),
        rng.normal(size=(batch, n, q, s, q)),
        log_sigmoid(rng.normal(size=(batch, n, m))),
        log_sigmoid(rng.normal(size=(m,))),
    )


# Every sublayer test feeds [B, n, d_model] = [2, 5, 8] and every model test [4, 5] tokens
# through the jitted helpers below, so each kernel compiles once for the whole file
# (nnx.jit caches on the module structure and the shapes).
def random_inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(2, 5, 8)).astype(np.float32)


@nnx.jit
def apply_layer(layer, x):
    return layer(x)


@nnx.jit
def forward(model, tokens, padding_mask=None):
    return model(tokens, padding_mask=padding_mask)


@nnx.jit
def gradients(layer, x):
    """d/d(parameters, x) of a squared-output loss through a sublayer."""
    return nnx.grad(lambda lay, inp: (lay(inp) ** 2).sum(), argnums=(0, 1))(layer, x)


# ---------------------------------------------------------------------------
# The oracles agree with the definitions.


def test_nondeterministic_oracle_is_the_sum_over_runs():
    push, repl, pop, pushed, bottom = random_log_weights(0, 2, 5, 2, 2, 3)
    readings = reference_nondeterministic_stack(push, repl, pop, pushed, bottom, xp=np)
    assert readings.shape == (2, 5, 2, 2, 3)
    for b in range(2):
        expected = enumerate_vpda_runs(push[b], repl[b], pop[b], pushed[b], bottom)
        np.testing.assert_allclose(readings[b], expected, rtol=1e-10)


def test_superposition_oracle_by_hand():
    # Push a, push b, pop: the tops are a, b, a. Then a half push of c over a: 0.5 c + 0.5 a.
    pushed = np.array([[[1.0], [2.0], [3.0], [4.0]]])
    actions = np.array([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0.5, 0, 0.5]]])
    np.testing.assert_allclose(reference_superposition_stack(actions, pushed, xp=np)[0, :, 0], [1, 2, 1, 2.5])


# ---------------------------------------------------------------------------
# Sublayers.


def layer_norm(x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)


def sigmoid(a):
    return 1 / (1 + np.exp(-a))


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def kernel(linear) -> np.ndarray:
    return np.asarray(linear.kernel[...], np.float64)


@pytest.mark.parametrize("pushed_vectors", [None, "paper"])  # None: the default, the release's raw W_v x
def test_superposition_sublayer_with_real_kernel_equals_hand_rolled_loop(pushed_vectors):
    real_op("superposition_stack")
    switch = {} if pushed_vectors is None else {"pushed_vectors": pushed_vectors}
    layer = SuperpositionStackAttention(8, 3, rngs=nnx.Rngs(3), **switch)  # default kernel: tgjax.ops
    layer.eval()
    x = random_inputs(4)
    # Eqs. (14)–(18), (20), (16) by hand, from the sublayer's weights (dropout off, layer norm at init).
    f = layer.function
    x_norm = layer_norm(x.astype(np.float64))
    actions = softmax(x_norm @ kernel(f.action_layer))
    pushed = x_norm @ kernel(f.pushed_layer)
    if pushed_vectors == "paper":
        pushed = sigmoid(pushed)  # eq. (17) as printed
    expected = x + reference_superposition_stack(actions, pushed, xp=np) @ kernel(f.output_layer)
    np.testing.assert_allclose(apply_layer(layer, jnp.asarray(x)), expected, atol=1e-5)


@pytest.mark.parametrize("pushed_vectors", [None, "paper"])  # None: the default, the release's log v = W_v x
def test_nondeterministic_sublayer_passes_the_paper_quantities_to_the_kernel(pushed_vectors):
    q, s, m = 2, 2, 3
    seen = {}

    def spy(*args):  # records the kernel's arguments; answers with the NumPy oracle
        seen.update(zip(("push", "repl", "pop", "pushed", "bottom"), (np.asarray(a, np.float64) for a in args)))
        return jnp.asarray(reference_nondeterministic_stack(*seen.values(), xp=np), jnp.float32)

    switch = {} if pushed_vectors is None else {"pushed_vectors": pushed_vectors}
    layer = NondeterministicStackAttention(8, q, s, m, stack_op=spy, rngs=nnx.Rngs(5), **switch)
    layer.eval()
    x = random_inputs(6)
    y = layer(jnp.asarray(x))
    f = layer.function
    x_norm = layer_norm(x.astype(np.float64))
    logits = x_norm @ kernel(f.action_layer)  # log Δ_t, eq. (19)
    assert logits.shape[-1] == q * s * q * (2 * s + 1)
    block = q * s * q * s
    np.testing.assert_allclose(seen["push"], logits[..., :block].reshape(2, 5, q, s, q, s), atol=1e-5)
    np.testing.assert_allclose(seen["repl"], logits[..., block : 2 * block].reshape(2, 5, q, s, q, s), atol=1e-5)
    np.testing.assert_allclose(seen["pop"], logits[..., 2 * block :].reshape(2, 5, q, s, q), atol=1e-5)
    log_pushed = x_norm @ kernel(f.pushed_layer)
    if pushed_vectors == "paper":
        log_pushed = np.log(sigmoid(log_pushed))  # eq. (17) as printed
    np.testing.assert_allclose(seen["pushed"], log_pushed, atol=1e-5)
    bottom_logits = np.asarray(f.bottom_logits[...], np.float64)
    np.testing.assert_allclose(seen["bottom"], np.log(sigmoid(bottom_logits)), atol=1e-6)  # v_0 = σ(w_v)
    assert np.all(np.abs(bottom_logits) <= 0.1)  # w_v ~ U[−0.1, 0.1] (Appendix D.2)
    readings = reference_nondeterministic_stack(*seen.values(), xp=np)
    expected = x + readings.reshape(2, 5, q * s * m) @ kernel(f.output_layer)
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_nondeterministic_sublayer_with_real_kernel_matches_oracle():
    real_op("nondeterministic_stack")
    layer = NondeterministicStackAttention(8, 2, 2, 3, rngs=nnx.Rngs(7))  # default kernel: tgjax.ops
    layer.eval()
    x = random_inputs(8)
    f = layer.function
    inputs = f.stack_inputs(jnp.asarray(layer_norm(x)))
    args = [np.asarray(inputs[k], np.float64) for k in ("push", "repl", "pop", "pushed", "bottom")]
    readings = reference_nondeterministic_stack(*args, xp=np)
    expected = x + readings.reshape(2, 5, -1) @ kernel(f.output_layer)
    np.testing.assert_allclose(apply_layer(layer, jnp.asarray(x)), expected, rtol=1e-4, atol=1e-4)


def test_released_variant_uses_raw_pushed_vectors():
    x = jnp.asarray(random_inputs(9))
    sup = SuperpositionStackFunction(8, 3, pushed_vectors="released", rngs=nnx.Rngs(0))
    actions, pushed = sup.stack_inputs(x)
    np.testing.assert_allclose(actions.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(pushed, np.asarray(x) @ kernel(sup.pushed_layer), atol=1e-5)  # no activation
    paper = SuperpositionStackFunction(8, 3, pushed_vectors="paper", rngs=nnx.Rngs(0))
    np.testing.assert_allclose(paper.stack_inputs(x)[1], sigmoid(np.asarray(pushed, np.float64)), atol=1e-6)
    nd = NondeterministicStackFunction(8, 2, 2, 3, pushed_vectors="released", rngs=nnx.Rngs(0))
    inputs = nd.stack_inputs(x)
    np.testing.assert_allclose(inputs["pushed"], np.asarray(x) @ kernel(nd.pushed_layer), atol=1e-5)
    np.testing.assert_allclose(inputs["bottom"], np.log(sigmoid(np.asarray(nd.bottom_logits[...], np.float64))),
                               atol=1e-6)
    with pytest.raises(ValueError, match="pushed_vectors"):
        SuperpositionStackFunction(8, 3, pushed_vectors="tanh", rngs=nnx.Rngs(0))


@pytest.mark.parametrize("kind", ["superposition", "nondeterministic"])
def test_sublayer_gradients_are_finite(kind):
    if kind == "superposition":
        layer = SuperpositionStackAttention(8, 3, stack_op=kernel_or_oracle(kind), rngs=nnx.Rngs(params=0, dropout=1))
    else:
        layer = NondeterministicStackAttention(8, 2, 2, 3, stack_op=kernel_or_oracle(kind),
                                               rngs=nnx.Rngs(params=0, dropout=1))
    layer.train()  # through dropout too
    param_grads, x_grad = gradients(layer, jnp.asarray(random_inputs(10)))
    leaves = jax.tree.leaves(param_grads)
    assert leaves and all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert bool(jnp.all(jnp.isfinite(x_grad))) and float(jnp.abs(x_grad).max()) > 0
    f = param_grads["function"]
    assert all(float(jnp.abs(f[name]["kernel"][...]).max()) > 0 for name in ("action_layer", "pushed_layer",
                                                                             "output_layer"))
    if kind == "nondeterministic":
        assert float(jnp.abs(f["bottom_logits"][...]).max()) > 0


# ---------------------------------------------------------------------------
# The language models.


def tiny_config(kind: str, causal: bool = True) -> StackLMConfig:
    return StackLMConfig(input_vocab_size=7, num_layers=3, d_model=8, num_heads=2, feedforward_size=16,
                         stack=kind, stack_embedding_size=3, num_states=2, stack_alphabet_size=2, causal=causal)


TOKENS = jnp.array([[1, 3, 4, 5, 6], [1, 4, 4, 3, 2], [1, 3, 4, 5, 3], [1, 4, 4, 3, 5]])  # rows 2, 3: t = 4 changed


@pytest.fixture(scope="module")
def tiny_models() -> dict:
    """One 3-layer decoder per kind, the stack in layer 2 (built once: construction is slow on CPU)."""
    return {
        kind: StackTransformerLM(tiny_config(kind), stack_op=None if kind == "none" else kernel_or_oracle(kind),
                                 rngs=nnx.Rngs(params=0, dropout=1))
        for kind in ("none", "superposition", "nondeterministic")
    }


@pytest.mark.parametrize("kind", ["none", "superposition", "nondeterministic"])
def test_decoder_shapes_and_causality(kind, tiny_models):
    model = tiny_models[kind]
    model.eval()
    logits = forward(model, TOKENS)
    assert logits.shape == (4, 5, 7) and logits.dtype == jnp.float32
    # Rows 2 and 3 differ from rows 0 and 1 only at t = 4: nothing before t = 4 may change.
    np.testing.assert_array_equal(logits[2:, :4], logits[:2, :4])
    assert not np.allclose(logits[2:, 4], logits[:2, 4])


def test_dropout_only_in_train_mode(tiny_models):
    model = tiny_models["none"]
    model.train()
    assert not np.allclose(forward(model, TOKENS), forward(model, TOKENS))
    model.eval()
    np.testing.assert_array_equal(forward(model, TOKENS), forward(model, TOKENS))


def test_encoder_mode_sees_the_future_and_ignores_padding():
    model = StackTransformerLM(tiny_config("none", causal=False), rngs=nnx.Rngs(0))
    model.eval()
    # Row 1 changes a real token (t = 3) of row 0, row 2 its padding (t = 4); row 3 is unpadded.
    tokens = jnp.array([[1, 3, 4, 5, 0], [1, 3, 4, 6, 0], [1, 3, 4, 5, 6], [1, 3, 4, 5, 6]])
    real = jnp.array([[True] * 4 + [False]] * 3 + [[True] * 5])
    logits = forward(model, tokens, real)
    assert not np.allclose(logits[1, :3], logits[0, :3])  # earlier positions see the change
    np.testing.assert_allclose(logits[2, :4], logits[0, :4], atol=1e-6)  # padding is invisible
    assert not np.allclose(logits[3, :4], logits[0, :4])  # unless it is a real token


def test_middle_layer_is_the_stack_layer():
    model = nnx.eval_shape(lambda: StackTransformerLM(
        StackLMConfig(input_vocab_size=5, stack="superposition", stack_embedding_size=4), rngs=nnx.Rngs(0)
    ))
    kinds = [type(layer.attention).__name__ for layer in model.layers]
    assert kinds == ["PreNormResidual"] * 2 + ["SuperpositionStackAttention"] + ["PreNormResidual"] * 2
    assert StackLMConfig(input_vocab_size=5, num_layers=4).resolved_stack_layer == 1  # ⌈4/2⌉ = 2nd layer


def test_sinusoidal_positions():
    table = np.asarray(jax.jit(sinusoidal_positions, static_argnums=(0, 1))(5, 6))  # one program, not op by op
    np.testing.assert_allclose(table[:, 0], np.sin(np.arange(5)), atol=1e-6)
    np.testing.assert_allclose(table[:, 1], np.cos(np.arange(5)), atol=1e-6)
    np.testing.assert_allclose(table[3, 4], np.sin(3 / 10000 ** (4 / 6)), atol=1e-6)
    np.testing.assert_allclose(table[3, 5], np.cos(3 / 10000 ** (4 / 6)), atol=1e-6)


# Table 5 of the paper: parameter counts with the authors' vocabularies (|Σ| + 1 in and out);
# the first number is |Σ| + 1. stack_cfl_config takes the CFL vocabulary size, |Σ| + 3 (PAD, BOS, EOS).
TABLE_5 = {
    "marked_reversal": (4, {"tf": 43_044, "tf+sup": 40_964, "tf+nd": 33_273}),
    "unmarked_reversal": (3, {"tf": 42_979, "tf+sup": 40_899, "tf+nd": 33_216}),
    "padded_reversal": (3, {"tf": 42_979, "tf+sup": 40_899, "tf+nd": 36_576}),
    "dyck": (5, {"tf": 43_109, "tf+sup": 41_029, "tf+nd": 33_330}),
    "hardest_cfl": (8, {"tf": 43_304, "tf+sup": 41_224, "tf+nd": 36_861}),
}


@pytest.mark.parametrize("task", ["marked_reversal", "hardest_cfl"])  # both |Q| settings; the rest: -m slow
def test_parameter_counts_match_table_5(task):
    vocab_size, counts = TABLE_5[task]
    assert set(STACK_CFL_SIZES[task]) == set(MODEL_KINDS)
    for model_name, expected in counts.items():
        model = nnx.eval_shape(lambda: StackTransformerLM(stack_cfl_config(task, model_name, vocab_size + 2),
                                                          rngs=nnx.Rngs(0)))
        count = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
        assert count == expected, (task, model_name)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["unmarked_reversal", "padded_reversal", "dyck"])
def test_parameter_counts_match_table_5_other_tasks(task):
    test_parameter_counts_match_table_5(task)


def test_config_errors():
    with pytest.raises(ValueError, match="stack must be"):
        StackLMConfig(input_vocab_size=5, stack="grefenstette")
    with pytest.raises(ValueError, match="divisible"):
        StackLMConfig(input_vocab_size=5, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="stack_layer"):
        StackLMConfig(input_vocab_size=5, stack_layer=5)
    with pytest.raises(ValueError, match="unknown model"):
        stack_cfl_config("dyck", "lstm", 5)
