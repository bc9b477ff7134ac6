"""`tgjax eval dyck`: the closing-bracket metric by hand, the sets against a brute-force stack, scorers, bad input."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import dyck
from tgjax.eval import dyck as ed
from tgjax.infer.pushdown_loading import LoadedPushdown
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig

VOCAB2 = dyck.dyck_vocabulary(2)  # PAD 0, <s> 1, </s> 2, (a 3, (b 4, a) 5, b) 6


def brute_force_open(prefix):
    """(index, token) of the brackets left open: delete adjacent matched pairs until none is left."""
    items = list(enumerate(prefix))
    changed = True
    while changed:
        changed = False
        for i in range(len(items) - 1):
            (_, left), (_, right) = items[i], items[i + 1]
            if left.startswith("(") and right.endswith(")") and left[1:] == right[:-1]:
                del items[i:i + 2]
                changed = True
                break
    assert all(token.startswith("(") for _, token in items), "a prefix of a Dyck string never has a stray closer"
    return items


def brute_force_attachments(prefix):
    """``<s>`` and openers shift; a closer attaches to (the position of) its opener: the pair that deletion removes."""
    attach = list(range(len(prefix) + 1))
    items = [(i + 1, t) for i, t in enumerate(prefix)]
    while True:
        pair = next((k for k in range(len(items) - 1) if items[k][1].startswith("(") and items[k + 1][1].endswith(")")
                     and items[k][1][1:] == items[k + 1][1][:-1]), None)
        if pair is None:
            return np.asarray(attach)
        attach[items[pair + 1][0]] = items[pair][0]
        del items[pair:pair + 2]


# -- the metric, by hand


def test_choose_and_accuracy_by_hand():
    # Row 0: "(a" is the likeliest token, "b)" the likeliest closer. Row 1: "a)" is both.
    log_probs = np.log(np.array([[0.0, 0.05, 0.05, 0.5, 0.1, 0.1, 0.2],
                                 [0.0, 0.05, 0.05, 0.1, 0.1, 0.6, 0.1]]) + 1e-12)
    closers = np.array([5, 6])
    np.testing.assert_array_equal(ed.choose(log_probs, closers), [6, 5])
    np.testing.assert_array_equal(ed.choose(log_probs, np.arange(7)), [3, 5])
    targets = np.array([6, 6])
    assert ed.accuracy(ed.choose(log_probs, closers), targets) == 0.5
    assert ed.accuracy(ed.choose(log_probs, np.arange(7)), targets) == 0.0
    with pytest.raises(ValueError, match="3 predictions for 2 targets"):
        ed.accuracy(np.zeros(3), targets)


def test_score_set_by_hand():
    """A scorer that always prefers "a)" then "b)": 2 of 3 targets are "a)"; the tape agreement counted per token."""
    examples = [dyck.DyckExample(("(a",), "a)", 1, 1),
                dyck.DyckExample(("(b", "(a", "a)"), "b)", 3, 1),
                dyck.DyckExample(("(a", "(b", "b)"), "a)", 3, 1)]
    row = np.log(np.array([1e-3, 1e-3, 1e-3, 0.3, 0.3, 0.25, 0.1]))

    def scorer(ids, gold):
        # The first example's tape (<s> (a): gold; the others': every token shifts (wrong at the closer only).
        used = [g if len(g) == 2 else np.arange(len(g)) for g in gold]
        return np.tile(row, (len(ids), 1)), used

    score = ed.score_set("x", examples, VOCAB2, scorer, batch_size=2)
    assert (score.num_correct, score.num_examples) == (2, 3) and score.accuracy == pytest.approx(2 / 3)
    # Tokens after <s>: 1 + 3 + 3 = 7, of which the two closers of examples 2 and 3 are wrong.
    assert score.attachment_agreement == pytest.approx(5 / 7)
    assert score.exact_tapes == pytest.approx(1 / 3)
    # Over the whole vocabulary, "(a" wins everywhere: no target is an opener.
    assert ed.score_set("x", examples, VOCAB2, scorer, among="all").accuracy == 0.0


# -- the sets against a brute-force stack


@pytest.fixture(scope="module")
def all_sets():
    return ed.evaluation_sets(ed.SET_NAMES, seed=0)


def test_sets_targets_and_distances_against_brute_force(all_sets):
    assert all(len(all_sets[n]) >= 50 for n in ed.LONG_RANGE_SETS) and len(ed.LONG_RANGE_SETS) == 8
    assert len(all_sets["depth"]) == 105
    assert len(all_sets["valid"]) == 500
    for name, examples in all_sets.items():
        for e in examples:
            still_open = brute_force_open(e.prefix)
            index, opener = still_open[-1]
            assert e.target == opener[1:] + ")", name
            assert e.distance == len(e.prefix) - index and e.depth == len(still_open), name
            if name in ed.LONG_RANGE_SETS:
                assert e.distance >= ed.LONG_RANGE_SETS[name] and len(e.prefix) <= 600
            elif name == "valid":  # the training distribution: depth <= 10, prefixes <= 250
                assert dyck.max_nesting(e.prefix) <= dyck.PAPER_TRAIN_DEPTH and len(e.prefix) <= 250
            else:
                assert len(still_open) == 1 and dyck.max_nesting(e.prefix) >= 15
            np.testing.assert_array_equal(ed.gold_attachments(e), brute_force_attachments(e.prefix))
    depths = sorted({dyck.max_nesting(e.prefix) for e in all_sets["depth"]})
    assert depths[0] == 15 and depths[-1] >= 49
    # In distribution: every closer of each string in turn, so consecutive strings' examples tile them.
    valid = all_sets["valid"]
    assert {e.depth for e in valid} >= {1, 2, 3} and max(e.depth for e in valid) <= dyck.PAPER_TRAIN_DEPTH


@pytest.mark.parametrize("seed", range(3))
def test_default_long_range_sets_nest_no_deeper_than_training(seed):
    """Every prefix of dyck50..dyck300 nests <= the training depth; each dependency is >= the set's L."""
    sets = ed.evaluation_sets(ed.TRAINING_DEPTH_SETS, seed=seed)
    for name, length in ed.TRAINING_DEPTH_SETS.items():
        assert len(sets[name]) == 50
        for e in sets[name]:
            opener = dyck.matching_openers([*e.prefix, e.target], complete=False)[-1]
            assert dyck.max_nesting(e.prefix) <= dyck.PAPER_TRAIN_DEPTH, name
            assert len(e.prefix) - opener == e.distance >= length, name


