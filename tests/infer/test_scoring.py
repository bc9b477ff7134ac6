"""Scoring: equal to the training loss, rows independent, segments invisible, per-token and per-word maps.

Models are tiny: freshly initialised where training does not matter, and one
TG trained for 10 steps (shared by the eval test modules through
`trained_workdir`) where the checkpoint path does.
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tgjax
from tests.train.helpers import small_config
from tgjax.data import corpora
from tgjax.data import pipeline as pl
from tgjax.data.vocab import build_word_dictionary, train_sentencepiece
from tgjax.eval import summaries
from tgjax.infer import loading, scoring
from tgjax.infer.loading import CheckpointError, from_model
from tgjax.infer.scoring import Scorer, encode, encode_tree, score_trees, word_surprisals
from tgjax.models import build_model, model_spec, sequence_loss
from tgjax.syntax import actions, masks, trees
from tgjax.syntax import token_types as tt
from tgjax.workdir import VocabularyMismatch

SIZES = dict(d_model=32, num_layers=2, num_heads=4, ffw_hidden_size=64)


# -----------------------------------------------------------------------------
# Shared by tests/eval/test_*.py (imported from here).


@functools.cache
def trained_workdir() -> tuple[Path, dict]:
    """A TG trained for 4 steps on the built-in corpus (T = M = 16), validated and saved at steps 2 and 4.

    Returns the workdir and the validation losses {2: ..., 4: ...}.
    """
    from tgjax.train import train

    root = Path(tempfile.mkdtemp(prefix="tgjax-eval-test-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    workdir = root / "tg"
    cache = jax.config.jax_compilation_cache_dir
    result = train(small_config("training.num_steps=4", "evaluation.interval_steps=2", "checkpointing.interval_steps=2",
                                "checkpointing.async_save=false"), workdir, quiet=True)
    assert jax.config.jax_compilation_cache_dir == cache
    return workdir, dict(result.valid_losses)


@functools.cache
def corpus(split: str = "valid", n: int = 24) -> tuple[trees.Tree, ...]:
    return tuple(corpora.get_corpus("builtin", split, num_sentences=n, seed=0))


@functools.cache
def vocabulary(rule: str):
    """A word dictionary of the built-in training split (actions, or words for TXL (terminals))."""
    return build_word_dictionary([pl.tokens_for_rule(t, rule, pos_tags=True) for t in corpus("train", 200)])


# Segment and memory lengths of the fresh models: one segment of 16 with a memory of 16 (the default), many
# short segments with a memory that holds every stack / prefix, and one long segment. Every scorer has B = 4
# rows, so models of one shape share one compilation.
BASE, SHORT, LONG = (16, 16), (8, 128), (128, 8)
B = 4


def fresh(name: str, lengths: tuple[int, int] = BASE, *, seed: int = 0, vocab=None) -> loading.RestoredLM:
    """A freshly initialised model of the registry (same seed: same parameters, whatever the lengths)."""
    rule = model_spec(name).pipeline["rule"]
    vocab = vocab or vocabulary(rule)
    T, M = lengths
    model = build_model(name, vocab.size, rngs=nnx.Rngs(params=seed, dropout=0), sequence_length=T,
                        memory_length=M, **SIZES)
    return from_model(model, vocab, name)


@functools.cache
def fresh_scorer(name: str, lengths: tuple[int, int] = BASE, seed: int = 0) -> Scorer:
    return Scorer(fresh(name, lengths, seed=seed), batch_size=B)


def logps(scores) -> np.ndarray:
    return np.array([s.logp for s in scores])


# -----------------------------------------------------------------------------
# Equal to training.


def test_encoding_is_the_training_pipelines():
    for rule in ("tg", "txl_cc", "txl_terminals"):
        config = pl.PipelineConfig(rule=rule)
        expected = pl.encode_corpus(list(corpus()), vocabulary(rule), config).sequences
        for tree, arrays in zip(corpus(), expected):
            got = encode_tree(vocabulary(rule), tree, rule, pos_tags=True).arrays
            for a, b in zip(got, arrays):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["tg", "txl_cc", "txl_terminals"])
def test_scores_equal_the_training_loss(name):
    """Σ log p over the validation split = −(summed nll of the training pipeline's batches under sequence_loss)."""
    scorer = fresh_scorer(name)
    loaded = scorer.loaded
    fields = model_spec(name).pipeline_fields(loaded.model_config)
    pipeline = pl.Pipeline(pl.PipelineConfig(batch_size=B, **fields), loaded.vocab, tree_list=list(corpus()))
    source = pipeline.epoch_source(0)

    @jax.jit
    def eval_step(params, rest, batch, memory):
        logits, memory = nnx.merge(loaded.graphdef, params, rest)(batch, memory, deterministic=True)
        return (*sequence_loss(logits, batch), memory)

    memory = loaded.model.init_memory(B)
    nll, events = 0.0, 0
    for i in range(len(source)):
        batch = {k: jnp.asarray(v) for k, v in source[i].items() if k in masks.CompactChunk._fields}
        total, count, memory = eval_step(loaded.params, loaded.rest, batch, memory)
        nll += float(total)
        events += int(count)
    scores = score_trees(scorer, list(corpus()))
    assert sum(s.num_predictions for s in scores) == events
    np.testing.assert_allclose(-math.fsum(s.logp for s in scores), nll, rtol=2e-6)


def test_trained_checkpoint_scores_equal_its_validation_loss():
    workdir, valid_losses = trained_workdir()
    loaded = tgjax.load(workdir, step="latest").restore()
    assert loaded.step == 4 and loaded.model_name == "tg" and loaded.rule == "tg"
    valid = corpora.get_corpus("builtin", "valid", num_sentences=16, seed=0)
    scores = score_trees(Scorer(loaded, batch_size=4), valid)
    mean_nll = -math.fsum(s.logp for s in scores) / sum(s.num_predictions for s in scores)
    assert mean_nll == pytest.approx(valid_losses[4], rel=1e-5)


# -----------------------------------------------------------------------------
# Batching and segments.


def test_rows_are_independent_and_memory_resets():
    """Each sequence scored alone (the other rows idle) = scored in a full batch, rows switching sequences."""
    scorer = fresh_scorer("tg", SHORT)
    tree_list = list(corpus())
    batched = score_trees(scorer, tree_list)
    for tree, score in zip(tree_list[:5], batched):
        (single,) = score_trees(scorer, [tree])
        np.testing.assert_allclose(single.logp, score.logp, rtol=1e-6)
        np.testing.assert_allclose(single.token_logprobs, score.token_logprobs, rtol=1e-6, atol=1e-6)
    # Streaming in chunks of 5 sequences (rows carry memory across chunks) changes nothing.
    items = ((i, encode_tree(scorer.vocab, t, "tg", pos_tags=True)) for i, t in enumerate(tree_list))
    chunked = list(scoring.score_sequences(scorer, items, chunk_size=5))
    assert [s.index for s in chunked] == list(range(len(tree_list)))
    np.testing.assert_allclose(logps(chunked), logps(batched), rtol=1e-6)


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_many_segments_equal_one(name):
    """T = 8 with a memory that holds the stack (TG) / the whole prefix (TXL) = one segment per sequence."""
    short, long = fresh_scorer(name, SHORT), fresh_scorer(name, LONG)
    for a, b in zip(jax.tree.leaves(short.loaded.params), jax.tree.leaves(long.loaded.params)):
        np.testing.assert_array_equal(a, b)
    tree_list = list(corpus())
    assert max(len(actions.choe_charniak(t, pos_tags=True)) for t in tree_list) > 3 * 8  # several segments
    s_short, s_long = score_trees(short, tree_list), score_trees(long, tree_list)
    np.testing.assert_allclose(logps(s_short), logps(s_long), rtol=1e-5)
    for a, b in zip(s_short, s_long):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=2e-5)
    assert short.stats.dropped_stack_entries == 0


