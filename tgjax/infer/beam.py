"""Word-synchronous beam search for TG and TXL (CC): surprisals, an approximate p(x), and parses.

A syntactic language model (TG, TXL on Choe–Charniak actions) gives the
joint p(x, y) of a sentence x and a tree y; incremental surprisal and p(x)
need the marginal over trees, which is intractable. Following Stern et al.
(2017, "Effective inference for generative neural parsing") and its use for
surprisal by Hale et al. (2018), the search advances **word by word**: the
word beam for word t holds the best (at most `word_beam`) action prefixes
that have just generated words 0..t, and

    p(x_<=t) ~= sum of p(prefix) over the word beam after word t,
    surprisal_t = -log p(x_<=t) + log p(x_<t)            (nats),

so a trained model is also a parser (the best complete tree) that needs no
external proposals.

The search for word t (all sentences of a batch advance together, and all
their hypotheses are scored in one device call per action step):

1. the action-level frontier starts as the word beam of word t - 1;
2. every frontier item is extended by every *well-formed* action: an opening
   non-terminal of any label (if fewer than `max_open_nts` are open and fewer
   than `max_consecutive_opens` opens came in a row), the closing
   non-terminal of the innermost open label (only if that constituent is
   non-empty and is not the root, which closes only after the last word), or
   word t (forced: the sentence's word, all of its pieces);
3. *fast track*: the best `fast_track` word successors go to the next word
   beam directly; the other successors compete for the `action_beam` slots,
   word successors among them joining the next word beam and the others
   forming the new frontier;
4. this repeats until the frontier is empty, or — once `word_beam` items
   have generated word t — until no frontier item scores above the
   `word_beam`-th best of them (scores only fall as actions are added, so
   none could enter the top `word_beam`): `stop="bound"`, the default.
   `stop="count"` ends the step as soon as `word_beam` items have generated
   the word, as Stern et al. do.
   The loop ends: between two words an item can only close (at most as many
   as are open) and then open (at most `max_consecutive_opens`).
5. the next word beam is the best `word_beam` of the items that generated word t.

After the last word every item closes all its open constituents (one model
call scores the whole run of closings), which gives complete trees:
`log_prob` is log Σ p(x, y) over them, `best_tree` the argmax.

Probabilities are the model's own, **not renormalised over the allowed
actions**: mass the model puts on ill-formed continuations (a closing label
that does not match, a word that is not the sentence's, BOS, ...) is lost,
so p(x) is a lower bound on the model's marginal; restricting only decides
which continuations are explored. TG's closing non-terminal is two layout
positions (CNT1 composes and predicts nothing; CNT2's distribution is the
next action's), handled by the masking rule in `PrefixScorer`.

Host side: the beam bookkeeping (NumPy over each sentence's successors),
which knows hypotheses only through a `tgjax.infer.search.SearchFamily`:
their states, allowed actions, log-probabilities and successors. For TG and
TXL (CC) that is `tgjax.infer.choe_charniak.ChoeCharniakFamily`, whose
device side is `tgjax.infer.incremental.PrefixScorer` (jitted model calls);
each hypothesis carries the `PrefixCache` of its parent, so a step runs the
model on the hypothesis's last action and the forced word only.

For TXL (terminals), `TerminalScorer` gives exact surprisals and log p(x)
by scoring the word sequence, ended by `</s>` as in training, directly.

Ensembles (several models, one vocabulary): the uniform mixture per action
of Sartran et al. (2022, §3.7), p_ens(a | prefix) = (1/K) Σ_k p_k(a | prefix).
The search is the same, over **one** beam: every member has its own
`PrefixScorer` (its own masking rule, so TG and TXL (CC) members mix), all
members score the same requests, and the next-action and continuation
log-probabilities are mixed per action (`tgjax.infer.ensemble.mix_log_probs`)
before the beam sees them; a hypothesis carries one `PrefixCache` per
member, each following the shared hypotheses. `TerminalScorer` mixes the
members' next-token distributions per token in the same way (`</s>` included).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import logsumexp  # float64 on the host; -inf for no values or all -inf

from tgjax.data.vocab import Vocabulary
from tgjax.infer.choe_charniak import ActionSpace, ChoeCharniakFamily
from tgjax.infer.ensemble import member_list, score_mixed
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.search import SearchFamily
from tgjax.models.transformer_lm import TransformerLM
from tgjax.syntax import actions as cc
from tgjax.syntax.trees import Tree

STOP_RULES = ("bound", "count")


# -----------------------------------------------------------------------------
# Configuration and results.


@dataclasses.dataclass(frozen=True)
class BeamConfig:
    """Beam sizes and the well-formedness caps.

    Attributes:
      word_beam: hypotheses kept after each word (k_w).
      action_beam: frontier size at each action step (k_a).
      fast_track: word successors that join the next word beam at each
        action step without competing for the action beam (k_ft).
      max_open_nts: most constituents open at once.
      max_consecutive_opens: most opening non-terminals in a row.
      stop: "bound" (default) or "count" (Stern et al.): see the module docstring.
      batch_sentences: sentences searched together (their hypotheses share model calls).
      max_batch, min_batch: most and fewest rows per model call (see `PrefixScorer`).
      length_bucket: see `PrefixScorer`.
      use_cache: score each hypothesis incrementally from its parent's
        `PrefixCache` (default); False recomputes every prefix from scratch
        (the reference, for benchmarks; the results are the same).
    """

    word_beam: int = 10
    action_beam: int = 50
    fast_track: int = 2
    max_open_nts: int = 32
    max_consecutive_opens: int = 6
    stop: str = "bound"
    batch_sentences: int = 8
    max_batch: int = 256
    min_batch: int = 8
    length_bucket: int = 32
    use_cache: bool = True

    def __post_init__(self):
        for name in ("word_beam", "action_beam", "max_open_nts", "max_consecutive_opens", "batch_sentences",
                     "max_batch", "min_batch", "length_bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"beam config: {name} must be at least 1, got {getattr(self, name)}")
        if self.fast_track < 0:
            raise ValueError(f"beam config: fast_track must be >= 0, got {self.fast_track}")
        if self.stop not in STOP_RULES:
            raise ValueError(f"beam config: stop must be one of {STOP_RULES}, got {self.stop!r}")


@dataclasses.dataclass
class BeamResult:
    """The search's answer for one sentence (log-probabilities in nats).

    Attributes:
      words: the sentence.
      prefix_log_probs: `[n + 1]`: log p(x_<=t) from the word beam after word
        t (entry 0 is log p(empty prefix) = 0).
      surprisals: `[n]`: -log p(x_t | x_<t) = prefix_log_probs[t] - prefix_log_probs[t + 1].
      log_prob: log p(x) ~= log Σ p(x, y) over the complete trees found
        (TXL (terminals): exactly log p(x), `</s>` included).
      end_surprisal: -(log_prob - prefix_log_probs[n]): the cost of ending
        the sentence (closing every open constituent; TXL (terminals):
        -log p(</s> | x)); `surprisals.sum() + end_surprisal == -log_prob`.
      best_actions: Choe–Charniak actions of the best tree (the sentence's
        own words, not UNK); None for TXL (terminals).
      best_log_prob: log p(x, y*) of that tree.
      hypotheses: complete trees found, best first, as (actions, log p(x, y)).
      num_unknown: words of the sentence mapped to UNK.
    """

    words: list[str]
    prefix_log_probs: np.ndarray
    surprisals: np.ndarray
    log_prob: float
    end_surprisal: float
    best_actions: list[str] | None = None
    best_log_prob: float = math.nan
    hypotheses: list[tuple[list[str], float]] = dataclasses.field(default_factory=list)
    num_unknown: int = 0

    @property
    def best_tree(self) -> Tree | None:
        """The best tree (no pre-terminals), via `tree_from_choe_charniak`; None without one."""
        return None if self.best_actions is None else cc.tree_from_choe_charniak(self.best_actions)


# -----------------------------------------------------------------------------
# The search state of one sentence (host side).


class _Item:
    """A hypothesis: the family's state (its prefix, parse state and caches) and `score`, log p(prefix)."""

    __slots__ = ("state", "score")

    def __init__(self, state, score: float):
        self.state, self.score = state, score


