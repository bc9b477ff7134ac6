"""The Dyck task of Pushdown Layers: the release's labels and tapes by hand, generator and test-set constraints."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tgjax.data import dyck
from tgjax.data.pushdown import PushdownBatches
from tgjax.nn.pushdown_attention import stack_tape_from_nodes


def test_release_examples_by_hand():
    """released-code.md §1.8: "(a (b b) a)" targets [1, 2, 2, 1], tape rows 0/0/0/[0,0,1,1,0]/[0,1,1,1,1]."""
    tokens = ["(a", "(b", "b)", "a)"]
    attach = dyck.dyck_attachments(tokens)
    np.testing.assert_array_equal(attach[1:], [1, 2, 2, 1])
    np.testing.assert_array_equal(dyck.dyck_tape(attach), [[0, 0, 0, 0, 0],
                                                           [0, 0, 0, 0, 0],
                                                           [0, 0, 0, 0, 0],
                                                           [0, 0, 1, 1, 0],
                                                           [0, 1, 1, 1, 1]])
    np.testing.assert_array_equal(dyck.dyck_attachments(["(a", "a)", "(b", "b)"])[1:], [1, 1, 3, 3])


def test_pushdown_rows_and_binary_device_tape():
    sentence = dyck.encode_for_pushdown([["(a", "(b", "b)", "a)"]])[0]
    vocab = dyck.dyck_vocabulary()
    assert vocab.size == 43 and vocab.id_of("(a") == 3 and vocab.id_of("a)") == 23
    np.testing.assert_array_equal(sentence.tokens, [1, 3, 4, 24, 23, 2])
    batches = PushdownBatches([sentence], seq_len=5, batch_size=1, num_depths=2, binary_tape=True, dense=True)
    batch = next(batches.epoch(0))
    np.testing.assert_array_equal(batch["attach_targets"][0], [1, 2, 2, 1, 5])
    np.testing.assert_array_equal(batch["attach_weights"][0], [1, 1, 1, 1, 0])  # the end token's label is not trained
    want = dyck.dyck_tape(dyck.dyck_attachments(["(a", "(b", "b)", "a)"]))
    np.testing.assert_array_equal(batch["tape"][0], want)
    rebuilt = stack_tape_from_nodes(jnp.asarray(batch["node_start"]), jnp.asarray(batch["node_end"]), 5, binary=True)
    np.testing.assert_array_equal(np.asarray(rebuilt)[0], want)
    assert batches.report.num_clipped_entries == 0  # a binary tape never clips


def test_generator_constraints():
    rng = np.random.default_rng(0)
    strings = [dyck.sample_dyck(rng, num_types=20, max_depth=10, min_length=6) for _ in range(400)]
    names = set(dyck.bracket_names(20))
    assert dyck.bracket_names(28)[26:] == ["aa", "bb"]
    depths = []
    for tokens in strings:
        assert len(tokens) >= 6
        dyck.matching_openers(tokens)  # balanced and well-typed, or it raises
        depths.append(dyck.max_nesting(tokens))
        assert {t.strip("()") for t in tokens} <= names
    assert max(depths) <= 10 and max(depths) >= 5
    used = {t.strip("()") for s in strings for t in s}
    assert len(used) == 20  # every type occurs
    # Closing probability 1/2 below the cap: the mean length of a top-level pair's content is finite and small.
    assert 6 <= np.mean([len(s) for s in strings]) < 200


def test_expected_length_by_hand():
    # A fair walk between an empty and a full stack returns in 2m tokens; two excursions on average.
    assert dyck.expected_length(max_depth=10) == pytest.approx(40.0)
    assert dyck.expected_length(max_depth=1, open_probability=0.3) == pytest.approx(4.0)  # "(a a)", then END or again
    # m = 2, p = 1/4: E_1 = 1 + E_2/4, E_2 = 1 + E_1  ->  E_1 = 5/3; 2 (1 + 5/3) = 16/3.
    assert dyck.expected_length(max_depth=2, open_probability=0.25) == pytest.approx(16 / 3)


@pytest.mark.parametrize("max_depth, open_probability", [(10, 0.5), (10, 0.3), (4, 0.7)])
def test_sampler_mean_length_matches_the_markov_chain(max_depth, open_probability):
    rng = np.random.default_rng(11)
    lengths = np.array([len(dyck.sample_dyck(rng, max_depth=max_depth, min_length=1, open_probability=open_probability))
                        for _ in range(4000)])
    standard_error = lengths.std() / np.sqrt(len(lengths))
    expected = dyck.expected_length(max_depth=max_depth, open_probability=open_probability)
    assert abs(lengths.mean() - expected) < 4 * standard_error


def test_open_probability_is_checked():
    with pytest.raises(ValueError, match="open_probability"):
        dyck.sample_dyck(np.random.default_rng(0), open_probability=1.0)


def test_corpus_redraws_and_counts_long_strings():
    strings, redrawn = dyck.dyck_corpus(300, seed=3, max_length=20)
    assert len(strings) == 300 and all(1 <= len(s) <= 20 for s in strings) and redrawn > 0
    again, _ = dyck.dyck_corpus(300, seed=3, max_length=20)
    assert again == strings  # seeded


@pytest.mark.parametrize("construction", [dyck.long_range_examples, dyck.release_long_range_examples])
def test_long_range_examples(construction):
    rng = np.random.default_rng(1)
    examples = construction(rng, 50, num_examples=50)
    assert len(examples) >= 50
    for ex in examples:
        assert len(ex.prefix) <= 599 and ex.distance >= 50
        # An independent stack: the bracket open at the end of the prefix, and how far back it is.
        stack = []
        for i, token in enumerate(ex.prefix):
            if token.startswith("("):
                stack.append(i)
            else:
                stack.pop()
        assert ex.target == ex.prefix[stack[-1]][1:] + ")"
        assert ex.distance == len(ex.prefix) - stack[-1] and ex.depth == len(stack)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("open_probability", [0.5, 0.3])
def test_long_range_examples_stay_at_the_training_depth(seed, open_probability):
    """Long dependencies, not deeper nesting: every prefix nests <= 10, every dependency is >= L (also at an open
    probability where rejection sampling would never find one of 300)."""
    for length in dyck.LONG_RANGE_LENGTHS:
        examples = dyck.long_range_examples(np.random.default_rng([seed, length]), length,
                                            open_probability=open_probability)
        assert len(examples) == 50
        for ex in examples:
            assert dyck.max_nesting(ex.prefix) <= dyck.PAPER_TRAIN_DEPTH and len(ex.prefix) <= 599
            match = dyck.matching_openers([*ex.prefix, ex.target], complete=False)
            assert ex.distance == len(ex.prefix) - match[-1] >= length


def test_the_releases_long_range_sets_nest_deeper_than_training():
    """Why the release's construction is a switch: its prefixes mostly nest deeper than the training cap."""
    examples = dyck.release_long_range_examples(np.random.default_rng(0), 100)
    deeper = np.mean([dyck.max_nesting(ex.prefix) > dyck.PAPER_TRAIN_DEPTH for ex in examples])
    assert deeper > 0.8


