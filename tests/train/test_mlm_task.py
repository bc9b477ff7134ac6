"""The UDGN masked-LM task (tgjax.train.tasks.mlm): masking, batching, vocabulary, a run, resume, bad input."""

from __future__ import annotations

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import mlm_corpus as corpus
from tgjax.data.batching import EpochBatches, epoch_order, round_up
from tgjax.train.config import ConfigError, load_config
from tgjax.train.loop import train
from tgjax.train.params_state import ParamsState
from tgjax.train.tasks import mlm

from .helpers import read_metrics

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


NUM_STEPS = 40
TINY = [
    "model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
    "model.parser_hidden=8", "model.parser_layers=1", "data.num_train_sentences=200", "data.num_valid_sentences=30",
    "training.token_budget=256", "training.length_bucket=32", f"training.num_steps={NUM_STEPS}",
    "training.learning_rate=0.01", "training.lr_patience=1", "evaluation.interval_steps=10", "evaluation.runs=2",
    "checkpointing.interval_steps=10", "checkpointing.max_to_keep=10", "logging.interval_steps=1",
]


def tiny_config(*extra):
    return load_config("configs/udgn_tiny.py", [*TINY, *extra])


# -- masking ---------------------------------------------------------------------------------------


def test_masking_rate_eligibility_and_replacement_on_a_large_sample():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50, size=(200, 100)).astype(np.int32)  # includes <unk>=0, <pad>=1, <mask>=2 ids
    valid = rng.random((200, 100)) < 0.8
    tokens = np.where(valid, tokens, mlm.PAD_ID)
    inputs, masked = jax.device_get(mlm.mask_tokens(jax.random.key(3), jnp.asarray(tokens), jnp.asarray(valid), 0.3))
    eligible = valid & (tokens != mlm.UNK_ID)
    assert not np.any(masked & ~eligible)  # padding and <unk> are never masked
    rate = masked.sum() / eligible.sum()
    n = eligible.sum()
    assert abs(rate - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)  # within 4 standard deviations
    assert np.all(inputs[masked] == mlm.MASK_ID)  # 100% replaced by <mask>, no 80/10/10
    assert np.array_equal(inputs[~masked], tokens[~masked])


def test_the_loss_counts_exactly_the_masked_positions():
    # Logits that predict every target perfectly except at two unmasked positions, where they are
    # badly wrong: if unmasked positions counted, the total would be huge.
    targets = np.array([[3, 4, 5, 6]])
    masked = np.array([[True, False, True, False]])
    logits = np.where(np.eye(8)[targets] > 0, 0.0, -1e4).astype(np.float32)  # built in NumPy: no op compiled
    logits[0, 1] = np.where(np.arange(8) == 7, 0.0, -1e4)  # wrong at unmasked 1
    logits[0, 0] = 0.0  # uniform at masked 0: nll = log 8
    total, count = jax.jit(mlm.masked_nll)(logits, targets, masked)
    assert int(count) == 2
    assert float(total) == pytest.approx(math.log(8), abs=1e-5)


# -- vocabulary and words --------------------------------------------------------------------------


def test_vocabulary_by_count_then_alphabet_with_specials_first():
    sentences = [["b", "a", "c"], ["a", "c"], ["d"], ["c"]]
    assert corpus.build_vocabulary(sentences, 1) == ["<unk>", "<pad>", "<mask>", "c", "a", "b", "d"]
    assert corpus.build_vocabulary(sentences, 2) == ["<unk>", "<pad>", "<mask>", "c", "a"]
    ids, unknown = corpus.encode([["a", "zzz", "c"]], corpus.build_vocabulary(sentences, 2))
    assert ids[0].tolist() == [4, 0, 3] and unknown == 1


def test_release_words_drop_punctuation_and_normalise():
    from tgjax.syntax.trees import parse

    tree = parse("(S (NP (DT The) (NNS Mice)) (VP (VBD ate) (CD 1,250) (NP (-NONE- *T*)) ($ $)) (. .))")
    assert corpus.release_words(tree) == ["the", "mice", "ate", "N,N"]


