"""The Pushdown-LM training task (tgjax.train.tasks.pushdown_lm): loss, run, resume, windows, configs, bad input."""

from __future__ import annotations

import logging
import math
import shutil

import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import pushdown_corpus as corpus
from tgjax.data.batching import EpochBatches
from tgjax.data.corpora import builtin_treebank
from tgjax.data.pushdown import (
    bucket_width,
    bucket_widths,
    encode_trees,
    epoch_batches,
    make_batch,
    tape_from_nodes,
    train_epochs,
)
from tgjax.data.vocab import build_word_dictionary
from tgjax.models.pushdown_lm import PushdownLM
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train
from tgjax.train.tasks import pushdown_lm as pd

from .helpers import read_metrics

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


NUM_STEPS = 24
TINY = [
    "model.d_model=32", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=64",
    "model.sequence_length=32", "data.num_train_sentences=160", "data.num_valid_sentences=24",
    "training.batch_size=8", "evaluation.batch_size=8", f"training.num_steps={NUM_STEPS}",
    "training.lr_schedule.kwargs.max_lr=0.005", "training.lr_schedule.kwargs.warmup_steps=4",
    f"training.lr_schedule.kwargs.cosine_cycle_length={NUM_STEPS - 4}", "evaluation.interval_steps=12",
    "checkpointing.interval_steps=12", "checkpointing.max_to_keep=5", "logging.interval_steps=1",
]


def tiny_config(*extra):
    return load_config("configs/pushdown_tiny.py", [*TINY, *extra])


# -- the loss against an independent computation -----------------------------------------------------


def legal_slots_by_stack(attach: np.ndarray) -> list[set[int]]:
    """For each token k: the slots it may take (the rightmost tokens of the stack's elements, and k itself),
    under the ROOT rule: a word never takes ROOT (token 0), the token that attaches to it (<eos>) only ROOT.

    An explicit stack of element ends: a shift pushes k; attaching to j pops every element ending at or
    after j and pushes the merged element, which ends at k.
    """
    stack, legal = [], []
    for k, a in enumerate(attach):
        legal.append({0} if k and a == 0 else (set(stack) - {0}) | {k})
        if a != k:
            while stack and stack[-1] >= a:
                stack.pop()
        stack.append(k)
    return legal


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def oracle_loss(outputs, batch, attachment_weight, normalise="legal"):
    """Mean LM CE over real positions + weight x mean attachment CE (softmax over legal or causal slots)."""
    lm_logits, attach_logits = np.asarray(outputs["lm_logits"]), np.asarray(outputs["attach_logits"])
    lm, attach = [], []
    for b in range(batch["inputs"].shape[0]):
        legal = legal_slots_by_stack(batch["attach"][b])
        for i in range(batch["inputs"].shape[1]):
            if batch["weights"][b, i] > 0:
                lm.append(-log_softmax(lm_logits[b, i])[batch["targets"][b, i]])
            if batch["attach_weights"][b, i] > 0:
                slots = sorted(legal[i + 1]) if normalise == "legal" else list(range(i + 2))
                picked = slots.index(int(batch["attach"][b, i + 1]))
                attach.append(-log_softmax(attach_logits[b, i, slots])[picked])
    return np.mean(lm) + attachment_weight * np.mean(attach), np.mean(lm), np.mean(attach)


def forward_and_loss(model, batch, model_cfg, attachment_weight):
    """(the model's deterministic outputs, `pd.loss_and_metrics` of them) on a NumPy batch, in one compiled
    program (run eagerly, each operation would be compiled on its own)."""

    @nnx.jit
    def run(model, batch):
        outputs = model(batch, deterministic=True)
        return outputs, pd.loss_and_metrics(outputs, batch, model_cfg, attachment_weight)

    return run(model, {k: jax.numpy.asarray(v) for k, v in batch.items()})