_WORD, _FINISH, _DONE = 0, 1, 2


class _SentenceSearch:
    """Word-synchronous beam search over one sentence; `requests` / `update` alternate.

    Knows the beam only: what a state is, which actions it allows and how
    they score are the family's (`tgjax.infer.search.SearchFamily`).
    """

    def __init__(self, index: int, words: Sequence[str], family: SearchFamily, config: BeamConfig):
        if not words:
            raise ValueError(f"sentence {index}: no words; a tree needs at least one")
        self.index = index
        self.words = list(words)
        self.family = family
        self.config = config
        try:
            encoded = [family.encode_word(w) for w in self.words]
        except ValueError as err:
            raise ValueError(f"sentence {index}: {err}") from None
        self.pieces = [ids for ids, _ in encoded]
        self.num_unknown = sum(unk for _, unk in encoded)
        self.t = 0
        self.frontier: list[_Item] = [_Item(family.initial_state(), 0.0)]
        self.next_word: list[_Item] = []
        self.prefix_log_probs = [0.0]
        self.phase = _WORD
        self.result: BeamResult | None = None
        self.steps = 0

    def requests(self) -> list[tuple[object, tuple[int, ...] | None]]:
        """(state, the next word's ids) per frontier item; None for the word asks to end the sentence."""
        word = self.pieces[self.t] if self.phase == _WORD else None
        return [(item.state, word) for item in self.frontier]

    def update(self, log_probs: np.ndarray, end_log_probs: np.ndarray, memories: list) -> None:
        if self.phase == _WORD:
            self._word_step(log_probs, memories)
        else:
            self._finish(end_log_probs)

    def _word_step(self, log_probs: np.ndarray, memories: list) -> None:
        config, family = self.config, self.family
        frontier = self.frontier
        self.steps += 1
        score = np.array([it.score for it in frontier])
        allowed = family.allowed([it.state for it in frontier])  # [n, A]
        word = family.word_action
        # Successors as (parent, action, score), in a fixed order (the other actions, then the words) for ties.
        parent_a, action_a = np.nonzero(np.delete(allowed, word, axis=1))
        action_a = action_a + (action_a >= word)
        parent_w = np.flatnonzero(allowed[:, word])
        parent = np.concatenate([parent_a, parent_w])
        action = np.concatenate([action_a, np.full(len(parent_w), word)])
        value = score[parent] + log_probs[parent, action]
        is_word = action == word
        # Fast track: the best word successors join the word beam directly.
        word_idx = np.flatnonzero(is_word)
        word_idx = word_idx[np.argsort(-value[word_idx], kind="stable")]
        fast = word_idx[:config.fast_track]
        pool = np.setdiff1d(np.arange(len(value)), fast, assume_unique=True)
        pool = pool[np.argsort(-value[pool], kind="stable")][:config.action_beam]
        new_frontier = []
        for k in np.concatenate([fast, pool]):
            state = family.advance(frontier[parent[k]].state, int(action[k]), self.pieces[self.t], memories[parent[k]])
            (self.next_word if is_word[k] else new_frontier).append(_Item(state, float(value[k])))
        done = not new_frontier
        if len(self.next_word) >= config.word_beam:
            if config.stop == "count":
                done = True
            else:
                threshold = np.sort([it.score for it in self.next_word])[::-1][config.word_beam - 1]
                new_frontier = [it for it in new_frontier if it.score > threshold]
                done = not new_frontier
        self.frontier = new_frontier
        if done:
            self._next_word()

    def _next_word(self) -> None:
        ranked = sorted(self.next_word, key=lambda it: -it.score)[:self.config.word_beam]
        if not ranked:  # pragma: no cover - every frontier item can generate the word
            raise RuntimeError(f"sentence {self.index}: no hypothesis generated word {self.t}")
        self.prefix_log_probs.append(float(logsumexp([it.score for it in ranked])))
        self.t += 1
        self.frontier, self.next_word = ranked, []
        if self.t == len(self.words):
            self.phase = _FINISH

    def _finish(self, end_log_probs: np.ndarray) -> None:
        totals = np.array([it.score + end for it, end in zip(self.frontier, end_log_probs)])
        order = np.argsort(-totals, kind="stable")
        hypotheses = [(self.family.tokens(self.frontier[k].state, self.words), float(totals[k])) for k in order]
        prefix = np.asarray(self.prefix_log_probs)
        log_prob = float(logsumexp(totals))
        self.result = BeamResult(
            words=self.words, prefix_log_probs=prefix, surprisals=prefix[:-1] - prefix[1:], log_prob=log_prob,
            end_surprisal=float(prefix[-1] - log_prob), best_actions=hypotheses[0][0],
            best_log_prob=hypotheses[0][1], hypotheses=hypotheses, num_unknown=self.num_unknown,
        )
        self.phase = _DONE