def strings_of(examples):
    """The strings the in-distribution examples came from (each up to its last example's closer)."""
    strings = []
    for e in examples:
        whole = (*e.prefix, e.target)
        if strings and whole[:len(strings[-1])] == strings[-1]:
            strings[-1] = whole
        else:
            strings.append(whole)
    return strings


def open_rate(strings, max_depth):
    """Openers per choice where the automaton chooses (a stack neither empty nor full)."""
    opened = chose = 0
    for tokens in strings:
        depth = 0
        for token in tokens:
            is_open = token.startswith("(")
            if 0 < depth < max_depth:
                opened, chose = opened + is_open, chose + 1
            depth += 1 if is_open else -1
    return opened / chose, chose


@pytest.mark.parametrize("open_probability", [0.3, 0.5])
def test_sets_follow_the_runs_open_probability(open_probability):
    """The in-distribution set (and the strings of the others) come from the run's automaton, not always 1/2."""
    strings = ed.TrainingStrings(open_probability=open_probability)
    sets = ed.evaluation_sets(["valid", "depth", "dyck50"], seed=0, strings=strings)
    rate, chose = open_rate(strings_of(sets["valid"]), dyck.PAPER_TRAIN_DEPTH)
    assert abs(rate - open_probability) < 4 * np.sqrt(open_probability * (1 - open_probability) / chose)
    # The long-range contexts and the depth set's inserted strings: the same automaton, so longer at 1/2.
    assert sets == ed.evaluation_sets(["valid", "depth", "dyck50"], seed=0, strings=strings)
    # (another probability below 1/2: the strings of 0.7 run long, and sampling them takes seconds)
    other = ed.evaluation_sets(["depth", "dyck50"], seed=0, strings=ed.TrainingStrings(open_probability=0.4))
    assert other["depth"] != sets["depth"] and other["dyck50"] != sets["dyck50"]


def test_the_command_reads_the_runs_open_probability(tmp_path):
    loaded = fake_loader()("W", step="best")
    loaded.meta["config"]["data"].update(dyck_open_probability=0.3, dyck_min_length=2)
    out = tmp_path / "scores.json"
    assert ed.main_dyck(["--workdir", "W", "--sets", "valid", "--tape", "gold", "--limit", "1", "--quiet",
                         "-o", str(out)], load=lambda workdir, step: loaded) == 0
    record = json.loads(out.read_text())
    assert record["strings"]["open_probability"] == 0.3 and record["strings"]["min_length"] == 2


