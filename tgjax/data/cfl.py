"""The five context-free language (CFL) tasks of DuSell & Chiang (2020; 2022; 2024).

Stack Attention (DuSell & Chiang, ICLR 2024, §6 and Appendix D) trains
language models on five CFLs, "using the same sampling procedure as DuSell &
Chiang (2020)":

=================  =====================  ================================
name               language               grammar (before ε/unary removal)
=================  =====================  ================================
marked_reversal    w#wᴿ, w ∈ {0,1}*        S → 0 S 0 | 1 S 1 | #
unmarked_reversal  wwᴿ                     S → 0 S 0 | 1 S 1 | ε
padded_reversal    w aᵖ wᴿ, a ∈ {0,1}      S → a S a | T_a ;  T_a → a T_a | ε
dyck               Dyck-2: () and []       S → S T | T ;  T → ( S ) | ( ) | [ S ] | [ ]
hardest_cfl        Greibach's L₀           see `hardest_cfl_grammar_text`
=================  =====================  ================================

**Rule probabilities.** The 2024 paper defers to DuSell & Chiang (2020) for
the grammars; their probabilities are set from target means, as in the
authors' released code (read for the numbers only: the task settings of
`cfl_language_modeling/functions.bash` in bdusell/nondeterministic-stack-rnn
and bdusell/stack-attention). A rule pair `X → a X (p) | ε (1 − p)` makes |X|
geometric with mean p / (1 − p), so a mean μ gives p = μ / (μ + 1)
(`continue_probability`). Settings: reversal tasks mean half-length 60 (padding
mean 30); Dyck mean bracket splits 1 and mean nesting depth 40; Hardest CFL
mean commas 0.5, short filler 0.5, long filler 2, semicolon probability 0.25,
bracket splits 1.5, nesting depth 3. Each alphabet symbol `a` gets an equal
share of its rule's probability (alphabet {0, 1} for the reversal tasks).
For w#wᴿ and wwᴿ only the 0/1 symmetry matters once the length is fixed
(every string of a valid length is equally likely); for the other three the
numbers shape p(w | |w|).

**Sampling** (`CFLTask.sample`, as DuSell & Chiang 2020): the grammar's ε-
and unary rules are removed (`WeightedCFG.without_epsilon_and_unary`, which
leaves p(w | |w|) unchanged), a length ℓ is drawn uniformly from the *valid*
lengths of the range (those the grammar can derive), then a tree is sampled
top-down conditioned on yield length exactly ℓ with the inside weights over
lengths (`WeightedCFG.sample_with_length`). As in the paper (Appendix D.3) a
length is drawn once per group of 10 strings (one minibatch), so a training
batch of 10 needs no padding; every string's length is still uniform.

**Splits** (`SPLITS`): train 10,000 and validation 1,000 strings of lengths
40–80; test 100 strings for each valid length 40–100. The test set uses a
fixed seed (0) in every run; training runs pass their own seed.

**True probability** of a string w in a split whose valid lengths are L:

    p(w) = (1 / |L|) · p_G(w) / p_G(|w| = ℓ),   p_G(ℓ) = Σ_{|w'| = ℓ} p_G(w'),

with p_G(w) from the exact inside algorithm (ambiguous strings sum over all
their trees) and p_G(ℓ) from the inside weights over lengths
(`CFLTask.log_prob_true`). `tgjax.data.cfl_metric.cross_entropy_difference` turns it
into the paper's metric.

**Vocabulary.** Ids PAD 0, BOS 1, EOS 2 (the ids of `tgjax.data.vocab`), then
the task's symbols. `CFLTask.encode` gives model inputs `BOS w₁ … wₙ` and
targets `w₁ … wₙ EOS`: the model predicts EOS, and EOS counts as a symbol of
the cross-entropy (as the authors' evaluation does).

NumPy only (no JAX), so it runs in data-loader worker processes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from tgjax.data.vocab import BOS_ID, BOS_TOKEN, EOS_ID, EOS_TOKEN, PAD_ID, PAD_TOKEN
from tgjax.syntax.grammar import WeightedCFG

__all__ = [
    "CFLTask",
    "CFLVocabulary",
    "SPLITS",
    "SplitSpec",
    "TASK_NAMES",
    "cfl_task",
    "continue_probability",
    "dyck_grammar_text",
    "hardest_cfl_grammar_text",
    "marked_reversal_grammar_text",
    "padded_reversal_grammar_text",
    "unmarked_reversal_grammar_text",
]

TASK_NAMES = ("marked_reversal", "unmarked_reversal", "padded_reversal", "dyck", "hardest_cfl")
_DISPLAY_NAMES = {
    "marked_reversal": "w#wᴿ",
    "unmarked_reversal": "wwᴿ",
    "padded_reversal": "waᵖwᴿ",
    "dyck": "Dyck",
    "hardest_cfl": "Hardest CFL",
}


# ---------------------------------------------------------------------------
# Grammars.


def continue_probability(mean: float) -> float:
    """p such that `X → a X (p) | ε (1 − p)` gives |X| (geometric) the mean `mean`: p = mean / (mean + 1)."""
    if mean < 0:
        raise ValueError(f"a mean length must be >= 0, got {mean}")
    return mean / (mean + 1.0)


def _w(p: float) -> str:
    """A weight written so the grammar text round-trips the float exactly."""
    return repr(float(p))


def marked_reversal_grammar_text(symbols: Sequence[str] = ("0", "1"), mean_length: float = 60) -> str:
    """w#wᴿ: `S → a S a` (p / |Σ| each) `| #` (1 − p), p = continue_probability(mean_length)."""
    p = continue_probability(mean_length)
    lines = [f"S -> '{a}' S '{a}' {_w(p / len(symbols))}" for a in symbols]
    lines.append(f"S -> '#' {_w(1 - p)}")
    return "\n".join(lines) + "\n"


