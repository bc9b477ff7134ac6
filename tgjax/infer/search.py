"""What a model family gives a search: states, allowed actions, their log-probabilities, successors.

Word-synchronous beam search (`tgjax.infer.beam`), and next the device beam
engine and the Pushdown Layers family, walk the same graph: from a state a
few actions are allowed, the model gives each a log-probability, and an
action leads to a new state. The search keeps the beam (scores, ranking,
word synchronisation); a family keeps everything about its syntax and its
model, behind this interface:

    family.initial_state()                      the state before any action
    family.allowed(states)                      [N, A] bool: the actions each state may take
    family.score(states, next_words)            ActionScores: log p of every action (or of ending), one model call
    family.advance(state, action, word, memory) the successor state
    family.tokens(state, words)                 the finished sequence, as tokens

Actions are the family's own codes 0..A−1 (`num_actions`); exactly one of
them, `word_action`, generates the sentence's next word (forced: the search
knows the words), so a search can tell word successors from the rest
without knowing the family's syntax. For Choe–Charniak families (TG, TXL
(CC); `tgjax.infer.choe_charniak`) the codes are "open label l", "close the
innermost constituent" and "the next word"; a Pushdown family's would be
(word, attachment) pairs.

Log-probabilities are the model's own, not renormalised over the allowed
actions. `score` runs one (batched) model call for all the states given,
so a search asks once per step for all its sentences.

Sampling (`tgjax.infer.sampling`) walks the same states without knowing the
words: it needs the model's whole next-token distribution, one model id at a
time (a word of several pieces is several steps). A family that can be
sampled adds (`SamplingFamily`; nothing above changes):

    family.vocab_size                            V, the model's ids
    family.state_after(tokens)                   the state after a prompt (ValueError naming the bad token)
    family.length(state)                         ids in the state's sequence
    family.steps_to_finish(state)                the fewest ids that complete it (0: finished)
    family.allowed_tokens(states, max_length)    [N, V] bool: well-formed next ids, completable within max_length
    family.next_token_scores(states)             TokenScores: log p of every id as the next one, one model call
    family.advance_token(state, token, memory)   the successor by one id
    family.decode(state, since)                  the tokens of the sequence (after the prefix state `since`)

An id is allowed when it keeps the sequence a prefix of a well-formed one
(within the family's caps) and `length + 1 + steps_to_finish(successor) <=
max_length`, so a sampler that takes only allowed ids ends every sample
well-formed within the cap. Finished states allow nothing. For Choe–Charniak
families closing the root is the last id (`advance` never closes the root:
a search ends a sentence with `end_log_probs` instead), and the token
methods run on `allowed`/`advance` for the rest; their `next_token_scores`
needs scorers over the whole vocabulary (`candidate_ids=None`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

State = TypeVar("State")


@dataclasses.dataclass
class ActionScores:
    """The model's answer for N states (natural logs).

    Attributes:
      log_probs: `[N, A]`: log p(action | state's prefix) of every action
        code, `word_action` being the next word (all its pieces); rows asked
        with `next_words[n] = None` are undefined.
      end_log_probs: `[N]`: log p of ending the sentence from the state (for
        Choe–Charniak: closing every open constituent); defined only where
        `next_words[n]` is None.
      memories: per state, what the model keeps of its prefix (caches), to
        hand to `advance` for the state's successors.
    """

    log_probs: np.ndarray
    end_log_probs: np.ndarray
    memories: list


@runtime_checkable
class SearchFamily(Protocol[State]):
    """A model family as a search sees it (see the module docstring)."""

    num_actions: int  # A
    word_action: int  # the code that generates the next word

    def encode_word(self, word: str) -> tuple[tuple[int, ...], bool]:
        """A word's model ids (one or more pieces) and whether it is unknown; ValueError if it cannot be a word."""
        ...

    def initial_state(self) -> State:
        """The state before any action."""
        ...

    def allowed(self, states: Sequence[State]) -> np.ndarray:
        """`[N, A]` bool: the actions that keep each state a prefix of a well-formed sequence, within the caps."""
        ...

    def score(self, states: Sequence[State], next_words: Sequence[tuple[int, ...] | None]) -> ActionScores:
        """log p of every action from each state (`next_words[n]`: the next word's ids), or of ending (None)."""
        ...

    def advance(self, state: State, action: int, word: tuple[int, ...], memory) -> State:
        """The successor of `state` by `action` (`word`: the next word's ids; `memory`: `score`'s for `state`)."""
        ...

    def tokens(self, state: State, words: Sequence[str]) -> list[str]:
        """The state's sequence ended (everything closed), with the sentence's own words."""
        ...


@dataclasses.dataclass
class TokenScores:
    """The model's next-id distribution for N states (natural logs), what sampling draws from.

    Attributes:
      log_probs: `[N, V]`: log p(id | state's prefix) of every model id, unrestricted.
      memories: per state, what the model keeps of its prefix, for `advance_token`.
    """

    log_probs: np.ndarray
    memories: list


@runtime_checkable
class SamplingFamily(SearchFamily[State], Protocol[State]):
    """A search family that can also be sampled one model id at a time (see the module docstring)."""

    vocab_size: int  # V

    def state_after(self, tokens: Sequence[str]) -> State:
        """The state after a prompt's tokens; ValueError naming the first token that is not a well-formed prefix."""
        ...

    def length(self, state: State) -> int:
        """How many model ids the state's sequence holds."""
        ...

    def steps_to_finish(self, state: State) -> int:
        """The fewest ids that complete the state's sequence; 0 when it is finished."""
        ...

    def allowed_tokens(self, states: Sequence[State], max_length: int) -> np.ndarray:
        """`[N, V]` bool: the ids that keep each sequence well-formed and completable within `max_length` ids."""
        ...

    def next_token_scores(self, states: Sequence[State]) -> TokenScores:
        """log p of every model id as the next one after each state (one batched model call)."""
        ...

    def advance_token(self, state: State, token: int, memory) -> State:
        """The successor of `state` by the id `token` (`memory`: `next_token_scores`'s for `state`)."""
        ...

    def decode(self, state: State, since: State | None = None) -> list[str]:
        """The tokens of the state's sequence, words decoded from their ids; only those after `since`'s if given."""
        ...


__all__ = ["ActionScores", "SamplingFamily", "SearchFamily", "TokenScores"]
