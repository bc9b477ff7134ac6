"""Sentences and their parses sampled from a Pushdown-LM: x_k, then r_k, token by token (`tgjax sample`).

Eq. 7 read generatively: at position k-1 (tape W_{k-1}) the model gives
p(x_k | x_<k); the next token is drawn, and then its attachment from the
head, which conditions on the drawn token (released-code.md §1.4), among the
legal slots (the stack elements' rightmost tokens, or shift; never ROOT
``<s>``), the tape updated by Algorithm 1. ``<eos>`` ends the sentence and
attaches to ROOT, folding what is left on the stack. The legal sets are
training's and the beam's (`tgjax.infer.pushdown_oracle.allowed_slots`).
A sample's ``log_prob`` is log p(x, y) under the model's own distributions,
the attachment's renormalised over the legal slots it was drawn from,
whatever the temperature, top-k or top-p used to draw it: with the paper's
legal softmax that is what `pushdown_search.gold_joint_log_prob` gives for
it; with the causal softmax (Fig. 8, the release), whose legal slots sum to
less than one, it is more.

Each step runs the model teacher-forced on the prefix (two passes: the
next-token distribution, then the head given the drawn token): quadratic in
the length, fine for the short sentences of small models.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import logsumexp

from tgjax.infer.pushdown_oracle import allowed_slots
from tgjax.infer.pushdown_search import PushdownSearch, _teacher_forced, _with_words
from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree


@dataclasses.dataclass(frozen=True)
class PushdownSamplingConfig:
    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    max_tokens: int = 64  # tokens after <s>; a sentence that reaches it is ended (and counted)
    allow_unk: bool = True

    def __post_init__(self):
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 2:
            raise ValueError(f"sampling settings out of range: {self}; need temperature >= 0, top_k >= 0, "
                             f"0 < top_p <= 1, max_tokens >= 2")


@dataclasses.dataclass
class PushdownSample:
    ids: np.ndarray  # [n] <s> .. <eos>
    attach: np.ndarray  # [n]
    log_prob: float  # log p(x, y)
    tree: Tree  # over the tokens as words (labels X)
    truncated: bool  # max_tokens reached: <eos> was forced

    def fields(self) -> dict:
        """What was drawn, for a JSON record beside the tree and log p (`tgjax sample --json`)."""
        return {"ids": self.ids.tolist(), "attachments": self.attach.tolist()}


def _draw(log_probs: np.ndarray, allowed: np.ndarray, config: PushdownSamplingConfig, rng) -> int:
    """One index from `log_probs` restricted to `allowed`, with temperature / top-k / top-p."""
    scores = np.where(allowed, log_probs, -np.inf)
    if config.temperature == 0:
        return int(np.argmax(scores))
    scores = scores / config.temperature
    order = np.argsort(-scores)
    if config.top_k:
        scores[order[config.top_k:]] = -np.inf
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    if config.top_p < 1:
        cumulative = np.cumsum(probs[order])
        cut = order[np.searchsorted(cumulative, config.top_p) + 1:]
        probs[cut] = 0.0
        probs /= probs.sum()
    return int(rng.choice(probs.size, p=probs))


def _legal_log_probs(attach_logits, k: int, legal_slots: np.ndarray, padded: int, normalise_over: str) -> np.ndarray:
    """``[k + 1]`` log p(r_k = c) over the legal slots of token k, −inf elsewhere, renormalised over them.

    With the paper's legal softmax this is the head's distribution as it is; with the causal one (Fig. 8, the
    release) the masked values sum to less than one, and the draw (and so the sample's log-probability) is
    from their renormalisation.
    """
    from tgjax.nn.attachment_head import attachment_log_probs

    legal = np.zeros((1, padded, padded + 1), bool)
    legal[0, k - 1, legal_slots] = True
    slot_lp = np.asarray(attachment_log_probs(attach_logits.astype(jnp.float32), jnp.asarray(legal),
                                              normalise_over=normalise_over, mask_illegal=True)[0, k - 1, :k + 1],
                         np.float64)
    return slot_lp - logsumexp(slot_lp[legal_slots])


def sample_one(model, vocab, config: PushdownSamplingConfig, rng: np.random.Generator) -> PushdownSample:
    ids, attach = [vocab.bos_id], [0]
    tape = stt.IncrementalStackTape(config.max_tokens + 2)
    tape.step(0)
    log_prob, truncated = 0.0, False
    banned = {getattr(vocab, "pad_id", 0), vocab.bos_id}
    if not config.allow_unk and getattr(vocab, "unk_id", None) is not None:
        banned.add(vocab.unk_id)
    while True:
        k = len(ids)
        outputs, _, _ = _teacher_forced(model, np.asarray(ids), np.asarray(attach))
        token_lp = np.asarray(jax.nn.log_softmax(outputs["lm_logits"][0, k - 1].astype(jnp.float32)), np.float64)
        allowed = np.ones(token_lp.size, bool)
        allowed[list(banned)] = False
        if k == 1:
            allowed[vocab.eos_id] = False  # at least one word
        if k - 1 == config.max_tokens - 1:
            allowed[:] = False
            allowed[vocab.eos_id] = True
            truncated = True
        token = _draw(token_lp, allowed, config, rng)
        log_prob += token_lp[token]
        # The head given the drawn token: a pass with it as position k-1's target (the dummy shift at k is unread).
        outputs, _, padded = _teacher_forced(model, np.asarray(ids + [token]), np.asarray(attach + [k]))
        legal_slots = allowed_slots(tape.candidates(), k, final=token == vocab.eos_id)
        slot_lp = _legal_log_probs(outputs["attach_logits"], k, legal_slots, padded, model.config.attachment_normalise)
        choices = np.zeros(k + 1, bool)
        choices[legal_slots] = True
        r = _draw(slot_lp, choices, config, rng)
        log_prob += slot_lp[r]
        ids.append(token)
        attach.append(r)
        tape.step(r)
        if token == vocab.eos_id:
            break
    ids_array, attach_array = np.asarray(ids, np.int32), np.asarray(attach, np.int32)
    words = [str(w) for w in vocab.decode(ids_array[1:-1])]
    tree = PushdownSearch.word_tree(attach_array, np.arange(len(words)))
    return PushdownSample(ids_array, attach_array, float(log_prob), _with_words(tree, words), truncated)


def sample(model, vocab, num_samples: int, *, config: PushdownSamplingConfig | None = None, seed: int = 0
           ) -> list[PushdownSample]:
    """`num_samples` independent samples (seeded)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    config = config or PushdownSamplingConfig()
    rng = np.random.default_rng(seed)
    return [sample_one(model, vocab, config, rng) for _ in range(num_samples)]


class PushdownSampler:
    """A Pushdown-LM's `Sampler` capability (`tgjax.load(workdir).sampler()`): whole sentences, words and
    attachments drawn token by token (`sample`); there is no prompt (it is a TG / TXL (CC) action prefix)."""

    def __init__(self, model, vocab, config: PushdownSamplingConfig | None = None):
        self.model, self.vocab, self.config = model, vocab, config or PushdownSamplingConfig()

    def sample(self, num_samples: int, *, seed: int = 0, prompt=None) -> list[PushdownSample]:
        if prompt:
            raise ValueError("a prompt is a TG / TXL (CC) action prefix; a Pushdown-LM samples whole sentences")
        return sample(self.model, self.vocab, num_samples, config=self.config, seed=seed)

    def note(self, samples) -> str:
        """What `tgjax sample` says of a batch of samples."""
        truncated = sum(s.truncated for s in samples)
        return (f"words and attachments drawn token by token; log p = log p(x, y); {truncated} reached the length "
                f"cap ({self.config.max_tokens} tokens) and were ended there; unlabelled trees (X)")


__all__ = ["PushdownSample", "PushdownSampler", "PushdownSamplingConfig", "sample", "sample_one"]
