"""Ensembles: uniform mixtures of experts over several checkpoints, per action (Sartran et al. 2022, §3.7).

    ens = Ensemble([tgjax.load(w).tree_scorer() for w in ("runs/tg1", "runs/tg2", "runs/txl1")])
    score_treebank(ens, "valid.txt")         # anything that takes a Scorer takes an Ensemble
    word_surprisals(ens, tree)

The paper's mixture is per action: every next-action distribution is the
mean of the members',

    p_ens(a_i | a_<i) = (1/K) Σ_k p_k(a_i | a_<i),
    log p_ens(x, y)   = Σ_i log p_ens(a_i | a_<i)
                      = Σ_i [logsumexp_k log p_k(a_i | a_<i) − log K],

itself an autoregressive model (what an incremental reader of the ensemble
sees), so `logp` is the sum of `token_logprobs` and the word surprisals sum
to −`logp`. This is what `Ensemble` reports as `logp` by default
(`mixture="per-action"`), and so what `tgjax eval score | ppl | rerank`
report, bound and rerank with; beam search (`tgjax.infer.beam`) searches one
beam with the mixed next-action distribution.

`mixture="sequence"` (`--ensemble-mixture sequence`) reports instead the
mixture of whole sequences,

    log p_seq(x, y) = log (1/K) Σ_k p_k(x, y),

another proper distribution over sequences, which weights the members by how
well each predicted the whole sequence; it is not the paper's ensemble.
`token_logprobs` stay per action under both, so with "sequence" they do not
sum to `logp` for K > 1. Both mixtures equal the single model's for K = 1.

`mix_log_probs` is the one operation of both, for code that holds the
members' log probs itself (beam search mixes next-action distributions with it).

Members must read the same sequences with the same ids: the same vocabulary
(fingerprint), and all syntactic (TG / TXL (CC): p(x, y), mixable with each
other, each laid out by its own masking rule) or all TXL (terminals) (p(x));
a mix of the two is refused. Members run one after another over the same batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

from tgjax.infer.incremental import PrefixScorer, ScoredPrefixes
from tgjax.infer.scoring import Encoded, Scorer, SequenceScore, _make_score
from tgjax.models.transformer_lm import TransformerLM

MIXTURES = ("per-action", "sequence")


def mix_log_probs(values, axis: int = 0) -> np.ndarray:
    """The uniform mixture in log space: `log mean_k exp(values[k])` along `axis` (float64, exact for K = 1).

    Over members' per-action log probs `[K, n]`, or their next-action log
    distributions `[K, ..., V]` (what beam search holds), it is the paper's
    per-action mixture; over members' sequence log probs `[K]` it is the
    sequence mixture. −inf entries are fine (a member that rules an action out).
    """
    values = np.asarray(values, np.float64)
    if values.shape[axis] == 1:
        return np.squeeze(values, axis=axis)
    return logsumexp(values, axis=axis) - math.log(values.shape[axis])


def mixed_sequence_log_prob(member_pieces: np.ndarray, mixture: str = "per-action") -> float:
    """log p_ens of one sequence from its members' per-id log probs `member_pieces [K, n_ids]`.

    "per-action": Σ_i log mean_k p_k(a_i | a_<i) (the paper's); "sequence": log mean_k Π_i p_k(a_i | a_<i).
    """
    if mixture == "per-action":
        return math.fsum(mix_log_probs(member_pieces, axis=0))
    if mixture == "sequence":
        return float(mix_log_probs([math.fsum(row) for row in member_pieces]))
    raise ValueError(f"ensemble mixture: expected one of {MIXTURES}, got {mixture!r}")


class Ensemble:
    """A uniform mixture of `Scorer`s (see the module docstring); scores like a `Scorer`.

    Args:
      members: the K scorers (one vocabulary; all p(x, y) or all p(x)).
      mixture: what `logp` is: "per-action" (default, the paper's ensemble)
        or "sequence" (the mixture of whole sequences).
    """

    def __init__(self, members: Sequence[Scorer], mixture: str = "per-action"):
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one model")
        if mixture not in MIXTURES:
            raise ValueError(f"ensemble mixture: expected one of {MIXTURES}, got {mixture!r}")
        first = members[0]
        for k, m in enumerate(members[1:], start=1):
            if m.loaded.vocab_fingerprint != first.loaded.vocab_fingerprint:
                raise ValueError(f"ensemble member {k} ({m.loaded.describe()}) has another vocabulary than member 0 "
                                 f"({first.loaded.describe()}): members must share one vocabulary")
            if (m.rule == "txl_terminals") != (first.rule == "txl_terminals"):
                raise ValueError(f"ensemble member {k} ({m.loaded.describe()}) models "
                                 f"{'p(x)' if m.rule == 'txl_terminals' else 'p(x, y)'} but member 0 "
                                 f"({first.loaded.describe()}) models "
                                 f"{'p(x)' if first.rule == 'txl_terminals' else 'p(x, y)'}; they cannot be mixed")
        self.members = members
        self.mixture = mixture
        self.vocab = first.vocab
        # The rule decides what is read of a tree; TG and TXL (CC) read the same actions.
        self.rule = first.rule

    def __len__(self) -> int:
        return len(self.members)

    def describe(self) -> str:
        return f"ensemble ({self.mixture} mixture) of " + ", ".join(m.loaded.describe() for m in self.members)

    def score_encoded(self, encoded: Sequence[Encoded], indices: Sequence[int] | None = None) -> list[SequenceScore]:
        """Per sequence: `logp` (of the ensemble's `mixture`), `token_logprobs` (per action), `member_logps`."""
        indices = range(len(encoded)) if indices is None else indices
        per_member = [m.piece_logprobs(encoded) for m in self.members]  # [K][S][n_ids]
        out = []
        for s, (index, e) in enumerate(zip(indices, encoded)):
            pieces = np.stack([per_member[k][s] for k in range(len(self.members))])  # [K, n_ids]
            member_logps = np.array([math.fsum(row) for row in pieces])
            logp = mixed_sequence_log_prob(pieces, self.mixture)
            out.append(_make_score(index, e, mix_log_probs(pieces, axis=0), logp=logp, member_logps=member_logps))
        return out


# -----------------------------------------------------------------------------
# Ensemble members of the searches (one beam over the per-action mixture).


def member_list(model: TransformerLM | Sequence[TransformerLM],
                rule: str | Sequence[str]) -> list[tuple[TransformerLM, str]]:
    """(model, rule) per ensemble member: one model, or K models with one rule each (or one rule for all)."""
    models = list(model) if isinstance(model, (list, tuple)) else [model]
    rules = [rule] * len(models) if isinstance(rule, str) else list(rule)
    if not models or len(rules) != len(models):
        raise ValueError(f"{len(models)} models and {len(rules)} rules: give one rule per model")
    return list(zip(models, rules))


def score_mixed(scorers: Sequence[PrefixScorer], sequences: Sequence[Sequence[int]], queries: Sequence[int],
                caches: Sequence[tuple | None] | None = None) -> ScoredPrefixes:
    """`PrefixScorer.score` of K members on the same sequences, mixed per action (the mean of the probabilities).

    Args:
      scorers: the K members' scorers (one vocabulary).
      sequences, queries: as `PrefixScorer.score`.
      caches: None, or per sequence None or a K-tuple of caches (member k's
        cache of that sequence's prefix).
    Returns:
      `ScoredPrefixes` with `next_log_probs [N, C]` the mixed next-action
      distributions, `continuation_log_probs[i]` the mixed per-action log
      probs, and `caches[i]` the K-tuple of the members' caches. For K = 1,
      the member's own values.
    """
    scored = []
    for k, scorer in enumerate(scorers):
        own = None if caches is None else [None if c is None else c[k] for c in caches]
        scored.append(scorer.score(sequences, queries, own))
    next_log_probs = mix_log_probs(np.stack([s.next_log_probs for s in scored]), axis=0)  # [N, C]
    continuations = [mix_log_probs(np.stack([s.continuation_log_probs[i] for s in scored]), axis=0)
                     for i in range(len(sequences))]
    return ScoredPrefixes(next_log_probs, continuations, list(zip(*(s.caches for s in scored))))
