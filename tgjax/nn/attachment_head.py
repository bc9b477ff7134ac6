"""The Pushdown attachment head (Murty et al., EMNLP 2023, §3.2 eq. 5 and Fig. 8).

At position i the LM has read tokens 0..i and predicts token i+1; the head
then predicts r_{i+1}, which stack element token i+1 reduces with, by
attention from the new token to the prefix. Its scores live in ``T + 1``
slots per position: slot ``c <= i`` is "attach to the constituent whose
rightmost token is c", slot ``i + 1`` is "shift only", and slots beyond are
never valid. So the slot index *is* the attachment label of
`tgjax.syntax.stack_tape` (``attach[k] == k`` is a shift), and the target at
position i is ``attach[i + 1]``.

Paper (Fig. 8), with h_j the final-layer states `[B, T, d]`, e the embedding of
the next token `[B, T, d_e]` and W_i the stack tape row of position i:

    q'_i, k_j = A_q h_i, A_k h_j                       (one d -> 2·key_dim projection)
    q_i       = MLP_q([q'_i; e_{i+1}])
    k_self_i  = MLP_k([q'_i; e_{i+1}])
    k~_ij     = MLP_c([k_j; β[W_i[j]]])
    s_ij      = q_i · k~_ij / sqrt(key_dim)   (j <= i),     s_i,shift = q_i · k_self_i / sqrt(key_dim)

each MLP `Linear, ReLU, Dropout, Linear` (the release's shape). The paper
speaks twice, in its text (eq. 5, Fig. 2) and in its code (Fig. 8), and the
authors' release differs from both; each difference is a named switch, named
here for where each value comes from (defaults: the paper):

* ``scaled``: True, Fig. 8's 1/sqrt(key_dim) on the scores; False, the
  release (quirk §1.10.3);
* ``self_key_input``: ``"projection"``, Fig. 8's k_self = MLP_k([q'_i; e]);
  ``"query"``, the release's MLP_k([q_i; e]) from the already transformed query;
* ``relative_positions``: True adds the release's q_i · B_pos PE(i + 1 − c)
  to every slot (the shift slot at distance 0); neither eq. 5 nor Fig. 8 has it;
* the softmax (`attachment_log_probs`): ``"legal"``, the paper's *text*:
  eq. 5 over the candidates, the rightmost tokens of the stack elements and
  shift, the other tokens being unreachable (Fig. 2's dashed lines), under
  the ROOT rule of `slot_legality`; ``"causal"``, the paper's *Fig. 8* and
  the release: over every causal slot c <= i + 1 (Fig. 8 masks only the
  future); at inference the release then sets the illegal slots to −inf
  after the log-softmax without renormalising (Fig. 8 shows no inference).

k~_ij depends on j and on the depth value only, so MLP_c's hidden layer is
evaluated once per (token, depth value) instead of forming `[T, T, key_dim]`
keys. (Dropout inside MLP_c is therefore drawn per (j, depth), not per (i, j)
pair as in the release; the same in expectation.) Two ways to score, the
same numbers up to float rounding (``depth_chunk``):

* ``depth_chunk=C`` (the default, C = 1): MLP_c's second layer is moved onto
  the query, q_i · (W_2ᵀ g + b_2) = (W_2 q_i) · g + q_i · b_2 with g the
  hidden layer, and the depth values are visited C at a time in a
  `lax.scan` whose body is rematerialised: each step forms g for C depth
  values `[B, T, C, key_dim]`, scores it against every query `[B, T, T, C]`
  and keeps the entries whose tape value it holds. The backward pass keeps
  only `[B, T, key_dim]` tensors and the `[B, T, T]` scores, and the second
  layer costs `B·T·key_dim²` instead of `B·T·D·key_dim²`. At
  configs/pushdown_bllip.py's size (T = 256, d = 1024, key_dim = 2048,
  D = 50, batch 120) the whole train step compiles to 1.07× a plain
  Transformer LM's memory, 1.21× with scan + remat, against 1.75× and 4.9×
  with the table path (benchmarks/pushdown_memory.py, docs/pushdown-layers.md).
  Dropout masks are drawn per depth value from one key, so C changes no
  number, dropout included; they are not the table path's masks.
* ``depth_chunk=None``: the table path (the head before the depth-chunked scan), MLP_c
  evaluated in full for every (token, depth value) `[B, T, D, key_dim]`, the
  scores per depth value `[B, T, T, D]` gathered by the tape;
  ``query_chunk=C`` computes the score table C query rows at a time
  (`lax.map`), `[B, C, T, D]` live at once. Kept as the reference and for
  `nnx.Dropout`'s masks; on a CPU it is as fast as C = 1 with the Dyck
  model's 2 depth values and about 2× slower with 50 (docs/pushdown-layers.md).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.attention import sinusoidal_encoding
from tgjax.nn.params import dense_init, param


def legal_attachments(attach: jax.Array) -> jax.Array:
    """Which tokens token k may attach to, from the labels `[B, N]`: `[B, N, N]` bool.

    ``mask[k, j]``: ``j == k`` (shift), or j is the rightmost token of an
    element on the stack before token k. Token j's element is pushed at step
    j and popped by the first later step k' with ``attach[k'] <= j``, so j is
    a candidate for ``j < k <= pop[j]`` (the device twin of
    `tgjax.syntax.stack_tape.attachment_candidates`).
    """
    n = attach.shape[-1]
    steps = jnp.arange(n)
    pops = (steps[:, None] > steps[None, :]) & (attach[..., :, None] <= steps[None, :])  # [B, k', j]
    pop_step = jnp.where(pops.any(axis=-2), jnp.argmax(pops, axis=-2), n)  # [B, j]
    k, j = steps[:, None], steps[None, :]
    return ((j < k) & (k <= pop_step[..., None, :])) | (j == k)


def slot_legality(attach: jax.Array, roots: jax.Array | None = None) -> jax.Array:
    """Legal slots `[B, T, T + 1]` of positions 0..T-1 from the labels of tokens 0..T, `attach [B, T + 1]`.

    The stack's candidates (`legal_attachments`) under the ROOT rule. ROOT
    (``<s>``) is prepended "such that the attachment decision of the final
    word is made to this ROOT token" (Appendix B), and the release's beam
    allows slot 0 only at ``<eos>`` (released-code.md §1.7), so:

    * a ROOT token shifts;
    * the token that attaches to its sentence's ROOT ends the sentence
      (``<eos>`` in the data's layout; the head sees that token) and has that
      one slot;
    * any other token takes a candidate above its sentence's ROOT (never ROOT,
      never an earlier sentence of a window), or shifts.

    The search and the sampler use the same sets, so a softmax over them
    (``normalise_over="legal"``) makes p(x) = Σ_y p(x, y) a distribution.

    Args:
      attach: `[B, T + 1]` int labels.
      roots: `[B, T + 1]` bool, True at ROOT tokens (one per sentence of a
        window); None: token 0 alone (one sentence per row).
    """
    steps = jnp.arange(attach.shape[-1])
    if roots is None:
        roots = jnp.broadcast_to(steps == 0, attach.shape)
    latest_root = jax.lax.cummax(jnp.where(roots, steps, 0), axis=roots.ndim - 1)  # [B, N]: at or before k
    own_root = jnp.concatenate([jnp.zeros_like(latest_root[..., :1]), latest_root[..., :-1]], axis=-1)  # before k
    ends_sentence = jnp.take_along_axis(roots, attach, axis=-1) & (attach != steps)  # [B, N]
    k, j = steps[:, None], steps[None, :]
    word_slots = (legal_attachments(attach) & (j > own_root[..., :, None])) | (j == k)
    legal = jnp.where(ends_sentence[..., None], j == own_root[..., :, None], word_slots)
    legal = jnp.where(roots[..., None], j == k, legal)
    return legal[..., 1:, :]


def causal_slots(length: int) -> jax.Array:
    """`[T, T + 1]`: slot c exists at position i iff c <= i + 1."""
    return jnp.arange(length + 1)[None, :] <= jnp.arange(length)[:, None] + 1


def attachment_log_probs(logits: jax.Array, legal: jax.Array | None, *,
                         normalise_over: Literal["legal", "causal"] = "legal",
                         mask_illegal: bool = True) -> jax.Array:
    """Log-probabilities `[B, T, T + 1]` of the slots; −inf where a slot is excluded.

    Args:
      logits: `[B, T, T + 1]` from `AttachmentHead`.
      legal: `[B, T, T + 1]` bool (see `slot_legality`), or None for causal only.
      normalise_over: ``"legal"`` (the paper's text, eq. 5 and Fig. 2): softmax
        over the legal slots; ``"causal"`` (the paper's Fig. 8 and the release):
        over every slot c <= i + 1.
      mask_illegal: with ``normalise_over="causal"``, set illegal slots to −inf
        after the log-softmax without renormalising (release inference);
        False leaves them (release training).
    """
    if normalise_over not in ("legal", "causal"):
        raise ValueError(f"normalise_over must be 'legal' or 'causal', got {normalise_over!r}")
    allowed = jnp.broadcast_to(causal_slots(logits.shape[-2]), logits.shape)
    if legal is not None and normalise_over == "legal":
        allowed = allowed & legal
    neg = jnp.finfo(logits.dtype).min
    log_probs = jax.nn.log_softmax(jnp.where(allowed, logits, neg), axis=-1)
    keep = allowed if legal is None or normalise_over == "legal" or not mask_illegal else allowed & legal
    return jnp.where(keep, log_probs, -jnp.inf)


def attachment_loss(log_probs: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    """Mean attachment cross-entropy: `log_probs [B, T, T + 1]`, `labels [B, T]` slots, `weights [B, T]`
    (0 = ignore)."""
    picked = jnp.take_along_axis(log_probs, jnp.clip(labels, 0, log_probs.shape[-1] - 1)[..., None], axis=-1)[..., 0]
    weights = weights.astype(log_probs.dtype)
    picked = jnp.where(weights > 0, picked, 0.0)  # an ignored −inf must not turn the sum into nan
    return -(picked * weights).sum() / jnp.maximum(weights.sum(), 1.0)


class _MLP(nnx.Module):
    """`Linear(d_in -> d_out), ReLU, Dropout, Linear(d_out -> d_out)` on the last axis."""

    def __init__(self, d_in: int, d_out: int, dropout: float, rngs: nnx.Rngs):
        self.w1 = param(rngs, dense_init(), (d_in, d_out), (None, "mlp"))
        self.b1 = param(rngs, nnx.initializers.zeros, (d_out,), ("mlp",))
        self.w2 = param(rngs, dense_init(), (d_out, d_out), ("mlp", None))
        self.b2 = param(rngs, nnx.initializers.zeros, (d_out,), (None,))
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def hidden(self, pre: jax.Array, deterministic: bool) -> jax.Array:
        """The rest of the MLP given the first layer's pre-activation (bias included)."""
        return self.dropout(jax.nn.relu(pre), deterministic=deterministic) @ self.w2[...] + self.b2[...]

    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        return self.hidden(x @ self.w1[...] + self.b1[...], deterministic)


class AttachmentHead(nnx.Module):
    """Scores `[B, T, T + 1]` over (attach to rightmost token c <= i, shift) for each position i."""

    def __init__(self, d_model: int, embed_dim: int, *, num_depths: int, depth_dim: int | None = None,
                 key_dim: int | None = None, dropout: float = 0.0, scaled: bool = True,
                 self_key_input: Literal["projection", "query"] = "projection",
                 relative_positions: bool = False, max_relative_position: int = 512,
                 query_chunk: int | None = None, depth_chunk: int | None = 1, rngs: nnx.Rngs):
        if self_key_input not in ("projection", "query"):
            raise ValueError(f"self_key_input must be 'projection' (paper) or 'query' (release), "
                             f"got {self_key_input!r}")
        if num_depths < 1:
            raise ValueError(f"num_depths must be >= 1, got {num_depths}")
        if query_chunk is not None and query_chunk < 1:
            raise ValueError(f"query_chunk must be >= 1 or None, got {query_chunk}")
        if depth_chunk is not None and depth_chunk < 1:
            raise ValueError(f"depth_chunk must be >= 1 or None, got {depth_chunk}")
        self.query_chunk = query_chunk  # table path: this many query rows at a time (memory B·C·T·D, not B·T·T·D)
        self.depth_chunk = depth_chunk  # None: the table path; C: C depth values per rematerialised scan step
        self.key_dim = key_dim or 2 * d_model
        self.num_depths = int(num_depths)
        depth_dim = depth_dim or self.key_dim
        self.scaled, self.self_key_input = scaled, self_key_input
        self.max_relative_position = int(max_relative_position)
        self.query_proj = param(rngs, dense_init(), (d_model, self.key_dim), ("embed", "mlp"))  # A_q
        self.key_proj = param(rngs, dense_init(), (d_model, self.key_dim), ("embed", "mlp"))  # A_k
        self.query_mlp = _MLP(self.key_dim + embed_dim, self.key_dim, dropout, rngs)
        self.self_key_mlp = _MLP(self.key_dim + embed_dim, self.key_dim, dropout, rngs)
        self.key_depth_mlp = _MLP(self.key_dim + depth_dim, self.key_dim, dropout, rngs)
        self.depth_embedding = param(rngs, nnx.initializers.normal(1.0), (self.num_depths, depth_dim), (None, None))
        if relative_positions:
            self.rel_key = param(rngs, dense_init(), (d_model, self.key_dim), ("embed", "mlp"))  # B_pos
            self.position_table = nnx.Cache(
                jnp.asarray(sinusoidal_encoding(np.arange(self.max_relative_position + 1), d_model)))
        else:
            self.rel_key = None

    def _depth_parts(self, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
        """MLP_c's first layer split over [k_j; β_e]: `[B, T, kd]` from the keys, `[D, kd]` from β (bias in)."""
        w1 = self.key_depth_mlp.w1[...]
        return keys @ w1[: self.key_dim], self.depth_embedding[...] @ w1[self.key_dim:] + self.key_depth_mlp.b1[...]

    def _table_scores(self, query: jax.Array, keys: jax.Array, depth_index: jax.Array,
                      deterministic: bool) -> jax.Array:
        """q_i · MLP_c([k_j; β[W_i[j]]]) `[B, T, T]` from MLP_c evaluated for every (j, e) `[B, T, D, kd]`."""
        B, T, _ = query.shape
        key_part, depth_part = self._depth_parts(keys)
        depth_keys = self.key_depth_mlp.hidden(key_part[:, :, None, :] + depth_part, deterministic)  # [B, T, D, kd]

        def rows(query_rows, index_rows):  # [B, C, kd], [B, C, T] -> [B, C, T]
            by_depth = jnp.einsum("bik,bjek->bije", query_rows, depth_keys)  # [B, C, T(j), D]
            return jnp.take_along_axis(by_depth, index_rows[..., None], axis=-1)[..., 0]

        chunk = self.query_chunk
        if chunk is None or chunk >= T:
            return rows(query, depth_index)  # [B, T, T]
        # [B, C, T, D] per block of C query rows instead of [B, T, T, D] at once (long windows).
        pad = -T % chunk
        blocks = (T + pad) // chunk
        q_blocks = jnp.pad(query, ((0, 0), (0, pad), (0, 0))).reshape(B, blocks, chunk, -1).swapaxes(0, 1)
        i_blocks = jnp.pad(depth_index, ((0, 0), (0, pad), (0, 0))).reshape(B, blocks, chunk, T).swapaxes(0, 1)
        token_scores = jax.lax.map(lambda qi: rows(*qi), (q_blocks, i_blocks))
        return token_scores.swapaxes(0, 1).reshape(B, T + pad, T)[:, :T]

    def _depth_chunked_scores(self, query: jax.Array, keys: jax.Array, depth_index: jax.Array,
                              deterministic: bool) -> jax.Array:
        """The same `[B, T, T]` as `_table_scores`, C depth values per rematerialised scan step.

        s_ij = q_i · (W_2ᵀ g_je + b_2) = (W_2 q_i) · g_je + q_i · b_2 with e = W_i[j] and g_je =
        Dropout(ReLU(k_j A + β_e A' + b_1)) MLP_c's hidden layer: per step, g for C depth values
        `[B, T, C, kd]`, their scores against every query `[B, T, T, C]`, and the entries whose tape value
        is among them. `jax.checkpoint` on the step: the backward pass recomputes g instead of keeping it.
        """
        mlp = self.key_depth_mlp
        B, T, kd = query.shape
        key_part, depth_part = self._depth_parts(keys)  # [B, T, kd], [D, kd]
        reduced_query = query @ mlp.w2[...].T  # W_2 q_i: [B, T, kd]
        chunk = min(self.depth_chunk, self.num_depths)
        pad = -self.num_depths % chunk
        steps = (self.num_depths + pad) // chunk
        # Padding depth values (>= D) match no tape entry: their scores are computed and dropped.
        depth_blocks = jnp.pad(depth_part, ((0, pad), (0, 0))).reshape(steps, chunk, kd)
        value_blocks = jnp.arange(self.num_depths + pad, dtype=jnp.int32).reshape(steps, chunk)
        drop = mlp.dropout
        use_dropout = not deterministic and drop.rate > 0.0
        # One key for the call; each depth value's mask is drawn from it by its value, so the chunk size
        # changes no mask.
        dropout_key = drop.rngs() if use_dropout else jax.random.key(0)

        def step(scores, block):  # [B, T, T]; ([C, kd], [C])
            part, values = block
            hidden = jax.nn.relu(key_part[:, :, None, :] + part)  # [B, T(j), C, kd]
            if use_dropout:
                keep = 1.0 - drop.rate
                masks = jax.vmap(lambda v: jax.random.bernoulli(
                    jax.random.fold_in(dropout_key, v), keep, (B, T, kd)), out_axes=2)(values)
                hidden = jnp.where(masks, hidden / keep, 0.0)
            by_depth = jnp.einsum("bik,bjek->bije", reduced_query, hidden)  # [B, T(i), T(j), C]
            picked = jnp.where(depth_index[..., None] == values, by_depth, 0.0).sum(-1)
            return scores + picked, None

        step = jax.checkpoint(step, prevent_cse=False)  # inside a scan CSE cannot undo it
        scores, _ = jax.lax.scan(step, jnp.zeros((B, T, T), query.dtype), (depth_blocks, value_blocks))
        return scores + (query @ mlp.b2[...])[:, :, None]

    def __call__(self, hidden: jax.Array, next_embedding: jax.Array, tape: jax.Array, *,
                 deterministic: bool = True) -> jax.Array:
        """Slot logits `[B, T, T + 1]` (unmasked; see `attachment_log_probs`).

        Args:
          hidden: `[B, T, d]` final-layer states h_0..h_{T-1}.
          next_embedding: `[B, T, d_e]`, row i the embedding of token i + 1.
          tape: `[B, T, T]` integer stack tape, row i = W_i (clipped to the table).
        """
        B, T, _ = hidden.shape
        projected_q = hidden @ self.query_proj[...]  # q' [B, T, kd]
        keys = hidden @ self.key_proj[...]  # k [B, T, kd]
        query = self.query_mlp(jnp.concatenate([projected_q, next_embedding], -1), deterministic)
        self_source = projected_q if self.self_key_input == "projection" else query
        self_key = self.self_key_mlp(jnp.concatenate([self_source, next_embedding], -1), deterministic)
        depth_index = jnp.clip(tape, 0, self.num_depths - 1).astype(jnp.int32)
        if self.depth_chunk is None:
            token_scores = self._table_scores(query, keys, depth_index, deterministic)
        else:
            token_scores = self._depth_chunked_scores(query, keys, depth_index, deterministic)
        self_scores = jnp.einsum("bik,bik->bi", query, self_key)  # [B, T]
        # Slot i + 1 of row i holds the shift score; slots beyond are masked later.
        steps = jnp.arange(T + 1)
        is_shift = steps[None, :] == jnp.arange(T)[:, None] + 1  # [T, T + 1]
        padded = jnp.concatenate([token_scores, jnp.zeros((B, T, 1), token_scores.dtype)], axis=-1)
        logits = jnp.where(is_shift, self_scores[..., None], padded)
        if self.rel_key is not None:
            rel_keys = self.position_table[...] @ self.rel_key[...]  # [P, kd]
            by_distance = query @ rel_keys.T  # [B, T, P]
            distance = jnp.clip(jnp.arange(T)[:, None] + 1 - steps[None, :], 0, self.max_relative_position)
            logits = logits + jnp.take_along_axis(by_distance, jnp.broadcast_to(distance, (B, T, T + 1)), axis=-1)
        if self.scaled:
            logits = logits / np.sqrt(self.key_dim)
        return logits
