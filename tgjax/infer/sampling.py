"""Ancestral sampling from TG and TXL (CC) that only ever produces well-formed trees.

At every step the model's next-action distribution (`PrefixScorer`, device
side, incremental: each sample keeps its prefix's layer inputs) is restricted to the actions that keep the sequence a prefix of one
well-formed tree (host side), then tempered and truncated (top-k, top-p) and
sampled (device side):

* an opening non-terminal (any label), if fewer than `max_open_nts`
  constituents are open, fewer than `max_consecutive_opens` opens came in a
  row, and the length cap still leaves room to finish;
* a word (any terminal id; with SentencePiece a continuation piece only right
  after another piece), if a constituent is open;
* the closing non-terminal of the innermost open label, if that constituent
  is non-empty. Closing the root ends the sample: one root, nothing after it;
* the length cap `max_actions`: an action is allowed only if the shortest
  completion after it (close everything, after one word if the innermost
  constituent is empty) still fits, so every sample ends well-formed within
  the cap (it is then made to close).

Sampling is from the *restricted, renormalised* distribution (it must be: a
disallowed action cannot be taken); `Sample.log_prob` reports the model's
own, unrestricted log p of the sampled actions. `temperature=0` is greedy
decoding (argmax over the allowed actions); `top_k=1` is greedy too. Ties at
a top-k or top-p threshold are all kept.

A prompt (Choe–Charniak tokens, e.g. `"(S (NP the"`) is validated as a
well-formed prefix and continued. Outputs are trees, via
`tree_from_choe_charniak`.

    loaded = load_model("runs/tiny")                                 # tgjax.infer.loading
    sampler = Sampler(loaded.model, loaded.vocab, "tg", SamplingConfig(temperature=0.8, top_p=0.95))
    samples = sampler.sample(5, seed=0, prompt="(S (NP the")    # each: .tree, .log_prob, .actions

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
from tgjax.infer.choe_charniak import ActionSpace
from tgjax.infer.incremental import PrefixScorer
from tgjax.models.transformer_lm import TransformerLM
from tgjax.syntax import actions as cc
from tgjax.syntax import token_types as tt
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


@dataclasses.dataclass
class _State:
    """Parse state of one sample (host side)."""

    ids: list[int]
    stack: list[list]  # [label index, non-empty]
    opens: int = 0
    last_terminal: bool = False
    done: bool = False
    log_prob: float = 0.0
    cache: object = None  # PrefixCache of BOS + ids[:-1] (from the previous step)


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
    """Ancestral sampler for TG / TXL (CC) (see the module docstring).

    Args:
      model: the model; vocab: its vocabulary; rule: "tg" or "txl_cc".
      config: `SamplingConfig`.
    """

    def __init__(self, model: TransformerLM, vocab: Vocabulary, rule: str, config: SamplingConfig = SamplingConfig()):
        if rule not in ("tg", "txl_cc"):
            raise ValueError(f"sampling trees needs a syntactic model (rule 'tg' or 'txl_cc'), got rule {rule!r}")
        self.vocab = vocab
        self.config = config
        self.space = ActionSpace.from_vocab(vocab)
        if not self.space.num_labels:
            raise ValueError("the vocabulary has no non-terminals: cannot build trees")
        self.scorer = PrefixScorer(model, rule, self.space.token_types, bos_id=vocab.bos_id, candidate_ids=None,
                                   max_batch=config.batch_size, min_batch=config.batch_size)
        V = vocab.size
        types = self.space.token_types
        self.is_open = np.zeros(V, bool)
        self.is_open[self.space.open_ids] = True
        terminal = np.isin(types, (tt.TERMINAL, tt.PLACEHOLDER))
        terminal[[vocab.pad_id, vocab.bos_id, vocab.eos_id]] = False
        if not config.allow_unk:
            terminal[vocab.unk_id] = False
        word_start = terminal.copy()
        processor = getattr(vocab, "processor", None)  # SentencePiece: "▁" starts a word
        if processor is not None:
            starts = np.array([processor.id_to_piece(i).startswith("\u2581") for i in range(V)])
            word_start &= starts | (np.arange(V) == vocab.unk_id)
        self.word_start = word_start
        self.continuation = terminal & ~word_start
        self.label_of_open = {int(i): k for k, i in enumerate(self.space.open_ids)}
        self.label_of_close = {int(i): k for k, i in enumerate(self.space.close_ids)}

    # -- prompts ---------------------------------------------------------------

    def _prompt_state(self, prompt: str | Sequence[str] | None) -> tuple[_State, list[str]]:
        tokens = prompt.split() if isinstance(prompt, str) else list(prompt or [])
        state = _State(ids=[], stack=[])
        closed_root = False
        for position, token in enumerate(tokens):
            kind = cc.token_type(token)
            if closed_root:
                raise ValueError(f"prompt token {position} ({token!r}): the tree is already complete")
            if kind == tt.OPENING_NT:
                label = token[1:]
                if label not in self.space.labels:
                    raise ValueError(f"prompt token {position}: unknown non-terminal {token!r}")
                state.stack.append([self.space.labels.index(label), False])
                state.opens += 1
                state.last_terminal = False
                state.ids.append(int(self.space.open_ids[self.space.labels.index(label)]))
            elif kind == tt.CLOSING_NT:
                if not state.stack:
                    raise ValueError(f"prompt token {position} ({token!r}): closes nothing")
                label, non_empty = state.stack[-1]
                if token[:-1] != self.space.labels[label]:
                    raise ValueError(f"prompt token {position} ({token!r}): the innermost open constituent is "
                                     f"{cc.opening(self.space.labels[label])!r}")
                if not non_empty:
                    raise ValueError(f"prompt token {position} ({token!r}): closes an empty constituent")
                state.stack.pop()
                if state.stack:
                    state.stack[-1][1] = True
                else:
                    closed_root = True
                state.opens = 0
                state.last_terminal = False
                state.ids.append(int(self.space.close_ids[label]))
            else:
                if not state.stack:
                    raise ValueError(f"prompt token {position} ({token!r}): a word outside any constituent "
                                     f"(start with an opening non-terminal)")
                ids, _ = self.space.encode_word(token)
                state.ids.extend(ids)
                state.stack[-1][1] = True
                state.opens = 0
                state.last_terminal = True
        state.done = closed_root
        need = self._need(state)
        if len(state.ids) + need > self.config.max_actions:
            raise ValueError(f"max_actions={self.config.max_actions} leaves no room to complete the prompt "
                             f"({len(state.ids)} ids, {need} more needed at least)")
        return state, tokens

    @staticmethod
    def _need(state: _State) -> int:
        """The fewest actions that complete the sequence: close every open constituent (after a word if empty)."""
        if state.done:
            return 0
        if not state.stack:
            return 3
        return len(state.stack) + (0 if state.stack[-1][1] else 1)

    # -- sampling --------------------------------------------------------------

    def _allowed(self, states: list[_State]) -> np.ndarray:
        """`[N, V]` bool: the well-formed next actions of each sample (host side)."""
        c = self.config
        depth = np.array([len(s.stack) for s in states])
        opens = np.array([s.opens for s in states])
        budget = c.max_actions - np.array([len(s.ids) for s in states])
        last_terminal = np.array([s.last_terminal for s in states])
        can_open = (depth < c.max_open_nts) & (opens < c.max_consecutive_opens) & (1 + depth + 2 <= budget)
        can_word = (depth >= 1) & (1 + depth <= budget)
        allowed = ((can_open[:, None] & self.is_open[None]) | (can_word[:, None] & self.word_start[None])
                   | ((can_word & last_terminal)[:, None] & self.continuation[None]))
        for n, s in enumerate(states):
            if s.stack and s.stack[-1][1]:
                allowed[n, self.space.close_ids[s.stack[-1][0]]] = True
        return allowed

    def _apply(self, state: _State, action: int, log_prob: float) -> None:
        state.ids.append(action)
        state.log_prob += log_prob
        if action in self.label_of_open:
            state.stack.append([self.label_of_open[action], False])
            state.opens += 1
            state.last_terminal = False
        elif action in self.label_of_close:
            state.stack.pop()
            if state.stack:
                state.stack[-1][1] = True
            else:
                state.done = True
            state.opens = 0
            state.last_terminal = False
        else:
            state.stack[-1][1] = True
            state.opens = 0
            state.last_terminal = True

    def sample(self, num_samples: int, *, seed: int = 0, prompt: str | Sequence[str] | None = None) -> list[Sample]:
        """Draws `num_samples` trees (continuing `prompt` if given), `config.batch_size` at a time."""
        if num_samples < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        c = self.config
        template, prompt_tokens = self._prompt_state(prompt)
        key = jax.random.PRNGKey(seed)
        samples: list[Sample] = []
        for start in range(0, num_samples, c.batch_size):
            states = [dataclasses.replace(template, ids=list(template.ids), stack=[list(e) for e in template.stack])
                      for _ in range(min(c.batch_size, num_samples - start))]
            rows = len(states)
            while True:
                active = [s for s in states if not s.done]
                if not active:
                    break
                scored = self.scorer.score([s.ids for s in active], [len(s.ids) for s in active],
                                           [s.cache for s in active])
                # Fixed [rows, V] for `choose` (one compilation); finished rows are padding.
                log_probs = np.zeros((rows, self.vocab.size), np.float32)
                log_probs[:len(active)] = scored.next_log_probs
                allowed = np.ones((rows, self.vocab.size), bool)
                allowed[:len(active)] = self._allowed(active)
                key, sub = jax.random.split(key)
                chosen = np.asarray(choose(sub, jnp.asarray(log_probs), jnp.asarray(allowed),
                                           jnp.float32(max(c.temperature, 1e-30)), jnp.int32(c.top_k),
                                           jnp.float32(c.top_p), greedy=c.temperature == 0))
                for n, (s, a) in enumerate(zip(active, chosen)):
                    if not allowed[n, a]:  # pragma: no cover - every row allows something
                        raise AssertionError(f"sampled a disallowed action {a}")
                    s.cache = scored.caches[n]  # covers the prefix before this action
                    self._apply(s, int(a), float(scored.next_log_probs[n, a]))
            for s in states:
                samples.append(Sample(self._tokens(s, prompt_tokens, len(template.ids)), s.log_prob,
                                      len(prompt_tokens)))
        return samples

    def _tokens(self, state: _State, prompt_tokens: list[str], num_prompt_ids: int) -> list[str]:
        prompt_ids = state.ids[:num_prompt_ids]
        if self.vocab.decode(prompt_ids) == prompt_tokens:  # decode the whole sequence: pieces join up
            return self.vocab.decode(state.ids)
        return prompt_tokens + self.vocab.decode(state.ids[num_prompt_ids:])  # keep the prompt's unknown words


__all__ = ["Sample", "Sampler", "SamplingConfig", "choose"]
