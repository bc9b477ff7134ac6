"""Slow, obvious Pushdown-LM inference straight from the paper's equations: the oracle for `pushdown_search`.

Murty et al. (EMNLP 2023) eq. 7: for a token string x (``<s> w_1 .. w_n
<eos>``, `tgjax.data.pushdown`'s layout) and attachment decisions y,

    log p(x, y) = Σ_k [ log p(x_k | x_<k; W_{k-1}) + log p(r_k | x_<=k; W_{k-1}) ]

where W_{k-1} is the stack tape after token k-1 (Algorithm 1) and the
attachment head sees the next token's embedding (released-code.md §1.4).
Everything here calls the whole model, teacher-forced, on a full prefix with
the dense tape replayed from the attachments (`stack_tape.replay`): no cache,
no incremental state. The tape rows of earlier positions never change once
written (row j is the tape after token j), so this is exactly what the
incremental search must compute.

Legal slots (shared with `pushdown_search` and training, see its docstring): a
word never attaches to ``<s>`` (ROOT); the final ``<eos>`` must (Appendix B), its
attachment log-probability counted (``final_attachment="scored"``, eq. 7) or
not (``"forced"``, the release); ``prefix=True`` scores a string without an
end (the Dyck evaluation's input).

* `joint_log_prob`: log p(x, y) of one attachment sequence, one forward pass.
* `enumerate_joint`: every valid attachment sequence and its log p(x, y); the
  exact log p(x) = logsumexp over them (tiny strings: Catalan-many trees).
* `host_beam`: the beam search over (word, attachment), one forward pass per
  hypothesis and step, with the surprisal definitions of `pushdown_search`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy.special import logsumexp  # float64 on the host; -inf for no values or all -inf

from tgjax.infer.pushdown_search import forward
from tgjax.nn.attachment_head import attachment_log_probs
from tgjax.syntax import stack_tape as stt


def prefix_step_log_probs(model, tokens: Sequence[int], attach: Sequence[int], *, final: bool = False
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Next-token and attachment log-probabilities after the prefix ``tokens[:len(attach)]``.

    Runs the whole model, teacher-forced, on the prefix (positions 0..k-1,
    k = len(attach)) with the dense tape replayed from ``attach`` and reads the
    last position. (Inputs are padded to a multiple of 8 so that one
    compilation serves every prefix: positions after k-1 cannot change it,
    attention being causal.)

    Returns:
      ``(token_log_probs [V], slot_log_probs [k + 1])``: log p(x_k | x_<k) for
      every id, and log p(r_k = c | x_<=k) for every slot c (c = k: shift) given
      the next token ``tokens[k]``; −inf where a slot is not legal (`allowed_slots`;
      ``final``: token k is the string's ``<eos>``) under the model's normalisation
      (`attachment_normalise`).
    """
    tokens = np.asarray(tokens, np.int32)
    n, k = -(-max(tokens.size, 2) // 8) * 8, len(attach)  # padded to a multiple of 8: few compilations
    depths, _ = stt.replay(np.asarray(attach))
    tape = np.zeros((1, n, n), np.int32)
    tape[0, :k, :k] = np.minimum(depths, 1) if model.config.binary_tape else depths
    inputs = np.zeros((1, n), np.int32)
    inputs[0, :k] = tokens[:k]
    targets = np.zeros((1, n), np.int32)
    targets[0, :tokens.size - 1] = tokens[1:]
    weights = (np.arange(n) < k).astype(np.float32)[None]
    graphdef, state = nnx.split(model)
    outputs = forward(graphdef, state, {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets),
                                         "weights": jnp.asarray(weights), "tape": jnp.asarray(tape)})
    token_log_probs = np.asarray(jax.nn.log_softmax(outputs["lm_logits"][0, k - 1].astype(jnp.float32)), np.float64)
    # Legal slots for token k: the stack elements' rightmost tokens and shift, under the ROOT rule.
    tape_state = stt.IncrementalStackTape(k)
    for r in attach:
        tape_state.step(int(r))
    legal = np.zeros((1, n, n + 1), bool)
    legal[0, k - 1, allowed_slots(tape_state.candidates(), k, final=final)] = True
    slots = attachment_log_probs(outputs["attach_logits"], jnp.asarray(legal),
                                 normalise_over=model.config.attachment_normalise, mask_illegal=True)
    return token_log_probs, np.asarray(slots[0, k - 1, :k + 1], np.float64)


def allowed_slots(candidates: np.ndarray, k: int, *, final: bool) -> np.ndarray:
    """The legal attachments of token k from the stack's candidates (ROOT rule): ROOT alone for the final
    ``<eos>``, else every candidate but ROOT. Training normalises over the same sets (`slot_legality`)."""
    if final:
        return np.asarray([0])
    return np.asarray([c for c in candidates.tolist() if c != 0])