@pytest.mark.parametrize("normalise", ["legal", "causal"])
def test_the_loss_is_lm_plus_weighted_attachment_cross_entropy(normalise):
    config = tiny_config(f"model.attachment_normalise={normalise}")
    trees = builtin_treebank("train", 3)
    vocab = build_word_dictionary([t.leaves() for t in trees])
    sentences, _ = encode_trees(trees, vocab)
    batch, _ = make_batch([*sentences, None], 32)  # an idle row must not count
    model_cfg = pd.model_config(config, vocab.size)
    model = PushdownLM(model_cfg, rngs=nnx.Rngs(params=1, dropout=0))
    outputs, (loss, metrics) = forward_and_loss(model, batch, model_cfg, 0.5)
    expected, lm, attach = oracle_loss(outputs, batch, 0.5, normalise)
    assert float(metrics["lm_loss"]) == pytest.approx(lm, rel=1e-5)
    assert float(metrics["attach_loss"]) == pytest.approx(attach, rel=1e-5)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["num_tokens"]) == sum(len(s) - 1 for s in sentences)
    assert float(metrics["sum_lm_nll"]) == pytest.approx(lm * float(metrics["num_tokens"]), rel=1e-5)


def test_the_dyck_loss_skips_the_end_tokens_attachment_and_reads_the_binary_tape():
    from tgjax.data import dyck

    config = load_config("configs/pushdown_dyck.py", ["model.d_model=16", "model.num_layers=1", "model.num_heads=2",
                                                      "model.ffw_hidden_size=32", "model.sequence_length=24"])
    strings, _ = dyck.dyck_corpus(3, 7, max_length=20)
    sentences = dyck.encode_for_pushdown(strings)
    batch, _ = make_batch(sentences, 24)
    assert [int(w.sum()) for w in batch["attach_weights"]] == [len(s) - 2 for s in sentences]
    model_cfg = pd.model_config(config, dyck.dyck_vocabulary().size)
    assert model_cfg.binary_tape and model_cfg.num_depths == 2
    model = PushdownLM(model_cfg, rngs=nnx.Rngs(params=2, dropout=0))
    outputs, (loss, _) = forward_and_loss(model, batch, model_cfg, 1.0)
    # The release's head (Table 1's recipe): the softmax over every causal slot.
    assert config.model.attachment_normalise == "causal"
    assert float(loss) == pytest.approx(oracle_loss(outputs, batch, 1.0, "causal")[0], rel=1e-5)


def test_the_stack_oracle_on_a_hand_worked_sentence():
    # <s> the dog barks <eos>: dog attaches to the (slot 2 -> (the dog)); barks shifts; <eos> to <s>.
    attach = np.array([0, 1, 1, 3, 0])
    assert legal_slots_by_stack(attach) == [{0}, {1}, {1, 2}, {2, 3}, {0}]


# -- a run and its resume -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return train(tiny_config(), tmp_path_factory.mktemp("pushdown_run"), quiet=True)


def test_a_short_run_lowers_the_lm_and_attachment_losses(uninterrupted):
    records = read_metrics(uninterrupted.workdir)
    trains = [r for r in records if r["split"] == "train"]
    vocab = len((uninterrupted.workdir / "vocab.txt").read_text().splitlines())
    assert np.mean([r["lm_loss"] for r in trains[:3]]) == pytest.approx(math.log(vocab), abs=0.6)
    assert np.mean([r["lm_loss"] for r in trains[-3:]]) < np.mean([r["lm_loss"] for r in trains[:3]]) - 0.5
    assert np.mean([r["attach_loss"] for r in trains[-3:]]) < np.mean([r["attach_loss"] for r in trains[:3]])
    assert all(r["tokens_per_second"] > 0 and 0 <= r["attach_accuracy"] <= 1 for r in trains)
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [12, 24]
    assert valid[-1]["loss"] < valid[0]["loss"]
    assert valid[-1]["perplexity"] == pytest.approx(math.exp(valid[-1]["loss"]))
    assert uninterrupted.valid_losses[24] == pytest.approx(valid[-1]["loss"])  # the selection is the LM loss