def unmarked_reversal_grammar_text(symbols: Sequence[str] = ("0", "1"), mean_length: float = 60) -> str:
    """wwᴿ: `S → a S a` (p / |Σ| each) `| ε` (1 − p), p = continue_probability(mean_length)."""
    p = continue_probability(mean_length)
    lines = [f"S -> '{a}' S '{a}' {_w(p / len(symbols))}" for a in symbols]
    lines.append(f"S -> ε {_w(1 - p)}")
    return "\n".join(lines) + "\n"


def padded_reversal_grammar_text(
    symbols: Sequence[str] = ("0", "1"), mean_content_length: float = 60, mean_padding_length: float = 30
) -> str:
    """waᵖwᴿ: `S → a S a` (p / |Σ|) `| T_a` ((1 − p) / |Σ|) for each a; `T_a → a T_a` (g) `| ε` (1 − g).

    p = continue_probability(mean_content_length), g =
    continue_probability(mean_padding_length): the padding aᵖ has mean length
    `mean_padding_length`, so long runs of one symbol in the middle are common.
    """
    p = continue_probability(mean_content_length)
    g = continue_probability(mean_padding_length)
    k = len(symbols)
    lines = []
    for i, a in enumerate(symbols):
        lines.append(f"S -> '{a}' S '{a}' {_w(p / k)} | T{i} {_w((1 - p) / k)}")
    for i, a in enumerate(symbols):
        lines.append(f"T{i} -> '{a}' T{i} {_w(g)} | ε {_w(1 - g)}")
    return "\n".join(lines) + "\n"