# -----------------------------------------------------------------------------
# The searches.


class WordSynchronousBeamSearch:
    """Word-synchronous beam search with a TG or TXL (CC) model, or an ensemble of them (see the module docstring).

    Args:
      model: the model (`TransformerLM`, eval mode is used: no dropout), or
        a sequence of K models for their per-action uniform mixture (one beam).
      vocab: their vocabulary (ensemble members must share it).
      rule: "tg" or "txl_cc" (`tgjax.infer.incremental.rule_of(model_name)`);
        for an ensemble, one per model (TG and TXL (CC) members may mix).
      config: beam sizes and caps.

    `search(sentences)` takes word lists and returns one `BeamResult` each,
    in order; the sentences are searched `config.batch_sentences` at a time,
    their hypotheses scored together (a finished sentence's slot is refilled
    at once).
    """

    def __init__(self, model: TransformerLM | Sequence[TransformerLM], vocab: Vocabulary,
                 rule: str | Sequence[str], config: BeamConfig = BeamConfig()):
        members = member_list(model, rule)
        for _, member_rule in members:
            if member_rule not in ("tg", "txl_cc"):
                raise ValueError(f"beam search needs syntactic models (rule 'tg' or 'txl_cc'), got rule "
                                 f"{member_rule!r}; use TerminalScorer for txl_terminals")
        self.space = ActionSpace.from_vocab(vocab)
        if not self.space.num_labels:
            raise ValueError("the vocabulary has no non-terminals: cannot build trees")
        self.config = config
        candidates = np.concatenate([self.space.open_ids, self.space.close_ids])
        self.scorers = [PrefixScorer(m, member_rule, self.space.token_types, bos_id=vocab.bos_id,
                                     candidate_ids=candidates, length_bucket=config.length_bucket,
                                     max_batch=config.max_batch, min_batch=config.min_batch)
                        for m, member_rule in members]
        self.family = ChoeCharniakFamily(self.scorers, self.space, max_open_nts=config.max_open_nts,
                                         max_consecutive_opens=config.max_consecutive_opens,
                                         use_cache=config.use_cache)
        self.steps = 0  # action steps summed over sentences (for benchmarks)

    @property
    def scorer(self) -> PrefixScorer:
        """The first member's `PrefixScorer` (the only one for a single model; its counters, for benchmarks)."""
        return self.scorers[0]

    def search(self, sentences: Iterable[Sequence[str]]) -> list[BeamResult]:
        sentences = [list(s) for s in sentences]
        pending = iter(enumerate(sentences))
        results: list[BeamResult | None] = [None] * len(sentences)
        active: list[_SentenceSearch] = []

        def refill() -> None:
            while len(active) < self.config.batch_sentences:
                try:
                    index, words = next(pending)
                except StopIteration:
                    return
                active.append(_SentenceSearch(index, words, self.family, self.config))

        refill()
        while active:
            requests, counts = [], []
            for search in active:
                r = search.requests()
                requests.extend(r)
                counts.append(len(r))
            scored = self.family.score([r[0] for r in requests], [r[1] for r in requests])  # one model call
            offset = 0
            for search, n in zip(active, counts):
                search.update(scored.log_probs[offset:offset + n], scored.end_log_probs[offset:offset + n],
                              scored.memories[offset:offset + n])
                offset += n
            for search in [s for s in active if s.phase == _DONE]:
                results[search.index] = search.result
                self.steps += search.steps
                active.remove(search)
            refill()
        return results  # type: ignore[return-value]

    # Convenience for the drivers.
    def word_surprisals(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, `[n]` surprisals in nats."""
        return [r.surprisals for r in self.search(sentences)]

    def log_probs(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        """`[N]` approximate log p(x) (nats)."""
        return np.array([r.log_prob for r in self.search(sentences)])


class TerminalScorer:
    """Exact word surprisals and log p(x) for TXL (terminals): `<s> w1 ... wn </s>` scored directly.

    The sequence is the training pipeline's (`pipeline.ends_with_eos`): the
    words, then the end-of-sentence token `</s>` that the last word predicts.
    A word's surprisal is the sum over its pieces; `end_surprisal` is
    -log p(</s> | w1 ... wn); `log_prob` is log p(x) of the whole sentence,
    the sum of the words' log-probabilities and log p(</s> | ...), so
    `surprisals.sum() + end_surprisal == -log_prob`. (`prefix_log_probs`
    stay those of the words as prefixes.)

    `model` may be a sequence of K models (one vocabulary): their per-token
    uniform mixture, log p_ens(w_i | w_<i) = log (1/K) Σ_k p_k(w_i | w_<i)
    for every piece and `</s>`, and log p(x) the sum of those.
    """

    def __init__(self, model: TransformerLM | Sequence[TransformerLM], vocab: Vocabulary, *, batch_size: int = 64,
                 length_bucket: int = 32, min_batch: int = 8):
        self.space = ActionSpace.from_vocab(vocab)
        self.eos_id = vocab.eos_id
        self.batch_size = batch_size
        self.scorers = [PrefixScorer(m, "txl_terminals", self.space.token_types, bos_id=vocab.bos_id,
                                     candidate_ids=[vocab.bos_id], length_bucket=length_bucket,
                                     max_batch=batch_size, min_batch=min_batch)
                        for m, _ in member_list(model, "txl_terminals")]

    def search(self, sentences: Iterable[Sequence[str]]) -> list[BeamResult]:
        sentences = [list(s) for s in sentences]
        results = []
        for start in range(0, len(sentences), self.batch_size):
            chunk = sentences[start:start + self.batch_size]
            encoded = []
            for index, words in enumerate(chunk, start):
                if not words:
                    raise ValueError(f"sentence {index}: no words")
                encoded.append([self.space.encode_word(w) for w in words])
            sequences = [tuple(i for ids, _ in enc for i in ids) + (self.eos_id,) for enc in encoded]
            scored = score_mixed(self.scorers, sequences, [0] * len(sequences))
            for words, enc, lp in zip(chunk, encoded, scored.continuation_log_probs):
                lengths = np.array([len(ids) for ids, _ in enc])
                word_lp = np.add.reduceat(lp[:-1], np.cumsum(lengths) - lengths)  # [n]: sum over each word's pieces
                prefix = np.concatenate([[0.0], np.cumsum(word_lp)])
                end_lp = float(lp[-1])  # log p(</s> | the words)
                results.append(BeamResult(words=words, prefix_log_probs=prefix, surprisals=-word_lp,
                                          log_prob=float(prefix[-1]) + end_lp, end_surprisal=-end_lp,
                                          num_unknown=sum(unk for _, unk in enc)))
        return results

    def word_surprisals(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return [r.surprisals for r in self.search(sentences)]

    def log_probs(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        return np.array([r.log_prob for r in self.search(sentences)])


def make_word_scorer(model: TransformerLM | Sequence[TransformerLM], vocab: Vocabulary, rule: str | Sequence[str],
                     config: BeamConfig = BeamConfig()):
    """The scorer of a model or ensemble: beam search for "tg"/"txl_cc", direct scoring for "txl_terminals".

    An ensemble (sequences of models and rules) is all syntactic or all
    "txl_terminals"; a mix is refused.
    """
    members = member_list(model, rule)
    rules = [member_rule for _, member_rule in members]
    if "txl_terminals" in rules and set(rules) != {"txl_terminals"}:
        raise ValueError(f"an ensemble mixes syntactic models or words-only models, not both (rules {rules})")
    models = [m for m, _ in members]
    if rules[0] == "txl_terminals":
        return TerminalScorer(models, vocab, batch_size=config.max_batch, length_bucket=config.length_bucket,
                              min_batch=config.min_batch)
    return WordSynchronousBeamSearch(models, vocab, rules, config)


__all__ = ["BeamConfig", "BeamResult", "STOP_RULES", "TerminalScorer", "WordSynchronousBeamSearch", "make_word_scorer"]