def test_sets_are_reproducible_and_seeded():
    again = ed.evaluation_sets(["dyck50"], seed=0)["dyck50"]
    assert again == ed.evaluation_sets(["dyck50"], seed=0)["dyck50"]
    assert again != ed.evaluation_sets(["dyck50"], seed=1)["dyck50"]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_gold_attachments_match_brute_force_on_random_prefixes(seed, depth):
    rng = np.random.default_rng(seed)
    tokens = dyck.sample_dyck(rng, num_types=3, max_depth=depth, min_length=2)
    cut = int(rng.integers(1, len(tokens) + 1))
    example = dyck.DyckExample(tuple(tokens[:cut]), "a)", 0, 0)
    np.testing.assert_array_equal(ed.gold_attachments(example), brute_force_attachments(tokens[:cut]))


# -- the scorers on a small random model


def small_model(base=False, seed=0):
    config = PushdownLMConfig(vocab_size=VOCAB2.size, d_model=16, num_layers=2, num_heads=2, ffw_hidden_size=32,
                              sequence_length=16, pushdown_layers=() if base else None, num_depths=2,
                              binary_tape=True, dropout=0.0, embedding_dropout=0.0, head_depth_dim=8)
    return PushdownLM(config, rngs=nnx.Rngs(seed))


@functools.partial(jax.jit, static_argnums=0)
def _lm_logits(graphdef, state, batch):
    """The model's `lm_logits`, jitted: one compilation per length, not one per operation of an eager pass."""
    return nnx.merge(graphdef, state)(batch, deterministic=True)["lm_logits"]


def full_pass_last(model, ids, attach):
    """log p(next | <s> prefix) from one unpadded forward pass (the slow, obvious way)."""
    tape = ed.tape_of(attach, binary=True)
    batch = {"inputs": jnp.asarray(ids[None]), "targets": jnp.zeros((1, len(ids)), jnp.int32),
             "weights": jnp.ones((1, len(ids)), jnp.float32), "tape": jnp.asarray(tape[None])}
    logits = np.asarray(_lm_logits(*nnx.split(model), batch)[0, -1], np.float64)
    return logits - np.logaddexp.reduce(logits)


def test_padded_batches_equal_single_passes():
    model = small_model()
    # Two lengths (each full pass compiles per shape), padded to 8 and 16 in two batches.
    prefixes = [("(a", "(b"), ("(b", "(a", "a)", "(a", "(b", "b)", "a)", "(a", "(b"), ("(a", "a)")]
    ids = [np.asarray([1] + [VOCAB2.id_of(t) for t in p], np.int32) for p in prefixes]
    gold = [ed.gold_attachments(dyck.DyckExample(p, "a)", 0, 0)) for p in prefixes]
    scorer = ed.TeacherForcedScorer(model, bucket=8)
    batched = np.concatenate([scorer.log_probs(ids[:1], gold[:1]), scorer.log_probs(ids[1:], gold[1:])])
    for b in range(len(ids)):
        np.testing.assert_allclose(batched[b], full_pass_last(model, ids[b], gold[b]), atol=2e-5)


def test_model_tape_scorer_is_each_prefixs_own_beam_and_pass():
    """Prefixes searched three at a time (one padded group) and read in one padded pass give what
    `PushdownSearch.prefix` gives for each alone: its top tape and the distribution after it."""
    from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch

    model = small_model(seed=1)
    prefixes = [("(a", "(b"), ("(b", "(a", "a)", "(a", "(b", "b)", "a)"), ("(a",), ("(a", "a)", "(b", "(b")]
    ids = [np.asarray([1] + [VOCAB2.id_of(t) for t in p], np.int32) for p in prefixes]
    gold = [ed.gold_attachments(dyck.DyckExample(p, "a)", 0, 0)) for p in prefixes]
    log_probs, found = ed.model_tape_scorer(model, VOCAB2, beam_size=4, bucket=8, num_parallel=3)(ids, gold)
    alone = PushdownSearch(model, VOCAB2, PushdownBeamConfig(beam_size=4, bucket=8))
    for b, row in enumerate(ids):
        expected = alone.prefix(row)
        np.testing.assert_array_equal(found[b], expected.best_attach)
        np.testing.assert_allclose(log_probs[b], expected.log_probs[-1], atol=2e-5)