def dyck_grammar_text(
    brackets: Sequence[tuple[str, str]] = (("(", ")"), ("[", "]")),
    mean_bracket_splits: float = 1,
    mean_nesting_depth: float = 40,
) -> str:
    """Dyck-k: `S → S T` (s) `| T` (1 − s); `T → l S r` (t / k) `| l r` ((1 − t) / k) per bracket pair.

    s = continue_probability(mean_bracket_splits), t =
    continue_probability(mean_nesting_depth − 1) (the outermost pair is one
    level of depth already).
    """
    if mean_nesting_depth <= 1:
        raise ValueError(f"mean_nesting_depth must be > 1, got {mean_nesting_depth}")
    s = continue_probability(mean_bracket_splits)
    t = continue_probability(mean_nesting_depth - 1)
    k = len(brackets)
    lines = [f"S -> S T {_w(s)} | T {_w(1 - s)}"]
    for left, right in brackets:
        lines.append(f"T -> '{left}' S '{right}' {_w(t / k)} | '{left}' '{right}' {_w((1 - t) / k)}")
    return "\n".join(lines) + "\n"


def hardest_cfl_grammar_text(
    mean_num_commas: float = 0.5,
    mean_short_filler_length: float = 0.5,
    mean_long_filler_length: float = 2,
    semicolon_probability: float = 0.25,
    mean_bracket_splits: float = 1.5,
    mean_nesting_depth: float = 3,
) -> str:
    """Greibach's (1973) hardest CFL as the PCFG of DuSell & Chiang (2020), over `( ) [ ] , ; $`.

    The language (DuSell & Chiang's alphabet):

        L₀ = { x₁,y₁,z₁; x₂,y₂,z₂; ⋯ xₙ,yₙ,zₙ; | n ≥ 1, y₁⋯yₙ ∈ $D₂ }

    where D₂ is Dyck-2 over `()` and `[]`, each yᵢ is over `( ) [ ] $` (no
    comma) and each "decoy" xᵢ, zᵢ is over `( ) [ ] $ ,`. A recogniser must
    guess which comma-delimited piece of each segment is the real yᵢ, which
    makes L₀ as hard to parse as any CFL.

    The grammar (start `Root`; Greibach/DuSell & Chiang's S' is `Root` here,
    L'/R' are `Lp`/`Rp`):

        Root → R $ Q S L ;                    (1)
        R    → U , Rp                          (1)     x, the decoy before y, and its comma
        Rp   → Rp V ,  (c) | ε (1 − c)
        L    → Lp , U                          (1)     the comma after y, and z
        Lp   → , V Lp  (c) | ε (1 − c)
        U    → W U     (u) | ε (1 − u)                 short filler, possibly empty
        V    → W V     (v) | W (1 − v)                 long filler, non-empty
        W    → ( | ) | [ | ] | $              (1/5 each)
        Q    → L ; R   (q) | ε (1 − q)                 a segment boundary inside y₁⋯yₙ
        S    → S Q T   (s) | T (1 − s)                 the Dyck string, cut by Q's
        T    → ( Q S Q ) (t/2) | ( Q ) ((1 − t)/2) | [ Q S Q ] (t/2) | [ Q ] ((1 − t)/2)

    with c = continue_probability(mean_num_commas), u =
    continue_probability(mean_short_filler_length), v =
    continue_probability(mean_long_filler_length − 1), q =
    semicolon_probability, s = continue_probability(mean_bracket_splits),
    t = continue_probability(mean_nesting_depth). The defaults are the
    settings of DuSell & Chiang's experiments (2020; used again in 2022 and
    2024). The grammar derives the part of L₀ where every y is non-empty, the
    Dyck part of y₁⋯yₙ is non-empty, and every comma-delimited field of a
    segment other than its first and last is non-empty.
    """
    if mean_long_filler_length <= 1:
        raise ValueError(f"mean_long_filler_length must be > 1, got {mean_long_filler_length}")
    if not 0 <= semicolon_probability <= 1:
        raise ValueError(f"semicolon_probability must be in [0, 1], got {semicolon_probability}")
    c = continue_probability(mean_num_commas)
    u = continue_probability(mean_short_filler_length)
    v = continue_probability(mean_long_filler_length - 1)
    q = semicolon_probability
    s = continue_probability(mean_bracket_splits)
    t = continue_probability(mean_nesting_depth)
    return "\n".join([
        "Root -> R '$' Q S L ';'",
        "R -> U ',' Rp",
        f"Rp -> Rp V ',' {_w(c)} | ε {_w(1 - c)}",
        "L -> Lp ',' U",
        f"Lp -> ',' V Lp {_w(c)} | ε {_w(1 - c)}",
        f"U -> W U {_w(u)} | ε {_w(1 - u)}",
        f"V -> W V {_w(v)} | W {_w(1 - v)}",
        "W -> '(' | ')' | '[' | ']' | '$'",
        f"Q -> L ';' R {_w(q)} | ε {_w(1 - q)}",
        f"S -> S Q T {_w(s)} | T {_w(1 - s)}",
        f"T -> '(' Q S Q ')' {_w(t / 2)} | '(' Q ')' {_w((1 - t) / 2)}",
        f"T -> '[' Q S Q ']' {_w(t / 2)} | '[' Q ']' {_w((1 - t) / 2)}",
    ]) + "\n"


