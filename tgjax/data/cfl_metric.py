"""Cross-entropy difference on the CFL tasks (DuSell & Chiang 2022; 2024 §6): the metric and the CFL training criterion.

The metric is the model's per-symbol cross-entropy minus that of the true
distribution the data were sampled from, in nats (0 is optimal):

    Δ = (−Σ_w log p_model(w) + Σ_w log p_true(w)) / Σ_w (|w| + 1)

over the strings w of a data set. The "+ 1" is EOS: the model predicts it
after the last symbol and it counts as a symbol, as in the authors'
evaluation (their lower bound divides by `len(sample) + 1`); BOS is given,
never predicted. log p_true(w) = log[(1 / |L|) · p_G(w) / p_G(|w|)] with L the
valid lengths of the split's range and p_G the generating grammar's exact
inside probability (`tgjax.data.cfl.CFLTask.log_prob_true`).

Per length bin the same formula runs over the strings in the bin. By default
the true distribution keeps its 1/|L| length term in every bin, so a model
equal to the source distribution scores 0 everywhere. The authors' test
script instead conditions each bin on its length (p_true(w) = p_G(w | |w|),
their `num_valid_lengths = 1` per length), which adds log|L| / (ℓ + 1) to a
bin's Δ for any model; `bins_condition_on_length=True` reproduces that.

NumPy only (model scores come in as arrays; JAX arrays are converted), so both
`tgjax.train` (best epoch) and the CFL evaluation use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tgjax.data.cfl import CFLTask, split_spec

__all__ = ["BinDifference", "CrossEntropyDifference", "cross_entropy_difference", "string_log_probs"]


@dataclasses.dataclass(frozen=True)
class BinDifference:
    """Cross-entropies (nats per symbol, EOS included) of the strings with length in [min_length, max_length]."""

    min_length: int
    max_length: int
    num_strings: int
    num_symbols: int
    model_cross_entropy: float
    true_cross_entropy: float

    @property
    def difference(self) -> float:
        return self.model_cross_entropy - self.true_cross_entropy


@dataclasses.dataclass(frozen=True)
class CrossEntropyDifference:
    """The metric over a data set: `overall`, and per length bin in `bins` (keyed by the bin's first length)."""

    overall: BinDifference
    bins: dict[int, BinDifference]

    @property
    def difference(self) -> float:
        """Δ over the whole data set (nats per symbol)."""
        return self.overall.difference

    def per_bin(self) -> dict[int, float]:
        """{first length of the bin: Δ of the bin}."""
        return {start: b.difference for start, b in self.bins.items()}


def string_log_probs(logits, targets, weights) -> np.ndarray:
    """Total log-probability of each string under a model's next-symbol logits.

    Args:
      logits: [N, T, V] unnormalised scores for the target at each position.
      targets: [N, T] int ids (`CFLTask.encode`'s targets: symbols then EOS).
      weights: [N, T] 1 where the target counts, 0 on padding.
    Returns:
      [N] float64: Σ_t weights · log softmax(logits)[targets].
    """
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets)
    weights = np.asarray(weights, dtype=np.float64)
    peak = logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits - peak).sum(axis=-1)) + peak[..., 0]
    picked = np.take_along_axis(logits, targets[..., None].astype(np.int64), axis=-1)[..., 0]
    # where() rather than multiplying, so padding with −inf scores cannot make NaNs.
    return np.where(weights > 0, weights * (picked - log_norm), 0.0).sum(axis=-1)


def _bin_difference(lo: int, hi: int, model_lp: np.ndarray, true_lp: np.ndarray, lengths: np.ndarray) -> BinDifference:
    num_symbols = int((lengths + 1).sum())  # + 1: EOS
    return BinDifference(
        min_length=lo,
        max_length=hi,
        num_strings=int(len(lengths)),
        num_symbols=num_symbols,
        model_cross_entropy=float(-model_lp.sum() / num_symbols),
        true_cross_entropy=float(-true_lp.sum() / num_symbols),
    )


def cross_entropy_difference(
    model_log_probs_per_string,
    strings: Sequence[Sequence[str]],
    task: CFLTask,
    split: str,
    *,
    bin_width: int = 1,
    bins_condition_on_length: bool = False,
) -> CrossEntropyDifference:
    """The cross-entropy difference of a model on `strings` of a split.

    Args:
      model_log_probs_per_string: [N] log p_model(w) of each whole string,
        EOS included (e.g. `string_log_probs` of the model's logits).
      strings: the N strings (lists of symbols, no BOS/EOS).
      task: the task that generated them.
      split: the split they come from ("train", "valid", "test"); its length
        range sets the true distribution's 1/|L| length term.
      bin_width: lengths per bin; bin k covers [lo + k·w, lo + (k + 1)·w − 1]
        with lo the split's minimum length (1 = one bin per length, as the
        paper's plots).
      bins_condition_on_length: per-bin true probabilities conditioned on
        the length (the authors' per-length lower bound); see the module
        docstring. `overall` is unaffected.
    Returns:
      `CrossEntropyDifference` (nats per symbol, EOS counted).
    Raises:
      ValueError: sizes disagree, or a string is outside the task's language
        or the split's length range (its true probability is 0).
    """
    model_lp = np.asarray(model_log_probs_per_string, dtype=np.float64).reshape(-1)
    if len(model_lp) != len(strings):
        raise ValueError(f"{len(model_lp)} model log-probabilities for {len(strings)} strings")
    if bin_width < 1:
        raise ValueError(f"bin_width must be >= 1, got {bin_width}")
    spec = split_spec(split)
    true_lp = task.log_probs_true(strings, split)
    bad = np.flatnonzero(~np.isfinite(true_lp))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"{len(bad)} of {len(strings)} strings have true probability 0 under task {task.name!r}, "
            f"split {split!r} (lengths {spec.min_length}–{spec.max_length}); first: string {i}, "
            f"{''.join(strings[i])!r}"
        )
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    shortest, longest = (int(lengths.min()), int(lengths.max())) if lengths.size else (0, 0)
    overall = _bin_difference(shortest, longest, model_lp, true_lp, lengths)
    bin_true_lp = true_lp
    if bins_condition_on_length:
        bin_true_lp = np.array([task.log_prob_given_length(s) for s in strings], dtype=np.float64)
    bin_index = (lengths - spec.min_length) // bin_width
    bins = {}
    for k in np.unique(bin_index):
        members = bin_index == k
        lo = spec.min_length + int(k) * bin_width
        bins[lo] = _bin_difference(lo, lo + bin_width - 1, model_lp[members], bin_true_lp[members], lengths[members])
    return CrossEntropyDifference(overall=overall, bins=bins)