# -----------------------------------------------------------------------------
# Per token, per word.


def test_token_logprobs_are_per_original_action():
    """Oracle: one whole-sequence segment through the model; CNT1 positions dropped, CNT2 carries the next action."""
    scorer = fresh_scorer("tg", LONG)
    tree = corpus()[1]
    encoded = encode_tree(scorer.vocab, tree, "tg", pos_tags=True)
    (chunk,) = masks.TGMasking(*LONG).compact_chunks(*encoded.arrays)
    # The jitted step (log p of each position's label) on B copies of the segment, through the scorer's own
    # compilation; the mapping back to actions is what is checked.
    batch = jax.device_put({k: np.stack([v] * B) for k, v in chunk._asdict().items()}, scorer._batch_sharding)
    label_log_probs, _ = scoring._score_step(scorer._graphdef, scorer._params, scorer._rest, batch,
                                             scorer._empty_memory())
    label_log_probs = np.asarray(label_log_probs[0])
    expected = []
    for i in range(LONG[0]):
        if chunk.inputs_ttypes[i] == tt.PAD:
            break
        if chunk.inputs_ttypes[i] == tt.CNT1:  # COMPOSE: predicts nothing
            assert chunk.labels_ttypes[i] == tt.PAD and label_log_probs[i] == 0.0
        elif chunk.labels_ttypes[i] != tt.PAD:  # everything else but the last position predicts the next action
            expected.append(label_log_probs[i])
    (score,) = score_trees(scorer, [tree])
    assert score.tokens == actions.choe_charniak(tree, pos_tags=True)
    assert len(expected) == len(score.tokens) == score.num_predictions
    np.testing.assert_allclose(score.token_logprobs, expected, rtol=1e-5)
    assert score.logp == pytest.approx(float(np.sum(expected)), rel=1e-6)


