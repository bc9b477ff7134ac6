"""CFL tasks and the cross-entropy difference.

Membership checkers here are written from the languages' definitions and
share no code with the grammars; probabilities are worked out by hand from
the rule probabilities of the module docstring.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from tgjax.data.cfl import SPLITS, TASK_NAMES, cfl_task
from tgjax.data.cfl_metric import cross_entropy_difference, string_log_probs

# ---------------------------------------------------------------------------
# Independent membership checkers.


def is_marked_reversal(w: list[str]) -> bool:
    if w.count("#") != 1:
        return False
    mid = w.index("#")
    return set(w[:mid]) <= {"0", "1"} and w[mid + 1 :] == w[:mid][::-1]


def is_unmarked_reversal(w: list[str]) -> bool:
    return len(w) > 0 and len(w) % 2 == 0 and set(w) <= {"0", "1"} and w == w[::-1]


def is_padded_reversal(w: list[str]) -> bool:
    """w = u aᵖ uᴿ for some u, a symbol a and p >= 0 (non-empty)."""
    if not w or not set(w) <= {"0", "1"}:
        return False
    n = len(w)
    return any(w[:k] == w[n - k :][::-1] and len(set(w[k : n - k])) <= 1 for k in range(n // 2 + 1))


def is_dyck2(w: list[str]) -> bool:
    pairs = {")": "(", "]": "["}
    stack: list[str] = []
    for s in w:
        if s in "([":
            stack.append(s)
        elif s in pairs:
            if not stack or stack.pop() != pairs[s]:
                return False
        else:
            return False
    return len(w) > 0 and not stack


def is_hardest_cfl(w: list[str]) -> bool:
    """The part of Greibach's L₀ the grammar derives (see `hardest_cfl_grammar_text`).

    w = x₁,y₁,z₁; ⋯ xₙ,yₙ,zₙ; (n >= 1) where, splitting each segment at its
    commas, every field but the first and last is non-empty, yᵢ is one of the
    inner fields, and y₁⋯yₙ = $ followed by a non-empty Dyck-2 string. The
    choice of yᵢ is tracked as a set of Dyck states (open brackets, seen a
    bracket), one segment at a time.
    """
    s = "".join(w)
    if not s.endswith(";") or set(s) - set("()[],;$"):
        return False
    closing = {")": "(", "]": "["}

    def advance(state, y):
        if state is None:  # y₁ must start the $D₂ string
            if not y.startswith("$"):
                return None
            state, y = ((), False), y[1:]
        stack, seen = list(state[0]), state[1]
        for ch in y:
            if ch in "([":
                stack.append(ch)
            elif ch in closing:
                if not stack or stack.pop() != closing[ch]:
                    return None
            else:  # '$' after the first, or anything else
                return None
            seen = True
        return tuple(stack), seen

    states = {None}
    for segment in s[:-1].split(";"):
        fields = segment.split(",")
        if len(fields) < 3 or any(f == "" for f in fields[1:-1]):
            return False
        states = {nxt for st in states for y in fields[1:-1] if (nxt := advance(st, y)) is not None}
        if not states:
            return False
    return ((), True) in states


MEMBERSHIP = {
    "marked_reversal": is_marked_reversal,
    "unmarked_reversal": is_unmarked_reversal,
    "padded_reversal": is_padded_reversal,
    "dyck": is_dyck2,
    "hardest_cfl": is_hardest_cfl,
}


def test_checkers_reject_near_misses():
    assert is_marked_reversal(list("01#10")) and not is_marked_reversal(list("01#01"))
    assert not is_marked_reversal(list("0#0#0"))
    assert is_unmarked_reversal(list("0110")) and not is_unmarked_reversal(list("010"))
    assert is_padded_reversal(list("0111110")) and is_padded_reversal(list("1"))
    assert not is_padded_reversal(list("01011"))
    assert is_dyck2(list("([])[]")) and not is_dyck2(list("([)]")) and not is_dyck2(list("(("))
    assert is_hardest_cfl(list(",$(),;")) and is_hardest_cfl(list("(,$[,;,],);"))
    assert not is_hardest_cfl(list(",(),;"))  # no $
    assert not is_hardest_cfl(list(",$(],;"))
    assert not is_hardest_cfl(list(",$,;"))  # empty Dyck part
    assert not is_hardest_cfl(list(",,$(),;"))  # empty inner field


# ---------------------------------------------------------------------------
# Grammars and lengths.


def test_rule_probabilities_are_the_documented_settings():
    g = cfl_task("marked_reversal").source_grammar
    assert g.rule_probability("S", ("0", "S", "0")) == pytest.approx(30 / 61)
    assert g.rule_probability("S", ("#",)) == pytest.approx(1 / 61)
    g = cfl_task("padded_reversal").source_grammar
    assert g.rule_probability("S", ("T0",)) == pytest.approx(1 / 122)
    assert g.rule_probability("T1", ("1", "T1")) == pytest.approx(30 / 31)
    g = cfl_task("dyck").source_grammar
    assert g.rule_probability("S", ("S", "T")) == pytest.approx(1 / 2)
    assert g.rule_probability("T", ("[", "S", "]")) == pytest.approx(39 / 80)
    assert g.rule_probability("T", ("(", ")")) == pytest.approx(1 / 80)
    g = cfl_task("hardest_cfl").source_grammar
    assert g.start == "Root"
    assert g.rule_probability("Lp", (",", "V", "Lp")) == pytest.approx(1 / 3)  # mean commas 0.5
    assert g.rule_probability("U", ("W", "U")) == pytest.approx(1 / 3)  # mean short filler 0.5
    assert g.rule_probability("V", ("W", "V")) == pytest.approx(1 / 2)  # mean long filler 2
    assert g.rule_probability("Q", ("L", ";", "R")) == pytest.approx(1 / 4)
    assert g.rule_probability("S", ("S", "Q", "T")) == pytest.approx(3 / 5)  # mean splits 1.5
    assert g.rule_probability("T", ("(", "Q", "S", "Q", ")")) == pytest.approx(3 / 8)  # mean depth 3
    assert g.rule_probability("W", ("$",)) == pytest.approx(1 / 5)


def test_sampling_grammar_has_no_epsilon_or_unary_rules():
    for name in TASK_NAMES:
        g = cfl_task(name).grammar
        for rule in g.rules:
            assert rule.rhs, (name, rule)
            assert not (len(rule.rhs) == 1 and rule.rhs[0] in g.nonterminals), (name, rule)


def test_valid_lengths():
    assert cfl_task("marked_reversal").valid_lengths(40, 80) == list(range(41, 80, 2))
    assert cfl_task("unmarked_reversal").valid_lengths(40, 80) == list(range(40, 81, 2))
    assert cfl_task("dyck").valid_lengths(40, 100) == list(range(40, 101, 2))
    assert cfl_task("padded_reversal").valid_lengths(40, 80) == list(range(40, 81))
    assert cfl_task("hardest_cfl").valid_lengths(1, 10) == list(range(6, 11))  # shortest: ,$(),;
    assert cfl_task("hardest_cfl").valid_lengths(40, 100) == list(range(40, 101))


def test_task_names_and_vocabulary():
    assert cfl_task("marked-reversal") is cfl_task("marked_reversal")
    with pytest.raises(ValueError, match="unknown CFL task"):
        cfl_task("anbn")
    vocab = cfl_task("dyck").vocabulary
    assert vocab.tokens == ("<PAD>", "<s>", "</s>", "(", ")", "[", "]")
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.size) == (0, 1, 2, 7)
    assert vocab.id_of("[") == 5 and vocab.symbol_of(5) == "["
    assert cfl_task("hardest_cfl").vocabulary.size == 10


# ---------------------------------------------------------------------------
# Hand-computed true probabilities.


def test_marked_and_unmarked_reversal_true_probability_is_uniform_per_length():
    rng = np.random.default_rng(3)
    marked, unmarked = cfl_task("marked_reversal"), cfl_task("unmarked_reversal")
    for k in (20, 27, 39):
        u = [str(b) for b in rng.integers(2, size=k)]
        w = u + ["#"] + u[::-1]
        # 20 valid lengths (41, 43, ..., 79) in train; 30 in test (41 ... 99); 2^k strings per length.
        assert marked.log_prob_true(w, "train") == pytest.approx(-math.log(20) - k * math.log(2), abs=1e-9)
        assert marked.log_prob_true(w, "test") == pytest.approx(-math.log(30) - k * math.log(2), abs=1e-9)
        v = u + u[::-1]
        assert unmarked.log_prob_true(v, "valid") == pytest.approx(-math.log(21) - k * math.log(2), abs=1e-9)
    assert marked.log_prob_true(list("01#01"), "train") == -math.inf
    assert marked.log_prob_true(["0"] * 50 + ["#"] + ["0"] * 50, "train") == -math.inf  # length 101 > 80


def test_dyck_length_four_by_hand():
    # p("()()") = S→ST · S→T · (T→() )² = 1/2 · 1/2 · (1/80)²; p("(())") = 1/2 · 39/80 · 1/2 · 1/80.
    # Length 4 holds 4 side-by-side and 4 nested strings: p_G(4) = (4 · 1 + 4 · 39) / 25600.
    task = cfl_task("dyck")
    assert math.exp(task.log_prob_given_length(list("()[]"))) == pytest.approx(1 / 160, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list("[()]"))) == pytest.approx(39 / 160, rel=1e-12)
    assert task.log_prob_given_length(list("([)]")) == -math.inf


def test_padded_reversal_length_three_by_hand():
    # Length 3: 010 and 101 (w = a, p = 1), 000 and 111 (w = a, p = 1, or w = ε, p = 3: two trees).
    p, g = 60 / 61, 30 / 31
    one_tree = (p / 2) * ((1 - p) / 2) * g * (1 - g)  # S → a S a, S → T_b, T_b → b T_b, T_b → ε
    padding_only = ((1 - p) / 2) * g**3 * (1 - g)  # S → T_a, T_a → a T_a (×3), T_a → ε
    total = 2 * one_tree + 2 * (one_tree + padding_only)
    task = cfl_task("padded_reversal")
    assert math.exp(task.log_prob_given_length(list("010"))) == pytest.approx(one_tree / total, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list("111"))) == pytest.approx(
        (one_tree + padding_only) / total, rel=1e-12
    )


def test_hardest_cfl_length_eight_by_hand():
    # Relative to the shortest form ",$(),;" (one bracket type), the ways to add two symbols:
    # two filler symbols in U (x side, z side, or one each): (1/3 · 1/5)² each, 25 strings each;
    # a decoy field ", W ," on either side: c · (1 − v) · 1/5 = 1/30, 5 strings each;
    # all doubled for the bracket type of the Dyck part; and two Dyck shapes, 4 strings each:
    # side by side S → S Q T: 0.6 · 0.75 · (0.125 · 0.75); nested T → (Q S Q): 0.375 · 0.75² · 0.4.
    side_by_side = 0.6 * 0.75 * 0.125 * 0.75
    nested = 0.375 * 0.75**2 * 0.4
    total = 2 * (3 * 25 / 225 + 2 * 5 / 30) + 4 * side_by_side + 4 * nested
    task = cfl_task("hardest_cfl")
    assert math.exp(task.log_prob_given_length(list(",$()[],;"))) == pytest.approx(side_by_side / total, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list(",$[()],;"))) == pytest.approx(nested / total, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list(",$(),]$;"))) == pytest.approx(1 / 225 / total, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list(",$,$(),;"))) == pytest.approx(1 / 30 / total, rel=1e-12)
    assert math.exp(task.log_prob_given_length(list(",$(),;"))) == pytest.approx(1 / 2, rel=1e-12)


def test_conditional_probabilities_sum_to_one_over_a_length():
    for name, length in (("padded_reversal", 7), ("dyck", 4), ("marked_reversal", 5)):
        task = cfl_task(name)
        symbols = task.vocabulary.symbols
        total = 0.0
        for ids in np.ndindex(*([len(symbols)] * length)):
            total += math.exp(task.log_prob_given_length([symbols[i] for i in ids]))
        assert total == pytest.approx(1.0, abs=1e-9), name


def test_epsilon_free_grammar_keeps_the_conditional_distribution():
    for name in TASK_NAMES:
        task = cfl_task(name)
        g = task.source_grammar
        start = g.nonterminals.index(g.start)
        for w in task.sample_split("valid", seed=5, size=3):
            expected = g.log_prob(w) - g.length_log_weights(len(w))[len(w), start]
            assert task.log_prob_given_length(w) == pytest.approx(expected, abs=1e-9), name


# ---------------------------------------------------------------------------
# Sampling.


@pytest.mark.parametrize("name", TASK_NAMES)
def test_samples_are_in_the_language_and_range(name):
    task = cfl_task(name)
    strings = task.sample_split("valid", seed=0, size=200)
    assert len(strings) == 200
    valid = set(task.valid_lengths(40, 80))
    for w in strings:
        assert len(w) in valid
        assert MEMBERSHIP[name](w), "".join(w)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_checker_agrees_with_the_grammar_on_mutated_strings(name):
    # Short strings with one symbol changed: some stay in the language, most leave it;
    # the checker and the inside probability must agree on which.
    task = cfl_task(name)
    rng = np.random.default_rng(11)
    symbols = task.vocabulary.symbols
    agreements = Counter()
    for w in task.sample_strings(40, 8, 16, rng):
        i = int(rng.integers(len(w)))
        w = w[:i] + [symbols[int(rng.integers(len(symbols)))]] + w[i + 1 :]
        member = MEMBERSHIP[name](w)
        assert member == math.isfinite(task.log_prob_given_length(w)), "".join(w)
        agreements[member] += 1
    assert agreements[False] > 0


def test_train_lengths_are_uniform_in_groups_of_ten():
    task = cfl_task("marked_reversal")
    strings = task.sample_split("train", seed=0, size=2000)
    lengths = np.array([len(w) for w in strings]).reshape(200, 10)
    assert (lengths == lengths[:, :1]).all()  # one length per group of 10 (a minibatch)
    valid = task.valid_lengths(40, 80)
    counts = Counter(lengths[:, 0].tolist())
    expected = 200 / len(valid)
    chi2 = sum((counts.get(n, 0) - expected) ** 2 / expected for n in valid)
    # 20 lengths -> 19 degrees of freedom; 43.82 is the 0.999 quantile of χ²(19). The seed is
    # fixed, so the test is deterministic; a correct sampler fails it for 0.1% of seeds.
    assert chi2 < 43.82
    # The bound is not vacuous: a sampler that never drew the longest quarter of the lengths
    # would score about 66 on the expected counts.
    skewed = [200 / 15] * 15 + [0] * 5
    assert sum((c - expected) ** 2 / expected for c in skewed) > 43.82


def test_test_split_has_every_length_equally():
    task = cfl_task("dyck")
    strings = task.sample_split("test", size=2)
    assert [len(w) for w in strings] == [n for n in range(40, 101, 2) for _ in range(2)]
    assert SPLITS["test"].per_length == 100 and SPLITS["test"].default_seed == 0


def test_splits_are_deterministic_by_seed():
    task = cfl_task("hardest_cfl")
    a = task.sample_split("train", seed=7, size=30)
    assert task.sample_split("train", seed=7, size=30) == a
    assert task.sample_split("train", seed=7, size=20) == a[:20]  # a prefix, group by group
    assert task.sample_split("train", seed=8, size=30) != a
    assert task.sample_split("valid", seed=7, size=30) != a  # separate streams per split
    assert task.sample_split("test", size=1) == cfl_task("hardest_cfl").sample_split("test", seed=0, size=1)
    with pytest.raises(ValueError, match="unknown split"):
        task.sample_split("dev")


# ---------------------------------------------------------------------------
# Encoding.


def test_encode_and_decode():
    task = cfl_task("marked_reversal")
    batch = task.encode([list("0#0"), list("#")])
    # ids: 0 -> 3, 1 -> 4, # -> 5; PAD 0, BOS 1, EOS 2.
    np.testing.assert_array_equal(batch["inputs"], [[1, 3, 5, 3], [1, 5, 0, 0]])
    np.testing.assert_array_equal(batch["targets"], [[3, 5, 3, 2], [5, 2, 0, 0]])
    np.testing.assert_array_equal(batch["weights"], [[1, 1, 1, 1], [1, 1, 0, 0]])
    np.testing.assert_array_equal(batch["lengths"], [3, 1])
    assert batch["inputs"].dtype == np.int32 and batch["weights"].dtype == np.float32
    assert task.decode(batch["targets"][0]) == list("0#0")
    assert task.encode([list("#")], pad_to=6)["inputs"].shape == (1, 6)
    with pytest.raises(ValueError, match="string 1.*'2'"):
        task.encode([list("0#0"), list("2")])
    with pytest.raises(ValueError, match="pad_to"):
        task.encode([list("0#0")], pad_to=3)


# ---------------------------------------------------------------------------
# The cross-entropy difference.


def marked_reversal_true_logits(strings: list[list[str]], valid_lengths: list[int]) -> tuple[np.ndarray, dict]:
    """Next-symbol log-probabilities of the true w#wᴿ source distribution, written from the definition.

    With half-length k = (ℓ − 1) / 2 uniform over the valid lengths, after t
    symbols of w the marker comes next with probability P(k = t | k >= t);
    0 and 1 share the rest. After the marker the string is determined.
    """
    task = cfl_task("marked_reversal")
    halves = np.array([(n - 1) // 2 for n in valid_lengths])
    batch = task.encode(strings)
    vocab = task.vocabulary
    probs = np.zeros(batch["targets"].shape + (vocab.size,))
    for i, w in enumerate(strings):
        mid = w.index("#")
        for t in range(len(w) + 1):
            if t <= mid:
                p_marker = float(np.sum(halves == t)) / float(np.sum(halves >= t))
                probs[i, t, vocab.id_of("#")] = p_marker
                probs[i, t, vocab.id_of("0")] = probs[i, t, vocab.id_of("1")] = (1 - p_marker) / 2
            elif t < len(w):
                probs[i, t, vocab.id_of(w[t])] = 1.0
            else:
                probs[i, t, vocab.eos_id] = 1.0
        probs[i, len(w) + 1 :, vocab.pad_id] = 1.0  # padding rows: anything finite
    with np.errstate(divide="ignore"):
        return np.log(probs), batch


def test_true_model_has_zero_cross_entropy_difference():
    task = cfl_task("marked_reversal")
    strings = task.sample_split("train", seed=1, size=100)
    logits, batch = marked_reversal_true_logits(strings, task.valid_lengths(40, 80))
    model_lp = string_log_probs(logits, batch["targets"], batch["weights"])
    result = cross_entropy_difference(model_lp, strings, task, "train")
    assert abs(result.difference) < 1e-9
    assert result.overall.num_symbols == sum(len(w) + 1 for w in strings)  # EOS counted
    assert result.overall.num_strings == 100
    assert (result.overall.min_length, result.overall.max_length) == (
        min(len(w) for w in strings), max(len(w) for w in strings))
    assert all(abs(d) < 1e-9 for d in result.per_bin().values())
    assert result.overall.true_cross_entropy > 0


def test_difference_is_the_model_excess_per_symbol():
    task = cfl_task("dyck")
    strings = task.sample_split("valid", seed=2, size=50)
    true_lp = task.log_probs_true(strings, "valid")
    excess = np.linspace(0.0, 3.0, len(strings))
    result = cross_entropy_difference(true_lp - excess, strings, task, "valid", bin_width=10)
    num_symbols = sum(len(w) + 1 for w in strings)
    assert result.difference == pytest.approx(excess.sum() / num_symbols, rel=1e-12)
    assert set(result.bins) <= {40, 50, 60, 70, 80}
    assert sum(b.num_strings for b in result.bins.values()) == 50
    for start, b in result.bins.items():
        members = [i for i, w in enumerate(strings) if start <= len(w) <= start + 9]
        assert b.difference == pytest.approx(excess[members].sum() / sum(len(strings[i]) + 1 for i in members))
    # The authors' per-length convention drops the 1/|L| term from each bin's true probability.
    authors = cross_entropy_difference(true_lp, strings, task, "valid", bins_condition_on_length=True)
    assert authors.difference == pytest.approx(0.0, abs=1e-12)
    for length, b in authors.bins.items():
        assert b.difference == pytest.approx(math.log(21) / (length + 1), rel=1e-9)


def test_metric_rejects_strings_outside_the_language_or_range():
    task = cfl_task("dyck")
    with pytest.raises(ValueError, match="true probability 0"):
        cross_entropy_difference([-1.0], [list("(]")], task, "train")
    with pytest.raises(ValueError, match="true probability 0"):
        cross_entropy_difference([-1.0], [list("()" * 50)], task, "train")  # length 100 > 80
    with pytest.raises(ValueError, match="2 model log-probabilities for 1 strings"):
        cross_entropy_difference([-1.0, -2.0], [list("()" * 20)], task, "train")


@pytest.mark.slow
@pytest.mark.parametrize("name", TASK_NAMES)
def test_full_training_split(name):
    task = cfl_task(name)
    strings = task.sample_split("train", seed=0)
    assert len(strings) == 10_000
    assert all(MEMBERSHIP[name](w) for w in strings)
    assert {len(w) for w in strings} <= set(task.valid_lengths(40, 80))
