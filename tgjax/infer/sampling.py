"""Ancestral sampling that only ever produces well-formed trees, through a family's `SamplingFamily` interface.

At every step the model's next-id distribution (`family.next_token_scores`,
device side, incremental: each sample keeps its prefix's layer inputs) is
restricted to the ids that keep the sequence a prefix of one well-formed tree
(`family.allowed_tokens`, host side), then tempered and truncated (top-k,
top-p) and sampled (`choose`, device side). For TG and TXL (CC)
(`tgjax.infer.choe_charniak.ChoeCharniakFamily`, the family beam search
walks) the allowed ids are

* an opening non-terminal (any label), if fewer than `max_open_nts`
  constituents are open, fewer than `max_consecutive_opens` opens came in a
  row, and the length cap still leaves room to finish;
* a word (any terminal id; with SentencePiece a continuation piece only right
  after another piece, and only pieces that keep the word writable in a tree:
  no whitespace, no bracket, not empty, not `<s>`; see
  `tgjax.infer.word_guard`), if a constituent is open;
* the closing non-terminal of the innermost open label, if that constituent
  is non-empty. Closing the root ends the sample: one root, nothing after it;
* the length cap `max_actions`: an id is allowed only if the shortest
  completion after it (close everything, after one word if the innermost
  constituent is empty) still fits, so every sample ends well-formed within
  the cap (it is then made to close).

Sampling is from the *restricted, renormalised* distribution (it must be: a
disallowed action cannot be taken); `Sample.log_prob` reports the model's
own, unrestricted log p of the sampled actions. `temperature=0` is greedy
decoding (argmax over the allowed actions); `top_k=1` is greedy too. Ties at
a top-k or top-p threshold are all kept.

A prompt (Choe–Charniak tokens, e.g. `"(S (NP the"`) is validated as a
well-formed prefix (`family.state_after`) and continued. Outputs are trees,
via `tree_from_choe_charniak`.

    sampler = tgjax.load("runs/tiny").sampler(temperature=0.8, top_p=0.95)   # a Sampler (tgjax.infer.api)
    samples = sampler.sample(5, seed=0, prompt="(S (NP the")    # each: .tree, .log_prob, .actions

Any other family that implements `SamplingFamily` (its `decode` giving
Choe–Charniak tokens) is sampled the same way: `Sampler.from_family(family,
config)`; its own caps then apply, `config`'s `max_open_nts`,
`max_consecutive_opens` and `allow_unk` are the family's business.

The command line (`tgjax sample`) is `tgjax.eval.sample_command`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from tgjax.data.vocab import Vocabulary
from tgjax.infer.choe_charniak import ActionSpace, ChoeCharniakFamily
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.search import SamplingFamily
from tgjax.models.transformer_lm import TransformerLM
from tgjax.syntax import actions as cc
from tgjax.syntax.trees import Tree


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings.

    Attributes:
      temperature: divides the log-probabilities; 0 means greedy (argmax).
      top_k: keep the k most probable allowed actions (0: all).
      top_p: keep the smallest set of most probable allowed actions whose
        probability reaches p (1.0: all).
      max_actions: length cap (actions, prompt included); at least 3.
      max_open_nts, max_consecutive_opens: well-formedness caps, as in beam search.
      allow_unk: whether the UNK word may be sampled.
      batch_size: samples drawn together: every model call has this many rows
        (finished samples are padding), so one compilation per length bucket.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_actions: int = 256
    max_open_nts: int = 32
    max_consecutive_opens: int = 6
    allow_unk: bool = True
    batch_size: int = 64

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_actions < 3:
            raise ValueError(f"max_actions must be at least 3 (open, word, close), got {self.max_actions}")
        for name in ("max_open_nts", "max_consecutive_opens", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


@dataclasses.dataclass
class Sample:
    """One sampled tree.

    Attributes:
      actions: Choe–Charniak tokens, prompt included.
      log_prob: the model's log p of the sampled actions given the prompt
        (unrestricted distribution, nats).
      num_prompt_actions: how many of `actions` came from the prompt.
    """

    actions: list[str]
    log_prob: float
    num_prompt_actions: int = 0

    @property
    def tree(self) -> Tree:
        return cc.tree_from_choe_charniak(self.actions)

    def fields(self) -> dict:
        """What was drawn, for a JSON record beside the tree and log p (`tgjax sample --json`)."""
        return {"actions": self.actions}


@functools.partial(jax.jit, static_argnames=("greedy",))
def choose(key: jax.Array, log_probs: jax.Array, allowed: jax.Array, temperature: jax.Array, top_k: jax.Array,
           top_p: jax.Array, *, greedy: bool) -> jax.Array:
    """One id per row from `log_probs [N, V]` restricted to `allowed [N, V]` (device side).

    Greedy: the argmax over allowed ids. Otherwise: divide by `temperature`,
    keep the `top_k` best (0: all), then the smallest prefix of the sorted
    distribution reaching `top_p`, and sample. Every row must allow something.
    """
    logits = jnp.where(allowed, log_probs, -jnp.inf)
    if greedy:
        return jnp.argmax(logits, axis=-1)
    logits = logits / temperature
    vocab_size = logits.shape[-1]
    ordered = -jnp.sort(-logits, axis=-1)  # descending
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab_size), vocab_size)
    kth = jnp.take_along_axis(ordered, jnp.broadcast_to(k - 1, ordered.shape[:-1])[..., None], axis=-1)
    logits = jnp.where(logits >= kth, logits, -jnp.inf)
    ordered = jnp.where(ordered >= kth, ordered, -jnp.inf)
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep = jnp.sum(before < top_p, axis=-1)  # >= 1: the first is always kept
    threshold = jnp.take_along_axis(ordered, (keep - 1)[..., None], axis=-1)
    logits = jnp.where(logits >= threshold, logits, -jnp.inf)
    return jax.random.categorical(key, logits, axis=-1)


class Sampler:
    """Ancestral sampler for TG / TXL (CC), or any `SamplingFamily` (see the module docstring).

    Args:
      model: the model; vocab: its vocabulary; rule: "tg" or "txl_cc".
      config: `SamplingConfig`.
    """

    def __init__(self, model: TransformerLM, vocab: Vocabulary, rule: str, config: SamplingConfig = SamplingConfig()):
        if rule not in ("tg", "txl_cc"):
            raise ValueError(f"sampling trees needs a syntactic model (rule 'tg' or 'txl_cc'), got rule {rule!r}")
        space = ActionSpace.from_vocab(vocab)
        if not space.num_labels:
            raise ValueError("the vocabulary has no non-terminals: cannot build trees")
        # The whole vocabulary per call (candidate_ids=None), batch_size rows every call.
        scorer = PrefixScorer(model, rule, space.token_types, bos_id=vocab.bos_id, candidate_ids=None,
                              max_batch=config.batch_size, min_batch=config.batch_size)
        family = ChoeCharniakFamily([scorer], space, max_open_nts=config.max_open_nts,
                                    max_consecutive_opens=config.max_consecutive_opens, allow_unk=config.allow_unk)
        self._setup(family, config)
        self.vocab = vocab
        self.space = space
        self.scorer = scorer

    @classmethod
    def from_family(cls, family: SamplingFamily, config: SamplingConfig = SamplingConfig()) -> Sampler:
        """A sampler of any `SamplingFamily` (its own caps apply; see the module docstring)."""
        sampler = cls.__new__(cls)
        sampler._setup(family, config)
        return sampler

    def _setup(self, family: SamplingFamily, config: SamplingConfig) -> None:
        if not isinstance(family, SamplingFamily):
            raise TypeError(f"{type(family).__name__} does not implement SamplingFamily (tgjax.infer.search)")
        self.family = family
        self.config = config

    def _prompt_state(self, prompt: str | Sequence[str] | None):
        tokens = prompt.split() if isinstance(prompt, str) else list(prompt or [])
        state = self.family.state_after(tokens)
        length, need = self.family.length(state), self.family.steps_to_finish(state)
        if length + need > self.config.max_actions:
            raise ValueError(f"max_actions={self.config.max_actions} leaves no room to complete the prompt "
                             f"({length} ids, {need} more needed at least)")
        return state, tokens

    def note(self, samples: Sequence[Sample]) -> str:
        """What `tgjax sample` says of a batch of samples."""
        mean = np.mean([len(s.actions) for s in samples]) if samples else 0
        return f"mean {mean:.1f} actions"

    def sample(self, num_samples: int, *, seed: int = 0, prompt: str | Sequence[str] | None = None) -> list[Sample]:
        """Draws `num_samples` trees (continuing `prompt` if given), `config.batch_size` at a time."""
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        c, family = self.config, self.family
        template, prompt_tokens = self._prompt_state(prompt)
        # The prompt's own text is kept where the vocabulary does not give it back (unknown words).
        keep_prompt = family.decode(template) != prompt_tokens
        V = family.vocab_size
        key = jax.random.PRNGKey(seed)
        samples: list[Sample] = []
        for start in range(0, num_samples, c.batch_size):
            rows = min(c.batch_size, num_samples - start)
            states = [template] * rows  # states are immutable: advancing makes new ones
            log_prob = np.zeros(rows)
            while True:
                active = [n for n in range(rows) if family.steps_to_finish(states[n])]
                if not active:
                    break
                scored = family.next_token_scores([states[n] for n in active])
                # Fixed [rows, V] for `choose` (one compilation); finished rows are padding.
                log_probs = np.zeros((rows, V), np.float32)
                log_probs[:len(active)] = scored.log_probs
                allowed = np.ones((rows, V), bool)
                allowed[:len(active)] = family.allowed_tokens([states[n] for n in active], c.max_actions)
                key, sub = jax.random.split(key)
                chosen = np.asarray(choose(sub, jnp.asarray(log_probs), jnp.asarray(allowed),
                                           jnp.float32(max(c.temperature, 1e-30)), jnp.int32(c.top_k),
                                           jnp.float32(c.top_p), greedy=c.temperature == 0))
                for row, (n, token) in enumerate(zip(active, chosen)):
                    if not allowed[row, token]:  # pragma: no cover - every row allows something
                        raise AssertionError(f"sampled a disallowed id {token}")
                    log_prob[n] += float(scored.log_probs[row, token])
                    states[n] = family.advance_token(states[n], int(token), scored.memories[row])
            for n in range(rows):
                tokens = (prompt_tokens + family.decode(states[n], since=template) if keep_prompt
                          else family.decode(states[n]))
                samples.append(Sample(tokens, float(log_prob[n]), len(prompt_tokens)))
        return samples


__all__ = ["Sample", "Sampler", "SamplingConfig", "choose"]
