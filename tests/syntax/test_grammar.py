"""Weighted CFGs: text format, hand-worked probabilities, and two independent brute-force oracles.

Oracles (slow, written here from the definitions, sharing no code with the
library):

* `enumerate_trees`: every tree of a given yield length, by recursion over
  rules and ways to share the words among the children. Exact for grammars
  without ε-rules or unary cycles (finitely many trees per length).
* `naive_inside`: for grammars with ε-rules and unary cycles (infinitely many
  trees), the inside equations over the *original* rules, every span and
  every way to cut it into pieces (empty pieces allowed), iterated from 0
  (Kleene/Jacobi iteration) until nothing changes: it converges to the least
  fixed point, the total probability of the finite derivations.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.syntax.grammar import GrammarError, Rule, SamplingError, WeightedCFG
from tgjax.syntax.trees import Tree

# Ambiguous, with long rules, terminals mixed into rules and (acyclic) unary
# chains S -> A -> B, but no ε-rules: finitely many trees per length.
ACYCLIC = """
S -> S S 0.2 | A B 0.2 | a S b 0.15 | A 0.15 | b 0.1 | A A A 0.1 | c A B c 0.1
A -> a 0.5 | A c 0.2 | B 0.3
B -> b 0.6 | a B 0.4
"""

# ε-rules, nullable children inside binary/long rules and unary cycles
# (S -> S, S -> B -> A -> S, and A -> A A with A nullable).
CYCLIC = """
S -> S S 0.2 | A S 0.1 | a 0.2 | S 0.1 | B 0.1 | ε 0.1 | A b A 0.2
A -> S 0.3 | ε 0.3 | b 0.2 | A A 0.2
B -> A 0.5 | B a 0.3 | c 0.2
"""


# ---------------------------------------------------------------------------
# Oracles.


def normalised_rules(grammar: WeightedCFG) -> list[tuple[str, tuple[str, ...], float]]:
    totals: Counter = Counter()
    for r in grammar.rules:
        totals[r.lhs] += r.weight
    return [(r.lhs, r.rhs, r.weight / totals[r.lhs]) for r in grammar.rules]


def make_tree_enumerator(grammar: WeightedCFG):
    """trees(symbol, n) -> [(Tree, prob)]: all trees of `symbol` with n words (no ε, no unary cycles)."""
    rules = normalised_rules(grammar)
    nts = {lhs for lhs, _, _ in rules}

    @functools.cache
    def trees(symbol: str, n: int) -> tuple:
        out = []
        for lhs, rhs, p in rules:
            if lhs != symbol:
                continue
            for children, q in share(rhs, n):
                out.append((Tree(symbol, list(children)), p * q))
        return tuple(out)

    @functools.cache
    def share(rhs: tuple, n: int) -> tuple:
        if not rhs:
            return (((), 1.0),) if n == 0 else ()
        head, rest = rhs[0], rhs[1:]
        out = []
        if head not in nts:
            if n >= 1:
                out.extend(((head,) + kids, q) for kids, q in share(rest, n - 1))
            return tuple(out)
        for k in range(1, n - len(rest) + 1):
            for tree, p in trees(head, k):
                out.extend(((tree,) + kids, p * q) for kids, q in share(rest, n - k))
        return tuple(out)

    return trees


def naive_inside(grammar: WeightedCFG, words: list[str] | None, length: int, symbol: str) -> float:
    """Σ p(symbol =>* w) over w = words (or over all strings of `length` if words is None)."""
    rules = normalised_rules(grammar)
    nts = sorted({lhs for lhs, _, _ in rules})
    n = length if words is None else len(words)
    spans = [(i, j) for i in range(n + 1) for j in range(i, n + 1)]
    value = {(a, i, j): 0.0 for a in nts for i, j in spans}

    def matches(terminal: str, i: int) -> bool:
        return i < n and (words is None or words[i] == terminal)

    def ways(rhs: tuple, i: int, j: int) -> float:
        if not rhs:
            return 1.0 if i == j else 0.0
        head, rest = rhs[0], rhs[1:]
        if head not in value_nts:
            return ways(rest, i + 1, j) if i < j and matches(head, i) else 0.0
        return sum(value[(head, i, k)] * ways(rest, k, j) for k in range(i, j + 1))

    value_nts = set(nts)
    for _ in range(5000):
        new = {
            (a, i, j): sum(p * ways(rhs, i, j) for lhs, rhs, p in rules if lhs == a)
            for a in nts
            for i, j in spans
        }
        change = max(abs(new[k] - value[k]) for k in value)
        value = new
        if change < 1e-17:
            break
    return value[(symbol, 0, n)]


def all_strings(alphabet, length):
    return [list(w) for w in itertools.product(alphabet, repeat=length)]


# ---------------------------------------------------------------------------
# Text format.


def test_parse_format_features():
    g = WeightedCFG.from_string(
        """
        # comment line
        S -> NP VP '.' 2 | X Y
        NP -> the dog | "ROOT" 3
            | a 0.5
        VP -> barks
        X -> ε 0.25 | X X 0.75
        Y -> <eps>
        """
    )
    assert g.start == "S"
    assert g.nonterminals == ("S", "NP", "VP", "X", "Y")
    assert set(g.terminals) == {".", "the", "dog", "ROOT", "a", "barks"}
    assert g.rule_probability("S", ("NP", "VP", ".")) == pytest.approx(2 / 3)
    assert g.rule_probability("NP", ("ROOT",)) == pytest.approx(3 / 4.5)
    assert g.rule_probability("NP", ("a",)) == pytest.approx(0.5 / 4.5)
    assert g.rule_probability("X", ()) == pytest.approx(0.25)
    assert g.rule_probability("Y", ()) == 1.0
    assert g.rule_probability("S", ("nothing",)) == 0.0
    assert g.is_terminal("ROOT") and not g.is_terminal("NP")
    assert WeightedCFG.from_string("A -> b\nS -> A", start="S").start == "S"


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("S -> a\nS -> NP", 2, "undefined non-terminal 'NP'"),
        ("S -> a\n\nS -> b |", 3, "empty alternative"),
        ("S -> a\nS a b", 2, "expected 'LHS -> symbols"),
        ("S -> 'a", 1, "unterminated quote"),
        ("S -> a -0.5", 1, ">= 0"),
        ("S -> a\n# c\nS -> a 2", 3, "duplicate rule S -> a (first on line 1)"),
        ("S -> 'S' | a", 1, "cannot be both"),
        ("| a", 1, "continuation"),
        ("S -> a ε", 1, "ε must stand alone"),
        ("S -> a 0\nT -> b", 1, "total weight 0"),
        ("S -> '' a", 1, "empty quoted terminal"),
    ],
)
def test_parse_errors_name_the_line(text, line, fragment):
    with pytest.raises(GrammarError) as err:
        WeightedCFG.from_string(text, source="toy.cfg")
    assert f"toy.cfg:{line}" in str(err.value)
    assert fragment in str(err.value)


def test_to_string_round_trip():
    for text in (ACYCLIC, CYCLIC, "S -> 'S1' T '|' 1 | '2' 3\nT -> \"it's\" | ε"):
        g = WeightedCFG.from_string(text)
        h = WeightedCFG.from_string(g.to_string())
        assert h.start == g.start
        assert {(r.lhs, r.rhs): p for r, p in zip(h.rules, h.probabilities)} == pytest.approx(
            {(r.lhs, r.rhs): p for r, p in zip(g.rules, g.probabilities)}
        )


def test_constructor_validation():
    with pytest.raises(GrammarError, match="duplicate"):
        WeightedCFG([Rule("S", ("a",)), Rule("S", ("a",), 2.0)])
    with pytest.raises(GrammarError, match="start symbol"):
        WeightedCFG([("S", ("a",))], start="T")
    with pytest.raises(GrammarError, match="weight"):
        WeightedCFG([("S", ("a",), float("nan"))])


# ---------------------------------------------------------------------------
# Hand-worked examples.


@pytest.mark.parametrize("p", [0.3, 0.5])
def test_palindrome_marker_hand_worked(p):
    g = WeightedCFG.from_string(f"S -> a S a {p} | '#' {1 - p}")
    for k in range(6):
        w = ["a"] * k + ["#"] + ["a"] * k
        assert g.prob(w) == pytest.approx(p**k * (1 - p), rel=1e-12)
        tree = g.sample_with_length(2 * k + 1, np.random.default_rng(k))
        assert tree.leaves() == w
        # Unambiguous: the tree probability is the string probability.
        assert g.tree_prob(tree) == pytest.approx(p**k * (1 - p), rel=1e-12)
    assert g.prob("a # a a") == 0.0
    assert g.prob("a b") == 0.0  # unknown word
    assert g.prob([]) == 0.0
    dist = g.length_distribution(9)
    expected = [0, 1 - p, 0, p * (1 - p), 0, p**2 * (1 - p), 0, p**3 * (1 - p), 0, p**4 * (1 - p)]
    np.testing.assert_allclose(dist, expected, rtol=1e-12, atol=1e-300)


def test_catalan_long_string_does_not_underflow():
    # A -> A A q | a (1-q): p(a^n) = Catalan(n-1) q^(n-1) (1-q)^n, about e^-1238 for n = 100.
    q = 1e-6
    g = WeightedCFG.from_string(f"A -> A A {q} | a {1 - q}")
    for n in (1, 2, 7, 100, 150):
        log_catalan = math.lgamma(2 * n - 1) - math.lgamma(n) - math.lgamma(n + 1)
        expected = log_catalan + (n - 1) * math.log(q) + n * math.log(1 - q)
        assert g.log_prob(["a"] * n) == pytest.approx(expected, rel=1e-12)
    assert g.log_prob(["a"] * 100) < -1000
    log_weights = g.length_log_weights(150)
    assert log_weights[150, 0] == pytest.approx(g.log_prob(["a"] * 150), rel=1e-12)


def test_null_weights_and_unary_cycle_hand_worked():
    # n = 0.4 n^2 + 0.3: the least root.
    g = WeightedCFG.from_string("S -> S S 0.4 | a 0.3 | ε 0.3")
    null = (1 - math.sqrt(1 - 4 * 0.4 * 0.3)) / (2 * 0.4)
    assert g.null_weights()["S"] == pytest.approx(null, rel=1e-14)
    assert g.prob([]) == pytest.approx(null, rel=1e-14)
    # p(a) = 0.3 + 2 * 0.4 * n * p(a)  =>  p(a) = 0.3 / (1 - 0.8 n).
    assert g.prob("a") == pytest.approx(0.3 / (1 - 0.8 * null), rel=1e-13)
    # A unary self-loop: p(a) = Σ_k 0.5^k 0.5 = 1.
    assert WeightedCFG.from_string("S -> S 0.5 | a 0.5").prob("a") == pytest.approx(1.0, rel=1e-14)
    # A critical grammar: the partition function is 1. At a critical point the
    # residual x - f(x) = (1 - x)^2 / 2 vanishes below rounding once 1 - x is
    # about sqrt(machine epsilon), so float64 pins x down to ~1e-8 only.
    crit = WeightedCFG.from_string("S -> S S 0.5 | a 0.5")
    assert crit.partition_function()["S"] == pytest.approx(1.0, abs=1e-7)
    # A non-tight grammar: total mass 1/3 (least root of x = 0.75 x^2 + 0.25).
    explosive = WeightedCFG.from_string("S -> S S 0.75 | a 0.25")
    assert explosive.partition_function()["S"] == pytest.approx(1 / 3, rel=1e-12)


# ---------------------------------------------------------------------------
# Oracle comparisons.


def test_inside_matches_tree_enumeration_on_acyclic_grammar():
    g = WeightedCFG.from_string(ACYCLIC)
    trees = make_tree_enumerator(g)
    max_len = 5
    dist = g.length_distribution(max_len)
    for length in range(1, max_len + 1):
        per_string: Counter = Counter()
        for tree, p in trees("S", length):
            per_string[" ".join(tree.leaves())] += p
            # The library's tree probability agrees with the enumeration's product.
            assert g.tree_prob(tree) == pytest.approx(p, rel=1e-12)
        for w in all_strings(g.terminals, length):
            assert g.prob(w) == pytest.approx(per_string[" ".join(w)], rel=1e-10, abs=1e-300)
        assert dist[length] == pytest.approx(sum(per_string.values()), rel=1e-10)
        # The same for a non-start symbol.
        assert g.prob(["a"] * length, start="A") == pytest.approx(
            sum(p for t, p in trees("A", length) if t.leaves() == ["a"] * length), rel=1e-10, abs=1e-300
        )


def test_inside_matches_fixed_point_oracle_with_epsilon_and_unary_cycles():
    g = WeightedCFG.from_string(CYCLIC)
    assert g.null_weights()["S"] == pytest.approx(naive_inside(g, [], 0, "S"), rel=1e-10)
    for length in (1, 2, 3):
        for w in all_strings(("a", "b", "c"), length):
            assert g.prob(w) == pytest.approx(naive_inside(g, w, 0, "S"), rel=1e-10, abs=1e-14)
    log_weights = g.length_log_weights(3)
    for length in range(4):
        for a, symbol in enumerate(g.nonterminals):
            assert math.exp(log_weights[length, a]) == pytest.approx(
                naive_inside(g, None, length, symbol), rel=1e-10
            )


def test_inside_chart_entries():
    g = WeightedCFG.from_string(CYCLIC)
    words = "a b c a".split()
    chart = g.inside_log_chart(words)
    assert chart.shape == (4, 5, 3)
    for i in range(4):
        for length in range(1, 5 - i):
            for a, symbol in enumerate(g.nonterminals):
                assert np.exp(chart[i, length, a]) == pytest.approx(
                    g.prob(words[i : i + length], start=symbol), rel=1e-12, abs=1e-300
                )
    assert np.all(chart[3, 2:] == -np.inf)


@st.composite
def random_grammars(draw):
    """Small grammars over S, A, B and {a, b}: ε-rules, unary (cycles too), rules up to length 3."""
    nts = ["S", "A", "B"]
    symbols = nts + ["a", "b"]
    rules = []
    for lhs in nts:
        rhs_seen = {(draw(st.sampled_from(["a", "b"])),)}
        rules.append(Rule(lhs, next(iter(rhs_seen)), draw(st.floats(0.1, 1.0))))  # keeps the closure finite
        for _ in range(draw(st.integers(1, 4))):
            rhs = tuple(draw(st.lists(st.sampled_from(symbols), min_size=0, max_size=3)))
            if rhs in rhs_seen:
                continue
            rhs_seen.add(rhs)
            rules.append(Rule(lhs, rhs, draw(st.floats(0.01, 1.0))))
    return WeightedCFG(rules, start="S")


@settings(max_examples=30, deadline=None)
@given(random_grammars())
def test_property_sum_of_string_probabilities_is_the_length_weight(g):
    log_weights = g.length_log_weights(4)
    null = g.null_weights()
    assert math.exp(log_weights[0, 0]) == pytest.approx(null["S"], rel=1e-12, abs=1e-300)
    epsilon_free = g.without_epsilon_and_unary()
    nonempty = g.partition_function()["S"] - null["S"]
    for length in range(1, 5):
        probs = [g.prob(w) for w in all_strings(("a", "b"), length)]
        assert sum(probs) == pytest.approx(math.exp(log_weights[length, 0]), rel=1e-9, abs=1e-300)
        # The ε/unary-free grammar gives the same strings, renormalised over non-empty ones.
        for w, p in zip(all_strings(("a", "b"), length), probs):
            assert epsilon_free.prob(w) == pytest.approx(p / nonempty, rel=1e-8, abs=1e-300)


# ---------------------------------------------------------------------------
# ε- and unary-rule removal.


def test_without_epsilon_and_unary():
    g = WeightedCFG.from_string(CYCLIC)
    h = g.without_epsilon_and_unary()
    nts = set(h.nonterminals)
    assert all(len(r.rhs) >= 1 for r in h.rules)
    assert not any(len(r.rhs) == 1 and r.rhs[0] in nts for r in h.rules)
    for a in h.nonterminals:
        assert sum(p for r, p in zip(h.rules, h.probabilities) if r.lhs == a) == pytest.approx(1.0)
    # g is consistent, so the non-empty mass is 1 - p(ε).
    assert g.partition_function()["S"] == pytest.approx(1.0, abs=1e-12)
    scale = 1.0 - g.prob([])
    for length in (1, 2, 3):
        for w in all_strings(("a", "b", "c"), length):
            assert h.prob(w) == pytest.approx(g.prob(w) / scale, rel=1e-10, abs=1e-15)
    np.testing.assert_allclose(h.length_distribution(8)[1:], g.length_distribution(8)[1:] / scale, rtol=1e-10)
    assert h.prob([]) == 0.0


# ---------------------------------------------------------------------------
# Sampling.


def test_sampling_is_deterministic_by_seed():
    g = WeightedCFG.from_string(ACYCLIC)
    a = [g.sample(np.random.default_rng(7)).to_string() for _ in range(3)]
    b = [g.sample(np.random.default_rng(7)).to_string() for _ in range(3)]
    assert a == b
    rng1, rng2 = np.random.default_rng(3), np.random.default_rng(3)
    assert [g.sample_with_length(6, rng1).to_string() for _ in range(10)] == [
        g.sample_with_length(6, rng2).to_string() for _ in range(10)
    ]
    many = {g.sample(np.random.default_rng(s)).to_string() for s in range(30)}
    assert len(many) > 5


@pytest.mark.parametrize("text", [ACYCLIC, CYCLIC])
def test_sampled_trees_are_valid_and_bounded_by_string_probability(text):
    g = WeightedCFG.from_string(text)
    rng = np.random.default_rng(0)
    shortest = 0 if g.prob([]) > 0 else 1
    trees = [g.sample(rng) for _ in range(100)]
    trees += [g.sample_with_length(shortest + n % 7, rng) for n in range(60)]
    for tree in trees:
        words = tree.leaves()
        tree_lp, string_lp = g.tree_log_prob(tree), g.log_prob(words)
        assert np.isfinite(tree_lp) and np.isfinite(string_lp)
        assert tree_lp <= string_lp + 1e-12
    assert max(len(t.leaves()) for t in trees) >= 5


def test_preterminal_option():
    g = WeightedCFG.from_string("S -> NP VP\nNP -> DT N\nDT -> the\nN -> dog\nVP -> barks | V NP\nV -> sees")
    tree = g.sample(np.random.default_rng(0))
    assert tree.to_string().startswith("(S (NP (DT the) (N dog)) (VP")
    flat = g.sample(np.random.default_rng(0), preterminals=False)
    assert flat.to_string().startswith("(S (NP the dog) (VP")
    assert flat.leaves() == tree.leaves()
    flat = g.sample_with_length(3, np.random.default_rng(0), preterminals=False)
    # VP -> barks is a lexical rule too, so it collapses as well.
    assert flat.to_string() == "(S (NP the dog) barks)"
    # The root is kept even when its rule is lexical.
    assert g.sample(np.random.default_rng(0), "DT", preterminals=False).to_string() == "(DT the)"


def test_sampling_guards_raise():
    never_ends = WeightedCFG.from_string("S -> a S")
    with pytest.raises(SamplingError, match="max_depth=50"):
        never_ends.sample(np.random.default_rng(0), max_depth=50)
    with pytest.raises(SamplingError, match="max_length=10"):
        never_ends.sample(np.random.default_rng(0), max_depth=10_000, max_length=10)
    with pytest.raises(SamplingError, match="no string of length 4"):
        WeightedCFG.from_string("S -> a S a 0.5 | '#' 0.5").sample_with_length(4, np.random.default_rng(0))
    with pytest.raises(GrammarError, match="not a non-terminal"):
        never_ends.sample(np.random.default_rng(0), "T")


def chi_square(counts: Counter, expected_probs: dict, total: int) -> tuple[float, int]:
    """Pearson's statistic over outcomes with expected count >= 5 (the rest pooled); (stat, dof)."""
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for key, p in expected_probs.items():
        expected = p * total
        if expected >= 5:
            stat += (counts[key] - expected) ** 2 / expected
            cells += 1
        else:
            pooled_obs += counts[key]
            pooled_exp += expected
    unexpected = sum(c for k, c in counts.items() if k not in expected_probs)
    assert unexpected == 0, "sampled an outcome of probability 0"
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    return stat, cells - 1


