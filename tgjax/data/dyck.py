"""The Dyck task of Pushdown Layers (Murty et al., EMNLP 2023, §4.1; released-code.md §1.8).

Dyck_{k, m}: well-nested strings over k bracket types with nesting depth at
most m. Training strings come from the release's probabilistic automaton
(`sample_dyck`): with an empty stack, END with probability 1/2 and each opener
1/(2k); with a non-empty, non-full stack, close the top with probability 1/2
and each opener 1/(2k); with a full stack (depth m), close. END before
``min_length`` tokens is rejected and sampling goes on. The paper trains on
100k strings of Dyck_{20,10}.

That automaton does not make strings like the release's own data file.
From an empty stack each string is a run of excursions, each ending back at
depth 0; opening with probability 1/2 makes every excursion a fair walk.
A fair walk between depth 0 and a full stack at depth m returns after 2m
tokens on average. With min_length 1 there are two excursions on average,
so strings average 4m = 40 tokens (`expected_length`; 40.6 over 20,000
sampled strings), and 22% of them reach depth 8. released-code.md measured the shipped
k-20 depth-10 validation file instead: lengths 6–76, mean 13.3, depth 8 or
more in under 0.2% of strings. Those figures need a walk that favours
closing: opening with probability 0.25–0.3 and a minimum length of 6 gives
mean 10.3–11.6, maximum 64–94 and depth 8 or more in 0.1–0.5% of 20,000
strings. The release's train and test files are not in ../shared, so that
is as far as the check goes. The default stays the automaton as restated;
`open_probability` and `min_length` (`data.dyck_open_probability`,
`data.dyck_min_length` in the pushdown task) approximate the file.

(`tgjax.data.cfl` has a Dyck-2 *grammar* for the CFL tasks of DuSell &
Chiang, sampled by length from a PCFG; a different distribution, so it is not
reused here. Its `CFLVocabulary` is: ids PAD 0, BOS 1, EOS 2, then the
openers and the closers.)

Tokens are ``"(a"`` … and ``"a)"`` …, bracket types a..t for k = 20 (then
aa, bb, … as the release names them).

Attachment labels (the release's `compute_stack_labels`): every opener shifts
and every closer attaches to its own opener, so the closer's reduce pops the
whole constituent back to the opener. With ``<s>`` at position 0 (it shifts).
The tape is the release's binary "has been reduced" tape: 1 where a token has
taken part in any reduce (`dyck_tape`).

Evaluation sets (accuracy at choosing the right closing bracket):

* long-range dependencies (`long_range_examples`): 50 prefixes of Dyck_{20,10}
  strings, the training depth, each ending just before a closing bracket
  whose opener is at least L tokens back (prefix at most 599 tokens); L in
  {50, 100, 200, 300}. The paper tests "longer-range dependencies than seen
  at training time", apart from deeper nesting (its depth set). The
  release drew them from Dyck_{20,40} strings instead, every such prefix
  until at least 50 (`release_long_range_examples`, kept as a switch): 94-100%
  of those prefixes nest deeper than 10, so they mix the two tests;
* in distribution (`in_distribution_examples`; no paper figure): every
  closer of Dyck_{20,10} strings, the training distribution, with its prefix
  (at most 250 tokens), the first 500: what the release's training callback
  reports as validation accuracy (dyck_callback.py), and the check that a
  model learnt the language before it is asked to generalise;
* depth generalisation (`depth_generalisation_examples`): for each depth d in
  15..49, d openers of types a..j, closed in reverse order without the final
  (outermost) closer, which is the target; one random complete Dyck_{20,10}
  string inserted at a random token position; three sweeps give 105 examples.

NumPy only.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Sequence

import numpy as np

from tgjax.data.cfl import CFLVocabulary
from tgjax.data.pushdown import PushdownSentence, sentence_from_attachments
from tgjax.syntax import stack_tape as stt

PAPER_TYPES, PAPER_TRAIN_DEPTH, PAPER_LONG_RANGE_DEPTH = 20, 10, 40
LONG_RANGE_LENGTHS = (50, 100, 200, 300)
LONG_RANGE_MAX_PREFIX = 600  # the release's bound: a prefix and its target closer, so <s> + prefix <= 600 ids
DEPTH_GEN_DEPTHS = tuple(range(15, 50))


def bracket_names(num_types: int) -> list[str]:
    """a, b, …, z, then aa, bb, …: the release's names of the bracket types."""
    if num_types < 1:
        raise ValueError(f"num_types must be >= 1, got {num_types}")
    letters = string.ascii_lowercase
    return [letters[i % 26] * (i // 26 + 1) for i in range(num_types)]


def openers(num_types: int) -> list[str]:
    return [f"({name}" for name in bracket_names(num_types)]


def closers(num_types: int) -> list[str]:
    return [f"{name})" for name in bracket_names(num_types)]


def dyck_vocabulary(num_types: int = PAPER_TYPES) -> CFLVocabulary:
    """PAD 0, BOS 1, EOS 2, the openers, then the closers (closer of type t at 3 + k + t)."""
    return CFLVocabulary(tuple(openers(num_types) + closers(num_types)))


def sample_dyck(rng: np.random.Generator, *, num_types: int = PAPER_TYPES, max_depth: int = PAPER_TRAIN_DEPTH,
                min_length: int = 0, max_length: int | None = None,
                open_probability: float = 0.5) -> list[str]:
    """One string of the release's automaton (see the module docstring).

    ``max_length``: when reached with an empty stack, the string ends; a
    string cannot end with an open bracket, so the bound is soft by at most
    ``max_depth`` closers. ``open_probability``: the chance of opening
    (each type equally likely) when the stack is neither empty nor full;
    1/2 in the release's automaton.
    """
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    if not 0.0 < open_probability < 1.0:
        raise ValueError(f"open_probability must be in (0, 1), got {open_probability}")
    opens, closes = openers(num_types), closers(num_types)
    stack: list[int] = []
    out: list[str] = []
    while True:
        if not stack:
            if max_length is not None and len(out) >= max_length:
                return out
            # END with probability 1/2, else an opener; an early END is rejected.
            if rng.random() < 0.5:
                if len(out) >= min_length:
                    return out
                continue
            t = int(rng.integers(num_types))
        elif len(stack) >= max_depth or rng.random() >= open_probability:
            out.append(closes[stack.pop()])
            continue
        else:
            t = int(rng.integers(num_types))
        stack.append(t)
        out.append(opens[t])


def dyck_corpus(num_strings: int, seed: int, *, num_types: int = PAPER_TYPES, max_depth: int = PAPER_TRAIN_DEPTH,
                min_length: int = 1, max_length: int = 600,
                open_probability: float = 0.5) -> tuple[list[list[str]], int]:
    """``num_strings`` strings of the automaton (the paper: 100k of Dyck_{20,10}) and how many were redrawn.

    Strings longer than ``max_length`` are dropped and redrawn, as the release
    skips them at load; the count is returned so that the caller can report it.
    """
    rng = np.random.default_rng(seed)
    strings: list[list[str]] = []
    redrawn = 0
    while len(strings) < num_strings:
        tokens = sample_dyck(rng, num_types=num_types, max_depth=max_depth, min_length=min_length,
                             open_probability=open_probability)
        if len(tokens) > max_length:
            redrawn += 1
            continue
        strings.append(tokens)
    return strings, redrawn


def expected_length(*, max_depth: int = PAPER_TRAIN_DEPTH, open_probability: float = 0.5) -> float:
    """The mean length of `sample_dyck` strings with ``min_length`` 1 and no ``max_length``.

    Markov-chain arithmetic, independent of the sampler. Let E_d be the
    expected number of tokens to get back to an empty stack from depth d:
    E_0 = 0, E_d = 1 + p E_{d+1} + (1 − p) E_{d−1} for 0 < d < m, and
    E_m = 1 + E_{m−1}. An excursion is 1 + E_1 tokens. The first visit to the
    empty stack must open (END is rejected before any token); each later
    visit ends the string with probability 1/2, so one more excursion is
    expected, and the string has 2 (1 + E_1) tokens on average.
    """
    m, p = max_depth, open_probability
    # Unknowns E_1..E_m as rows of a linear system A E = 1.
    system = np.zeros((m, m))
    for d in range(1, m + 1):
        row = d - 1
        system[row, row] = 1.0
        if d > 1:  # E_0 = 0 drops out of the first row
            system[row, row - 1] = -1.0 if d == m else -(1.0 - p)
        if d < m:
            system[row, row + 1] = -p
    hitting = np.linalg.solve(system, np.ones(m))
    return 2.0 * (1.0 + hitting[0])


def _bracket_kind(token: str) -> tuple[bool, str]:
    if token.startswith("(") and len(token) > 1:
        return True, token[1:]
    if token.endswith(")") and len(token) > 1:
        return False, token[:-1]
    raise ValueError(f"{token!r} is not a bracket token ('(a' or 'a)')")


def matching_openers(tokens: Sequence[str], *, name: str = "string", complete: bool = True) -> np.ndarray:
    """``[n]`` int: for a closer, the index of its opener; for an opener, -1.

    Raises:
      ValueError (naming the string): a closer without an open bracket, a
        closer of the wrong type, or (with ``complete``) brackets left open.
    """
    stack: list[tuple[int, str]] = []
    match = np.full(len(tokens), -1, np.int64)
    for i, token in enumerate(tokens):
        try:
            is_open, kind = _bracket_kind(token)
        except ValueError as error:
            raise ValueError(f"{name}: token {i}: {error}") from None
        if is_open:
            stack.append((i, kind))
            continue
        if not stack:
            raise ValueError(f"{name}: token {i} {token!r} closes nothing (no open bracket)")
        j, open_kind = stack.pop()
        if open_kind != kind:
            raise ValueError(f"{name}: token {i} {token!r} closes '({open_kind}' opened at token {j}")
        match[i] = j
    if complete and stack:
        raise ValueError(f"{name}: {len(stack)} bracket(s) left open, the first at token {stack[0][0]}")
    return match


def dyck_attachments(tokens: Sequence[str], *, bos: bool = True, name: str = "string",
                     complete: bool = True) -> np.ndarray:
    """Attachment labels ``[n (+1)]`` int32: openers (and ``<s>``) shift, closers attach to their opener."""
    match = matching_openers(tokens, name=name, complete=complete)
    positions = np.arange(len(tokens))
    labels = np.where(match >= 0, match, positions)
    if bos:
        labels = np.concatenate([[0], labels + 1])
    return labels.astype(np.int32)


def dyck_tape(attach: np.ndarray) -> np.ndarray:
    """The release's binary tape ``[n, n]`` int32: row k, 1 where token j was reduced by step k."""
    depths, _ = stt.replay(attach)
    return (depths > 0).astype(np.int32)


def max_nesting(tokens: Sequence[str]) -> int:
    depth = deepest = 0
    for token in tokens:
        depth += 1 if _bracket_kind(token)[0] else -1
        deepest = max(deepest, depth)
    return deepest


@dataclasses.dataclass(frozen=True)
class DyckExample:
    """A prefix and the closing bracket that must come next."""

    prefix: tuple[str, ...]
    target: str
    distance: int  # tokens from the target's opener to the target (its dependency length)
    depth: int  # open brackets at the end of the prefix


def long_range_examples(rng: np.random.Generator, min_distance: int, *, num_examples: int = 50,
                        num_types: int = PAPER_TYPES, max_depth: int = PAPER_TRAIN_DEPTH,
                        open_probability: float = 0.5, max_prefix: int = LONG_RANGE_MAX_PREFIX,
                        max_tries: int = 100_000) -> list[DyckExample]:
    """Prefixes nesting at most ``max_depth`` (the training depth) that end just before a closer whose opener is
    >= ``min_distance`` tokens back: long dependencies without deeper nesting.

    Each example is what rejection sampling of the automaton would give, drawn directly (rejection is
    hopeless: at depth 10 a bracket rarely stays open for 300 tokens, and never at open probability 0.3): a
    training string cut where at most ``max_depth - 2`` brackets are open (`_context`), an opener, then the
    automaton inside it, conditioned on keeping it open for ``min_distance - 1`` tokens, until it closes it
    (`_bracket_body`); that closer is the target. An example whose prefix would pass ``max_prefix - 1``
    tokens is redrawn (RuntimeError after ``max_tries`` draws).
    """
    if max_depth < 2:
        raise ValueError(f"max_depth must be >= 2 for a dependency longer than 1, got {max_depth}")
    opens, closes = openers(num_types), closers(num_types)
    survive = _survival_table(min_distance - 1, max_depth, open_probability)
    examples: list[DyckExample] = []
    for _ in range(max_tries):
        context = _context(rng, num_types, max_depth, open_probability)
        depth = sum(1 if t.startswith("(") else -1 for t in context) + 1  # inside the opener
        kind = int(rng.integers(num_types))
        body = _bracket_body(rng, survive, depth, num_types, max_depth, open_probability,
                             budget=max_prefix - 2 - len(context))
        if body is None:
            continue
        examples.append(DyckExample((*context, opens[kind], *body), closes[kind], len(body) + 1, depth))
        if len(examples) == num_examples:
            return examples
    raise RuntimeError(f"{max_tries} draws gave only {len(examples)} prefixes of at most {max_prefix - 1} tokens "
                       f"with a dependency of {min_distance}")


def _context(rng: np.random.Generator, num_types: int, max_depth: int, open_probability: float) -> list[str]:
    """A training string cut at a uniform position among those with at most ``max_depth - 2`` brackets open
    (room for the opener and something inside it)."""
    tokens = sample_dyck(rng, num_types=num_types, max_depth=max_depth, min_length=1,
                         open_probability=open_probability)
    depths = np.cumsum([0] + [1 if t.startswith("(") else -1 for t in tokens])
    return tokens[:int(rng.choice(np.flatnonzero(depths <= max_depth - 2)))]


def _survival_table(length: int, max_depth: int, open_probability: float) -> np.ndarray:
    """``[length + 1, max_depth + 2, max_depth + 1]`` survive[t, floor, d]: the automaton's chance, from depth d,
    of staying at or above ``floor`` for t more tokens, up to a factor per (t, floor) (rows rescaled to max 1: a
    step's choice needs the ratio of two entries of one row).

    survive[t, f, d] = p(d) survive[t - 1, f, d + 1] + (1 - p(d)) survive[t - 1, f, d - 1] [d - 1 >= f],
    with p(d) the chance of opening (0 on a full stack).
    """
    depths = np.arange(max_depth + 1)
    p_open = np.where(depths >= max_depth, 0.0, open_probability)
    floors = np.arange(max_depth + 2)[:, None]
    survive = np.ones((length + 1, max_depth + 2, max_depth + 1))
    survive[0] = depths[None, :] >= floors
    for t in range(1, length + 1):
        previous = survive[t - 1]
        up = np.concatenate([previous[:, 1:], np.zeros((max_depth + 2, 1))], axis=1)
        down = np.concatenate([np.zeros((max_depth + 2, 1)), previous[:, :-1]], axis=1)
        row = (p_open * up + (1 - p_open) * down * (depths - 1 >= floors)) * (depths >= floors)
        survive[t] = row / np.maximum(row.max(axis=1, keepdims=True), 1e-300)
    return survive


def _bracket_body(rng: np.random.Generator, survive: np.ndarray, floor: int, num_types: int, max_depth: int,
                  open_probability: float, budget: int) -> list[str] | None:
    """The balanced tokens inside an opener that leaves ``floor`` brackets open: the automaton, conditioned on
    staying at or above ``floor`` for ``len(survive) - 1`` tokens (`_survival_table`), then as it is until it
    would close the opener. None if that takes more than ``budget`` tokens."""
    names = bracket_names(num_types)
    conditioned = survive.shape[0] - 1
    stack: list[str] = []
    out: list[str] = []
    depth = floor
    while True:
        p_open = open_probability if depth < max_depth else 0.0
        remaining = conditioned - len(out)
        if remaining > 0:  # p(open | the opener stays open for `remaining` more tokens)
            row = survive[remaining - 1, floor]
            up = p_open * (row[depth + 1] if depth < max_depth else 0.0)
            down = (1 - p_open) * row[depth - 1] if depth > floor else 0.0
            opens = rng.random() * (up + down) < up
        else:
            opens = rng.random() < p_open
            if not opens and depth == floor:
                return out
        if len(out) == budget:
            return None
        if opens:
            stack.append(names[int(rng.integers(num_types))])
            out.append(f"({stack[-1]}")
        else:
            out.append(f"{stack.pop()})")
        depth += 1 if opens else -1


def release_long_range_examples(rng: np.random.Generator, min_distance: int, *, num_examples: int = 50,
                                num_types: int = PAPER_TYPES, max_depth: int = PAPER_LONG_RANGE_DEPTH,
                                open_probability: float = 0.5, max_prefix: int = LONG_RANGE_MAX_PREFIX,
                                max_strings: int = 100_000) -> list[DyckExample]:
    """The release's long-range sets: prefixes of Dyck_{num_types, 40} strings ending just before a closer whose
    opener is >= ``min_distance`` tokens back (deeper than training, most of them).

    Strings are drawn (at least ``min_distance`` tokens long, at most ``max_prefix``) and every qualifying
    closer of each contributes an example, until ``num_examples`` are collected (the last string's extras are
    kept, as the release does: "until >= 50"). Raises RuntimeError if ``max_strings`` strings do not give enough.
    """
    examples: list[DyckExample] = []
    for _ in range(max_strings):
        tokens = sample_dyck(rng, num_types=num_types, max_depth=max_depth, min_length=min_distance + 1,
                             max_length=max_prefix, open_probability=open_probability)
        examples += [e for e in _closer_examples(tokens, max_prefix - 1) if e.distance >= min_distance]
        if len(examples) >= num_examples:
            return examples
    raise RuntimeError(f"{max_strings} strings gave only {len(examples)} examples with distance >= {min_distance}")


def in_distribution_examples(rng: np.random.Generator, *, num_examples: int = 500, num_types: int = PAPER_TYPES,
                             max_depth: int = PAPER_TRAIN_DEPTH, max_prefix: int = 250, min_length: int = 1,
                             open_probability: float = 0.5) -> list[DyckExample]:
    """The first ``num_examples`` closers of fresh training-distribution strings, each with its prefix.

    Strings of Dyck_{num_types, max_depth} from `sample_dyck` with the training run's ``min_length`` and
    ``open_probability`` (as `dyck_corpus` draws training strings); every closer whose prefix is at most
    ``max_prefix`` tokens is an example.
    """
    examples: list[DyckExample] = []
    while len(examples) < num_examples:
        tokens = sample_dyck(rng, num_types=num_types, max_depth=max_depth, min_length=min_length,
                             open_probability=open_probability)
        examples += _closer_examples(tokens, max_prefix)
    return examples[:num_examples]


def _closer_examples(tokens: Sequence[str], max_prefix: int) -> list[DyckExample]:
    """Every closer of a complete string whose prefix is at most ``max_prefix`` tokens, in order, as an example."""
    match = matching_openers(tokens)
    examples, depth = [], 0
    for i, token in enumerate(tokens[:max_prefix + 1]):
        if match[i] >= 0:
            examples.append(DyckExample(tuple(tokens[:i]), token, int(i - match[i]), depth))
            depth -= 1
        else:
            depth += 1
    return examples


def depth_generalisation_examples(rng: np.random.Generator, *, depths: Sequence[int] = DEPTH_GEN_DEPTHS,
                                  sweeps: int = 3, num_types: int = PAPER_TYPES, opener_types: int = 10,
                                  inserted_depth: int = PAPER_TRAIN_DEPTH, open_probability: float = 0.5
                                  ) -> list[DyckExample]:
    """``sweeps × len(depths)`` examples of deep nesting (see the module docstring); the inserted string is a
    training string (``inserted_depth``, ``open_probability``)."""
    names = bracket_names(num_types)
    examples = []
    for _ in range(sweeps):
        for d in depths:
            kinds = [names[int(t)] for t in rng.integers(opener_types, size=d)]
            body = [f"({k}" for k in kinds] + [f"{k})" for k in reversed(kinds[1:])]
            inserted = sample_dyck(rng, num_types=num_types, max_depth=inserted_depth, min_length=1,
                                   open_probability=open_probability)
            at = int(rng.integers(len(body) + 1))
            prefix = body[:at] + inserted + body[at:]
            outermost = 0 if at > 0 else len(inserted)
            examples.append(DyckExample(tuple(prefix), f"{kinds[0]})", len(prefix) - outermost, 1))
    return examples


def encode_for_pushdown(strings: Sequence[Sequence[str]], vocab: CFLVocabulary | None = None) -> list[PushdownSentence]:
    """Dyck strings -> `PushdownSentence` rows ``<s> tokens <eos>`` with the Dyck labels.

    The end token shifts and its attachment is not trained (``final_attachment=False``);
    batch them with ``PushdownBatches(..., binary_tape=True)`` (and `stack_tape_from_nodes(binary=True)`).
    """
    vocab = vocab or dyck_vocabulary()
    rows = []
    for i, tokens in enumerate(strings):
        name = f"Dyck string {i}"
        if not tokens:
            raise ValueError(f"{name}: empty")
        ids = [vocab.bos_id] + [vocab.id_of(t) for t in tokens] + [vocab.eos_id]
        attach = np.r_[dyck_attachments(tokens, name=name, complete=False), len(tokens) + 1]
        rows.append(sentence_from_attachments(np.asarray(ids), attach, name=name, final_attachment=False))
    return rows