def joint_log_prob(model, tokens: Sequence[int], attach: Sequence[int], *, final_attachment: str = "scored",
                   prefix: bool = False, name: str = "string") -> float:
    """log p(x, y) (eq. 7) of ``tokens`` with attachments ``attach`` (``attach[0] == 0``: ``<s>`` shifts).

    One teacher-forced forward pass with the whole replayed tape. The last
    token's attachment is counted unless it is an ``<eos>`` with
    ``final_attachment="forced"``.
    """
    tokens = np.asarray(tokens, np.int32)
    attach = np.asarray(attach, np.int32)
    n = tokens.size
    if attach.shape != tokens.shape:
        raise ValueError(f"{name}: {attach.size} attachments for {n} tokens; expected one per token (<s> included)")
    if n < 2 or attach[0] != 0:
        raise ValueError(f"{name}: expected <s> (attachment 0) and at least one more token, got attachments "
                         f"{attach.tolist()}")
    try:
        stt.replay(attach)
    except ValueError as error:
        raise ValueError(f"{name}: the attachments are not a valid stack tape for these tokens: {error}") from None
    total = 0.0
    for k in range(1, n):  # token k, predicted at position k-1 after the prefix's attachments
        token_lp, slot_lp = prefix_step_log_probs(model, tokens, attach[:k], final=k == n - 1 and not prefix)
        total += float(token_lp[tokens[k]])
        if not (k == n - 1 and not prefix and final_attachment == "forced"):
            total += float(slot_lp[attach[k]])
    return total


def valid_attachment_sequences(n: int, *, prefix: bool = False):
    """Every attachment sequence of n tokens the search may produce (``<s>`` first; ROOT rule)."""
    def extend(tape: stt.IncrementalStackTape, attach: list[int]):
        k = len(attach)
        if k == n:
            yield list(attach)
            return
        for r in allowed_slots(tape.candidates(), k, final=(k == n - 1 and not prefix)).tolist():
            child = tape.copy()
            child.step(r)
            yield from extend(child, attach + [r])

    start = stt.IncrementalStackTape(n)
    start.step(0)
    yield from extend(start, [0])


def enumerate_joint(model, tokens: Sequence[int], *, final_attachment: str = "scored",
                    prefix: bool = False) -> list[tuple[list[int], float]]:
    """Every valid attachment sequence with its log p(x, y); exact log p(x) = logsumexp of the scores."""
    return [(attach, joint_log_prob(model, tokens, attach, final_attachment=final_attachment, prefix=prefix))
            for attach in valid_attachment_sequences(len(tokens), prefix=prefix)]


@dataclasses.dataclass
class HostBeamResult:
    """The host beam's answer (token level; position t = token t of the string).

    final: ``[(attach, score)]`` of the last beam, best first.
    beam_surprisals: ``[n]``, entry t (t >= 1): −log Σ_{b in B_{t-1}} p(x_<=t, y_b) / Σ_{b in B_{t-1}} p(x_<t, y_b).
    release_prefix: ``[n]``, entry t: our reading of the release's log p(x_<=t) (see `pushdown_search`).
    """

    final: list[tuple[list[int], float]]
    beam_surprisals: np.ndarray
    release_prefix: np.ndarray

    @property
    def log_prob(self) -> float:
        return float(logsumexp([score for _, score in self.final]))


def host_beam(model, tokens: Sequence[int], beam_size: int, *, final_attachment: str = "scored",
              prefix: bool = False) -> HostBeamResult:
    """Beam search over (next token, attachment), one forward pass per hypothesis and step (the oracle)."""
    tokens = np.asarray(tokens, np.int32)
    n = tokens.size
    start = stt.IncrementalStackTape(n)
    start.step(0)
    beam: list[tuple[list[int], float, stt.IncrementalStackTape]] = [([0], 0.0, start)]
    surprisals = np.zeros(n)
    release = np.zeros(n)
    for k in range(1, n):
        final = k == n - 1 and not prefix
        candidates = []  # (score, parent index, r, word log-prob)
        word_lps = []
        for b, (attach, score, tape) in enumerate(beam):
            token_lp, slot_lp = prefix_step_log_probs(model, tokens, attach, final=final)
            word_lp = float(token_lp[tokens[k]])
            word_lps.append(word_lp)
            for r in allowed_slots(tape.candidates(), k, final=final).tolist():
                attach_lp = 0.0 if (final and final_attachment == "forced") else float(slot_lp[r])
                if np.isfinite(attach_lp):
                    candidates.append((score + word_lp + attach_lp, b, r))
        scores = np.asarray([s for _, s, _ in beam])
        surprisals[k] = -(logsumexp(scores + np.asarray(word_lps)) - logsumexp(scores))
        # Stable order: score descending, then (parent, r) ascending, as the device's top-k breaks ties.
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        kept = candidates[:beam_size]
        origins = sorted({parent for _, parent, _ in kept})
        # The release indexes the sorted candidates by origin (quirk §1.10.6): candidate o's parent, not o.
        release[k] = logsumexp([scores[kept[o][1]] + word_lps[kept[o][1]] for o in origins if o < len(kept)])
        new_beam = []
        for score, parent, r in kept:
            attach, _, tape = beam[parent]
            child = tape.copy()
            child.step(r)
            new_beam.append((attach + [r], score, child))
        beam = new_beam
    return HostBeamResult([(a, s) for a, s, _ in beam], surprisals, release)


__all__ = ["HostBeamResult", "allowed_slots", "enumerate_joint", "host_beam", "joint_log_prob",
           "prefix_step_log_probs", "valid_attachment_sequences"]