# Under a correct sampler the statistic is chi-square with `dof` degrees of
# freedom: mean dof, standard deviation sqrt(2 dof). A threshold of mean + 5 sd
# is exceeded with probability below 1e-3 for these dofs (the seed is fixed,
# so the test is deterministic), while a sampler that ignores the length
# weights when choosing rules or splits is off by thousands.
def chi_square_threshold(dof: int) -> float:
    return dof + 5 * math.sqrt(2 * dof)


def test_length_conditioned_sampling_matches_exact_tree_distribution():
    g = WeightedCFG.from_string(ACYCLIC)
    trees = make_tree_enumerator(g)
    length = 4
    exact = {t.to_string(): p for t, p in trees("S", length)}
    z = sum(exact.values())
    assert z == pytest.approx(g.length_distribution(length)[length], rel=1e-12)
    conditional = {k: p / z for k, p in exact.items()}
    rng = np.random.default_rng(1234)
    num = 20_000
    counts = Counter(g.sample_with_length(length, rng).to_string() for _ in range(num))
    stat, dof = chi_square(counts, conditional, num)
    assert dof >= 20
    assert stat < chi_square_threshold(dof), (stat, dof)


def test_length_conditioned_sampling_matches_exact_string_distribution_with_cycles():
    g = WeightedCFG.from_string(CYCLIC)
    length = 3
    z = math.exp(g.length_log_weights(length)[length, 0])
    conditional = {" ".join(w): g.prob(w) / z for w in all_strings(("a", "b", "c"), length)}
    assert sum(conditional.values()) == pytest.approx(1.0, rel=1e-12)
    conditional = {k: p for k, p in conditional.items() if p > 0}
    rng = np.random.default_rng(99)
    num = 20_000
    counts = Counter(" ".join(g.sample_with_length(length, rng).leaves()) for _ in range(num))
    stat, dof = chi_square(counts, conditional, num)
    assert dof >= 10
    assert stat < chi_square_threshold(dof), (stat, dof)