@pytest.mark.parametrize("name", ["tg", "txl_terminals"])
def test_word_surprisals_sum_to_minus_logp(name):
    scorer = fresh_scorer(name, seed=1)
    tree = trees.parse("(S (NP (DT the) (NN manager)) (VP (VBZ is) (ADJP (JJ careful))) (. .))")
    w = word_surprisals(scorer, tree)
    assert w.words == ["the", "manager", "is", "careful", "."]
    assert float(w.surprisals.sum()) + w.end == pytest.approx(-w.logp, rel=1e-9)
    (score,) = score_trees(scorer, [tree])
    lp = score.token_logprobs
    if name == "tg":
        # (S (NP the | manager | NP) (VP is | (ADJP careful | ADJP) VP) . | S)
        np.testing.assert_allclose(w.surprisals, -np.array([lp[0:3].sum(), lp[3], lp[4:7].sum(), lp[7:9].sum(),
                                                            lp[9:12].sum()]), rtol=1e-9)
        assert w.end == pytest.approx(-lp[12])
    else:
        # The words, then </s> (a prediction event, not a word): its surprisal is the end.
        assert score.tokens == w.words + ["</s>"]
        assert (score.num_words, score.num_predictions) == (5, 6)
        np.testing.assert_allclose(w.surprisals, -lp[:-1])
        assert w.end == pytest.approx(-lp[-1]) and w.end > 0
    many = scoring.word_surprisals_many(scorer, [tree, corpus()[0]])
    np.testing.assert_allclose(many[0].surprisals, w.surprisals, rtol=1e-6)


def test_unknown_words_are_unk_and_counted():
    scorer = fresh_scorer("tg")
    tree = trees.parse("(S (NP (DT the) (NN zyzzyva)) (VP (VBZ is) (ADJP (JJ quux))) (. .))")
    encoded = encode_tree(scorer.vocab, tree, "tg", pos_tags=True)
    assert encoded.num_unk == 2 and encoded.num_words == 5
    (score,) = score_trees(scorer, [tree])
    assert score.num_unk == 2 and math.isfinite(score.logp)
    with pytest.raises(ValueError, match="unknown non-terminal '\\(ZZ'"):
        encode_tree(scorer.vocab, trees.parse("(ZZ (DT the))"), "tg", pos_tags=True, where="f.txt: sentence 3")


def test_sentencepiece_pieces_sum_to_their_action():
    vocab = train_sentencepiece([pl.tokens_for_rule(t, "tg", pos_tags=True) for t in corpus("train", 200)], 400)
    loaded = fresh("tg", vocab=vocab)
    tree = corpus()[0]
    encoded = encode_tree(vocab, tree, "tg", pos_tags=True)
    assert encoded.num_ids > len(encoded.tokens)  # some words are several pieces
    (score,) = score_trees(Scorer(loaded, batch_size=B), [tree])
    assert score.num_predictions == encoded.num_ids
    np.testing.assert_allclose(score.token_logprobs, np.bincount(encoded.source, score.piece_logprobs))
    w = scoring.surprisals_from_score(score)
    assert float(w.surprisals.sum()) + w.end == pytest.approx(-score.logp, rel=1e-9)


# -----------------------------------------------------------------------------
# Ensembles: tests/infer/test_ensemble.py.


# -----------------------------------------------------------------------------
# Loading.