def test_conditioned_bodies_are_the_automatons_given_a_long_dependency():
    """`_bracket_body` conditioned on a dependency >= L draws what rejection sampling of the automaton draws."""
    rng = np.random.default_rng(0)
    max_depth, p, floor, length = 4, 0.5, 2, 8
    conditioned = dyck._survival_table(length - 1, max_depth, p)
    free = dyck._survival_table(0, max_depth, p)
    drawn = [len(dyck._bracket_body(rng, conditioned, floor, 3, max_depth, p, 10**6)) for _ in range(4000)]
    rejected = []
    while len(rejected) < 4000:
        body = dyck._bracket_body(rng, free, floor, 3, max_depth, p, 10**6)
        if len(body) >= length - 1:
            rejected.append(len(body))
    assert min(drawn) >= length - 1
    want = np.bincount(rejected, minlength=40)[:40] / len(rejected)
    got = np.bincount(drawn, minlength=40)[:40] / len(drawn)
    assert np.abs(got - want).max() < 0.03


def test_depth_generalisation_examples():
    rng = np.random.default_rng(2)
    examples = dyck.depth_generalisation_examples(rng)
    assert len(examples) == 105
    first_types = set(dyck.bracket_names(10))
    for d, ex in zip(list(range(15, 50)) * 3, examples):
        match = dyck.matching_openers(ex.prefix, complete=False)
        open_positions = [i for i in range(len(ex.prefix)) if ex.prefix[i].startswith("(") and i not in set(match)]
        assert len(open_positions) == 1  # only the outermost bracket is left open
        assert ex.target == ex.prefix[open_positions[0]][1:] + ")" and ex.target[:-1] in first_types
        assert dyck.max_nesting(ex.prefix) >= d and ex.distance == len(ex.prefix) - open_positions[0]


def test_bad_strings_are_named():
    with pytest.raises(ValueError, match="Dyck string 0: token 1 'b\\)' closes '\\(a'"):
        dyck.dyck_attachments(["(a", "b)"], name="Dyck string 0")
    with pytest.raises(ValueError, match="s: token 0 'a\\)' closes nothing"):
        dyck.dyck_attachments(["a)"], name="s")
    with pytest.raises(ValueError, match="1 bracket\\(s\\) left open"):
        dyck.matching_openers(["(a"])
    with pytest.raises(ValueError, match="Dyck string 1: empty"):
        dyck.encode_for_pushdown([["(a", "a)"], []])