# -- batching --------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=80), st.sampled_from([64, 100, 256]),
       st.sampled_from([1, 4, 8]), st.sampled_from([1, 2]))
def test_token_budget_batches_cover_every_sentence_once_within_budget(lengths, budget, bucket, rows_multiple):
    lengths = np.array(lengths)
    if corpus.rows_for(round_up(int(lengths.max()), bucket), budget, rows_multiple) < 1:
        with pytest.raises(ValueError, match="does not fit the token budget"):
            corpus.token_budget_batches(lengths, budget, bucket, rows_multiple)
        return
    batches = corpus.token_budget_batches(lengths, budget, bucket, rows_multiple)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    sentences = [np.full(n, 7, np.int32) for n in lengths]
    previous_max = 0
    for indices in batches:
        batch = corpus.make_batch(sentences, indices, budget, bucket, rows_multiple)
        rows, width = batch["tokens"].shape
        assert rows * width <= budget and rows % rows_multiple == 0 and width % bucket == 0
        assert batch["valid"].sum() == lengths[indices].sum()
        assert np.all(batch["tokens"][~batch["valid"]] == corpus.PAD_ID)
        assert lengths[indices].min() >= previous_max  # packed in length order
        previous_max = lengths[indices].max()
    # Greedy: a batch is closed only when the next sentence would not fit.
    for a, b in zip(batches, batches[1:]):
        width = round_up(int(lengths[np.concatenate([a, b[:1]])].max()), bucket)
        assert len(a) + 1 > corpus.rows_for(width, budget, rows_multiple)


def test_batch_iterator_resumes_from_its_position():
    sentences = [np.arange(3, 3 + n, dtype=np.int32) for n in [2, 5, 3, 9, 4, 4, 1, 7, 6, 2]]
    batches = corpus.token_budget_batches(np.array([len(s) for s in sentences]), 16, 4)
    epochs = corpus.train_epochs(sentences, batches, 16, 4, seed=5)
    it = EpochBatches(epochs)
    seen = [next(it) for _ in range(7)]  # crosses an epoch boundary
    assert len(batches) < 7
    position = {"epoch": 0, "step": 3}
    again = EpochBatches(epochs)
    for _ in range(3):
        next(again)
    assert again.get_state() == position
    resumed = EpochBatches(corpus.train_epochs(sentences, batches, 16, 4, seed=5), position)
    for expected in seen[3:]:
        got = next(resumed)
        assert np.array_equal(got["tokens"], expected["tokens"])
    # epoch e gives the fixed batches in epoch_order(n, seed, e): the order the pinned losses were recorded with
    plan = [batches[i] for e in range(2) for i in epoch_order(len(batches), 5, e)]
    assert len(plan) >= len(seen)
    for got, indices in zip(seen, plan):
        assert np.array_equal(got["tokens"], corpus.make_batch(sentences, indices, 16, 4)["tokens"])


def test_each_process_keeps_its_share_of_the_same_global_batch():
    sentences = [np.arange(3, 3 + n, dtype=np.int32) for n in [2, 5, 3, 9, 4, 4, 1, 7, 6, 2]]
    batches = corpus.token_budget_batches(np.array([len(s) for s in sentences]), 32, 4, rows_multiple=2)
    whole = next(EpochBatches(corpus.train_epochs(sentences, batches, 32, 4, seed=5, rows_multiple=2)))
    shares = [next(EpochBatches(corpus.train_epochs(sentences, batches, 32, 4, seed=5, rows_multiple=2,
                                                    process_index=i, process_count=2))) for i in range(2)]
    for key, value in whole.items():
        assert shares[0][key].shape[0] == len(value) // 2
        assert np.array_equal(np.concatenate([s[key] for s in shares]), value)