def test_load_steps_restore_and_errors(tmp_path, monkeypatch):
    workdir, _ = trained_workdir()
    best = tgjax.load(workdir)  # the lower of the validation losses at steps 2 and 4
    assert (best.family, best.model_name, best.rule) == ("lm", "tg", "tg")  # from the meta: nothing restored yet
    assert best.capabilities == ("scorer", "parser", "sampler", "tree_scorer")
    monkeypatch.chdir(workdir.parent)
    assert tgjax.load(workdir.name).restore().step == best.step  # a relative workdir (orbax wants absolute paths)
    assert best.step == best.restore().step == loading.read_meta(workdir, 4)["best_step"]
    assert tgjax.load(workdir, step=2).restore().step == 2
    assert tgjax.load(workdir, step="4").step == 4
    latest = tgjax.load(workdir, step="latest")
    short = latest.restore(sequence_length=8, memory_length=32)
    assert (short.model_config.sequence_length, short.pipeline_fields["seq_len"], short.pipeline_fields["mem_len"]) \
        == (8, 8, 32)
    assert latest.restore(sequence_length=8, memory_length=32) is short  # read once per distinct options
    assert latest.restore().model_config.sequence_length != 8

    with pytest.raises(FileNotFoundError, match="does not exist"):
        tgjax.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoints"):
        tgjax.load(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="no checkpoint step 3"):
        tgjax.load(workdir, step=3)
    with pytest.raises(ValueError, match="expected 'best', 'latest'"):
        tgjax.load(workdir, step="newest")

    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy)
    data = json.loads((copy / "vocab.json").read_text())
    data["terminals"][0], data["terminals"][1] = data["terminals"][1], data["terminals"][0]
    (copy / "vocab.json").write_text(json.dumps(data))
    with pytest.raises(VocabularyMismatch, match="is not the vocabulary"):
        tgjax.load(copy).restore()
    (copy / "vocab.json").unlink()
    with pytest.raises(FileNotFoundError, match="no vocabulary"):
        tgjax.load(copy).restore()


def test_words_files_for_txl_terminals(tmp_path):
    """One sentence of words per line (blank lines skipped) scores like the trees' words; exact word perplexity."""
    tree_list = list(corpus()[:5])
    path = tmp_path / "words.txt"
    path.write_text("\n".join(" ".join(t.leaves()) for t in tree_list[:2]) + "\n\n"
                    + "\n".join(" ".join(t.leaves()) for t in tree_list[2:]) + "\n")
    scorer = fresh_scorer("txl_terminals")
    from_words = list(scoring.score_treebank(scorer, path, input_format="words", shard=(0, 1)))
    np.testing.assert_allclose(logps(from_words), logps(score_trees(scorer, tree_list)), rtol=1e-12)
    summary = summaries.ScoreSummary("txl_terminals")
    for s in from_words:
        summary.add(summaries.score_record(s))
    words = sum(len(t.leaves()) for t in tree_list)
    # Each sentence's </s> is predicted (in the log p) but not counted as a word.
    assert summary.result()["num_predictions"] == words + len(tree_list)
    assert summary.result()["num_words"] == words
    assert summary.result()["word_perplexity"] == pytest.approx(math.exp(-logps(from_words).sum() / words))
    with pytest.raises(ValueError, match="for TXL \\(terminals\\) models"):
        list(scoring.score_treebank(fresh_scorer("tg"), path, input_format="words"))


def test_encode_rejects_empty_sequences():
    with pytest.raises(ValueError, match="empty sequence"):
        encode(vocabulary("tg"), [])


# -----------------------------------------------------------------------------
# The command.


def test_score_command(tmp_path, capsys):
    from tgjax.eval.commands import main_score

    workdir, _ = trained_workdir()
    treebank = tmp_path / "valid.txt"
    corpora.write_treebank(treebank, list(corpus()[:7]))
    out = tmp_path / "scores.jsonl"
    assert main_score(["--workdir", str(workdir), "--input", str(treebank), "-o", str(out), "--per-token",
                       "--surprisal", "--batch-size", "4"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(7))
    expected = score_trees(tgjax.load(workdir).tree_scorer(batch_size=B), list(corpus()[:7]))
    for r, s in zip(records, expected):
        assert r["logp"] == s.logp and r["num_predictions"] == s.num_predictions
        assert r["tokens"] == s.tokens and len(r["token_logprobs"]) == len(s.tokens)
        assert sum(r["surprisals"]) + r["end_surprisal"] == pytest.approx(-r["logp"])
    meta = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())
    assert meta["summary"]["sentences"] == 7
    assert meta["summary"]["num_unk_words"] == sum(r["num_unk"]for r in records) > 0  # trained on 64 sentences
    assert "joint_word_perplexity" in capsys.readouterr().err

    # Errors: a missing file, an empty file, a malformed tree (file and line named), a missing workdir.
    assert main_score(["--workdir", str(workdir), "--input", str(tmp_path / "nope.txt")]) == 2
    assert "no such input file" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("")
    assert main_score(["--workdir", str(workdir), "--input", str(tmp_path / "empty.txt")]) == 2
    assert "no sentences" in capsys.readouterr().err
    (tmp_path / "bad.txt").write_text("(S (NP the dog) (VP barks)\n(S (NP a) b))\n")
    assert main_score(["--workdir", str(workdir), "--input", str(tmp_path / "bad.txt")]) == 2
    assert "bad.txt:2" in capsys.readouterr().err
    assert main_score(["--workdir", str(tmp_path / "nowhere"), "--input", str(treebank)]) == 2
    assert "does not exist" in capsys.readouterr().err
