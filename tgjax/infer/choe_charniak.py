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

Sampling (`tgjax.infer.sampling`) walks the same family one model id at a
time (`SamplingFamily`): `allowed_tokens` maps the allowed actions to ids (an
opening non-terminal per label, the innermost label's closing one, the
closing of the root too, which finishes the sequence; a word-start piece, and
a continuation piece right after a word's piece) and adds the length cap;
`advance_token` takes an opening or closing id as its action and a
word-start piece as the word action with that one piece (a continuation
piece extends the word: no new action); `next_token_scores` asks the scorers
for the whole vocabulary, so the family's scorers must have been built with
`candidate_ids=None` for it (and `score` then reads the non-terminal columns
out of the full distribution).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tgjax.data.vocab import Vocabulary
from tgjax.infer.ensemble import score_mixed
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.search import ActionScores, TokenScores
from tgjax.infer.word_guard import WordGuard
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
    def from_vocab(cls, vocab: Vocabulary) -> ActionSpace:
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

    @functools.cached_property
    def word_pieces(self) -> tuple[np.ndarray, np.ndarray]:
        """`([V] bool, [V] bool)`: the ids that start a word, and those that continue one (SentencePiece).

        A word is terminal ids (UNK included; not PAD, BOS, EOS). With
        SentencePiece a piece starts a word if it carries the "▁" mark (UNK
        always does); a word dictionary has no continuation ids.
        """
        vocab, size = self.vocab, self.vocab.size
        terminal = np.isin(self.token_types, (tt.TERMINAL, tt.PLACEHOLDER))
        terminal[[vocab.pad_id, vocab.bos_id, vocab.eos_id]] = False
        word_start = terminal.copy()
        processor = getattr(vocab, "processor", None)  # SentencePiece: "▁" starts a word
        if processor is not None:
            starts = np.array([processor.id_to_piece(i).startswith("\u2581") for i in range(size)])
            word_start &= starts | (np.arange(size) == vocab.unk_id)
        return word_start, terminal & ~word_start

    @functools.cached_property
    def word_guard(self) -> WordGuard | None:
        """SentencePiece: which pieces keep a sampled word writable (`tgjax.infer.word_guard`); else None."""
        processor = getattr(self.vocab, "processor", None)
        if processor is None:
            return None
        return WordGuard(processor, *self.word_pieces, self.vocab.unk_id)

    def action_tokens(self, actions: Sequence[int], words: Sequence[str]) -> list[str]:
        """Choe–Charniak tokens of recorded actions: a < L opens label a, a < 2L closes label a − L, else a word."""
        L, labels = self.num_labels, self.labels
        out, w = [], 0
        for a in actions:
            if a < L:
                out.append(cc.opening(labels[a]))
            elif a < 2 * L:
                out.append(cc.closing(labels[a - L]))
            else:
                out.append(words[w])
                w += 1
        return out

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
      scorers: one `PrefixScorer` per member, all with the same candidates:
        `space.open_ids` then `space.close_ids` (what a search needs), or the
        whole vocabulary (`candidate_ids=None`; needed for sampling).
      space: the vocabulary's actions.
      max_open_nts, max_consecutive_opens: the well-formedness caps.
      use_cache: score from the parent's caches (default); False recomputes
        every prefix (the reference; same results).
      allow_unk: whether `allowed_tokens` lets the UNK word be sampled.
    """

    def __init__(self, scorers: Sequence[PrefixScorer], space: ActionSpace, *, max_open_nts: int,
                 max_consecutive_opens: int, use_cache: bool = True, allow_unk: bool = True):
        self.scorers = list(scorers)
        self.space = space
        self.max_open_nts = max_open_nts
        self.max_consecutive_opens = max_consecutive_opens
        self.use_cache = use_cache
        self.allow_unk = allow_unk
        self.num_actions = space.num_labels + 2
        self.word_action = space.num_labels + 1
        self.vocab_size = space.vocab.size
        # Where the opening and closing non-terminals are in the scorers' next-id columns.
        L = space.num_labels
        nt_ids = np.concatenate([space.open_ids, space.close_ids])
        candidates = {None if s.candidate_ids is None else tuple(int(i) for i in s.candidate_ids)
                      for s in self.scorers}
        if candidates == {None}:
            self.full_vocabulary = True
            self._open_columns, self._close_columns = space.open_ids, space.close_ids
        elif candidates == {tuple(int(i) for i in nt_ids)}:
            self.full_vocabulary = False
            self._open_columns, self._close_columns = np.arange(L), L + np.arange(L)
        else:
            raise ValueError("the scorers' candidate_ids must all be the opening then the closing non-terminals "
                             "of the action space, or all None (the whole vocabulary)")
        self._label_of_open = {int(i): k for k, i in enumerate(space.open_ids)}
        self._label_of_close = {int(i): k for k, i in enumerate(space.close_ids)}

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
        next_lp = scored.next_log_probs  # [N, C]: C = 2L (the opening then the closing non-terminals) or V
        continuation = np.array([c.sum() for c in scored.continuation_log_probs], np.float64)  # [N]
        top_label = np.array([s.stack[-1] >> 1 if s.stack else 0 for s in states], dtype=np.int64)
        log_probs = np.empty((len(states), L + 2), np.float64)
        log_probs[:, :L] = next_lp[:, self._open_columns]
        log_probs[:, L] = next_lp[np.arange(len(states)), self._close_columns[top_label]]  # the innermost's closing
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
        out = self.space.action_tokens(state.actions, words)
        out.extend(cc.closing(self.space.labels[e >> 1]) for e in reversed(state.stack))
        return out


    # -- sampling, one model id at a time (`SamplingFamily`) ---------------------

    def state_after(self, tokens: Sequence[str]) -> CCState:
        """The state after the Choe–Charniak tokens of a prompt, e.g. `["(S", "(NP", "the"]`.

        Raises ValueError naming the first token that does not continue a
        well-formed prefix: an unknown label, a closing non-terminal that is
        not the innermost's or closes an empty constituent, a word outside any
        constituent, anything after the root is closed. (The caps are not
        checked: a prompt may open more than a search would.)
        """
        labels, L = self.space.labels, self.space.num_labels
        state = _INITIAL
        for position, token in enumerate(tokens):
            kind = cc.token_type(token)
            if state.actions and not state.stack:
                raise ValueError(f"prompt token {position} ({token!r}): the tree is already complete")
            if kind == tt.OPENING_NT:
                if token[1:] not in labels:
                    raise ValueError(f"prompt token {position}: unknown non-terminal {token!r}")
                state = self.advance(state, labels.index(token[1:]), (), None)
            elif kind == tt.CLOSING_NT:
                if not state.stack:
                    raise ValueError(f"prompt token {position} ({token!r}): closes nothing")
                label, non_empty = state.stack[-1] >> 1, state.stack[-1] & 1
                if token[:-1] != labels[label]:
                    raise ValueError(f"prompt token {position} ({token!r}): the innermost open constituent is "
                                     f"{cc.opening(labels[label])!r}")
                if not non_empty:
                    raise ValueError(f"prompt token {position} ({token!r}): closes an empty constituent")
                state = self.advance_token(state, int(self.space.close_ids[label]), None)
            else:
                if not state.stack:
                    raise ValueError(f"prompt token {position} ({token!r}): a word outside any constituent "
                                     f"(start with an opening non-terminal)")
                ids, _ = self.space.encode_word(token)
                state = self.advance(state, L + 1, ids, None)
        return state

    def length(self, state: CCState) -> int:
        return len(state.ids)

    def steps_to_finish(self, state: CCState) -> int:
        """Close every open constituent, after a word if the innermost is empty; 3 from nothing; 0 when done."""
        if not state.stack:
            return 0 if state.actions else 3
        return len(state.stack) + (0 if state.stack[-1] & 1 else 1)

    def allowed_tokens(self, states: Sequence[CCState], max_length: int) -> np.ndarray:
        """`[N, V]` bool: `allowed`'s actions as ids, the root's closing, word pieces, within `max_length`."""
        L, space = self.space.num_labels, self.space
        actions = self.allowed(states)  # [N, L + 2]
        depth = np.array([len(s.stack) for s in states], dtype=np.int64)
        budget = max_length - np.array([len(s.ids) for s in states], dtype=np.int64)
        finished = np.array([bool(s.actions) and not s.stack for s in states])
        top = np.array([s.stack[-1] if s.stack else 0 for s in states], dtype=np.int64)
        after_word = np.array([bool(s.actions) and s.actions[-1] == 2 * L for s in states])
        # Successors' steps to finish: an open leaves depth + 1 constituents, the innermost empty
        # (depth + 2); a word leaves depth, the innermost non-empty; a close leaves depth - 1.
        can_open = actions[:, 0] & (1 + depth + 2 <= budget) & ~finished if L else np.zeros(len(states), bool)
        can_word = actions[:, L + 1] & (1 + depth <= budget)
        can_close = (actions[:, L] | ((depth == 1) & (top & 1).astype(bool))) & (depth <= budget)
        word_start, continuation = space.word_pieces
        if not self.allow_unk:
            word_start = word_start.copy()
            word_start[space.vocab.unk_id] = False
        allowed = np.zeros((len(states), self.vocab_size), bool)
        allowed[:, space.open_ids] = can_open[:, None]
        guard = space.word_guard
        if guard is None:
            allowed |= can_word[:, None] & word_start[None]
            allowed |= (can_word & after_word)[:, None] & continuation[None]
        else:  # SentencePiece: only pieces that keep every word writable in a tree
            can_grow = 2 + depth <= budget  # room for the next piece and one more
            allowed |= can_word[:, None] & (word_start & ~guard.never)[None]
            allowed[:, guard.start_needs_more] &= can_grow[:, None]
        rows = np.flatnonzero(can_close)
        allowed[rows, space.close_ids[top[rows] >> 1]] = True
        if guard is not None:
            for row in np.flatnonzero(can_word & after_word):
                must_continue, pieces = guard.after(states[row].ids, bool(can_grow[row]))
                if must_continue:
                    allowed[row] = False
                allowed[row] |= pieces
        return allowed

    def next_token_scores(self, states: Sequence[CCState]) -> TokenScores:
        if not self.full_vocabulary:
            raise ValueError("next_token_scores needs scorers over the whole vocabulary (PrefixScorer with "
                             "candidate_ids=None); these score the non-terminals only")
        scored = score_mixed(self.scorers, [s.ids for s in states], [len(s.ids) for s in states],
                             [s.cache for s in states] if self.use_cache else None)
        return TokenScores(scored.next_log_probs, list(scored.caches))

    def advance_token(self, state: CCState, token: int, memory) -> CCState:
        """The successor by one id (the caller keeps to `allowed_tokens`; this does not check).

        A word is one word action however many pieces it has, its pieces
        following a word-start piece (or UNK). `decode`, not `tokens`, turns a
        sampled state into tokens: the vocabulary's decoding is what delimits
        words (a continuation piece sampled right after UNK decodes as a word
        of its own).
        """
        L = self.space.num_labels
        if token in self._label_of_open:
            return self.advance(state, self._label_of_open[token], (), memory)
        if token in self._label_of_close:
            if len(state.stack) >= 2:
                return self.advance(state, L, (), memory)
            # The root's closing: nothing is open any more, which finishes the sequence.
            return CCState(state.ids + (token,), state.actions + (L + self._label_of_close[token],), (), 0, memory)
        word_start, _ = self.space.word_pieces
        if word_start[token]:
            return self.advance(state, L + 1, (token,), memory)
        return CCState(state.ids + (token,), state.actions, state.stack, 0, memory)  # the word's next piece

    def decode(self, state: CCState, since: CCState | None = None) -> list[str]:
        """The vocabulary's decoding of the state's ids (pieces joined into words), or of those after `since`'s."""
        return self.space.vocab.decode(list(state.ids[len(since.ids):] if since is not None else state.ids))


_INITIAL = CCState()

__all__ = ["ActionSpace", "CCState", "ChoeCharniakFamily"]