def test_tape_matters_for_pushdown_and_not_for_base():
    ids = [np.asarray([1, 3, 4, 6, 4], np.int32)]  # <s> (a (b b) (b
    gold = [ed.gold_attachments(dyck.DyckExample(("(a", "(b", "b)", "(b"), "b)", 0, 0))]
    shifts = [np.arange(5)]
    pushdown, base = ed.TeacherForcedScorer(small_model()), ed.TeacherForcedScorer(small_model(base=True))
    assert np.abs(pushdown.log_probs(ids, gold) - pushdown.log_probs(ids, shifts)).max() > 1e-4
    np.testing.assert_allclose(base.log_probs(ids, gold), base.log_probs(ids, shifts), atol=1e-6)


# -- the command


def fake_loader(source="dyck", base=False, vocab=None):
    """A `main_dyck(load=...)` that returns a small random model as if restored from a workdir."""
    vocab = vocab or dyck.dyck_vocabulary(20)
    config = PushdownLMConfig(vocab_size=vocab.size, d_model=16, num_layers=1, num_heads=2, ffw_hidden_size=32,
                              sequence_length=16, pushdown_layers=() if base else None, num_depths=2,
                              binary_tape=True, dropout=0.0, embedding_dropout=0.0, head_depth_dim=8)
    loaded = LoadedPushdown(model=PushdownLM(config, rngs=nnx.Rngs(3)), vocab=vocab, step=7,
                            workdir=Path("runs/fake"), meta={"config": {"data": {"source": source,
                                                                                  "dyck_num_types": 20}}})
    return lambda workdir, step: loaded


def test_command_gold_tape_table_and_json(tmp_path, capsys):
    out = tmp_path / "scores.json"
    rc = ed.main_dyck(["--workdir", "W", "--sets", "dyck50,depth", "--tape", "gold", "--limit", "2", "--quiet",
                       "-o", str(out)], load=fake_loader())
    assert rc == 0
    printed = capsys.readouterr().out
    assert "tape: gold" in printed and "Dyck (50)" in printed and "96.5" in printed and "68.3" in printed
    record = json.loads(out.read_text())
    assert record["model"] == "pushdown" and record["paper"]["depth"] == 68.3
    # Recompute the depth accuracy the obvious way.
    loaded = fake_loader()("W", step="best")
    vocab = dyck.dyck_vocabulary(20)
    closers = np.asarray([vocab.id_of(t) for t in dyck.closers(20)])
    correct = 0
    for e in ed.evaluation_sets(["depth"], seed=0)["depth"][:2]:
        ids = np.asarray([1] + [vocab.id_of(t) for t in e.prefix], np.int32)
        log_probs = full_pass_last(loaded.model, ids, ed.gold_attachments(e))
        correct += int(closers[np.argmax(log_probs[closers])] == vocab.id_of(e.target))
    assert record["scores"]["depth"]["num_correct"] == correct and record["scores"]["depth"]["num_examples"] == 2
    assert record["scores"]["depth"]["attachment_agreement"] == 1.0  # the gold tape is the gold tape


def test_command_base_lm_reads_no_tape(capsys):
    assert ed.main_dyck(["--workdir", "W", "--sets", "dyck100", "--limit", "2", "--quiet"],
                        load=fake_loader(base=True)) == 0
    printed = capsys.readouterr().out
    assert "not read (Base-LM)" in printed and "81.0" in printed  # the paper's Base-LM column


@pytest.mark.parametrize("argv, loader, message", [
    (["--sets", "dyck50,dyck75"], fake_loader(), "unknown set 'dyck75'; expected a comma-separated list of dyck50"),
    (["--sets", "depth,depth"], fake_loader(), "named twice"),
    (["--beam-size", "0"], fake_loader(), "--beam-size: expected at least 1"),
    ([], fake_loader(source="treebank"), "trained on data.source='treebank', not Dyck strings"),
])
def test_bad_input_is_a_clear_error(argv, loader, message, capsys):
    assert ed.main_dyck(["--workdir", "W", *argv], load=loader) == 2
    err = capsys.readouterr().err
    assert err.startswith("tgjax eval dyck: error:") and message in err


def test_missing_workdir_and_other_trainers_runs(tmp_path, capsys):
    assert ed.main_dyck(["--workdir", str(tmp_path / "nothing")]) == 2
    assert "tgjax eval dyck: error:" in capsys.readouterr().err
    # A directory with no checkpoints.
    assert ed.main_dyck(["--workdir", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_vocabulary_of_another_task_is_refused(capsys):
    assert ed.main_dyck(["--workdir", "W"], load=fake_loader(vocab=dyck.dyck_vocabulary(19))) == 2
    assert "is not the Dyck vocabulary of 20 bracket types" in capsys.readouterr().err