# (grammar text, the task's symbols in vocabulary order)
_TASK_GRAMMARS = {
    "marked_reversal": (marked_reversal_grammar_text, ("0", "1", "#")),
    "unmarked_reversal": (unmarked_reversal_grammar_text, ("0", "1")),
    "padded_reversal": (padded_reversal_grammar_text, ("0", "1")),
    "dyck": (dyck_grammar_text, ("(", ")", "[", "]")),
    "hardest_cfl": (hardest_cfl_grammar_text, ("(", ")", "[", "]", ",", ";", "$")),
}


# ---------------------------------------------------------------------------
# Splits and vocabulary.


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """How a split is sampled.

    Either `num_strings` strings, with a length drawn uniformly from the valid
    lengths in [min_length, max_length] once per group of `group_size`
    consecutive strings (train, valid), or `per_length` strings of every valid
    length, shortest first (test).
    """

    min_length: int
    max_length: int
    num_strings: int | None = None
    per_length: int | None = None
    group_size: int = 1
    default_seed: int = 0

    def __post_init__(self):
        if (self.num_strings is None) == (self.per_length is None):
            raise ValueError("a split gives exactly one of num_strings and per_length")
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(f"need 1 <= min_length <= max_length, got {self.min_length}, {self.max_length}")
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")