def resumable_at_step_12(uninterrupted, workdir):
    """A copy of the uninterrupted run's workdir as a run stopped after step 12 leaves it: its checkpoint of step 24
    removed (its metrics of steps 13-24 are dropped by the resumed run's writer)."""
    shutil.copytree(uninterrupted.workdir, workdir, dirs_exist_ok=True)
    shutil.rmtree(workdir / "checkpoints" / str(NUM_STEPS))
    assert sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == [12]
    return workdir


def test_resume_from_a_checkpoint_is_bit_identical(tmp_path, uninterrupted):
    """Resumed from the checkpoint of step 12 (the one a stop there writes: `stop_after_step` is the trainer's,
    tests/train/test_resume.py), steps 13-24 are the uninterrupted run's, bit for bit."""
    workdir = resumable_at_step_12(uninterrupted, tmp_path)
    second = train(tiny_config(), workdir, quiet=True)
    assert second.start_step == 12 and second.final_step == NUM_STEPS
    for step in range(13, NUM_STEPS + 1):
        assert second.losses[step] == uninterrupted.losses[step], step  # exact float equality
    assert second.valid_losses[NUM_STEPS] == uninterrupted.valid_losses[NUM_STEPS]
    records = [(r["split"], r["step"]) for r in read_metrics(workdir)]
    assert records == [(r["split"], r["step"]) for r in read_metrics(uninterrupted.workdir)]  # once each
    with pytest.raises(ConfigError, match="model.d_model: 32 in the checkpoint, 16 now"):
        train(tiny_config("model.d_model=16", f"training.num_steps={NUM_STEPS + 4}"), workdir, quiet=True)


def test_a_run_may_resume_with_remat_switched_on(tmp_path, uninterrupted):
    """remat changes how the numbers are computed, not which: the checkpoint is accepted and restored into the
    remat model (a run with nothing left to train restores it and stops; -m slow trains on)."""
    workdir = resumable_at_step_12(uninterrupted, tmp_path)
    again = train(tiny_config("model.remat=true", "training.num_steps=12"), workdir, quiet=True)
    assert again.start_step == again.final_step == 12 and again.losses == {}


@pytest.mark.slow
def test_a_run_resumed_with_remat_trains_on(tmp_path, uninterrupted):
    workdir = resumable_at_step_12(uninterrupted, tmp_path)
    third = train(tiny_config("model.remat=true", "training.num_steps=14"), workdir, quiet=True)
    assert third.start_step == 12 and third.final_step == 14
    assert all(math.isfinite(third.losses[step]) for step in (13, 14))


def test_the_batch_iterator_resumes_from_its_position():
    trees = builtin_treebank("train", 21)
    sentences, _ = encode_trees(trees, build_word_dictionary([t.leaves() for t in trees]))
    batches = EpochBatches(train_epochs(sentences, seq_len=32, batch_size=4, seed=3))
    seen = [next(batches) for _ in range(7)]  # 6 batches an epoch: crosses into epoch 1
    assert batches.get_state() == {"epoch": 1, "step": 1}
    assert sum(b["weights"][:, 0].sum() for b in seen[:6]) == 21  # every sentence once, 3 idle rows
    resumed = EpochBatches(train_epochs(sentences, seq_len=32, batch_size=4, seed=3), {"epoch": 0, "step": 4})
    for expected in seen[4:]:
        got = next(resumed)
        assert all(np.array_equal(got[k], expected[k]) for k in expected)
    # epoch e's batches are the shuffle of (seed, e): the order the pinned losses were recorded with
    plan = [b for e in range(2) for b in epoch_batches(len(sentences), 4, 3, e)]
    for got, indices in zip(seen, plan):
        rows = [sentences[i] for i in indices]
        expected = make_batch(rows + [None] * (4 - len(rows)), 32)[0]
        assert all(np.array_equal(got[k], expected[k]) for k in expected)


