"""Ensembles: uniform mixtures of experts over several checkpoints (Sartran et al. 2022, §3.7).

    ens = Ensemble([Scorer(load_model(w)) for w in ("runs/tg1", "runs/tg2", "runs/txl1")])
    score_treebank(ens, "valid.txt")         # anything that takes a Scorer takes an Ensemble
    word_surprisals(ens, tree)

Two mixtures, and where each is used:

* Sequence level, for perplexity bounds, reranking and `score`'s `logp`:
  the paper's "probability is the mean probability under the constituent
  models",

      log p_ens(x, y) = log (1/K) Σ_k p_k(x, y) = logsumexp_k log p_k(x, y) − log K.

  A proper distribution over whole sequences.
* Per token, for surprisal (`token_logprobs`, `word_surprisals`): each
  next-token distribution is the mean of the members' next-token
  distributions,

      log p_ens(a_i | a_<i) = logsumexp_k log p_k(a_i | a_<i) − log K,

  which is what an incremental reader of the ensemble would see, and is
  itself a proper autoregressive model; it is *not* the sequence mixture
  (which would weight members by how well they predicted the prefix), so
  Σ_i token log probs differs from `logp` for K > 1. Both are equal to the
  single model's for K = 1, and for K identical models.

`mix_log_probs` is both mixtures as one function, for code that holds the
members' log probs itself (beam search and SyntaxGym scoring mix next-token
distributions with it).

Members must read the same sequences with the same ids: the same vocabulary
(fingerprint), and all syntactic (TG / TXL (CC): p(x, y), mixable with each
other) or all TXL (terminals) (p(x)); a mix of the two is refused. Members
run one after another over the same batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tgjax.eval.scoring import Encoded, Scorer, SequenceScore, _make_score


def mix_log_probs(values, axis: int = 0) -> np.ndarray:
    """The uniform mixture in log space: `log mean_k exp(values[k])` along `axis` (float64, exact for K = 1).

    The one operation of both mixtures: over members' sequence log probs
    `[K]` it is the sequence mixture; over members' per-token log probs
    `[K, n]`, or their next-token log distributions `[K, ..., V]` (what an
    incremental scorer, beam search or SyntaxGym code holds), the per-token
    mixture. −inf entries are fine (a member that rules a token out).
    """
    values = np.asarray(values, np.float64)
    if values.shape[axis] == 1:
        return np.squeeze(values, axis=axis)
    top = np.max(values, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    mean = np.mean(np.exp(values - top), axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.squeeze(np.log(mean) + top, axis=axis)


class Ensemble:
    """A uniform mixture of `Scorer`s (see the module docstring); scores like a `Scorer`."""

    def __init__(self, members: Sequence[Scorer]):
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one model")
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
        self.vocab = first.vocab
        # The rule decides what is read of a tree; TG and TXL (CC) read the same actions.
        self.rule = first.rule

    def __len__(self) -> int:
        return len(self.members)

    def describe(self) -> str:
        return "ensemble of " + ", ".join(m.loaded.describe() for m in self.members)

    def score_encoded(self, encoded: Sequence[Encoded], indices: Sequence[int] | None = None) -> list[SequenceScore]:
        """Per sequence: `logp` the sequence mixture, `token_logprobs` the per-token mixture, `member_logps`."""
        indices = range(len(encoded)) if indices is None else indices
        per_member = [m.piece_logprobs(encoded) for m in self.members]  # [K][S][n_ids]
        out = []
        for s, (index, e) in enumerate(zip(indices, encoded)):
            pieces = np.stack([per_member[k][s] for k in range(len(self.members))])  # [K, n_ids]
            member_logps = np.array([math.fsum(row) for row in pieces])
            logp = float(mix_log_probs(member_logps))
            token_mix = mix_log_probs(pieces, axis=0)
            out.append(_make_score(index, e, token_mix, logp=logp, member_logps=member_logps))
        return out


class WordScorerEnsemble:
    """A uniform mixture of word scorers (beam searches or `TerminalScorer`s) for SyntaxGym and BLiMP.

    Each member searches every sentence on its own; the results are mixed as
    the module docstring says: per word, the mixture of the members'
    next-word distributions,

        surprisal_ens(x_t) = −log (1/K) Σ_k p_k(x_t | x_<t),

    and per sentence the sequence mixture log p_ens(x) = log (1/K) Σ_k p_k(x)
    (end of sentence included); for K > 1 the surprisals then do not sum to
    −log p_ens(x) (the two mixtures differ). The members' vocabularies may differ (each
    encodes the words its own way); they must all be syntactic or all words-only.
    """

    def __init__(self, members: Sequence, names: Sequence[str] | None = None):
        members = list(members)
        if not members:
            raise ValueError("an ensemble needs at least one model")
        self.members = members
        self.names = list(names) if names is not None else [f"member {k}" for k in range(len(members))]
        self.space = members[0].space  # unknown words are counted with member 0's vocabulary

    def search(self, sentences: Sequence[Sequence[str]]):
        from tgjax.eval.beam import BeamResult

        per_member = [m.search(sentences) for m in self.members]  # [K][N]
        mixed = []
        for results in zip(*per_member):
            surprisals = -mix_log_probs(np.stack([-r.surprisals for r in results]))  # [n]
            end = -mix_log_probs(np.array([-r.end_surprisal for r in results]))
            log_prob = float(mix_log_probs(np.array([r.log_prob for r in results])))
            best = max(results, key=lambda r: r.best_log_prob if r.best_actions is not None else -math.inf)
            mixed.append(BeamResult(words=list(results[0].words),
                                    prefix_log_probs=np.concatenate([[0.0], np.cumsum(-surprisals)]),
                                    surprisals=surprisals, log_prob=log_prob, end_surprisal=float(end),
                                    best_actions=best.best_actions, best_log_prob=best.best_log_prob,
                                    num_unknown=results[0].num_unknown))
        return mixed

    def word_surprisals(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return [r.surprisals for r in self.search(sentences)]

    def log_probs(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        return np.array([r.log_prob for r in self.search(sentences)])
