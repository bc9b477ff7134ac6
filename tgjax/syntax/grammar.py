"""Weighted context-free grammars: a text format, sampling, the exact inside algorithm.

A `WeightedCFG` holds rules `lhs -> rhs` with non-negative weights; the rules
of each left-hand side are normalised into probabilities, so the grammar is a
PCFG. Right-hand sides may have any length (0 = an ε-rule) and mix terminals
and non-terminals; unary rules and unary cycles are allowed.

Text format (`WeightedCFG.from_string`)::

    # A comment: a line whose first non-blank character is '#'.
    S  -> NP VP '.'              1.0
    NP -> DT NN 0.7 | DT JJ NN 0.3
    DT -> the 2 | a
        | this
    NN -> dog | cat
    JJ -> big
    VP -> barks | sleeps
    X  -> ε 0.1 | X X 0.9

* One rule per line: `LHS -> alternative | alternative | ...`, with `->` and
  `|` as separate tokens. A line starting with `|` adds alternatives to the
  rule above it (handy for long word lists).
* An alternative is a list of symbols optionally followed by a weight: the
  last token, when it is an unquoted number (`1`, `0.5`, `2e-3`); default 1.
  Weights are relative among the rules of one left-hand side. `ε` (or
  `<eps>`) alone is the empty right-hand side; an empty alternative is an
  error, so a stray `|` is caught.
* A symbol is a **non-terminal** when it is unquoted and is the left-hand
  side of some rule. Every other symbol is a **terminal**: quoted ones
  (`'word'` or `"word"`, no blanks inside) and unquoted ones that do not start
  with an upper-case letter (`the`, `a`, `#`, `.`). An unquoted symbol that
  starts with an upper-case letter and has no rules is reported as an
  undefined non-terminal (quote it to use it as a word). Quote words that are
  numbers, `|`, `->` or `ε`. A name cannot be both a terminal and a
  non-terminal. `#` only starts a comment at the beginning of a line, so
  `S -> a S a | #` has the terminal `#`.
* A head child may be marked with a trailing `^` on a non-terminal
  (`VP -> VBZ^ NP`); it is kept in `Rule.head` (an index into the rhs) for
  exact dependency heads (`tgjax.syntax.heads.grammar_head_table`). At most
  one mark per alternative; sampling and probabilities ignore it.
* The start symbol is the left-hand side of the first rule unless given.
* Errors (`GrammarError`) name the source and line.

Algorithms (all exact, NumPy only; see the methods for details):

* `sample`: top-down ancestral sampling with a `numpy.random.Generator`.
* `log_prob`: the inside algorithm for p(w) = Σ_trees p(tree), on scaled
  real numbers (log space as the fallback and in `inside_log_chart`), over an
  internally binarised grammar; ε-rules are handled with the exact
  null weights (least fixed point, Newton's method) and unary rules (and the
  effective unaries A -> B C with C deriving ε) with the exact closure
  (I − U)^{-1}.
* `length_log_weights` / `sample_with_length`: for every non-terminal A and
  length ℓ the total probability that A derives a string of length ℓ, and
  exact sampling of trees conditioned on their yield length.
* `without_epsilon_and_unary`: an equivalent grammar (for non-empty strings)
  with no ε-rules and no unary rules.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import logsumexp

from tgjax.syntax.trees import Tree

EPSILON_MARKERS = ("ε", "<eps>")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_TOKEN = re.compile(r"""'[^']*'|"[^"]*"|\S+""")

__all__ = [
    "EPSILON_MARKERS",
    "GrammarError",
    "Rule",
    "SamplingError",
    "WeightedCFG",
]


class GrammarError(ValueError):
    """A grammar that cannot be parsed or used (names the line where there is one)."""


