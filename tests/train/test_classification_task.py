"""The classification task (Ordered Memory on logic / ListOps) on the shared trainer: it learns a separable
toy, resumes bit-exactly (plateau learning rate included), names bad input by file:line, batches every
example once per epoch, and scores parses like EVALB."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tgjax import cli
from tgjax.data import listops, logic
from tgjax.data.batching import EpochBatches
from tgjax.data.classification_corpus import encode_batch, epoch_batches, make_split, train_epochs
from tgjax.eval.evalb import evalb
from tgjax.models.ordered_memory import tree_spans
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train
from tgjax.train.tasks.classification import evaluate_best_checkpoint, span_f1, systematicity_totals

from .helpers import read_metrics

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


NUM_STEPS = 40


def _nots(variable: str, count: int) -> str:
    text = variable
    for _ in range(count):
        text = f"( not {text} )"
    return text


def write_toy_logic(directory, *, bad_line: int | None = None):
    """A logic directory whose relation is the premise's innermost variable: a, b, c -> '<'; d, e, f -> '>'.

    train0 holds 300 zero-operator pairs (every 10th is validation), train1..6 are empty, test7 holds
    two 7-operator pairs and test8..12 are empty. `bad_line` puts a malformed pair on that line of train0.
    """
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(300):
        left, right = rng.choice(list(logic.VARIABLES), 2)
        lines.append(f"{'<' if left in 'abc' else '>'}\t{left}\t{right}")
    if bad_line is not None:
        lines[bad_line - 1] = "<\t( a ( nand b ) )\tc"
    (directory / "train0").write_text("\n".join(lines) + "\n")
    for n in range(1, 7):
        (directory / f"train{n}").write_text("")
    (directory / "test7").write_text(f"<\t{_nots('a', 7)}\tb\n>\t{_nots('e', 7)}\tc\n")
    for n in range(8, 13):
        (directory / f"test{n}").write_text("")
    for n in range(0, 7):
        (directory / f"test{n}").write_text("")
    return directory


TOY_OVERRIDES = [
    "model.embedding_size=16", "model.slot_size=16", "model.mlp_hidden_size=16", "model.n_slots=4",
    "model.test_n_slots=4", "model.embedding_dropout=0.0", "model.output_dropout=0.1",
    "model.attention_dropout=0.0", "model.cell_dropout=0.0",
    "training.batch_size=16", "training.learning_rate=0.005", f"training.num_steps={NUM_STEPS}",
    "training.lr_patience=1", "evaluation.batch_size=32", "evaluation.interval_steps=10",
    "checkpointing.interval_steps=10", "checkpointing.max_to_keep=10", "logging.interval_steps=1",
]


def toy_config(logic_dir, *extra):
    return load_config("configs/om_logic.py", [*TOY_OVERRIDES, f"data.logic_dir={logic_dir}", *extra])


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    return write_toy_logic(tmp_path_factory.mktemp("toy_logic"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, toy_dir):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    return train(toy_config(toy_dir), workdir, quiet=True)


def test_a_separable_toy_is_learnt_and_tested_at_the_end(uninterrupted):
    accuracies = uninterrupted.valid_losses  # the selection value: validation accuracy
    assert sorted(accuracies) == [10, 20, 30, 40]
    assert max(accuracies.values()) >= 0.9  # chance is about 0.5
    assert uninterrupted.best_valid_loss == max(accuracies.values())
    losses = uninterrupted.losses
    assert np.mean([losses[s] for s in range(31, 41)]) < 0.5 * np.mean([losses[s] for s in range(1, 6)])
    report = json.loads((uninterrupted.workdir / "test_results.json").read_text())
    assert report["best_step"] == uninterrupted.best_step
    assert report["test"]["ops7"]["count"] == 2
    assert report["test"]["ops7"]["accuracy"] in (0.0, 0.5, 1.0)
    # Parse F1 over premises and hypotheses: seven nested nots over a variable have 7 gold spans, b and c none.
    assert report["test"]["ops7"]["gold_spans"] == 14
    assert 0.0 <= report["test"]["ops7"]["parse_f1"] <= 100.0


def test_stop_and_resume_is_bit_identical_with_the_plateau_schedule(tmp_path, toy_dir, uninterrupted):
    first = train(toy_config(toy_dir), tmp_path, stop_after_step=20, quiet=True)
    assert first.stopped_early and first.final_step == 20
    assert not (tmp_path / "test_results.json").exists()  # a pause is not the end: no test yet
    # A stopped run can still be scored: its best checkpoint so far, on the test splits.
    lines = evaluate_best_checkpoint(toy_config(toy_dir), tmp_path, say=lambda text: None)
    paused = json.loads((tmp_path / "test_results.json").read_text())
    best_so_far = max((s for s in (10, 20)), key=lambda s: (uninterrupted.valid_losses[s], -s))
    assert paused["best_step"] == best_so_far and paused["final_step"] == 20 and "ops7" in lines
    second = train(toy_config(toy_dir), tmp_path, quiet=True)
    assert second.start_step == 20 and second.final_step == NUM_STEPS
    for step in range(1, 21):
        assert first.losses[step] == uninterrupted.losses[step], step
    for step in range(21, NUM_STEPS + 1):
        assert second.losses[step] == uninterrupted.losses[step], step  # exact float equality
    assert second.valid_losses == {s: v for s, v in uninterrupted.valid_losses.items() if s > 20}
    # The learning rate (halved by the plateau on the host) came back with the checkpoint.
    mine = {r["step"]: r["learning_rate"] for r in read_metrics(tmp_path) if r["split"] == "train"}
    theirs = {r["step"]: r["learning_rate"] for r in read_metrics(uninterrupted.workdir) if r["split"] == "train"}
    assert mine == theirs
    assert len(set(theirs.values())) > 1, "the toy run should decay its learning rate at least once"
    # The test at the end used the best parameters, read back from the best checkpoint after the resume.
    resumed = json.loads((tmp_path / "test_results.json").read_text())
    reference = json.loads((uninterrupted.workdir / "test_results.json").read_text())
    assert resumed["best_step"] == reference["best_step"] and resumed["test"] == reference["test"]
    # A checkpoint of another model and other training data is refused, naming each change (one run asks both).
    with pytest.raises(ConfigError) as refused:
        train(toy_config(toy_dir, f"training.num_steps={NUM_STEPS + 10}", "model.slot_size=8",
                         "data.max_train_examples=100"), tmp_path, quiet=True)
    assert "model.slot_size: 16 in the checkpoint, 8 now" in str(refused.value)
    assert "the training examples differ" in str(refused.value)


def test_a_malformed_line_reaches_the_user_as_file_and_line(tmp_path, capsys):
    bad = write_toy_logic(tmp_path / "bad", bad_line=3)
    code = cli.main(["train", "--config", "configs/om_logic.py", "--workdir", str(tmp_path / "run"),
                     *(f"--config.{o}" for o in TOY_OVERRIDES), f"--config.data.logic_dir={bad}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{bad / 'train0'}:3:" in err and "expected an operator 'and' or 'or', found 'nand'" in err


def test_info_prints_the_release_sizes(capsys):
    # The reproduction configs run the release's recurrence: q/k LayerNorms (2 x 2 x D parameters) on top of
    # the thesis form's 1,246,808 (D = 200) and 448,011 (D = 128).
    assert cli.main(["info", "--config", "configs/om_logic.py"]) == 0
    out = capsys.readouterr().out
    assert "ordered_memory_logic: 1,247,608 parameters" in out and "vocabulary   12 ids" in out
    assert "release_switches=True" in out
    assert cli.main(["info", "--config", "configs/om_listops.py"]) == 0
    assert "ordered_memory_listops: 448,523 parameters" in capsys.readouterr().out
    # The thesis' equations stay one argument away.
    assert cli.main(["info", "--config", "configs/om_logic.py:thesis"]) == 0
    assert "ordered_memory_logic: 1,246,808 parameters" in capsys.readouterr().out
    assert cli.main(["info", "--config", "configs/om_listops.py:cpu,thesis"]) == 0
    out = capsys.readouterr().out
    assert "ordered_memory_listops: " in out and "release_switches=False" in out


def test_config_arguments_are_checked():
    for path, arg in (("configs/om_logic.py", "cpu,cpu_long"), ("configs/om_logic.py", "release"),
                      ("configs/om_listops.py", "cpu_long")):
        with pytest.raises(ValueError, match="takes no argument"):
            load_config(f"{path}:{arg}")


def _pattern_a(operators: int) -> str:
    """`operators` operators holding systematicity pattern A: nots around `( b ( and ( not a ) ) )`."""
    return _nots("( b ( and ( not a ) ) )", operators - 2)


def test_systematicity_results_put_7_to_12_beside_the_thesis_and_every_length_apart(tmp_path, toy_dir,
                                                                                     uninterrupted):
    # The toy's training pairs hold no pattern, so split A trains on the same pairs: the toy run's
    # checkpoint can be scored on A's test, three pattern pairs of 2, 7 and 12 operators.
    pattern_dir = tmp_path / "pattern"
    shutil.copytree(toy_dir, pattern_dir)
    for n in (2, 7, 12):
        with open(pattern_dir / f"test{n}", "a") as f:
            f.write(f"<\t{_pattern_a(n)}\tc\n")
    workdir = tmp_path / "run"
    shutil.copytree(uninterrupted.workdir, workdir)
    lines = evaluate_best_checkpoint(toy_config(pattern_dir, "data.split=A"), workdir, say=lambda text: None)
    report = json.loads((workdir / "test_results.json").read_text())
    test = report["test"]
    assert {name: r["count"] for name, r in test.items()} == {"A/2": 1, "A/7": 1, "A/12": 1, "A/7-12": 2,
                                                               "A/0-12": 3}
    assert test["A/7-12"]["accuracy"] == pytest.approx((test["A/7"]["accuracy"] + test["A/12"]["accuracy"]) / 2)
    assert report["beside_thesis"] == "A/7-12" and report["all_lengths"] == "A/0-12"
    assert "A/7-12: accuracy" in lines and "beside the thesis' A (unseen lengths 7-12)" in lines
    assert "A/0-12: accuracy" in lines and "not a thesis figure" in lines


def test_systematicity_totals_by_hand():
    results = {"B/3": {"accuracy": 0.5, "count": 2}, "B/7": {"accuracy": 1.0, "count": 1},
               "B/12": {"accuracy": 0.0, "count": 3}}
    totals = systematicity_totals(results, "B")
    assert totals["B/7-12"] == {"accuracy": pytest.approx(0.25), "count": 4}
    assert totals["B/0-12"] == {"accuracy": pytest.approx(2 / 6), "count": 6}


@pytest.mark.parametrize("override, message", [
    ("dataset=trees", "config key 'dataset'"),
    ("data.split=D", "config key 'data.split'"),
    ("training.schedule=cosine", "config key 'training.schedule'"),
    ("model.n_slots=0", "config key 'model.n_slots'"),
])
def test_bad_config_values_are_named(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        train(load_config("configs/om_logic.py", [override]), tmp_path, quiet=True)


def test_missing_logic_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no logic data directory"):
        train(toy_config(tmp_path / "nowhere"), tmp_path / "run", quiet=True)


# -- batching ------------------------------------------------------------------------------


def _listops_split(n=45, seed=0):
    return make_split("listops", listops.generate(n, seed=seed))


def test_each_epoch_gives_every_example_once_in_length_sorted_windows():
    split = _listops_split()
    for epoch in range(3):
        batches = epoch_batches(split, 4, seed=7, epoch=epoch)
        flat = np.concatenate(batches)
        assert sorted(flat.tolist()) == list(range(45))
        assert [len(b) for b in batches].count(4) == 11  # 45 = 11 x 4 + one batch of 1
        for batch in batches:  # sorted inside its window, so a batch spans a narrow length range
            lengths = split.lengths[batch]
            assert np.all(np.diff(np.sort(lengths)) >= 0)
    assert [b.tolist() for b in epoch_batches(split, 4, 7, 0)] != [b.tolist() for b in epoch_batches(split, 4, 7, 1)]


def test_the_iterator_resumes_from_its_position():
    split = _listops_split()
    epochs = train_epochs("listops", split, 4, seed=3, length_bucket=8)
    straight = EpochBatches(epochs)
    seen = [next(straight) for _ in range(30)]  # crosses two epoch boundaries (12 batches an epoch)
    resumed = EpochBatches(epochs)
    for _ in range(17):
        next(resumed)
    again = EpochBatches(train_epochs("listops", split, 4, seed=3, length_bucket=8), resumed.get_state())
    assert resumed.get_state() == {"epoch": 1, "step": 5}
    for expected in seen[17:]:
        got = next(again)
        assert got.keys() == expected.keys()
        assert all(np.array_equal(got[k], expected[k]) for k in got)
    for batch in seen:
        assert batch["inputs"].shape[1] % 8 == 0 and batch["inputs"].shape[0] == 4
    total = sum(float(b["weights"].sum()) for b in seen[:12])
    assert total == 45.0  # one epoch: every example once, the filler rows weigh nothing
    # epoch e's step i is epoch_batches(.., e)[i] (the release's order, what the pinned losses were recorded with)
    for step, batch in enumerate(seen):
        indices = epoch_batches(split, 4, 3, step // 12)[step % 12]
        expected = encode_batch("listops", [split.examples[i] for i in indices], 4, batch["inputs"].shape[1])
        assert all(np.array_equal(batch[k], expected[k]) for k in expected)


def test_each_process_keeps_its_share_of_the_same_global_batch():
    split = _listops_split()
    whole = EpochBatches(train_epochs("listops", split, 4, seed=3, length_bucket=8))
    shares = [EpochBatches(train_epochs("listops", split, 4, seed=3, length_bucket=8, process_index=i,
                                        process_count=2)) for i in range(2)]
    for _ in range(13):  # into the second epoch
        batch, parts = next(whole), [next(share) for share in shares]
        for key, value in batch.items():
            assert parts[0][key].shape[0] == 2 and np.array_equal(np.concatenate([p[key] for p in parts]), value)


def test_filler_rows_are_empty_and_weightless():
    examples = listops.generate(3, seed=1)
    batch = encode_batch("listops", examples, rows=5, width=16)
    assert batch["weights"].tolist() == [1, 1, 1, 0, 0]
    assert not batch["valid"][3:].any() and batch["valid"][:3].any()
    assert batch["labels"][:3].tolist() == [e.label for e in examples]
    pairs = [logic.parse_line("<\ta\t( b ( or c ) )")]
    pair_batch = encode_batch("logic", pairs, rows=2, width=8)
    assert pair_batch["right_valid"].sum(axis=1).tolist() == [7, 0]
    with pytest.raises(ValueError, match="do not fit"):
        encode_batch("listops", examples, rows=2, width=16)


# -- parse F1 ------------------------------------------------------------------------------


def _to_bracketed(tree, words) -> str:
    if isinstance(tree, list):
        return "(X " + " ".join(_to_bracketed(child, words) for child in tree) + ")"
    return f"(XX {words[tree]})"


def _random_binary(rng, start, end):
    if end - start == 1:
        return start
    split = int(rng.integers(start + 1, end))
    return [_random_binary(rng, start, split), _random_binary(rng, split, end)]


def test_span_f1_is_evalb_unlabelled_f1():
    rng = np.random.default_rng(4)
    gold_trees, pred_trees, gold_spans, pred_spans = [], [], [], []
    for _ in range(25):
        n = int(rng.integers(1, 12))
        words = [f"w{i}" for i in range(n)]
        gold, pred = _random_binary(rng, 0, n), _random_binary(rng, 0, n)
        gold_trees.append(_to_bracketed(gold, words) if n > 1 else f"(X (XX {words[0]}))")
        pred_trees.append(_to_bracketed(pred, words) if n > 1 else f"(X (XX {words[0]}))")
        gold_spans.append(tree_spans(gold))
        pred_spans.append(tree_spans(pred))
    ours, _ = span_f1(gold_spans, pred_spans)
    # EVALB counts the one-word sentences' root bracket; ours counts spans of >= 2 tokens only.
    one_word = [i for i, s in enumerate(gold_spans) if not s]
    keep = [i for i in range(25) if i not in one_word]
    reference = evalb([gold_trees[i] for i in keep], [pred_trees[i] for i in keep], "keep_punct", unlabeled=True)
    assert ours == pytest.approx(reference.all.bracketing_fmeasure, abs=1e-9)
    assert 0 < ours < 100


def test_listops_gold_spans_score_100_against_themselves():
    examples = listops.generate(20, seed=2)
    gold = [set(listops.gold_spans(e.expression)) for e in examples]
    assert span_f1(gold, gold)[0] == 100.0
    # The model's left-branching reading of `[SM 6 5 ]`: ((([SM 6) 5) ]) is the file's bracketing.
    expression = listops.parse_expression("[SM 6 5 ]")
    assert tree_spans([[[0, 1], 2], 3]) == set(listops.gold_spans(expression))


# -- the ListOps path ----------------------------------------------------------------------


@pytest.mark.slow  # about a minute on a loaded 2-core machine (four compilations)
def test_listops_run_reports_parse_f1_and_length_generalisation(tmp_path):
    pool = listops.generate(400, seed=9, max_tokens=30)
    short = [e for e in pool if listops.num_tokens(e.expression) <= 20][:10]
    long = [e for e in pool if 20 < listops.num_tokens(e.expression) <= 30][:4]
    too_long = listops.generate(30, seed=10, max_tokens=None)
    too_long = [e for e in too_long if listops.num_tokens(e.expression) > 30][:2]
    assert len(long) == 4 and len(too_long) == 2
    test_path = tmp_path / "test.tsv"
    listops.write_listops(test_path, short + long + too_long)
    config = load_config("configs/om_listops.py", [
        "data.train_size=64", "data.valid_size=16", "data.max_train_tokens=20", "data.length_bucket=32",
        f"data.test_path={test_path}", "data.test_max_tokens=30", "model.embedding_size=8", "model.slot_size=8",
        "model.n_slots=4", "model.test_n_slots=6", "training.batch_size=16", "training.num_steps=4",
        "evaluation.batch_size=16", "evaluation.interval_steps=2", "logging.interval_steps=1"])
    result = train(config, tmp_path / "run", quiet=True)
    assert sorted(result.valid_losses) == [2, 4]
    valid = [r for r in read_metrics(tmp_path / "run") if r["split"] == "valid"]
    assert all(0 <= r["parse_f1"] <= 100 and r["count"] == 16 for r in valid)
    report = json.loads((tmp_path / "run" / "test_results.json").read_text())
    assert report["skipped"] == {"test": 2}  # the two over data.test_max_tokens, counted
    tests = report["test"]
    assert tests["test"]["count"] == 14 and tests["test_le20"]["count"] == 10 and tests["test_gt20"]["count"] == 4
    both = tests["test_le20"]["accuracy"] * 10 + tests["test_gt20"]["accuracy"] * 4
    assert both == pytest.approx(tests["test"]["accuracy"] * 14)
    gold_spans = sum(len(listops.gold_spans(e.expression)) for e in short + long)
    assert tests["test"]["gold_spans"] == gold_spans and 0 <= tests["test"]["parse_f1"] <= 100