def test_bucketed_batches_are_the_full_width_batches_cut_to_a_power_of_two():
    from tgjax.data import dyck

    sentences = dyck.encode_for_pushdown(dyck.dyck_corpus(24, 5, max_length=62)[0])
    full = EpochBatches(train_epochs(sentences, seq_len=64, batch_size=4, seed=3))
    bucketed = EpochBatches(train_epochs(sentences, seq_len=64, batch_size=4, seed=3, bucket_lengths=True))
    widths = set()
    for _ in range(6):
        wide, cut = next(full), next(bucketed)
        width = cut["inputs"].shape[1]
        widths.add(width)
        longest = int(wide["weights"].sum(axis=1).max())
        assert longest <= width and (width == 16 or width < 2 * longest) and width & (width - 1) == 0
        for key, value in wide.items():
            columns = width + 1 if key in ("attach", "roots") else width
            assert np.array_equal(cut[key], value[:, :columns]), key
        assert not wide["weights"][:, width:].any() and not wide["attach_weights"][:, width:].any()
    assert len(widths) > 1, widths  # strings of several lengths


def test_length_grouped_epochs_hold_every_row_once_in_narrower_batches():
    from tgjax.data import dyck

    sentences = dyck.encode_for_pushdown(dyck.dyck_corpus(300, 9, max_length=126)[0])
    token_rows = sorted(tuple(int(t) for t in s.tokens) for s in sentences)  # strings repeat: a list
    widths = {}
    for grouped in (False, True):
        # pools of 10 batches: three pools (80 rows each) and a partial one (60 rows)
        batches = EpochBatches(train_epochs(sentences, seq_len=128, batch_size=8, seed=4, bucket_lengths=True,
                                            group_by_length=grouped, pool_batches=10))
        epoch = [next(batches) for _ in range(-(-len(sentences) // 8))]
        assert batches.get_state() == {"epoch": 0, "step": len(epoch)}
        seen = []
        for batch in epoch:
            for row in range(batch["inputs"].shape[0]):
                n = int(batch["weights"][row].sum())
                if n:
                    seen.append((*batch["inputs"][row, :n].tolist(), int(batch["targets"][row, n - 1])))
        assert sorted(seen) == token_rows  # every row exactly once
        widths[grouped] = np.mean([b["inputs"].shape[1] for b in epoch])
        if grouped:
            again = EpochBatches(train_epochs(sentences, seq_len=128, batch_size=8, seed=4, bucket_lengths=True,
                                              group_by_length=True, pool_batches=10), {"epoch": 0, "step": 5})
            for expected in epoch[5:9]:
                got = next(again)
                assert all(np.array_equal(got[k], expected[k]) for k in expected)
    assert widths[True] < 0.75 * widths[False], widths


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 300), min_size=1, max_size=8), st.sampled_from([64, 100, 512]))
def test_bucket_width_is_the_smallest_power_of_two_that_holds_the_batch(lengths, seq_len):
    rows = [np.zeros(n) for n in lengths] + [None]  # only len() is read; None is an idle row
    width = bucket_width(rows, seq_len)
    longest = max(lengths) - 1
    if longest > seq_len:
        assert width == seq_len
    else:
        assert longest <= width <= seq_len
        assert width == seq_len or (width & (width - 1) == 0 and (width == 16 or width // 2 < longest))


def test_the_loss_does_not_depend_on_the_padded_width():
    from tgjax.data import dyck

    config = load_config("configs/pushdown_dyck.py", ["model.d_model=16", "model.num_layers=2", "model.num_heads=2",
                                                      "model.ffw_hidden_size=32", "model.sequence_length=96"])
    strings, _ = dyck.dyck_corpus(4, 11, max_length=30)
    sentences = dyck.encode_for_pushdown(strings)
    model_cfg = pd.model_config(config, dyck.dyck_vocabulary().size)
    model = PushdownLM(model_cfg, rngs=nnx.Rngs(params=3, dropout=0))
    results = []
    narrow = bucket_width(sentences, 96)
    assert narrow < 96  # otherwise the two widths below are one
    for width in (narrow, 96):
        batch, _ = make_batch(sentences, width)
        results.append(forward_and_loss(model, batch, model_cfg, 1.0)[1][1])
    for key in ("lm_loss", "attach_loss", "attach_correct", "num_tokens", "clipped_depths"):
        assert float(results[0][key]) == pytest.approx(float(results[1][key]), rel=1e-5), key


def test_each_process_keeps_its_share_of_the_same_global_batch():
    trees = builtin_treebank("train", 9)
    sentences, _ = encode_trees(trees, build_word_dictionary([t.leaves() for t in trees]))
    whole = next(EpochBatches(train_epochs(sentences, seq_len=32, batch_size=4, seed=1)))
    shares = [next(EpochBatches(train_epochs(sentences, seq_len=32, batch_size=4, seed=1, process_index=i,
                                             process_count=2))) for i in range(2)]
    for key, value in whole.items():
        assert shares[0][key].shape[0] == 2 and np.array_equal(np.concatenate([s[key] for s in shares]), value)


# -- windows (WikiTrees) --------------------------------------------------------------------------------


def test_windows_start_at_sentence_boundaries_and_keep_each_tree():
    trees = builtin_treebank("train", 12)
    vocab = build_word_dictionary([t.leaves() for t in trees])
    sentences, _ = encode_trees(trees, vocab)
    longest = max(len(s) for s in sentences)
    rows, too_long = corpus.pack_windows(sentences, longest + 3)
    assert too_long == 0 and len(rows) < len(sentences)
    assert sum(len(r) for r in rows) == sum(len(s) for s in sentences)
    position = 0
    for row in rows:
        assert len(row) <= longest + 3
        offset = 0
        tape = tape_from_nodes(row.node_start, row.node_end, len(row))
        while offset < len(row):
            sentence = sentences[position]
            n = len(sentence)
            assert row.tokens[offset] == vocab.bos_id  # a ROOT before every sentence
            block = slice(offset, offset + n)
            assert np.array_equal(row.tokens[block], sentence.tokens)
            assert np.array_equal(row.attach[block] - offset, sentence.attach)
            assert np.array_equal(np.tril(tape[block, block]), np.tril(sentence.depths))
            if offset:  # an earlier sentence keeps the depths of its finished tree
                assert np.array_equal(tape[offset + n - 1, :offset], tape[offset - 1, :offset])
            offset += n
            position += 1
    assert position == len(sentences)
    _, skipped = corpus.pack_windows(sentences, longest - 1)
    assert skipped == sum(len(s) > longest - 1 for s in sentences) > 0


def test_clipped_tape_entries_are_counted_as_the_batcher_counts_them():
    trees = builtin_treebank("train", 40)
    sentences, _ = encode_trees(trees, build_word_dictionary([t.leaves() for t in trees]))
    for num_depths in (3, 5, 50):
        brute = sum(make_batch([s], 32, num_depths=num_depths)[1] for s in sentences)
        assert sum(corpus.count_clipped(s, num_depths) for s in sentences) == brute
    assert brute == 0 and sum(corpus.count_clipped(s, 3) for s in sentences) > 0


# -- configs and bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pushdown_tiny.py", "pushdown_dyck.py", "pushdown_dyck.py:base",
                                  "pushdown_bllip.py", "pushdown_wikitrees.py"])