class SamplingError(RuntimeError):
    """Sampling ran past its depth, length or size guard."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """`lhs -> rhs` with a non-negative weight; `rhs == ()` is an ε-rule.

    `head`: index into `rhs` of the head child, or None (unmarked).
    """

    lhs: str
    rhs: tuple[str, ...]
    weight: float = 1.0
    head: int | None = None


# ----------------------------------------------------------------------------
# Small log-space helpers.


def _log(x: np.ndarray | float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


@dataclasses.dataclass(frozen=True)
class _Groups:
    """Columns sorted by a target index, for a scatter-logsumexp into `size` slots."""

    order: np.ndarray  # [K] permutation putting columns in target order
    starts: np.ndarray  # [G] first column of each group (after `order`)
    counts: np.ndarray  # [G]
    targets: np.ndarray  # [G] target index of each group
    size: int

    @staticmethod
    def build(targets: np.ndarray, size: int) -> _Groups:
        order = np.argsort(targets, kind="stable")
        sorted_targets = targets[order]
        if len(sorted_targets) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return _Groups(order, empty, empty, empty, size)
        change = np.flatnonzero(np.diff(sorted_targets)) + 1
        starts = np.concatenate([[0], change])
        counts = np.diff(np.concatenate([starts, [len(sorted_targets)]]))
        return _Groups(order, starts, counts, sorted_targets[starts], size)

    def logsumexp(self, values: np.ndarray) -> np.ndarray:
        """[m, K] log values -> [m, size]: per target, log Σ exp over its columns."""
        out = np.full((values.shape[0], self.size), -np.inf)
        if len(self.starts) == 0:
            return out
        values = values[:, self.order]
        peak = np.maximum.reduceat(values, self.starts, axis=1)  # [m, G]
        peak = np.where(np.isfinite(peak), peak, 0.0)
        shifted = np.exp(values - np.repeat(peak, self.counts, axis=1))
        out[:, self.targets] = _log(np.add.reduceat(shifted, self.starts, axis=1)) + peak
        return out


# ----------------------------------------------------------------------------
# Least fixed points of x = c + L x + Σ_r p_r x_B x_C (null weights, totals).


def _least_fixed_point(
    const: np.ndarray,
    linear: np.ndarray,
    bin_lhs: np.ndarray,
    bin_left: np.ndarray,
    bin_right: np.ndarray,
    bin_prob: np.ndarray,
    active: np.ndarray,
    what: str,
) -> np.ndarray:
    """The least non-negative solution of x = c + L x + Σ_r p_r x_{B_r} x_{C_r} (x_{A_r} += ...).

    This is the total weight of the finite derivations in a system of
    polynomial equations with non-negative coefficients. Newton's method from
    0 on the "clean" system (the variables with a positive solution, `active`,
    found combinatorially by the caller) increases monotonically to the least
    solution (Etessami & Yannakakis 2009; Esparza, Kiefer & Luttenberger
    2010), quadratically in general and one bit per step at critical points, so
    200 steps reach machine precision. Linear systems take one step. At a
    critical point (spectral radius of the Jacobian 1 at the solution, e.g.
    S -> S S 0.5 | a 0.5) the residual is quadratic in the error and drops
    below rounding once the error is about √ε: the solution is then good to
    ~1e-8 only (to machine precision everywhere else).
    """
    n = len(const)
    x = np.zeros(n)
    idx = np.flatnonzero(active)
    if len(idx) == 0:
        return x
    sub = -np.ones(n, dtype=np.int64)
    sub[idx] = np.arange(len(idx))
    keep = active[bin_lhs] & active[bin_left] & active[bin_right]
    r_lhs, r_left, r_right, r_p = sub[bin_lhs[keep]], sub[bin_left[keep]], sub[bin_right[keep]], bin_prob[keep]
    c = const[idx]
    lin = linear[np.ix_(idx, idx)]
    k = len(idx)
    eye = np.eye(k)

    def value(y: np.ndarray) -> np.ndarray:
        out = c + lin @ y
        np.add.at(out, r_lhs, r_p * y[r_left] * y[r_right])
        return out

    y = np.zeros(k)
    for _ in range(200):
        jac = lin.copy()
        np.add.at(jac, (r_lhs, r_left), r_p * y[r_right])
        np.add.at(jac, (r_lhs, r_right), r_p * y[r_left])
        residual = value(y) - y
        try:
            step = np.linalg.solve(eye - jac, residual)
        except np.linalg.LinAlgError:
            step = None
        if step is None or not np.all(np.isfinite(step)):
            break  # fall through to the Kleene iteration below
        y_next = np.maximum(y + step, y)  # the exact Newton sequence is increasing
        done = np.max(np.abs(y_next - y)) <= 1e-15 * max(1.0, float(np.max(y_next)))
        y = y_next
        if done:
            break
    # Polish / fallback: Kleene iteration y <- f(y) is monotone and safe.
    for _ in range(10_000):
        y_next = value(y)
        if np.max(np.abs(y_next - y)) <= 1e-15 * max(1.0, float(np.max(y_next))):
            y = y_next
            break
        y = y_next
    residual = np.max(np.abs(value(y) - y)) if k else 0.0
    if not np.all(np.isfinite(y)) or residual > 1e-9 * max(1.0, float(np.max(y))):
        raise GrammarError(f"could not solve for the {what} (residual {residual:.3g})")
    x[idx] = y
    return x


# ----------------------------------------------------------------------------
# The internal binarised grammar.


_ORIGINAL, _INTERMEDIATE, _WRAPPER = 0, 1, 2


@dataclasses.dataclass
class _Binarized:
    """The grammar in a normal form the chart algorithms use.

    Non-terminals 0..num_original-1 are the grammar's own; then come
    intermediate symbols (one chain per rule with more than two symbols:
    A -> X1 X2 X3 X4 becomes A -> X1 @1, @1 -> X2 @2, @2 -> X3 X4, the first
    rule carrying the probability, the others 1) and terminal wrappers
    (@t -> t with probability 1, for terminals inside rules with two or more
    symbols). Derivations correspond one to one with the original ones, with
    the same probabilities. Rules are then of four kinds: ε, lexical A -> t,
    unary A -> B and binary A -> B C.
    """

    names: list[str]
    kind: np.ndarray  # [N] _ORIGINAL, _INTERMEDIATE or _WRAPPER
    wrapped_terminal: dict[int, str]
    num_original: int
    eps: np.ndarray  # [N] probability of A -> ε
    lex_lhs: np.ndarray  # [Rl]
    lex_term: np.ndarray  # [Rl] terminal ids
    lex_prob: np.ndarray  # [Rl]
    un_lhs: np.ndarray  # [Ru]
    un_child: np.ndarray
    un_prob: np.ndarray
    bin_lhs: np.ndarray  # [Rb]
    bin_left: np.ndarray
    bin_right: np.ndarray
    bin_prob: np.ndarray


class WeightedCFG:
    """A weighted context-free grammar, normalised per left-hand side into a PCFG.

    Args:
      rules: the rules; symbols on right-hand sides that are the left-hand side
        of no rule are terminals. Weights must be finite and non-negative, each
        left-hand side must have positive total weight, and rules must be
        distinct.
      start: the start symbol (default: the first rule's left-hand side).
    """

    def __init__(self, rules: Iterable[Rule | tuple], start: str | None = None):
        rule_list: list[Rule] = []
        for r in rules:
            if not isinstance(r, Rule):
                r = Rule(r[0], tuple(r[1]), float(r[2]) if len(r) > 2 else 1.0)
            r = Rule(str(r.lhs), tuple(str(s) for s in r.rhs), float(r.weight), r.head)
            if not math.isfinite(r.weight) or r.weight < 0:
                raise GrammarError(f"rule {_rule_text(r)}: weight must be finite and >= 0, got {r.weight}")
            if r.head is not None and not 0 <= r.head < len(r.rhs):
                raise GrammarError(f"rule {_rule_text(r)}: head {r.head} is not an index into its right-hand side")
            rule_list.append(r)
        if not rule_list:
            raise GrammarError("a grammar needs at least one rule")
        self._rules = tuple(rule_list)
        self._nonterminals = tuple(dict.fromkeys(r.lhs for r in rule_list))
        nt_set = set(self._nonterminals)
        self._terminals = tuple(dict.fromkeys(s for r in rule_list for s in r.rhs if s not in nt_set))
        self.start = self._nonterminals[0] if start is None else start
        if self.start not in nt_set:
            raise GrammarError(f"start symbol {self.start!r} has no rules")
        seen: dict[tuple[str, tuple[str, ...]], int] = {}
        for i, r in enumerate(rule_list):
            key = (r.lhs, r.rhs)
            if key in seen:
                raise GrammarError(f"duplicate rule {_rule_text(r)} (rules {seen[key]} and {i})")
            seen[key] = i
        totals: dict[str, float] = {}
        for r in rule_list:
            totals[r.lhs] = totals.get(r.lhs, 0.0) + r.weight
        for lhs, total in totals.items():
            if total <= 0:
                raise GrammarError(f"non-terminal {lhs!r}: its rules have total weight 0")
        self._probs = np.array([r.weight / totals[r.lhs] for r in rule_list])
        self._rule_index = seen

    # ------------------------------------------------------------------ basics

    @property
    def rules(self) -> tuple[Rule, ...]:
        return self._rules

    @property
    def nonterminals(self) -> tuple[str, ...]:
        """Non-terminals in order of first appearance as a left-hand side."""
        return self._nonterminals

    @property
    def terminals(self) -> tuple[str, ...]:
        """Terminals in order of first appearance."""
        return self._terminals

    @property
    def probabilities(self) -> np.ndarray:
        """[num_rules] normalised probability of each rule (same order as `rules`)."""
        return self._probs.copy()

    def is_terminal(self, symbol: str) -> bool:
        return symbol in self._terminal_index

    def rules_for(self, lhs: str) -> tuple[Rule, ...]:
        return tuple(r for r in self._rules if r.lhs == lhs)

    def rule_probability(self, lhs: str, rhs: Sequence[str]) -> float:
        """Normalised probability of `lhs -> rhs` (0 if there is no such rule)."""
        i = self._rule_index.get((lhs, tuple(rhs)))
        return 0.0 if i is None else float(self._probs[i])

    def __repr__(self) -> str:
        return (
            f"WeightedCFG(start={self.start!r}, {len(self._nonterminals)} non-terminals, "
            f"{len(self._terminals)} terminals, {len(self._rules)} rules)"
        )

    def _root(self, start: str | None) -> int:
        name = self.start if start is None else start
        if name not in self._nt_index:
            raise GrammarError(f"{name!r} is not a non-terminal of this grammar")
        return self._nt_index[name]

    @functools.cached_property
    def _terminal_index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self._terminals)}

    @functools.cached_property
    def _nt_index(self) -> dict[str, int]:
        return {a: i for i, a in enumerate(self._nonterminals)}

    # ------------------------------------------------------------ text format

    @classmethod
    def from_string(cls, text: str, start: str | None = None, source: str = "<string>") -> WeightedCFG:
        """Parses the text format described in the module docstring.

        Errors are `GrammarError`s naming `source` and the line number.
        """
        raw: list[tuple[str, list[tuple[str, bool]], float, int]] = []  # lhs, symbols, weight, line
        lhs_line: dict[str, int] = {}
        current_lhs: str | None = None
        for lineno, line in enumerate(text.splitlines(), start=1):
            where = f"{source}:{lineno}"
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            tokens = _tokenize(stripped, where)
            if tokens[0] == ("|", False):
                if current_lhs is None:
                    raise GrammarError(f"{where}: a continuation line ('| ...') needs a rule above it")
                lhs, body = current_lhs, tokens[1:]
            else:
                if len(tokens) < 2 or tokens[1] != ("->", False):
                    raise GrammarError(
                        f"{where}: expected 'LHS -> symbols [weight] | ...', got {stripped!r}"
                    )
                lhs_text, lhs_quoted = tokens[0]
                if lhs_quoted or _NUMBER.match(lhs_text) or lhs_text in ("|", *EPSILON_MARKERS):
                    raise GrammarError(f"{where}: {lhs_text!r} cannot be a left-hand side (non-terminal)")
                lhs, body = lhs_text, tokens[2:]
                lhs_line.setdefault(lhs, lineno)
            current_lhs = lhs
            alternatives: list[list[tuple[str, bool]]] = [[]]
            for tok in body:
                if tok == ("|", False):
                    alternatives.append([])
                elif tok == ("->", False):
                    raise GrammarError(f"{where}: unexpected '->' (one rule per line; quote it to use it as a word)")
                else:
                    alternatives[-1].append(tok)
            for alt in alternatives:
                weight = 1.0
                if alt and not alt[-1][1] and _NUMBER.match(alt[-1][0]):
                    weight = float(alt[-1][0])
                    alt = alt[:-1]
                if weight < 0 or not math.isfinite(weight):
                    raise GrammarError(f"{where}: weight must be finite and >= 0, got {weight}")
                if any(not q and s in EPSILON_MARKERS for s, q in alt):
                    if len(alt) != 1:
                        raise GrammarError(f"{where}: ε must stand alone in an alternative")
                    alt = []
                elif not alt:
                    raise GrammarError(
                        f"{where}: empty alternative in {stripped!r}; write ε for the empty right-hand side"
                    )
                raw.append((lhs, alt, weight, lineno))
        if not raw:
            raise GrammarError(f"{source}: no rules found")
        nonterminals = set(lhs_line)
        rules: list[Rule] = []
        first_line: dict[tuple[str, tuple[str, ...]], int] = {}
        for lhs, alt, weight, lineno in raw:
            where = f"{source}:{lineno}"
            rhs: list[str] = []
            head: int | None = None
            for sym, quoted in alt:
                if not quoted and sym.endswith("^") and sym[:-1] in nonterminals:
                    if head is not None:
                        raise GrammarError(f"{where}: more than one head marked ('^') in one alternative")
                    head, sym = len(rhs), sym[:-1]
                if quoted:
                    if sym in nonterminals:
                        raise GrammarError(
                            f"{where}: {sym!r} is used as a terminal here but is a non-terminal "
                            f"(rules on line {lhs_line[sym]}); a name cannot be both"
                        )
                elif sym not in nonterminals and sym[:1].isupper():
                    raise GrammarError(
                        f"{where}: undefined non-terminal {sym!r} (no rule has it on the left; "
                        f"quote it, '{sym}', to use it as a word)"
                    )
                rhs.append(sym)
            key = (lhs, tuple(rhs))
            if key in first_line:
                raise GrammarError(
                    f"{where}: duplicate rule {_rule_text(Rule(lhs, tuple(rhs)))} (first on line {first_line[key]})"
                )
            first_line[key] = lineno
            rules.append(Rule(lhs, tuple(rhs), weight, head))
        totals: dict[str, float] = {}
        for r in rules:
            totals[r.lhs] = totals.get(r.lhs, 0.0) + r.weight
        for lhs, total in totals.items():
            if total <= 0:
                raise GrammarError(f"{source}:{lhs_line[lhs]}: the rules of {lhs!r} have total weight 0")
        if start is not None and start not in nonterminals:
            raise GrammarError(f"{source}: start symbol {start!r} has no rules")
        return cls(rules, start=start)

    @classmethod
    def from_file(cls, path: str, start: str | None = None) -> WeightedCFG:
        with open(path, encoding="utf-8") as f:
            return cls.from_string(f.read(), start=start, source=str(path))

    def to_string(self) -> str:
        """The grammar in the text format, one rule per line (start symbol's rules first)."""
        order = sorted(range(len(self._rules)), key=lambda i: self._rules[i].lhs != self.start)
        lines = []
        for i in order:
            r = self._rules[i]
            rhs = " ".join(
                _quote(s) if s in self._terminal_index else s + "^" * (k == r.head) for k, s in enumerate(r.rhs)
            ) or "ε"
            lines.append(f"{r.lhs} -> {rhs} {r.weight!r}")
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------- tree probability

    @functools.cached_property
    def _rule_logprob(self) -> dict[tuple[str, tuple[str, ...]], float]:
        return {(r.lhs, r.rhs): float(_log(p)) for r, p in zip(self._rules, self._probs)}

    def tree_log_prob(self, tree: Tree) -> float:
        """log Π p(rule) over the tree's nodes: the probability that `tree.label` derives this tree.

        A node `Tree(A, children)` uses the rule `A -> (labels of Tree children
        and the words)`; an empty child list is `A -> ε`. A rule missing from
        the grammar gives −inf. Trees must be in the form `sample` returns with
        `preterminals=True` (every non-terminal a node).
        """
        total = 0.0
        stack = [tree]
        table = self._rule_logprob
        while stack:
            node = stack.pop()
            rhs = tuple(c.label if isinstance(c, Tree) else c for c in node.children)
            logp = table.get((node.label, rhs))
            if logp is None:
                return -math.inf
            total += logp
            stack.extend(c for c in node.children if isinstance(c, Tree))
        return total

    def tree_prob(self, tree: Tree) -> float:
        return math.exp(self.tree_log_prob(tree))

    # -------------------------------------------------------------- sampling

    @functools.cached_property
    def _sampling_table(self) -> dict[str, tuple[np.ndarray, list[Rule]]]:
        table: dict[str, tuple[list[float], list[Rule]]] = {}
        for r, p in zip(self._rules, self._probs):
            if p > 0:
                table.setdefault(r.lhs, ([], []))
                table[r.lhs][0].append(p)
                table[r.lhs][1].append(r)
        return {a: (_cumulative(np.array(ps)), rs) for a, (ps, rs) in table.items()}

    def sample(
        self,
        rng: np.random.Generator,
        start: str | None = None,
        *,
        max_depth: int = 200,
        max_length: int = 10_000,
        preterminals: bool = True,
    ) -> Tree:
        """Samples a tree top-down from the PCFG (ancestral sampling).

        Args:
          rng: the random generator; the same seed gives the same tree.
          start: the root non-terminal (default: the start symbol).
          max_depth: raise `SamplingError` when a node would lie deeper than
            this (root depth 0). A grammar whose derivations are infinite with
            positive probability (a non-tight PCFG) hits this guard.
          max_length: raise `SamplingError` when the yield would exceed this.
          preterminals: when True every non-terminal is a node, so a rule
            `X -> 'word'` gives the pre-terminal `Tree("X", ["word"])`. When
            False such a node (except the root) collapses to the bare word in
            its parent. Terminals in longer rules are always bare words.

        Returns:
          The tree: non-terminal labels on the nodes, terminals as words.
        """
        start = self._nonterminals[self._root(start)]
        table = self._sampling_table
        holder: list = []
        num_words = 0
        stack: list[tuple[str, int, list]] = [(start, 0, holder)]
        while stack:
            symbol, depth, out = stack.pop()
            if symbol in self._terminal_index:
                num_words += 1
                if num_words > max_length:
                    raise SamplingError(
                        f"sampling from {start!r}: the yield exceeded max_length={max_length}"
                    )
                out.append(symbol)
                continue
            if depth > max_depth:
                raise SamplingError(
                    f"sampling from {start!r}: the tree exceeded max_depth={max_depth} "
                    f"(at {symbol!r}); raise the guard, or use sample_with_length for a bounded yield"
                )
            cum, rules = table[symbol]
            rule = rules[int(np.searchsorted(cum, rng.random(), side="right"))]
            if (
                not preterminals
                and out is not holder
                and len(rule.rhs) == 1
                and rule.rhs[0] in self._terminal_index
            ):
                stack.append((rule.rhs[0], depth, out))
                continue
            node = Tree(symbol, [])
            out.append(node)
            for child in reversed(rule.rhs):
                stack.append((child, depth + 1, node.children))
        return holder[0]

    # -------------------------------------------------- the binarised grammar

    @functools.cached_property
    def _bin(self) -> _Binarized:
        names = list(self._nonterminals)
        kind = [_ORIGINAL] * len(names)
        wrapped: dict[int, str] = {}
        wrapper_of: dict[str, int] = {}
        nt_index = self._nt_index
        t_index = self._terminal_index
        eps = {}
        lex, un, bi = [], [], []

        def new_symbol(name: str, k: int) -> int:
            names.append(name)
            kind.append(k)
            return len(names) - 1

        def symbol_id(s: str) -> int:
            if s in nt_index:
                return nt_index[s]
            if s not in wrapper_of:
                wrapper_of[s] = new_symbol(f"@{s}", _WRAPPER)
                wrapped[wrapper_of[s]] = s
                lex.append((wrapper_of[s], t_index[s], 1.0))
            return wrapper_of[s]

        for rule_id, (r, p) in enumerate(zip(self._rules, self._probs)):
            if p == 0:
                continue
            a = nt_index[r.lhs]
            if len(r.rhs) == 0:
                eps[a] = eps.get(a, 0.0) + p
            elif len(r.rhs) == 1:
                s = r.rhs[0]
                if s in t_index:
                    lex.append((a, t_index[s], p))
                else:
                    un.append((a, nt_index[s], p))
            else:
                ids = [symbol_id(s) for s in r.rhs]
                current, prob = a, p
                for j in range(len(ids) - 2):
                    nxt = new_symbol(f"@{rule_id}.{j + 1}", _INTERMEDIATE)
                    bi.append((current, ids[j], nxt, prob))
                    current, prob = nxt, 1.0
                bi.append((current, ids[-2], ids[-1], prob))

        n = len(names)
        eps_arr = np.zeros(n)
        for a, p in eps.items():
            eps_arr[a] = p

        def cols(rows, k, dtypes):
            return [np.array([row[i] for row in rows], dtype=dt) for i, dt in zip(range(k), dtypes)]

        i64, f64 = np.int64, np.float64
        lex_lhs, lex_term, lex_prob = cols(lex, 3, (i64, i64, f64))
        un_lhs, un_child, un_prob = cols(un, 3, (i64, i64, f64))
        bin_lhs, bin_left, bin_right, bin_prob = cols(bi, 4, (i64, i64, i64, f64))
        return _Binarized(
            names=names,
            kind=np.array(kind),
            wrapped_terminal=wrapped,
            num_original=len(self._nonterminals),
            eps=eps_arr,
            lex_lhs=lex_lhs,
            lex_term=lex_term,
            lex_prob=lex_prob,
            un_lhs=un_lhs,
            un_child=un_child,
            un_prob=un_prob,
            bin_lhs=bin_lhs,
            bin_left=bin_left,
            bin_right=bin_right,
            bin_prob=bin_prob,
        )

    @functools.cached_property
    def _structure(self) -> dict[str, np.ndarray]:
        """Which symbols can derive ε, and which can derive a non-empty string (boolean fixed points)."""
        b = self._bin
        n = len(b.names)
        nullable = b.eps > 0
        while True:
            nxt = nullable.copy()
            nxt[b.un_lhs[nullable[b.un_child]]] = True
            nxt[b.bin_lhs[nullable[b.bin_left] & nullable[b.bin_right]]] = True
            if np.array_equal(nxt, nullable):
                break
            nullable = nxt
        productive = np.zeros(n, dtype=bool)
        productive[b.lex_lhs] = True
        while True:
            nxt = productive.copy()
            nxt[b.un_lhs[productive[b.un_child]]] = True
            left_ok = productive[b.bin_left] | nullable[b.bin_left]
            right_ok = productive[b.bin_right] | nullable[b.bin_right]
            some = productive[b.bin_left] | productive[b.bin_right]
            nxt[b.bin_lhs[left_ok & right_ok & some]] = True
            if np.array_equal(nxt, productive):
                break
            productive = nxt
        return {"nullable": nullable, "productive": productive}

    @functools.cached_property
    def _null(self) -> np.ndarray:
        """[N] null weights: probability that each symbol derives ε (exact least fixed point)."""
        b = self._bin
        n = len(b.names)
        linear = np.zeros((n, n))
        np.add.at(linear, (b.un_lhs, b.un_child), b.un_prob)
        return _least_fixed_point(
            b.eps, linear, b.bin_lhs, b.bin_left, b.bin_right, b.bin_prob,
            self._structure["nullable"], "null weights",
        )

    @functools.cached_property
    def _effective_unary(self) -> np.ndarray:
        """[N, N] U[A, C]: A -> C, plus A -> B C and A -> C B weighted by B's null weight.

        For a non-empty span these are exactly the ways A reaches C over the
        same span in one step, so the chart's unary closure is (I − U)^{-1}.
        """
        b = self._bin
        n = len(b.names)
        null = self._null
        u = np.zeros((n, n))
        np.add.at(u, (b.un_lhs, b.un_child), b.un_prob)
        np.add.at(u, (b.bin_lhs, b.bin_right), b.bin_prob * null[b.bin_left])
        np.add.at(u, (b.bin_lhs, b.bin_left), b.bin_prob * null[b.bin_right])
        return u

    @functools.cached_property
    def _nonempty_total(self) -> np.ndarray:
        """[N] T[A]: total probability of the finite derivations of non-empty strings from A."""
        b = self._bin
        lex_total = np.zeros(len(b.names))
        np.add.at(lex_total, b.lex_lhs, b.lex_prob)
        return _least_fixed_point(
            lex_total, self._effective_unary, b.bin_lhs, b.bin_left, b.bin_right, b.bin_prob,
            self._structure["productive"], "non-empty totals",
        )

    @functools.cached_property
    def _closure(self) -> tuple[_Groups, np.ndarray, np.ndarray]:
        """The unary closure C = (I − U)^{-1} over symbols that derive non-empty strings.

        Returned sparse: (groups by target A, source C per entry, log C[A, C]).
        Symbols deriving no non-empty string are left out: their chart entries
        are −inf anyway, and a probability-1 unary loop among them would make
        I − U singular.
        """
        names = self._bin.names
        n = len(names)
        active = self._structure["productive"]
        idx = np.flatnonzero(active)
        u = self._effective_unary[np.ix_(idx, idx)]
        k = len(idx)
        # Structural reachability decides which entries are non-zero.
        reach = np.eye(k, dtype=bool) | (u > 0)
        while True:
            nxt = reach | ((reach.astype(np.int64) @ reach.astype(np.int64)) > 0)
            if np.array_equal(nxt, reach):
                break
            reach = nxt
        try:
            closure = np.linalg.inv(np.eye(k) - u)
        except np.linalg.LinAlgError:
            closure = None
        # I - U is invertible with a non-negative inverse iff the spectral radius of U is < 1.
        if closure is None or not np.all(np.isfinite(closure)) or (k and np.min(closure) < -1e-9):
            cyc = [names[idx[i]] for i in range(k) if (reach[i] & reach[:, i]).sum() > 1 or u[i, i] > 0]
            raise GrammarError(
                "the unary rules (including A -> B C with B deriving ε) have total probability >= 1 "
                f"around a cycle among {cyc[:10]}; the closure (I - U)^-1 does not exist"
            )
        closure = np.where(reach, np.maximum(closure, 0.0), 0.0)
        rows, cols = np.nonzero(reach & (closure > 0))
        groups = _Groups.build(idx[rows], n)
        source = idx[cols]
        logw = _log(closure[rows, cols])
        return groups, source, logw

    def _close(self, raw: np.ndarray) -> np.ndarray:
        """[m, N] log weights before unary steps -> [m, N] after the unary closure."""
        groups, source, logw = self._closure
        return groups.logsumexp(raw[:, source] + logw)

    @functools.cached_property
    def _bin_groups(self) -> _Groups:
        return _Groups.build(self._bin.bin_lhs, len(self._bin.names))

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Binary rules over split points, both parts non-empty.

        Args:
          left, right: [m, D, N] log inside weights of the left and right parts
            of D split points of m spans.
        Returns:
          [m, N] log Σ_d Σ_{A -> B C} p · β_left[d, B] · β_right[d, C].
        """
        b = self._bin
        m = left.shape[0]
        if left.shape[1] == 0 or len(b.bin_lhs) == 0:
            return np.full((m, len(b.names)), -np.inf)
        per_rule = logsumexp(left[:, :, b.bin_left] + right[:, :, b.bin_right], axis=1)  # [m, Rb]
        return self._bin_groups.logsumexp(per_rule + _log(b.bin_prob))

    @functools.cached_property
    def _lex_log(self) -> np.ndarray:
        """[V + 1, N] log p(A -> t) (row V, for unknown words, is all −inf)."""
        b = self._bin
        table = np.zeros((len(self._terminals) + 1, len(b.names)))
        np.add.at(table, (b.lex_term, b.lex_lhs), b.lex_prob)
        return _log(table)

    # ------------------------------------------------------------ the inside

    def null_weights(self) -> dict[str, float]:
        """Probability that each non-terminal derives the empty string."""
        return {a: float(self._null[i]) for i, a in enumerate(self._nonterminals)}

    def partition_function(self) -> dict[str, float]:
        """Total probability of each non-terminal's finite derivations (1 for a consistent PCFG)."""
        total = self._null + self._nonempty_total
        return {a: float(total[i]) for i, a in enumerate(self._nonterminals)}

    def inside_log_chart(self, words: Sequence[str] | str) -> np.ndarray:
        """Log inside weights of every span and non-terminal.

        Args:
          words: the string (a `str` is split on whitespace).
        Returns:
          [n, n + 1, num_nonterminals] float64, entry [i, ℓ, A] = log p(A =>*
          words[i:i+ℓ]) for i + ℓ <= n, −inf elsewhere; ℓ = 0 holds the null
          weights. Non-terminals in `self.nonterminals` order.

        Works in log space per entry, so strings of hundreds of words neither
        underflow nor lose the small entries. Memory is O(n² N), time
        O(n³ R_binary + n² K_closure) with R_binary binary rules after
        binarisation.
        """
        return self._inside_chart(_as_words(words))[:, :, : self._bin.num_original]

    def _inside_chart(self, words: list[str]) -> np.ndarray:
        n = len(words)
        num = len(self._bin.names)
        chart = np.full((n, n + 1, num), -np.inf)  # [start, length, symbol]
        if n == 0:
            return chart
        chart[:, 0, :] = _log(self._null)
        unknown = len(self._terminals)
        ids = np.array([self._terminal_index.get(w, unknown) for w in words])
        chart[:, 1, :] = self._close(self._lex_log[ids])
        starts = np.arange(n)
        for length in range(2, n + 1):
            m = n - length + 1
            split = np.arange(1, length)  # length of the left part
            left = chart[:m, 1:length]  # [m, length-1, N]
            right = chart[starts[:m, None] + split[None, :], length - split[None, :]]
            chart[:m, length] = self._close(self._combine(left, right))
        return chart

    def log_prob(self, words: Sequence[str] | str, start: str | None = None) -> float:
        """log p(words): the log total probability of all trees with this yield.

        `start` (default: the start symbol) may be any non-terminal. Unknown
        words give −inf. Computed by `_scaled_inside_root` (real mantissas and
        one log scale per span: ~10× faster than the log-space chart on the
        Hardest CFL's test lengths 40–100, equal to it to float64 rounding;
        benchmarks/cfl_true_probabilities.py); where that
        finds no derivation, the log-space chart (`inside_log_chart`) decides,
        so an entry lost to underflow can never turn a string of the language
        into a probability of 0.
        """
        words = _as_words(words)
        a = self._root(start)
        if not words:
            return float(_log(self._null[a]))
        if any(w not in self._terminal_index for w in words):
            return -math.inf
        value = self._scaled_inside_root(words, a)
        if value == -math.inf:
            value = float(self._inside_chart(words)[0, len(words), a])
        return value

    @functools.cached_property
    def _child_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The symbols that occur as left (right) children of binary rules, and each rule's index into them."""
        b = self._bin
        left_symbols, rule_left = np.unique(b.bin_left, return_inverse=True)
        right_symbols, rule_right = np.unique(b.bin_right, return_inverse=True)
        return left_symbols, rule_left, right_symbols, rule_right

    def _scaled_inside_root(self, words: list[str], root: int) -> float:
        """log p(root =>* words) by the inside algorithm on scaled real numbers.

        Each span's weights are kept as mantissas in [0, 1] times exp(scale),
        the scale being the span's largest log weight. The sum over split
        points and binary rules is then a real multiply-add (one matrix
        product per span over the split points, left children × right
        children) instead of an exp per term; only the [spans, splits] scale
        differences and the new cells are exponentiated. The two charts hold
        only the columns binary rules read: `left` by (start, length) for left
        children, `right` by (end, length) for right children, so that a
        span's split points are two plain slices.

        An entry below ~1e-308 of its span's largest is dropped (float64
        underflow); the caller falls back to the log-space chart when the
        result is −inf.
        """
        b = self._bin
        n = len(words)
        left_symbols, rule_left, right_symbols, rule_right = self._child_columns
        rule_log_prob = _log(b.bin_prob)
        left = np.zeros((n, n + 1, len(left_symbols)))  # [start, length, left child] mantissas
        left_scale = np.full((n, n + 1), -np.inf)
        right = np.zeros((n + 1, n + 1, len(right_symbols)))  # [end, length, right child] mantissas
        right_scale = np.full((n + 1, n + 1), -np.inf)
        root_log = -np.inf

        def store(cells: np.ndarray, length: int) -> None:  # [m, N] log weights of the spans (i, length)
            nonlocal root_log
            scale = cells.max(axis=1)
            finite = np.isfinite(scale)
            shift = np.where(finite, scale, 0.0)[:, None]
            m = cells.shape[0]
            left[:m, length] = np.exp(cells[:, left_symbols] - shift)
            right[length : length + m, length] = np.exp(cells[:, right_symbols] - shift)
            left_scale[:m, length] = right_scale[length : length + m, length] = np.where(finite, scale, -np.inf)
            if length == n:
                root_log = cells[0, root]

        ids = np.array([self._terminal_index[w] for w in words])
        store(self._close(self._lex_log[ids]), 1)
        for length in range(2, n + 1):
            m = n - length + 1
            # split d (left part d words long) of span (i, length): left[i, d] and right[i + length, length - d]
            scale_sum = left_scale[:m, 1:length] + right_scale[length : length + m, length - 1 : 0 : -1]  # [m, D]
            peak = scale_sum.max(axis=1)
            finite = np.isfinite(peak)
            peak = np.where(finite, peak, 0.0)
            weighted_left = left[:m, 1:length] * np.exp(scale_sum - peak[:, None])[:, :, None]  # [m, D, L]
            pairs = np.matmul(weighted_left.transpose(0, 2, 1),
                              right[length : length + m, length - 1 : 0 : -1])  # [m, L, R]
            with np.errstate(divide="ignore"):
                per_rule = np.log(pairs[:, rule_left, rule_right]) + rule_log_prob + peak[:, None]  # [m, Rb]
            per_rule[~finite] = -np.inf
            store(self._close(self._bin_groups.logsumexp(per_rule)), length)
        return float(root_log)

    def prob(self, words: Sequence[str] | str, start: str | None = None) -> float:
        return math.exp(self.log_prob(words, start))

    # ---------------------------------------------------------- length weights

    _length_cache: np.ndarray | None = None

    def _length_log_weights_all(self, max_length: int) -> np.ndarray:
        """[max_length + 1, N] over all internal symbols (cached, grown on demand)."""
        cached = self._length_cache
        if cached is not None and cached.shape[0] > max_length:
            return cached
        if cached is not None:
            max_length = max(max_length, 2 * (cached.shape[0] - 1))
        b = self._bin
        logz = np.full((max_length + 1, len(b.names)), -np.inf)
        logz[0] = _log(self._null)
        if max_length >= 1:
            lex_total = np.zeros(len(b.names))
            np.add.at(lex_total, b.lex_lhs, b.lex_prob)
            logz[1] = self._close(_log(lex_total)[None])[0]
        for length in range(2, max_length + 1):
            left = logz[1:length][None]
            right = logz[length - 1 : 0 : -1][None]
            logz[length] = self._close(self._combine(left, right))[0]
        self._length_cache = logz
        return logz

    def length_log_weights(self, max_length: int) -> np.ndarray:
        """[max_length + 1, num_nonterminals]: entry [ℓ, A] = log Σ_{|w| = ℓ} p(A =>* w).

        The inside algorithm with every word replaced by "any word"; ℓ = 0 is
        the null weight. Columns in `self.nonterminals` order.
        """
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        return self._length_log_weights_all(max_length)[: max_length + 1, : self._bin.num_original].copy()

    def length_distribution(self, max_length: int, start: str | None = None) -> np.ndarray:
        """[max_length + 1] p(|w| = ℓ) for the start symbol (or `start`)."""
        a = self._root(start)
        return np.exp(self.length_log_weights(max_length)[:, a])

    # ----------------------------------------------- length-conditioned sampling

    @functools.cached_property
    def _rules_by_lhs(self) -> dict[str, list[np.ndarray]]:
        b = self._bin
        n = len(b.names)

        def split(lhs: np.ndarray) -> list[np.ndarray]:
            order = np.argsort(lhs, kind="stable")
            bounds = np.searchsorted(lhs[order], np.arange(n + 1))
            return [order[bounds[a] : bounds[a + 1]] for a in range(n)]

        return {"lex": split(b.lex_lhs), "un": split(b.un_lhs), "bin": split(b.bin_lhs)}

    @functools.cached_property
    def _option_cache(self) -> dict[tuple[int, int], tuple]:
        return {}

    def _options(self, symbol: int, length: int) -> tuple:
        """The ways `symbol` can derive a string of `length`, with their probabilities.

        Options: the ε-rule (length 0), lexical rules (length 1), unary rules
        A -> B (weight p · Z_B(ℓ)), and binary rules A -> B C with a split d,
        0 <= d <= ℓ (weight p · Z_B(d) · Z_C(ℓ − d)). They sum to Z_A(ℓ), so
        choosing them in proportion samples trees with yield length ℓ from
        p(tree | ℓ) exactly.
        """
        key = (symbol, length)
        cache = self._option_cache
        if key in cache:
            return cache[key]
        b = self._bin
        logz = self._length_log_weights_all(length)
        by = self._rules_by_lhs
        lex_ids = by["lex"][symbol] if length == 1 else np.zeros(0, dtype=np.int64)
        un_ids = by["un"][symbol]
        bin_ids = by["bin"][symbol]
        eps_w = np.array([b.eps[symbol]]) if length == 0 and b.eps[symbol] > 0 else np.zeros(0)
        splits = np.arange(length + 1)
        bin_w = (
            _log(b.bin_prob[bin_ids])[:, None]
            + logz[splits[None, :], b.bin_left[bin_ids][:, None]]
            + logz[length - splits[None, :], b.bin_right[bin_ids][:, None]]
        )  # [k, length + 1]
        logw = np.concatenate(
            [_log(eps_w), _log(b.lex_prob[lex_ids]), _log(b.un_prob[un_ids]) + logz[length, b.un_child[un_ids]],
             bin_w.reshape(-1)]
        )
        if len(logw) == 0 or not np.isfinite(np.max(logw)):
            raise SamplingError(f"{b.names[symbol]!r} derives no string of length {length}")
        cum = _cumulative(np.exp(logw - np.max(logw)))
        entry = (cum, len(eps_w), lex_ids, un_ids, bin_ids, length + 1)
        cache[key] = entry
        return entry

    def sample_with_length(
        self,
        length: int,
        rng: np.random.Generator,
        start: str | None = None,
        *,
        preterminals: bool = True,
        max_nodes: int | None = None,
    ) -> Tree:
        """Samples a tree whose yield has exactly `length` words, from p(tree) / Z(length).

        Top-down over the binarised grammar: at each (symbol, span length) an
        option (rule and, for binary rules, the split) is drawn in proportion
        to the total probability of its completions (see `_options`), then
        the binarisation is undone. Deterministic given `rng`'s state.

        Args:
          length: the yield length ℓ >= 0.
          rng: the random generator.
          start: the root non-terminal (default: the start symbol).
          preterminals: as in `sample`.
          max_nodes: raise `SamplingError` past this many internal nodes
            (default 100 · (ℓ + 10)); only unary or ε cycles can get near it.
        Raises:
          SamplingError: the root derives no string of this length.
        """
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        b = self._bin
        root = self._root(start)
        if not np.isfinite(self._length_log_weights_all(length)[length, root]):
            raise SamplingError(f"{b.names[root]!r} derives no string of length {length}")
        max_nodes = 100 * (length + 10) if max_nodes is None else max_nodes
        terminals = self._terminals
        holder: list = []
        stack: list[tuple[int, int, list]] = [(root, length, holder)]
        visited = 0
        while stack:
            symbol, span, out = stack.pop()
            visited += 1
            if visited > max_nodes:
                raise SamplingError(
                    f"sampling a tree of length {length} visited more than max_nodes={max_nodes} nodes"
                )
            kind = b.kind[symbol]
            if kind == _WRAPPER:
                out.append(b.wrapped_terminal[symbol])
                continue
            cum, n_eps, lex_ids, un_ids, bin_ids, width = self._options(symbol, span)
            choice = int(np.searchsorted(cum, rng.random(), side="right"))
            if kind == _ORIGINAL:
                if choice >= n_eps and choice < n_eps + len(lex_ids) and not preterminals and out is not holder:
                    out.append(terminals[b.lex_term[lex_ids[choice - n_eps]]])
                    continue
                node = Tree(b.names[symbol], [])
                out.append(node)
                target = node.children
            else:  # an intermediate symbol: its children belong to the enclosing node
                target = out
            if choice < n_eps:
                continue
            choice -= n_eps
            if choice < len(lex_ids):
                target.append(terminals[b.lex_term[lex_ids[choice]]])
                continue
            choice -= len(lex_ids)
            if choice < len(un_ids):
                stack.append((int(b.un_child[un_ids[choice]]), span, target))
                continue
            choice -= len(un_ids)
            rule, split = bin_ids[choice // width], choice % width
            stack.append((int(b.bin_right[rule]), span - split, target))
            stack.append((int(b.bin_left[rule]), split, target))
        return holder[0]

    def sample_in_length_range(
        self,
        rng: np.random.Generator,
        min_length: int,
        max_length: int,
        start: str | None = None,
        *,
        preterminals: bool = True,
    ) -> Tree:
        """Samples from p(tree | min_length <= |yield| <= max_length), exactly.

        Draws ℓ from the length distribution restricted to the range, then a
        tree with `sample_with_length`: the same distribution as rejection
        sampling, without the rejected draws.
        """
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        dist = self.length_distribution(max_length, start)[min_length:]
        if not np.any(dist > 0):
            raise SamplingError(f"no string with length in [{min_length}, {max_length}]")
        length = min_length + int(np.searchsorted(_cumulative(dist), rng.random(), side="right"))
        return self.sample_with_length(length, rng, start, preterminals=preterminals)

    # ---------------------------------------------- ε- and unary-rule removal

    def without_epsilon_and_unary(self) -> WeightedCFG:
        """An equivalent grammar with no ε-rules and no unary rules A -> B.

        For every non-empty string w the new grammar gives
        p'(w) = p(w) / T, where T = Σ_{w non-empty} p(w) is the start symbol's
        probability of deriving a non-empty string (T = 1 when p(ε) = 0 and the
        grammar is consistent): the string distribution conditioned on being
        non-empty, so conditional length distributions and p(w | |w| = ℓ) are
        unchanged. Trees change (unary chains are folded away).

        Construction: (1) each rule is expanded over the subsets of its
        nullable children, dropped with their null weights; (2) unary rules
        are folded in with the closure (I − U)^{-1}; (3) the weights are
        pushed with the non-empty totals T_A so each left-hand side sums to 1:
        p'(A -> α) = w(A -> α) Π_{B in α} T_B / T_A. Non-terminals that
        derive no non-empty string are removed.
        """
        null_all, total_all = self._null, self._nonempty_total
        nts = self._nonterminals
        idx = self._nt_index
        null = {a: null_all[i] for a, i in idx.items()}
        total = {a: total_all[i] for a, i in idx.items()}
        keep = [a for a in nts if total[a] > 0]
        if self.start not in keep:
            raise GrammarError(f"the start symbol {self.start!r} derives no non-empty string")
        # (1) ε-free weighted rules.
        weights: dict[tuple[str, tuple[str, ...]], float] = {}
        for r, p in zip(self._rules, self._probs):
            if p == 0 or total[r.lhs] == 0:
                continue
            nullable_positions = [i for i, s in enumerate(r.rhs) if s in null and null[s] > 0]
            if len(nullable_positions) > 16:
                raise GrammarError(f"rule {_rule_text(r)} has more than 16 nullable children")
            for mask in range(1 << len(nullable_positions)):
                dropped = {nullable_positions[j] for j in range(len(nullable_positions)) if mask >> j & 1}
                rhs = tuple(s for i, s in enumerate(r.rhs) if i not in dropped)
                if not rhs or any(s in total and total[s] == 0 for s in rhs):
                    continue
                w = p * math.prod(null[r.rhs[i]] for i in dropped)
                if w > 0:
                    weights[(r.lhs, rhs)] = weights.get((r.lhs, rhs), 0.0) + w
        # (2) fold unary rules with the closure.
        k_index = {a: i for i, a in enumerate(keep)}
        u = np.zeros((len(keep), len(keep)))
        for (lhs, rhs), w in weights.items():
            if len(rhs) == 1 and rhs[0] in k_index:
                u[k_index[lhs], k_index[rhs[0]]] += w
        try:
            closure = np.linalg.inv(np.eye(len(keep)) - u)
        except np.linalg.LinAlgError as e:
            raise GrammarError("unary cycle with probability 1; no closure") from e
        if np.min(closure) < -1e-9:
            raise GrammarError("unary rules have probability >= 1 around a cycle; no closure")
        folded: dict[tuple[str, tuple[str, ...]], float] = {}
        for (lhs, rhs), w in weights.items():
            if len(rhs) == 1 and rhs[0] in k_index:
                continue
            column = closure[:, k_index[lhs]]
            for a in keep:
                c = column[k_index[a]]
                if c > 0:
                    key = (a, rhs)
                    folded[key] = folded.get(key, 0.0) + c * w
        # (3) weight pushing.
        rules = []
        for (lhs, rhs), w in folded.items():
            pushed = w * math.prod(total[s] for s in rhs if s in total) / total[lhs]
            if pushed > 0:
                rules.append(Rule(lhs, rhs, pushed))
        order = {a: i for i, a in enumerate(keep)}
        rules.sort(key=lambda r: order[r.lhs])
        return WeightedCFG(rules, start=self.start)


# ----------------------------------------------------------------------------
# Helpers.


def _cumulative(weights: np.ndarray) -> np.ndarray:
    """Cumulative distribution ending exactly at 1 (for `searchsorted(u, side='right')`)."""
    cum = np.cumsum(weights)
    return cum / cum[-1]


def _as_words(words: Sequence[str] | str) -> list[str]:
    return words.split() if isinstance(words, str) else list(words)


def _quote(word: str) -> str:
    return f'"{word}"' if "'" in word else f"'{word}'"


def _rule_text(rule: Rule) -> str:
    return f"{rule.lhs} -> {' '.join(rule.rhs) or 'ε'}"


def _tokenize(line: str, where: str) -> list[tuple[str, bool]]:
    """Splits a line into (text, quoted) tokens."""
    tokens = []
    for tok in _TOKEN.findall(line):
        if tok[0] in "'\"":
            if len(tok) < 2 or tok[-1] != tok[0]:
                raise GrammarError(f"{where}: unterminated quote in {tok!r}")
            body = tok[1:-1]
            if not body:
                raise GrammarError(f"{where}: empty quoted terminal; write ε for the empty right-hand side")
            if any(ch.isspace() for ch in body):
                raise GrammarError(f"{where}: terminal {tok} contains a blank")
            tokens.append((body, True))
        else:
            tokens.append((tok, False))
    return tokens
