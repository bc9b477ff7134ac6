"""The Choe–Charniak search family: TG and TXL (CC), and ensembles of them, behind `SearchFamily`.

A state is an action prefix and its parse state: the model ids, the action
codes taken, the open constituents and how many opens came in a row. The
`A = L + 2` action codes (L labels) are

    l < L    open label l: allowed if fewer than `max_open_nts` constituents are
             open and fewer than `max_consecutive_opens` opens came in a row;
    L        close the innermost constituent: allowed if it is non-empty and
             is not the root (the root closes only when the sentence ends);
    L + 1    the sentence's next word (all its pieces): allowed inside a constituent.

`score` asks every member's `PrefixScorer` once for all states (each request
is the state's ids followed by the next word's pieces, or by the closing
non-terminals of everything open to end the sentence) and mixes the members
per action (`tgjax.infer.ensemble.score_mixed`). A state carries the members'
caches of its parent's prefix, so a request runs the models on the state's
last action and the continuation only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tgjax.data.vocab import Vocabulary
from tgjax.infer.ensemble import score_mixed
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.search import ActionScores
from tgjax.syntax import actions as cc
from tgjax.syntax import token_types as tt

# -----------------------------------------------------------------------------
# The action space of a vocabulary.


@dataclasses.dataclass(frozen=True)
class ActionSpace:
    """The actions of a Choe–Charniak vocabulary, as the searches and samplers use them.

    Attributes:
      vocab: the vocabulary.
      labels: `[L]` non-terminal labels (in the vocabulary's order).
      open_ids, close_ids: `[L]` int32: the ids of `(label` and `label)`.
      token_types: `[V]` int32: the token type of every id.
    """

    vocab: Vocabulary
    labels: tuple[str, ...]
    open_ids: np.ndarray
    close_ids: np.ndarray
    token_types: np.ndarray

    @classmethod
    def from_vocab(cls, vocab: Vocabulary) -> "ActionSpace":
        labels = tuple(nt[1:] for nt in vocab.opening_nts)
        open_ids = np.asarray(vocab.encode([cc.opening(label) for label in labels]), np.int32)
        close_ids = np.asarray(vocab.encode([cc.closing(label) for label in labels]), np.int32)
        if len(open_ids) != len(labels) or len(close_ids) != len(labels):  # pragma: no cover
            raise ValueError("every non-terminal must be one id")
        types = np.asarray(vocab.token_types(np.arange(vocab.size)), np.int32)
        return cls(vocab, labels, open_ids, close_ids, types)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def encode_word(self, word: str) -> tuple[tuple[int, ...], bool]:
        """The ids of one word (one or more terminal pieces), and whether it is unknown (UNK).

        Words are mapped as in training (`vocab.encode`): an unknown word is
        the UNK id for a word dictionary; SentencePiece splits it into pieces.
        Raises ValueError for a word that is a non-terminal or reserved token.
        """
        if cc.token_type(word) not in (tt.TERMINAL, tt.PLACEHOLDER) or not word or any(c.isspace() for c in word):
            raise ValueError(f"{word!r} cannot be a word of a Choe–Charniak sequence "
                             f"(it looks like a non-terminal, a reserved token, or is blank)")
        ids = tuple(int(i) for i in self.vocab.encode([word]))
        bad = [i for i in ids if self.token_types[i] not in (tt.TERMINAL, tt.PLACEHOLDER)]
        if not ids or bad:
            raise ValueError(f"word {word!r} encodes to non-terminal or reserved ids {bad}")
        return ids, ids == (self.vocab.unk_id,)


# -----------------------------------------------------------------------------
# States and the family.


class CCState(NamedTuple):  # a tuple: beam search makes one per successor, so creation must be cheap
    """An action prefix with its parse state.

    Attributes:
      ids: model ids (no BOS).
      actions: codes taken: l < L opened label l, L + l closed label l, 2L a word.
      stack: open constituents, innermost last, as `2 * label + non_empty`.
      opens: opening non-terminals in a row at the end.
      cache: per ensemble member, the `PrefixCache` of the parent's prefix
        (BOS + all actions but the last; None for the initial state).
    """

    ids: tuple[int, ...] = ()
    actions: tuple[int, ...] = ()
    stack: tuple[int, ...] = ()
    opens: int = 0
    cache: tuple | None = None


class ChoeCharniakFamily:
    """`SearchFamily` of TG and TXL (CC) models (one model, or the per-action mixture of several).

    Args:
      scorers: one `PrefixScorer` per member, whose candidates are
        `space.open_ids` then `space.close_ids`.
      space: the vocabulary's actions.
      max_open_nts, max_consecutive_opens: the well-formedness caps.
      use_cache: score from the parent's caches (default); False recomputes
        every prefix (the reference; same results).
    """

    def __init__(self, scorers: Sequence[PrefixScorer], space: ActionSpace, *, max_open_nts: int,
                 max_consecutive_opens: int, use_cache: bool = True):
        self.scorers = list(scorers)
        self.space = space
        self.max_open_nts = max_open_nts
        self.max_consecutive_opens = max_consecutive_opens
        self.use_cache = use_cache
        self.num_actions = space.num_labels + 2
        self.word_action = space.num_labels + 1

    def encode_word(self, word: str) -> tuple[tuple[int, ...], bool]:
        return self.space.encode_word(word)

    def initial_state(self) -> CCState:
        return _INITIAL

    def allowed(self, states: Sequence[CCState]) -> np.ndarray:
        """`[N, L + 2]` bool (see the module docstring)."""
        depth = np.array([len(s.stack) for s in states], dtype=np.int64)
        opens = np.array([s.opens for s in states], dtype=np.int64)
        top = np.array([s.stack[-1] if s.stack else 0 for s in states], dtype=np.int64)
        can_open = (depth < self.max_open_nts) & (opens < self.max_consecutive_opens)
        can_close = (depth >= 2) & (top & 1).astype(bool)
        can_word = depth >= 1
        return np.concatenate([np.broadcast_to(can_open[:, None], (len(states), self.space.num_labels)),
                               can_close[:, None], can_word[:, None]], axis=1)

    def score(self, states: Sequence[CCState], next_words: Sequence[tuple[int, ...] | None]) -> ActionScores:
        L, close_ids = self.space.num_labels, self.space.close_ids
        sequences = [s.ids + (word if word is not None else tuple(int(close_ids[e >> 1]) for e in reversed(s.stack)))
                     for s, word in zip(states, next_words)]
        scored = score_mixed(self.scorers, sequences, [len(s.ids) for s in states],
                             [s.cache for s in states] if self.use_cache else None)
        next_lp = scored.next_log_probs  # [N, 2L]: the opening then the closing non-terminals
        continuation = np.array([c.sum() for c in scored.continuation_log_probs], np.float64)  # [N]
        top_label = np.array([s.stack[-1] >> 1 if s.stack else 0 for s in states], dtype=np.int64)
        log_probs = np.empty((len(states), L + 2), np.float64)
        log_probs[:, :L] = next_lp[:, :L]
        log_probs[:, L] = next_lp[np.arange(len(states)), L + top_label]  # the innermost label's closing
        log_probs[:, L + 1] = continuation
        return ActionScores(log_probs, continuation, list(scored.caches))

    def advance(self, state: CCState, action: int, word: tuple[int, ...], memory) -> CCState:
        L = self.space.num_labels
        if action < L:
            return CCState(state.ids + (int(self.space.open_ids[action]),), state.actions + (action,),
                           state.stack + (2 * action,), state.opens + 1, memory)
        if action == L:
            label = state.stack[-1] >> 1
            return CCState(state.ids + (int(self.space.close_ids[label]),), state.actions + (L + label,),
                           state.stack[:-2] + (state.stack[-2] | 1,), 0, memory)
        return CCState(state.ids + tuple(word), state.actions + (2 * L,),
                       state.stack[:-1] + (state.stack[-1] | 1,), 0, memory)

    def tokens(self, state: CCState, words: Sequence[str]) -> list[str]:
        """Choe–Charniak tokens of the state's prefix with the sentence's words, then closes what is open."""
        L, labels = self.space.num_labels, self.space.labels
        out, w = [], 0
        for a in state.actions:
            if a < L:
                out.append(cc.opening(labels[a]))
            elif a < 2 * L:
                out.append(cc.closing(labels[a - L]))
            else:
                out.append(words[w])
                w += 1
        out.extend(cc.closing(labels[e >> 1]) for e in reversed(state.stack))
        return out


_INITIAL = CCState()

__all__ = ["ActionSpace", "CCState", "ChoeCharniakFamily"]
