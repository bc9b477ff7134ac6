"""The Ordered-Memory Policy Network's step (OMPN; Lu et al., ICLR 2021; released-code.md §5.7).

OMPN is the Ordered-Memory policy from which OCN descends: a stack of n
memory slots of size H, slot 0 the highest level (the task) and slot n-1
the lowest (the one the actions are read from). Shapes: the memory
M [B, n, H]; the encoded observation o_t [B, H]; the task embedding
e [B, H]; u_t = [o_t ; e] [B, 2H].

One step, restated from §5.7 (indices as there, i = 0..n-1):

    Composition, bottom-up from the last slot (candidates C [B, n, H]):
        h = o_t;  for i = n-1 .. 0:  h = ComCell_i(h, M_i, u_t);  C_i = h
    Scores and the n+1-way distribution phat [B, n + 1] with the "end" class in front, by `pointer`:
        beta_i = MLP([u_t ; M_i ; C_i])
        "stickbreaking" (default; what the release's OMStackBot runs): b_i = sigmoid(beta_i), the stick
            broken from the last slot upward:
            phat_{i+1} = b_i prod_{j>i} (1 - b_j),   phat_0 = prod_i (1 - b_i)
        "softmax" (the release's `Distribution` default, which its bots override):
            phat = softmax([0 ; beta_0 .. beta_{n-1}] / sqrt(H))
        p_end  = phat_0,  p = phat_{1:} / sum(phat_{1:})                pointer [B, n]
        pi     = cumsum_i p  (nondecreasing, pi_{n-1} = 1);  pi~ = reverse cumsum_i p
    Decomposition, top-down (c^in [B, n, H]):
        c = 0;  for i = 0 .. n-1:  c^in_i = c;  v = pi~_i C_i + (1 - pi~_i) c;  c = DecomCell_i(v, u_t)
    New memory and output:
        M'_i = (1 - pi_i) M_i + p_i C_i + (1 - pi~_i) c^in_i,   out_t = M'_{n-1}
    Policy over the A actions, DONE the last one:
        pi_t(a) = (1 - p_end) softmax(W_a [out_t ; e ; o_t] + b_a)_a  for the A - 1 others,  pi_t(DONE) = p_end

    ComCell_i(v, m, u) = LN(g_v * v + g_m * m + g_c * c),  with
        [z_g ; c] = ReLU([v ; m ; u] W1 + b1) W2 + b2    (W1: 4H x 4H, W2: 4H x 4H; z_g: 3H, c: H)
        [g_v ; g_m ; g_c] = sigmoid(LN_affine(z_g))
    DecomCell_i(v, u) = LN(g_v * v + g_c * c),  with
        [z_g ; c] = ReLU([v ; u] W1 + b1) W2 + b2        (W1: 3H x 4H, W2: 4H x 3H; z_g: 2H, c: H)
        [g_v ; g_c] = sigmoid(LN_affine(z_g))
    (* elementwise; the output LN has no affine parameters, the gates' LN_affine has its own per slot.)

Initial memory: M_0 = LN(e) (no affine parameters), M_1.. M_{n-1} = 0.
The **first step** uses the fixed phat = [0, 1, 0, ..., 0] (p_end = 0, the
pointer on slot 0), so p = [1, 0, ..., 0], pi = 1, pi~ = [1, 0, ..., 0].

Choices where §5.7 is silent (the release, gym_psketch/bots/omdec.py and
om_utils.py, was read to settle them; no code was copied):

* At the first step the candidates are the memory itself, C = M (the
  composition is not run, as in the release): the first new memory is then
  M'_0 = M_0 = LN(e) and M'_i = c^in_i, the task decomposed down the stack.
* The score MLP is Linear(4H -> H), LeakyReLU (slope 0.01), Linear(H -> 1),
  one MLP shared by the slots; only the "softmax" pointer divides its output
  by sqrt(H) (as the release's `Distribution` does). ComCell_i and
  DecomCell_i have their own parameters per slot. No dropout (the
  release's default is 0).
* DONE is the last action (index A - 1; `tgjax.envs.craft_rules.DONE`).
* Everything is in log space: log p = log phat_{1:} - logsumexp(log phat_{1:}),
  log(1 - p_end) = logsumexp(log phat_{1:}); stick-breaking's factors are
  log b = log_sigmoid(beta) and log(1 - b) = log_sigmoid(-beta), so its phat
  sums to 1 by construction (the stick's pieces telescope). The release
  clamps p_end to [1e-9, 1 - 1e-9] before mixing in probability space; here
  log phat is never -inf for a finite beta, and the exact zeros of the
  fixed first-step phat are `NEVER` (so DONE has log-probability -1e9 at
  the first step: a demonstration never starts with DONE).
* The boundary score (`log_done`): OMPN's metrics take the top-k steps of
  the negative expected expansion position E_t = sum_{j=0..n} j phat_{t,j}
  (j = 0 the "end" class, j = i + 1 slot i). Here the score is
  s_t = 1 - E_t / n = sum_{j<n} (1 - j / n) phat_{t,j} in [0, 1] (1 when the
  whole stack ends, 0 when only the lowest slot is rewritten): the same
  order, so the same top-k, and a probability-like number whose log is
  `log_done`. At the first step s = (n - 1) / n (the fixed phat); the
  metrics ignore step 0 either way. `tgjax.data.craft_metrics` reads s_t,
  computed on observation t, as marking action t - 1 as a subtask's last,
  the convention it has for OCN's e_t ("the previous subtask is done");
  the release's evaluate.py takes step t itself, one step later: the two
  agree within F1's tolerance 1, not always at tolerance 0.

The LayerNorm is `tgjax.ops.ordered_memory`'s (epsilon 1e-5, PyTorch's).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import dense_init, param
from tgjax.ops.ordered_memory import _layer_norm

__all__ = ["NEVER", "POINTERS", "OMPNCell", "OMPNState", "OMPNStepOutput", "boundary_log_score",
           "pointer_log_distribution"]

#: log of a probability that is exactly 0 (finite, so that gradients stay finite)
NEVER = -1e9
#: how the slot scores become the n+1-way distribution (module docstring); the first is the default
POINTERS = ("stickbreaking", "softmax")


class OMPNState(NamedTuple):
    """memory [B, n, H] (M); task [B, H] (the task embedding e, constant over an episode);
    first [B] bool (no step taken yet: the next step uses the fixed phat)."""

    memory: jax.Array
    task: jax.Array
    first: jax.Array


class OMPNStepOutput(NamedTuple):
    """log_pi [B, A] (DONE = p_end); log_done [B] (log s_t, the boundary score); log_p [B, n] (the pointer p);
    log_p_hat [B, n + 1] (the n+1-way distribution, "end" first); cumulative [B, n] (pi);
    reverse_cumulative [B, n] (pi~); output [B, H] (M'_{n-1})."""

    log_pi: jax.Array
    log_done: jax.Array
    log_p: jax.Array
    log_p_hat: jax.Array
    cumulative: jax.Array
    reverse_cumulative: jax.Array
    output: jax.Array


def _unit_layer_norm(z: jax.Array) -> jax.Array:
    """LayerNorm without affine parameters."""
    return _layer_norm(z, 1.0, 0.0)


def boundary_log_score(log_p_hat: jax.Array) -> jax.Array:
    """log s = log sum_{j<n} (1 - j/n) phat_j: log_p_hat [..., n + 1] -> [...] (module docstring)."""
    n = log_p_hat.shape[-1] - 1
    weights = np.log((n - np.arange(n)) / n)                     # j = 0 .. n-1; slot n-1 (j = n) has weight 0
    return jax.nn.logsumexp(log_p_hat[..., :n] + jnp.asarray(weights, log_p_hat.dtype), axis=-1)


def stick_breaking_log_distribution(beta: jax.Array) -> jax.Array:
    """log phat [B, n + 1] ("end" first) of the stick broken from the last slot upward: beta [B, n] (logits of b)."""
    log_stop, log_pass = jax.nn.log_sigmoid(beta), jax.nn.log_sigmoid(-beta)
    # sum_{j>i} log(1 - b_j): what is left of the stick when slot i takes its piece
    log_left_below = jnp.cumsum(log_pass[:, ::-1], axis=1)[:, ::-1] - log_pass
    log_end = jnp.sum(log_pass, axis=1, keepdims=True)
    return jnp.concatenate([log_end, log_stop + log_left_below], axis=1)


def pointer_log_distribution(beta: jax.Array, pointer: str, hidden_size: int) -> jax.Array:
    """log phat [B, n + 1] ("end" first) from the slot scores beta [B, n] (module docstring)."""
    if pointer == "stickbreaking":
        return stick_breaking_log_distribution(beta)
    scaled = beta / jnp.sqrt(jnp.asarray(hidden_size, beta.dtype))
    return jax.nn.log_softmax(jnp.concatenate([jnp.zeros_like(scaled[:, :1]), scaled], -1), axis=-1)


class OMPNCell(nnx.Module):
    """The memory, composition / decomposition cells, scorer and policy head of one OMPN (module docstring).

    Parameters (n = num_slots, H = hidden_size, A = num_actions):
    com_w1 [n, 4H, 4H], com_b1 [n, 4H], com_w2 [n, 4H, 4H], com_b2 [n, 4H], com_ln_scale / com_ln_bias [n, 3H];
    dec_w1 [n, 3H, 4H], dec_b1 [n, 4H], dec_w2 [n, 4H, 3H], dec_b2 [n, 3H], dec_ln_scale / dec_ln_bias [n, 2H];
    score_w1 [4H, H], score_b1 [H], score_w2 [H], score_b2 []; w_pi [3H, A - 1], b_pi [A - 1].
    """

    def __init__(self, num_slots: int, hidden_size: int, num_actions: int, *, pointer: str = "stickbreaking",
                 rngs: nnx.Rngs):
        if num_slots < 1 or hidden_size < 1 or num_actions < 2:
            raise ValueError(f"OMPNCell needs num_slots >= 1, hidden_size >= 1 and num_actions >= 2, got "
                             f"{num_slots}, {hidden_size}, {num_actions}")
        if pointer not in POINTERS:
            raise ValueError(f"OMPNCell pointer {pointer!r}: expected one of {', '.join(POINTERS)}")
        n, H, A = num_slots, hidden_size, num_actions
        self.num_slots, self.hidden_size, self.num_actions, self.pointer = n, H, A, pointer
        zeros, ones = nnx.initializers.zeros, nnx.initializers.ones
        stacked = dense_init(-2)
        self.com_w1 = param(rngs, stacked, (n, 4 * H, 4 * H), ("slots", "cell_in", "mlp"))
        self.com_b1 = param(rngs, zeros, (n, 4 * H), ("slots", "mlp"))
        self.com_w2 = param(rngs, stacked, (n, 4 * H, 4 * H), ("slots", "mlp", "cell_out"))
        self.com_b2 = param(rngs, zeros, (n, 4 * H), ("slots", "cell_out"))
        self.com_ln_scale = param(rngs, ones, (n, 3 * H), ("slots", "gates"))
        self.com_ln_bias = param(rngs, zeros, (n, 3 * H), ("slots", "gates"))
        self.dec_w1 = param(rngs, stacked, (n, 3 * H, 4 * H), ("slots", "cell_in", "mlp"))
        self.dec_b1 = param(rngs, zeros, (n, 4 * H), ("slots", "mlp"))
        self.dec_w2 = param(rngs, stacked, (n, 4 * H, 3 * H), ("slots", "mlp", "cell_out"))
        self.dec_b2 = param(rngs, zeros, (n, 3 * H), ("slots", "cell_out"))
        self.dec_ln_scale = param(rngs, ones, (n, 2 * H), ("slots", "gates"))
        self.dec_ln_bias = param(rngs, zeros, (n, 2 * H), ("slots", "gates"))
        self.score_w1 = param(rngs, dense_init(0), (4 * H, H), ("cell_in", "hidden"))
        self.score_b1 = param(rngs, zeros, (H,), ("hidden",))
        self.score_w2 = param(rngs, dense_init(0), (H,), ("hidden",))
        self.score_b2 = param(rngs, zeros, (), ())
        self.w_pi = param(rngs, dense_init(0), (3 * H, A - 1), ("policy_in", "outputs"))
        self.b_pi = param(rngs, zeros, (A - 1,), ("outputs",))

    def initial_state(self, task: jax.Array) -> OMPNState:
        """task [B, H] (the task embeddings) -> the state before the first step: M_0 = LN(e), the rest 0."""
        batch = task.shape[0]
        memory = jnp.zeros((batch, self.num_slots, self.hidden_size), task.dtype)
        memory = memory.at[:, 0].set(_unit_layer_norm(task))
        return OMPNState(memory=memory, task=task, first=jnp.ones((batch,), bool))

    def _com_cell(self, i: int, v: jax.Array, m: jax.Array, u: jax.Array) -> jax.Array:
        H = self.hidden_size
        z = jax.nn.relu(jnp.concatenate([v, m, u], -1) @ self.com_w1[i] + self.com_b1[i]) @ self.com_w2[i] \
            + self.com_b2[i]
        gates = jax.nn.sigmoid(_layer_norm(z[:, :3 * H], self.com_ln_scale[i], self.com_ln_bias[i]))
        return _unit_layer_norm(gates[:, :H] * v + gates[:, H:2 * H] * m + gates[:, 2 * H:] * z[:, 3 * H:])

    def _decom_cell(self, i: int, v: jax.Array, u: jax.Array) -> jax.Array:
        H = self.hidden_size
        z = jax.nn.relu(jnp.concatenate([v, u], -1) @ self.dec_w1[i] + self.dec_b1[i]) @ self.dec_w2[i] \
            + self.dec_b2[i]
        gates = jax.nn.sigmoid(_layer_norm(z[:, :2 * H], self.dec_ln_scale[i], self.dec_ln_bias[i]))
        return _unit_layer_norm(gates[:, :H] * v + gates[:, H:] * z[:, 2 * H:])

    def _scores(self, u: jax.Array, memory: jax.Array, candidates: jax.Array) -> jax.Array:
        """beta [B, n] (unscaled) from u [B, 2H], M and C [B, n, H]."""
        n = self.num_slots
        inputs = jnp.concatenate([jnp.broadcast_to(u[:, None], u.shape[:1] + (n,) + u.shape[1:]), memory,
                                  candidates], -1)
        hidden = jax.nn.leaky_relu(inputs @ self.score_w1[...] + self.score_b1[...], 0.01)
        return hidden @ self.score_w2[...] + self.score_b2[...]

    def __call__(self, state: OMPNState, obs_enc: jax.Array) -> tuple[OMPNState, OMPNStepOutput]:
        """One step: state, obs_enc [B, H] (o_t, the encoded observation) -> (next state, output)."""
        n = self.num_slots
        memory, task, first = state
        u = jnp.concatenate([obs_enc, task], -1)                                      # [B, 2H]

        # composition, bottom-up; at the first step C = M
        composed = [obs_enc] * n
        h = obs_enc
        for i in reversed(range(n)):
            h = self._com_cell(i, h, memory[:, i], u)
            composed[i] = h
        candidates = jnp.where(first[:, None, None], memory, jnp.stack(composed, axis=1))   # [B, n, H]

        # the n+1-way distribution ("end" first); the fixed [0, 1, 0, ...] at the first step
        log_p_hat = pointer_log_distribution(self._scores(u, memory, candidates), self.pointer, self.hidden_size)
        fixed = jnp.full((n + 1,), NEVER, log_p_hat.dtype).at[1].set(0.0)
        log_p_hat = jnp.where(first[:, None], fixed, log_p_hat)
        log_p_end = log_p_hat[:, 0]
        log_not_end = jax.nn.logsumexp(log_p_hat[:, 1:], axis=-1)                     # log(1 - p_end)
        log_p = log_p_hat[:, 1:] - log_not_end[:, None]
        p = jnp.exp(log_p)
        cumulative = jnp.cumsum(p, axis=1)
        reverse_cumulative = jnp.cumsum(p[:, ::-1], axis=1)[:, ::-1]

        # decomposition, top-down
        c = jnp.zeros_like(obs_enc)
        incoming = []
        for i in range(n):
            incoming.append(c)
            r = reverse_cumulative[:, i, None]
            c = self._decom_cell(i, r * candidates[:, i] + (1.0 - r) * c, u)
        c_in = jnp.stack(incoming, axis=1)                                             # [B, n, H]

        new_memory = ((1.0 - cumulative)[..., None] * memory + p[..., None] * candidates
                      + (1.0 - reverse_cumulative)[..., None] * c_in)
        output = new_memory[:, -1]
        logits = jnp.concatenate([output, task, obs_enc], -1) @ self.w_pi[...] + self.b_pi[...]
        log_pi = jnp.concatenate([jax.nn.log_softmax(logits, axis=-1) + log_not_end[:, None],
                                  log_p_end[:, None]], axis=-1)
        new_state = OMPNState(memory=new_memory, task=task, first=jnp.zeros_like(first))
        return new_state, OMPNStepOutput(log_pi=log_pi, log_done=boundary_log_score(log_p_hat), log_p=log_p,
                                         log_p_hat=log_p_hat, cumulative=cumulative,
                                         reverse_cumulative=reverse_cumulative, output=output)