def test_the_vocabulary_specials_are_the_masking_ids():
    assert (corpus.UNK, corpus.PAD, corpus.MASK) == (mlm.UNK, mlm.PAD, mlm.MASK) == corpus.SPECIALS
    assert (corpus.UNK_ID, corpus.PAD_ID, corpus.MASK_ID) == (mlm.UNK_ID, mlm.PAD_ID, mlm.MASK_ID)


# -- a run -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return train(tiny_config(), tmp_path_factory.mktemp("mlm_run"), quiet=True)


def test_a_short_run_lowers_the_masked_lm_loss(uninterrupted):
    losses = uninterrupted.losses
    vocab = len((uninterrupted.workdir / "vocab.txt").read_text().splitlines())
    first, last = np.mean([losses[s] for s in range(1, 6)]), np.mean([losses[s] for s in range(36, 41)])
    assert first == pytest.approx(math.log(vocab), abs=0.5)  # starts near uniform
    assert last < first - 0.3
    valid = [r for r in read_metrics(uninterrupted.workdir) if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [10, 20, 30, 40]
    assert valid[-1]["loss"] < valid[0]["loss"]
    assert all(r["perplexity"] == pytest.approx(math.exp(r["loss"])) for r in valid)


def test_stop_and_resume_is_bit_identical(tmp_path, uninterrupted):
    """Resumed from step 20's checkpoint, steps 21-40 (the plateau's halvings included) are the uninterrupted
    run's. The checkpoint is the uninterrupted run's, its later ones removed: what a stop after step 20 leaves (the
    trainer's `stop_after_step`, tests/train/test_resume.py), without training the first half again."""
    shutil.copytree(uninterrupted.workdir, tmp_path, dirs_exist_ok=True)
    for step in (30, 40):
        shutil.rmtree(tmp_path / "checkpoints" / str(step))
    second = train(tiny_config(), tmp_path, quiet=True)
    assert second.start_step == 20 and second.final_step == NUM_STEPS
    for step in range(21, NUM_STEPS + 1):
        assert second.losses[step] == uninterrupted.losses[step], step  # exact float equality
    assert second.valid_losses == {s: v for s, v in uninterrupted.valid_losses.items() if s > 20}
    rates = {r["step"]: r["learning_rate"] for r in read_metrics(uninterrupted.workdir) if r["split"] == "train"}
    assert rates[21] < rates[20] and rates[31] < rates[21], "the plateau should halve the rate before and after 20"
    resumed = {r["step"]: r["learning_rate"] for r in read_metrics(tmp_path) if r["split"] == "train"}
    assert resumed == rates
    with pytest.raises(ConfigError, match="model.d_model: 16 in the checkpoint, 8 now"):
        train(tiny_config("model.d_model=8", f"training.num_steps={NUM_STEPS + 5}"), tmp_path, quiet=True)


# -- bad input -------------------------------------------------------------------------------------


def test_missing_text_files_are_named(tmp_path):
    config = load_config("configs/udgn_ptb.py", [f"data.train_path={tmp_path / 'nope.txt'}",
                                                 f"data.valid_path={tmp_path / 'nope2.txt'}"])
    with pytest.raises(FileNotFoundError, match=r"nope\.txt.*data\.train_path"):
        train(config, tmp_path / "run", quiet=True)


def test_missing_craft_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="craft-ids-train.txt"):
        train(load_config("configs/udgn_craft.py", [f"data.craft_dir={tmp_path}"]), tmp_path / "run", quiet=True)


@pytest.mark.parametrize("override, message", [("training.mask_rate=1.5", "mask_rate"),
                                               ("data.source='web'", "data.source"),
                                               ("training.token_budget=0", "token_budget"),
                                               ("training.parser_hold_steps=-1", "parser_hold_steps")])
