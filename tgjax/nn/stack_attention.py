"""Stack attention sublayers (DuSell & Chiang, "Stack Attention", ICLR 2024, §5).

A stack attention sublayer replaces multi-head attention by a differentiable
stack. With x_t the sublayer input (eqs. 14–20):

    x'_t = LayerNorm(x_t)                                    (14)
    v_t  = σ(W_v x'_t)          pushed vectors, in (0, 1)^m   (17)
    a_t  = softmax(W_a x'_t)    superposition: push/pop/no-op (18)
    a_t  = exp(W_a x'_t)        nondeterministic: dVPDA weights (19), kept in log space
    r_t  = READING(STACK(…STACK(S_0, a_1, v_1)…, a_t, v_t))   (4)
    y'_t = W_y r_t                                           (20)
    y_t  = x_t + Dropout(y'_t)                               (16)

W_v, W_a and W_y are bias-free. The stack only looks back in time, so the
sublayer is causal with no mask, in decoders and encoders alike. For the
nondeterministic stack the bottom vector is v_0 = σ(w_v) with w_v learned.

Pushed vectors (`pushed_vectors`, both sublayers):

* "released" (default): the authors' released code, which produced the
  paper's numbers: the raw linear output W_v x'_t is the pushed vector of
  the superposition stack (no activation), and the *log* pushed vector of
  the nondeterministic stack (so v_t = exp(W_v x'_t));
* "paper": eq. (17) as printed, v_t = σ(W_v x'_t) (log σ for the dVPDA).

v_0 = σ(w_v) either way.

The stacks themselves are the kernels of `tgjax.ops` (imported when first
called, so this module loads without them); any function with the same
signature can be passed as `stack_op` (a reference implementation, another
kernel).

Parameters follow the paper's Appendix D.2: Xavier-uniform weight matrices,
w_v uniform in [−0.1, 0.1], layer norm scale 1 and bias 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import jax
from flax import nnx

__all__ = [
    "NondeterministicStackAttention",
    "NondeterministicStackFunction",
    "PreNormResidual",
    "PushedVectors",
    "SuperpositionStackAttention",
    "SuperpositionStackFunction",
]

PushedVectors = Literal["paper", "released"]
_LAYER_NORM_EPSILON = 1e-5  # PyTorch's default, which the paper's models used


def _check_pushed_vectors(pushed_vectors: str) -> None:
    if pushed_vectors not in ("paper", "released"):
        raise ValueError(f"pushed_vectors must be 'paper' or 'released', got {pushed_vectors!r}")


def _linear(in_features: int, out_features: int, rngs: nnx.Rngs) -> nnx.Linear:
    """A bias-free Xavier-uniform linear map (W_a, W_v, W_y)."""
    return nnx.Linear(
        in_features, out_features, use_bias=False, kernel_init=nnx.initializers.xavier_uniform(), rngs=rngs
    )


def _default_superposition_op() -> Callable:
    from tgjax.ops import superposition_stack

    return superposition_stack


def _default_nondeterministic_op() -> Callable:
    from tgjax.ops import nondeterministic_stack

    return nondeterministic_stack


class PreNormResidual(nnx.Module):
    """A pre-norm transformer sublayer: y = x + Dropout(f(LayerNorm(x))) (eqs. 14–16).

    Args:
      d_model: feature size of x.
      function: the sublayer function f, `[B, n, d_model] -> [B, n, d_model]`
        (extra keyword arguments of the call are passed on to it).
      dropout_rate: dropout on f's output (active in `train()` mode).
    """

    def __init__(self, d_model: int, function: nnx.Module, *, dropout_rate: float, rngs: nnx.Rngs):
        self.norm = nnx.LayerNorm(d_model, epsilon=_LAYER_NORM_EPSILON, rngs=rngs)
        self.function = function
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)

    def __call__(self, x: jax.Array, **kwargs) -> jax.Array:
        """x: [B, n, d_model] -> [B, n, d_model]."""
        return x + self.dropout(self.function(self.norm(x), **kwargs))


class SuperpositionStackFunction(nnx.Module):
    """The superposition-stack sublayer function (Joulin & Mikolov 2015 stack; eqs. 17, 18, 20).

    Args:
      d_model: input and output size.
      stack_embedding_size: m, the size of the pushed vectors and readings.
      pushed_vectors: "released" (v_t = W_v x, the authors' code; default) or
        "paper" (v_t = σ(W_v x), eq. 17).
      stack_op: `(actions [B, n, 3], pushed [B, n, m]) -> readings [B, n, m]`,
        actions being (push, pop, no-op) probabilities; default
        `tgjax.ops.superposition_stack`.
    """

    def __init__(
        self,
        d_model: int,
        stack_embedding_size: int,
        *,
        pushed_vectors: PushedVectors = "released",
        stack_op: Callable | None = None,
        rngs: nnx.Rngs,
    ):
        _check_pushed_vectors(pushed_vectors)
        self.pushed_vectors = pushed_vectors
        self.stack_op = stack_op
        self.action_layer = _linear(d_model, 3, rngs)  # W_a
        self.pushed_layer = _linear(d_model, stack_embedding_size, rngs)  # W_v
        self.output_layer = _linear(stack_embedding_size, d_model, rngs)  # W_y

    def stack_inputs(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x' [B, n, d] -> (actions [B, n, 3] probabilities (push, pop, no-op), pushed vectors [B, n, m])."""
        actions = jax.nn.softmax(self.action_layer(x), axis=-1)
        pushed = self.pushed_layer(x)
        if self.pushed_vectors == "paper":
            pushed = jax.nn.sigmoid(pushed)
        return actions, pushed

    def __call__(self, x: jax.Array) -> jax.Array:
        """x' [B, n, d_model] -> y' [B, n, d_model]; y'_t = W_y r_t with r_t the top of the stack after step t."""
        op = self.stack_op or _default_superposition_op()
        actions, pushed = self.stack_inputs(x)
        return self.output_layer(op(actions, pushed))


class NondeterministicStackFunction(nnx.Module):
    """The nondeterministic-stack (dVPDA) sublayer function (DuSell & Chiang 2023; eqs. 17, 19, 20).

    W_a x'_t holds the log weights of the transitions at step t, laid out as
    [push (q, x → r, xy) | replace (q, x → r, y) | pop (q, x → r)], i.e.
    |Q||Γ||Q|(2|Γ| + 1) numbers; the reading r_t ∈ R^{|Q|·|Γ|·m} is flattened
    in (r, y, m) order before W_y.

    Args:
      d_model: input and output size.
      num_states: |Q|.
      stack_alphabet_size: |Γ|.
      stack_embedding_size: m.
      pushed_vectors: "released" (log v_t = W_v x, the authors' code; default)
        or "paper" (log v_t = log σ(W_v x), eq. 17).
      stack_op: `(push, repl, pop, log_pushed, log_bottom) -> readings` with
        the shapes of `tgjax.ops.nondeterministic_stack` (its default).
    """

    def __init__(
        self,
        d_model: int,
        num_states: int,
        stack_alphabet_size: int,
        stack_embedding_size: int,
        *,
        pushed_vectors: PushedVectors = "released",
        stack_op: Callable | None = None,
        init_scale: float = 0.1,
        rngs: nnx.Rngs,
    ):
        _check_pushed_vectors(pushed_vectors)
        q, s, m = num_states, stack_alphabet_size, stack_embedding_size
        self.num_states, self.stack_alphabet_size, self.stack_embedding_size = q, s, m
        self.pushed_vectors = pushed_vectors
        self.stack_op = stack_op
        self.action_layer = _linear(d_model, q * s * q * (2 * s + 1), rngs)  # W_a
        self.pushed_layer = _linear(d_model, m, rngs)  # W_v
        self.output_layer = _linear(q * s * m, d_model, rngs)  # W_y
        # w_v, with v_0 = σ(w_v).
        self.bottom_logits = nnx.Param(
            jax.random.uniform(rngs.params(), (m,), minval=-init_scale, maxval=init_scale)
        )

    def stack_inputs(self, x: jax.Array) -> dict[str, jax.Array]:
        """x' [B, n, d] -> the op's arguments, all log weights.

        push, repl: [B, n, Q, Γ, Q, Γ]; pop: [B, n, Q, Γ, Q]; pushed: [B, n, m]
        (log v_1..v_n); bottom: [m] (log v_0).
        """
        q, s = self.num_states, self.stack_alphabet_size
        batch, n = x.shape[:2]
        logits = self.action_layer(x)
        block = q * s * q * s
        push = logits[..., :block].reshape(batch, n, q, s, q, s)
        repl = logits[..., block : 2 * block].reshape(batch, n, q, s, q, s)
        pop = logits[..., 2 * block :].reshape(batch, n, q, s, q)
        pushed = self.pushed_layer(x)
        if self.pushed_vectors == "paper":
            pushed = jax.nn.log_sigmoid(pushed)
        bottom = jax.nn.log_sigmoid(self.bottom_logits[...])
        return {"push": push, "repl": repl, "pop": pop, "pushed": pushed, "bottom": bottom}

    def __call__(self, x: jax.Array) -> jax.Array:
        """x' [B, n, d_model] -> y' [B, n, d_model]; y'_t = W_y r_t with r_t the dVPDA reading (eq. 12)."""
        op = self.stack_op or _default_nondeterministic_op()
        args = self.stack_inputs(x)
        readings = op(args["push"], args["repl"], args["pop"], args["pushed"], args["bottom"])  # [B, n, Q, Γ, m]
        batch, n = x.shape[:2]
        return self.output_layer(readings.reshape(batch, n, -1).astype(x.dtype))


class SuperpositionStackAttention(PreNormResidual):
    """Superposition stack attention sublayer: x [B, n, d_model] -> [B, n, d_model].

    `PreNormResidual` around `SuperpositionStackFunction` (see there for the
    arguments); `dropout_rate` is the residual dropout (0.1 in the paper).
    """

    def __init__(
        self,
        d_model: int,
        stack_embedding_size: int,
        *,
        dropout_rate: float = 0.1,
        pushed_vectors: PushedVectors = "released",
        stack_op: Callable | None = None,
        rngs: nnx.Rngs,
    ):
        function = SuperpositionStackFunction(
            d_model, stack_embedding_size, pushed_vectors=pushed_vectors, stack_op=stack_op, rngs=rngs
        )
        super().__init__(d_model, function, dropout_rate=dropout_rate, rngs=rngs)


class NondeterministicStackAttention(PreNormResidual):
    """Nondeterministic stack attention sublayer: x [B, n, d_model] -> [B, n, d_model].

    `PreNormResidual` around `NondeterministicStackFunction` (see there for
    the arguments); `dropout_rate` is the residual dropout (0.1 in the paper).
    """

    def __init__(
        self,
        d_model: int,
        num_states: int,
        stack_alphabet_size: int,
        stack_embedding_size: int,
        *,
        dropout_rate: float = 0.1,
        pushed_vectors: PushedVectors = "released",
        stack_op: Callable | None = None,
        init_scale: float = 0.1,
        rngs: nnx.Rngs,
    ):
        function = NondeterministicStackFunction(
            d_model,
            num_states,
            stack_alphabet_size,
            stack_embedding_size,
            pushed_vectors=pushed_vectors,
            stack_op=stack_op,
            init_scale=init_scale,
            rngs=rngs,
        )
        super().__init__(d_model, function, dropout_rate=dropout_rate, rngs=rngs)