def test_sample_in_length_range_lengths():
    g = WeightedCFG.from_string(ACYCLIC)
    rng = np.random.default_rng(5)
    num = 5_000
    lengths = Counter(len(g.sample_in_length_range(rng, 2, 4).leaves()) for _ in range(num))
    dist = g.length_distribution(4)[2:]
    expected = {k + 2: p / dist.sum() for k, p in enumerate(dist)}
    stat, dof = chi_square(lengths, expected, num)
    assert set(lengths) <= {2, 3, 4}
    assert stat < chi_square_threshold(dof)


# ---------------------------------------------------------------------------
# log_prob's scaled-real inside against the log-space chart.


@settings(max_examples=40, deadline=None)
@given(random_grammars(), st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=14))
def test_property_scaled_inside_equals_the_log_space_chart(g, words):
    """`log_prob` (mantissas and one scale per span) against `inside_log_chart` (log space throughout),
    for every non-terminal as the root, on strings longer than the oracles above can afford."""
    chart = g.inside_log_chart(words)
    for a, symbol in enumerate(g.nonterminals):
        expected = chart[0, len(words), a]
        got = g.log_prob(words, start=symbol)
        if expected == -np.inf:
            assert got == -np.inf
        else:
            assert got == pytest.approx(expected, rel=1e-11, abs=1e-11)


def test_scaled_inside_falls_back_to_log_space_when_an_entry_underflows():
    # The span "a" is X (weight 1) or Y (weight 1e-200 * 1e-200 through Z): scaled by X's weight, Y's
    # mantissa e^-921 underflows to 0, and only Y leads to S. The log-space chart keeps it.
    g = WeightedCFG.from_string("""
        S -> Y c 1 | X X 1
        X -> a 1
        Y -> Z 1e-200 | d 1
        Z -> a 1e-200 | e 1
    """)
    expected = math.log(0.5) + 2 * math.log(1e-200 / (1 + 1e-200))
    assert g.log_prob("a c") == pytest.approx(expected, rel=1e-12)
    assert g._scaled_inside_root(["a", "c"], 0) == -math.inf  # what the fallback is for
    assert g.log_prob("a a") == pytest.approx(math.log(0.5), rel=1e-12)
    assert g.log_prob("c a") == -math.inf  # not in the language: both paths say so