def test_every_pushdown_config_validates(name):
    config = load_config(f"configs/{name}")
    pd.check_config(config)
    model = pd.model_config(config, 100)
    layers = {"pushdown_dyck.py:base": (), "pushdown_wikitrees.py": (6, 7, 8, 9, 10, 11)}
    assert model.pushdown_layers == layers.get(name)
    assert model.binary_tape == name.startswith("pushdown_dyck")
    kwargs = config.training.lr_schedule.kwargs  # the cosine ends exactly at the last step
    assert kwargs.warmup_steps + kwargs.cosine_cycle_length == config.training.num_steps


def test_the_dyck_config_has_the_releases_head_and_the_papers_as_a_variant():
    """Table 1 came from the release's attachment head; the paper's is the other column (`-paper-head`)."""
    release, paper = (pd.model_config(load_config(f"configs/pushdown_dyck.py{variant}"), 100)
                      for variant in ("", ":base-cpu-paper-head"))
    head = lambda m: (m.head_scaled, m.head_self_key_input, m.head_relative_positions, m.attachment_normalise)  # noqa: E731
    assert head(release) == (False, "query", True, "causal")
    assert head(paper) == (True, "projection", False, "legal") and paper.pushdown_layers == () and paper.d_model == 64
    assert release.max_relative_position >= 600  # <s> + the longest evaluation prefix: no distance clipped