SPLITS = {
    "train": SplitSpec(40, 80, num_strings=10_000, group_size=10),
    "valid": SplitSpec(40, 80, num_strings=1_000, group_size=10),
    "test": SplitSpec(40, 100, per_length=100),
}
# Each split draws from its own random stream, so a seed's validation set
# does not depend on how many training strings were drawn.
_SPLIT_STREAMS = {"train": 0, "valid": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class CFLVocabulary:
    """Ids PAD 0, BOS 1, EOS 2, then `symbols` in order (ids 3, 4, ...)."""

    symbols: tuple[str, ...]
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every id's string: `<PAD> <s> </s>` then the symbols."""
        return (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, *self.symbols)

    @property
    def size(self) -> int:
        return 3 + len(self.symbols)

    def __len__(self) -> int:
        return self.size

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        return {s: 3 + i for i, s in enumerate(self.symbols)}

    def id_of(self, symbol: str) -> int:
        try:
            return self._ids[symbol]
        except KeyError:
            raise ValueError(f"{symbol!r} is not a symbol of this vocabulary {self.symbols}") from None

    def symbol_of(self, token_id: int) -> str:
        """The string of an id (special ids give their `<...>` token)."""
        if not 0 <= token_id < self.size:
            raise ValueError(f"id {token_id} is outside the vocabulary (size {self.size})")
        return self.tokens[token_id]


# ---------------------------------------------------------------------------
# The task.


class CFLTask:
    """One CFL task: its grammar, vocabulary, sampler, splits and true probabilities.

    Attributes:
      name: one of `TASK_NAMES`.
      display_name: the paper's name (w#wᴿ, ...).
      source_grammar: the grammar as written (with ε- and unary rules).
      grammar: the equivalent ε- and unary-free grammar samples come from.
      vocabulary: `CFLVocabulary` of the task's symbols.
    """

    def __init__(self, name: str, source_grammar: WeightedCFG, symbols: Sequence[str]):
        self.name = name
        self.display_name = _DISPLAY_NAMES.get(name, name)
        self.source_grammar = source_grammar
        self.grammar = source_grammar.without_epsilon_and_unary()
        self.vocabulary = CFLVocabulary(tuple(symbols))
        missing = set(self.grammar.terminals) - set(symbols)
        if missing:
            raise ValueError(f"task {name!r}: grammar terminals {sorted(missing)} are not in its symbols")
        self._given_length_cache: dict[tuple[str, ...], float] = {}

    def __repr__(self) -> str:
        return f"CFLTask({self.name!r}, symbols={self.vocabulary.symbols})"

    # ------------------------------------------------------------- lengths

    def _length_log_weights(self, max_length: int) -> np.ndarray:
        """[max_length + 1] log p_G(|w| = ℓ) of the start symbol."""
        start = self.grammar.nonterminals.index(self.grammar.start)
        return self.grammar.length_log_weights(max_length)[:, start]

    def valid_lengths(self, min_length: int, max_length: int) -> list[int]:
        """The lengths in [min_length, max_length] that some string of the language has."""
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        weights = self._length_log_weights(max_length)
        return [n for n in range(max(min_length, 1), max_length + 1) if np.isfinite(weights[n])]

    # ------------------------------------------------------------- sampling

    def sample(self, length: int, rng: np.random.Generator) -> list[str]:
        """One string of exactly `length` symbols, from p_G(w | |w| = length)."""
        return self.grammar.sample_with_length(length, rng).leaves()

    def sample_strings(
        self, num_strings: int, min_length: int, max_length: int, rng: np.random.Generator, group_size: int = 1
    ) -> list[list[str]]:
        """`num_strings` strings; a uniform valid length is drawn per group of `group_size` strings."""
        lengths = self.valid_lengths(min_length, max_length)
        if not lengths:
            raise ValueError(f"task {self.name!r} has no string with length in [{min_length}, {max_length}]")
        strings: list[list[str]] = []
        while len(strings) < num_strings:
            length = lengths[int(rng.integers(len(lengths)))]
            for _ in range(min(group_size, num_strings - len(strings))):
                strings.append(self.sample(length, rng))
        return strings

    def sample_per_length(
        self, per_length: int, min_length: int, max_length: int, rng: np.random.Generator
    ) -> list[list[str]]:
        """`per_length` strings of every valid length in the range, shortest first."""
        return [self.sample(n, rng) for n in self.valid_lengths(min_length, max_length) for _ in range(per_length)]

    def sample_split(self, split: str, seed: int | None = None, *, size: int | None = None) -> list[list[str]]:
        """The strings of a split (`SPLITS`): deterministic given (task, split, seed).

        Args:
          split: "train", "valid" or "test".
          seed: the random seed (default: the split's, 0). The test set of the
            paper uses the fixed default; training runs pass their own seed.
          size: overrides the split's size: the number of strings for train
            and valid, the number per length for test (for quick experiments
            and tests). Draws are made in the same order, so a smaller size
            gives a prefix of the larger one (whole length groups).
        """
        spec = split_spec(split)
        seed = spec.default_seed if seed is None else int(seed)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_SPLIT_STREAMS[split],)))
        if spec.per_length is not None:
            per_length = spec.per_length if size is None else int(size)
            return self.sample_per_length(per_length, spec.min_length, spec.max_length, rng)
        num = spec.num_strings if size is None else int(size)
        return self.sample_strings(num, spec.min_length, spec.max_length, rng, spec.group_size)

    # ------------------------------------------------------------- encoding

    def encode(self, strings: Sequence[Sequence[str]], pad_to: int | None = None) -> dict[str, np.ndarray]:
        """Model arrays for a batch of strings.

        Returns (N strings, T = pad_to or longest + 1):
          inputs:  [N, T] int32, `BOS w₁ … wₙ` then PAD.
          targets: [N, T] int32, `w₁ … wₙ EOS` then PAD.
          weights: [N, T] float32, 1 where the target is a symbol or EOS.
          lengths: [N] int32, n (EOS not counted).
        Raises ValueError naming the string and symbol for an unknown symbol.
        """
        vocab = self.vocabulary
        lengths = np.array([len(s) for s in strings], dtype=np.int32)
        width = int(lengths.max(initial=0)) + 1
        if pad_to is not None:
            if pad_to < width:
                raise ValueError(f"pad_to={pad_to} is shorter than the longest string + EOS ({width})")
            width = pad_to
        inputs = np.full((len(strings), width), vocab.pad_id, dtype=np.int32)
        targets = np.full((len(strings), width), vocab.pad_id, dtype=np.int32)
        for i, string in enumerate(strings):
            try:
                ids = [vocab.id_of(s) for s in string]
            except ValueError as e:
                raise ValueError(f"task {self.name!r}, string {i}: {e}") from None
            n = len(ids)
            inputs[i, 0] = vocab.bos_id
            inputs[i, 1 : n + 1] = ids
            targets[i, :n] = ids
            targets[i, n] = vocab.eos_id
        weights = (np.arange(width)[None, :] <= lengths[:, None]).astype(np.float32)
        return {"inputs": inputs, "targets": targets, "weights": weights, "lengths": lengths}

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Symbols of a target row: stops at the first EOS or PAD; BOS is skipped."""
        vocab = self.vocabulary
        out = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id in (vocab.eos_id, vocab.pad_id):
                break
            if token_id != vocab.bos_id:
                out.append(vocab.symbol_of(token_id))
        return out

    # ------------------------------------------------------ true probability

    def log_prob_given_length(self, string: Sequence[str]) -> float:
        """log p_G(w | |w|) = log p_G(w) − log p_G(|w|): exact, all trees of w summed (cached)."""
        key = tuple(string)
        cached = self._given_length_cache.get(key)
        if cached is None:
            if not key:
                return -math.inf
            log_total = self._length_log_weights(len(key))[len(key)]
            cached = self.grammar.log_prob(list(key)) - log_total if np.isfinite(log_total) else -math.inf
            self._given_length_cache[key] = cached
        return cached

    def log_prob_true(self, string: Sequence[str], split: str = "train") -> float:
        """log[(1 / |valid lengths of the split's range|) · p_G(w) / p_G(|w|)]: the split's source distribution.

        −inf for strings outside the language or the split's length range.
        """
        spec = split_spec(split)
        if not spec.min_length <= len(string) <= spec.max_length:
            return -math.inf
        num_lengths = len(self.valid_lengths(spec.min_length, spec.max_length))
        return self.log_prob_given_length(string) - math.log(num_lengths)

    def log_probs_true(self, strings: Sequence[Sequence[str]], split: str = "train") -> np.ndarray:
        """[N] `log_prob_true` of each string (float64)."""
        return np.array([self.log_prob_true(s, split) for s in strings], dtype=np.float64)


def split_spec(split: str) -> SplitSpec:
    try:
        return SPLITS[split]
    except KeyError:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(SPLITS)}") from None


def cfl_task(name: str) -> CFLTask:
    """The task called `name` (one of `TASK_NAMES`; '-' may stand for '_'), with the paper's settings.

    Tasks are cached: the same object (and its cache of true probabilities)
    is returned for a name.
    """
    key = name.replace("-", "_")
    if key not in _TASK_GRAMMARS:
        raise ValueError(f"unknown CFL task {name!r}; expected one of {TASK_NAMES}")
    return _build_task(key)


@functools.cache
def _build_task(key: str) -> CFLTask:
    make_text, symbols = _TASK_GRAMMARS[key]
    grammar = WeightedCFG.from_string(make_text(), source=f"<cfl:{key}>")
    return CFLTask(key, grammar, symbols)