def test_bad_config_values_are_named(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        train(tiny_config(override), tmp_path, quiet=True)


@pytest.mark.parametrize("hold", [0, 2])
def test_a_held_parser_gets_no_update_for_its_first_steps_and_the_rest_trains_throughout(hold):
    from flax import nnx

    from tgjax.models.udgn import UDGN, UDGNConfig

    model = UDGN(UDGNConfig(vocab_size=12, d_model=8, num_layers=1, num_channels=2, channel_size=4, parser_hidden=4,
                            parser_layers=1), rngs=nnx.Rngs(params=0, dropout=0))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    training = load_config("configs/udgn_tiny.py", [f"training.parser_hold_steps={hold}"]).training
    tx = mlm.make_optimizer(training)
    state = tx.init(params)
    keys = iter(jax.random.split(jax.random.key(3), 1000))
    for step in range(hold + 2):
        grads = jax.tree_util.tree_map(lambda p: jax.random.normal(next(keys), p.shape), params)
        updates, state = tx.update(grads, state, params)
        moved = {name: float(sum(jnp.abs(u).sum() for u in jax.tree_util.tree_leaves(part)))
                 for name, part in updates.items()}
        assert all(v > 0 for name, v in moved.items() if name != "parser")
        assert (moved["parser"] == 0) == (step < hold), (step, moved["parser"])


def test_a_sentence_longer_than_the_budget_is_an_error():
    with pytest.raises(ValueError, match="40 words .* does not fit the token budget 32"):
        corpus.token_budget_batches(np.array([3, 40]), 32, 8)


def test_the_train_step_feeds_the_masked_tokens_and_scores_the_originals():
    from flax import nnx

    from tgjax.models.udgn import UDGN, UDGNConfig

    model = UDGN(UDGNConfig(vocab_size=20, d_model=8, num_layers=1, num_channels=2, channel_size=4, parser_hidden=4,
                            parser_layers=1, dropout=0.0, attention_dropout=0.0, parser_dropout=0.0),
                 rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = nnx.to_pure_dict(params)
    training = load_config("configs/udgn_tiny.py").training
    tx = mlm.make_optimizer(training)
    train_step = jax.jit(mlm.make_steps(graphdef, tx, 0.5)[0])  # eager, it takes a minute
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, 20, size=(3, 8)), jnp.int32)
    valid = jnp.asarray(np.arange(8)[None, :] < np.array([[8], [5], [3]]))
    state = ParamsState(params, tx.init(params), jnp.zeros((), jnp.int32), jax.random.key_data(jax.random.key(7)))
    _, metrics = train_step(state, rest, {"tokens": tokens, "valid": valid})
    # The oracle: the same masking key, the masked inputs through the model, the originals as targets (one
    # compiled program).
    @jax.jit
    def oracle(params, tokens, valid):
        mask_key = jax.random.split(jax.random.fold_in(jax.random.key(7), 1))[0]
        inputs, masked = mlm.mask_tokens(mask_key, tokens, valid, 0.5)
        logits = nnx.merge(graphdef, params, rest)(inputs, valid, deterministic=True).logits
        return inputs, masked, *mlm.masked_nll(logits, tokens, masked)

    inputs, masked, total, count = oracle(nnx.state(model, nnx.Param), tokens, valid)
    assert int(jnp.sum(inputs == mlm.MASK_ID)) >= int(jnp.sum(masked)) > 0
    assert int(metrics["num_masked"]) == int(count)
    assert float(metrics["loss"]) == pytest.approx(float(total / count), rel=1e-5)


def test_sentences_left_empty_untagged_or_too_long_are_skipped_and_counted(tmp_path):
    path = tmp_path / "trees.mrg"
    path.write_text("(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))\n"
                    "(FRAG (NP (NN Xpd TTD)) (. .))\n"  # a word not under a POS tag (as CRAFT has)
                    "(FRAG (. .) (, ,))\n"  # nothing left after the WORD_TAGS filter
                    "(S (NP (PRP It)) (VP (VBZ is) (ADJP (RB very) (RB very) (JJ long))))\n")
    data = load_config("configs/udgn_tiny.py", ["data.source='treebank'", f"data.train_path={path}",
                                                "data.max_length=4"]).data
    sentences, skipped = corpus.read_split(data, "train")
    assert sentences == [["the", "dog", "barks"]]
    assert skipped == {"empty": 1, "untagged": 1, "too_long": 1}