@pytest.mark.parametrize("override, message", [
    ("data.source=web", "data.source"), ("model.pushdown_layers=1,7", "model.pushdown_layers"),
    ("model.attachment_normalise=all", "attachment_normalise"), ("training.batch_size=0", "training.batch_size"),
    ("model.num_heads=3", "model.num_heads")])
def test_bad_config_values_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        pd.check_config(tiny_config(override))


def test_a_malformed_tree_reaches_the_user_with_file_and_line(tmp_path):
    good = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))\n"
    train_file, valid_file = tmp_path / "train.mrg", tmp_path / "valid.mrg"
    train_file.write_text(good + good + "(S (NP (DT a) (NN cat)) (VP (VBZ sleeps))))\n" + good)
    valid_file.write_text(good)
    config = tiny_config("data.source=treebank", f"data.train_path={train_file}",
                         f"data.valid_path={valid_file}")
    with pytest.raises(Exception, match=rf"{train_file}:3:"):
        train(config, tmp_path / "run", quiet=True)


def test_missing_files_name_the_key(tmp_path):
    config = load_config("configs/pushdown_bllip.py", ["model.d_model=16", "model.num_layers=1"])
    with pytest.raises(FileNotFoundError, match="data.train_path"):
        train(config, tmp_path / "run", quiet=True)


def test_too_long_sentences_are_refused_or_counted(tmp_path):
    with pytest.raises(ValueError, match="do not fit model.sequence_length=8"):
        train(tiny_config("model.sequence_length=8", "data.on_too_long=error"), tmp_path / "a", quiet=True)
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext

    config = tiny_config("model.sequence_length=12")
    task = pd.PushdownLMTask(config)
    task.validate_config(config)
    trees = builtin_treebank("train", 160)
    expected = sum(len(t.leaves()) + 1 > 12 for t in trees)
    (tmp_path / "b").mkdir()
    task.setup(RunContext(tmp_path / "b", shd.make_mesh(), False, 0, 1, lambda text: None))
    assert task.train_data.report.num_skipped_too_long == expected > 0
    assert len(task.train_data.sentences) == 160 - expected
    # The rest make the batches of a run (what a train step is given: a row fits the model's 12 positions).
    batch = next(task.batches(None))
    assert batch["inputs"].shape == (8, 12) and batch["weights"].sum() > 0


def test_the_unigram_baseline_by_hand():
    from tgjax.data.pushdown import PushdownSentence

    def row(*tokens):
        ids = np.array(tokens, np.int32)
        return PushdownSentence(ids, np.arange(ids.size, dtype=np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))

    # Add-one counts over the predicted tokens of the training rows: 2 -> 3, 5 -> 3, 6 -> 2, the other five ids 1: 13.
    loss = corpus.unigram_loss([row(1, 5, 5, 2), row(1, 6, 2)], [row(1, 5, 2)], vocab_size=8)
    assert loss == pytest.approx(-math.log(3 / 13))


def dyck_row(num_tokens: int):
    from tgjax.data.pushdown import PushdownSentence

    ids = np.ones(num_tokens, np.int32)
    return PushdownSentence(ids, np.arange(num_tokens, dtype=np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))


def test_bucket_widths_are_the_powers_of_two_below_the_row_then_the_row():
    assert bucket_widths(512) == [16, 32, 64, 128, 256, 512]
    assert bucket_widths(100) == [16, 32, 64, 100]
    assert bucket_widths(16) == [16] and bucket_widths(10) == [10]
    for seq_len in (10, 16, 100, 512):  # bucket_width never returns a width outside the list
        rows = [dyck_row(n) for n in range(2, seq_len + 2)]  # inputs of 1 .. seq_len tokens
        assert {bucket_width([row], seq_len) for row in rows} == set(bucket_widths(seq_len))


def test_windowed_rows_hold_every_sentence_and_give_a_finite_loss(tmp_path):
    """data.windows: the task packs the sentences into rows, and the model's loss on a batch of them is finite
    (-m slow: a run trains and validates on them)."""
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext

    windowed = pd.PushdownLMTask(tiny_config("data.windows=true"))
    windowed.setup(RunContext(tmp_path, shd.make_mesh(), False, 0, 1, lambda text: None))
    rows = windowed.train_data.sentences
    assert len(rows) < 160 and sum(int((r.tokens == r.tokens[0]).sum()) for r in rows) == 160  # a ROOT each
    batch = next(windowed.batches(None))
    assert (batch["inputs"] == batch["inputs"][0, 0]).sum(axis=1).max() > 1  # a row of several sentences
    model = PushdownLM(windowed.model_config, rngs=nnx.Rngs(params=0, dropout=0))
    _, (loss, metrics) = forward_and_loss(model, batch, windowed.model_config, 1.0)
    assert math.isfinite(float(loss)) and float(metrics["num_attach"]) > 0


@pytest.mark.slow
def test_windowed_rows_train_through_the_trainer(tmp_path):
    windowed = pd.PushdownLMTask(tiny_config("data.windows=true", "training.num_steps=2",
                                             "evaluation.interval_steps=2"))
    result = train(windowed.config, tmp_path / "windows", task=windowed, quiet=True)
    rows = windowed.train_data.sentences
    assert len(rows) < 160 and sum(int((r.tokens == r.tokens[0]).sum()) for r in rows) == 160  # a ROOT each
    assert math.isfinite(result.valid_losses[2])


def test_dyck_strings_train_through_the_trainer(tmp_path, caplog):
    dyck_config = load_config("configs/pushdown_dyck.py", [
        "model.d_model=16", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=32",
        "model.sequence_length=32", "data.dyck_max_length=30", "data.dyck_num_train=40", "data.dyck_num_valid=8",
        "training.batch_size=8", "evaluation.batch_size=8", "training.num_steps=2", "evaluation.interval_steps=2",
        "checkpointing.interval_steps=2", "training.lr_schedule.kwargs.warmup_steps=1",
        "training.lr_schedule.kwargs.cosine_cycle_length=1", "training.bucket_lengths=true",
        "training.group_by_length=true", "model.scan_layers=true", "model.remat=true"])
    dyck_task = pd.PushdownLMTask(dyck_config)
    jax.config.update("jax_log_compiles", True)  # global: the per-thread context would miss the pool's threads
    try:
        with caplog.at_level(logging.WARNING):
            result = train(dyck_config, tmp_path / "dyck", task=dyck_task, quiet=True)
    finally:
        jax.config.update("jax_log_compiles", False)
    compiled_in = [r.threadName for r in caplog.records if r.getMessage().startswith("Compiling jit(train_step)")]
    assert dyck_task.model_config.binary_tape and dyck_task.model_config.scan_layers
    assert math.isfinite(result.valid_losses[2])
    epoch = dyck_task.batches(None)
    assert min(next(epoch)["inputs"].shape[1] for _ in range(len(epoch.epoch_dataset(0)))) < 32  # the switches reach it
    # every bucket width (16, 32) was compiled before the first step, and no step compiled another
    assert bucket_widths(32) == [16, 32]
    assert len(compiled_in) == 2 and "MainThread" not in compiled_in, compiled_in
    assert any("redrawn" in note for note in dyck_task.notes)  # the over-long strings are said, not hidden
