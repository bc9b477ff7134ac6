"""The host pipeline: determinism, coverage, resumption, host sharding, compact == dense, bad input."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tgjax.data import corpora
from tgjax.data.pipeline import Pipeline, PipelineConfig, build_vocabulary, deal_to_rows, encode_corpus, tokens_for_rule
from tgjax.data.vocab import EOS_ID, WordDictionary
from tgjax.syntax import masks, stack_tape, trees
from tgjax.syntax import token_types as tt

SMALL = PipelineConfig(corpus="builtin", num_sentences=60, seq_len=16, mem_len=12, batch_size=4, seed=3)


@pytest.fixture(scope="module")
def small_trees():
    return corpora.get_corpus("builtin", "train", num_sentences=60, seed=3)


def make(trees, **changes):
    return Pipeline(dataclasses.replace(SMALL, **changes), tree_list=trees)


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_same_seed_same_batches_other_seed_other_order(small_trees):
    first = take(make(small_trees).iterator(), 8)
    again = take(make(small_trees).iterator(), 8)
    assert_batches_equal(first, again)
    other = take(make(small_trees, seed=4).iterator(), 8)
    assert any(not np.array_equal(x["seq_index"], y["seq_index"]) for x, y in zip(first, other))


def test_one_epoch_reads_every_segment_once_in_order_per_row(small_trees):
    pipeline = make(small_trees)
    source = pipeline.epoch_source(0)
    seen = []
    row_history = {}
    for step in range(len(source)):
        batch = source[step]
        for row, (s, k) in enumerate(zip(batch["seq_index"], batch["segment_index"])):
            if s < 0:
                assert batch["inputs"][row].sum() == 0 and batch["beginning_of_seq"][row] == 1
                continue
            seen.append((int(s), int(k)))
            # A sequence's segments follow each other in one row, so its memory carries over.
            if k > 0:
                assert row_history[row] == (s, k - 1)
            assert batch["beginning_of_seq"][row] == (k == 0)
            row_history[row] = (s, k)
    rule = masks.TGMasking(16, 12)
    expected = set()
    for s, seq in enumerate(pipeline.encoded.sequences):
        expected |= {(s, k) for k in range(len(rule.compact_chunks(*seq)))}
    assert sorted(seen) == sorted(expected)
    assert any(k > 0 for _, k in seen), "the small config should produce multi-segment sequences"


def test_resume_from_saved_state_across_epochs(small_trees):
    pipeline = make(small_trees)
    steps_per_epoch = len(pipeline.epoch_source(0))
    total = steps_per_epoch + 5
    straight = take(pipeline.iterator(), total)
    cut = steps_per_epoch - 3  # stop inside epoch 0, resume into epoch 1
    it = pipeline.iterator()
    take(it, cut)
    state = it.get_state()
    assert state == {"epoch": 0, "step": cut}
    resumed = take(make(small_trees).iterator(state), total - cut)
    assert_batches_equal(straight[cut:], resumed)
    assert it.get_state()["epoch"] == 0
    # Epochs are reshuffled.
    second = take(pipeline.iterator({"epoch": 1, "step": 0}), 3)
    assert any(not np.array_equal(a["seq_index"], b["seq_index"]) for a, b in zip(straight[:3], second))


def test_hosts_split_the_rows(small_trees):
    whole = take(make(small_trees).iterator(), 6)
    parts = [take(Pipeline(SMALL, tree_list=small_trees, process_index=p, process_count=2).iterator(), 6)
             for p in range(2)]
    for step, batch in enumerate(whole):
        for key in batch:
            joined = np.concatenate([parts[0][step][key], parts[1][step][key]])
            np.testing.assert_array_equal(joined, batch[key], err_msg=key)


def test_compact_batches_expand_to_dense_batches(small_trees):
    compact = take(make(small_trees).iterator(), 5)
    dense = take(make(small_trees, compact=False).iterator(), 5)
    for c, d in zip(compact, dense):
        expanded = masks.expand(masks.CompactChunk(**{f: c[f] for f in masks.CompactChunk._fields}))
        for name, value in zip(masks.Chunk._fields, expanded):
            np.testing.assert_array_equal(value, d[name], err_msg=name)


def test_txl_and_pushdown_rules(small_trees):
    txl = next(make(small_trees, rule="txl_terminals").iterator())
    assert txl["causal"].all() and not np.isin(txl["inputs_ttypes"], [2, 4, 14]).any()
    pipeline = make(small_trees, rule="pushdown", seq_len=64)
    batch = pipeline.epoch_source(0)[0]
    row = int(np.flatnonzero(batch["seq_index"] >= 0)[0])
    s = list(pipeline.encoded.source_index).index(batch["seq_index"][row])
    tree = pipeline.trees[batch["seq_index"][row]]
    tape = stack_tape.stack_tape(tree, nary="right")
    n = len(tape.attach)
    np.testing.assert_array_equal(batch["attach"][row, 1:n + 1], tape.attach + 1)
    np.testing.assert_array_equal(batch["stack_depths"][row, 1:n + 1, 1:n + 1], tape.depths)
    # The row holds that tree's words (the sequence `seq_index` names), whole, from its first segment.
    inputs = pipeline.encoded.sequences[s][0]
    assert batch["segment_index"][row] == 0 and len(inputs) == 1 + len(tree.leaves()) == 1 + n
    np.testing.assert_array_equal(batch["inputs"][row, :len(inputs)], inputs)
    np.testing.assert_array_equal(batch["inputs"][row, len(inputs):], 0)
    assert pipeline.vocab.decode(inputs[1:]) == tree.leaves()


def pushdown_rows_against_dense_tapes(pipeline, steps):
    """Each read segment's attach / stack_depths against `stack_tape.stack_tape` (the syntax module's dense tape,
    over tokens: sub-word pieces right-branching under their word), shifted by the BOS at input position 0."""
    seen = 0
    source = pipeline.epoch_source(0)
    for step in range(min(steps, len(source))):
        batch = source[step]
        T = pipeline.config.seq_len
        for row in np.flatnonzero(batch["seq_index"] >= 0):
            s = list(pipeline.encoded.source_index).index(batch["seq_index"][row])
            tree = pipeline.trees[batch["seq_index"][row]]
            inputs = pipeline.encoded.sequences[s][0]
            ids, word_index = pipeline.vocab.encode_with_alignment(tree.leaves())
            np.testing.assert_array_equal(inputs[1:], ids)
            dense = stack_tape.stack_tape(tree, nary="right", word_index=word_index if len(ids) != len(tree.leaves())
                                          else None)
            full_attach = np.concatenate([[0], dense.attach + 1])  # BOS shifts
            full_depths = np.zeros((len(inputs), len(inputs)), np.int64)
            full_depths[1:, 1:] = dense.depths
            k = batch["segment_index"][row]
            positions = np.arange(k * T, min((k + 1) * T, len(inputs)))
            m = positions.size
            np.testing.assert_array_equal(batch["attach"][row, :m], full_attach[positions])
            np.testing.assert_array_equal(batch["stack_depths"][row, :m, :m], full_depths[np.ix_(positions, positions)])
            assert not batch["stack_depths"][row, m:].any() and not batch["stack_depths"][row, :, m:].any()
            seen += 1
    return seen


def test_pushdown_segments_of_long_sentences():
    """Rows of 6 positions: most sentences take several segments; every segment reads its slice of the tape."""
    tree_list = corpora.builtin_treebank("train", 40, seed=5)
    pipeline = Pipeline(dataclasses.replace(SMALL, rule="pushdown", seq_len=6, mem_len=6), tree_list=tree_list)
    assert max(len(seq[0]) for seq in pipeline.encoded.sequences) > 12
    assert pushdown_rows_against_dense_tapes(pipeline, 12) >= 24


def test_pushdown_sub_word_pieces():
    """A SentencePiece vocabulary: the tape covers the pieces (the words' pieces right-branching), not the words."""
    tree_list = corpora.builtin_treebank("train", 60, seed=5)
    vocab = build_vocabulary([t.leaves() for t in tree_list], kind="sentencepiece", size=320)
    pipeline = Pipeline(dataclasses.replace(SMALL, rule="pushdown", seq_len=64), vocab, tree_list=tree_list)
    assert any(len(seq[0]) - 1 > len(t.leaves()) for seq, t in zip(pipeline.encoded.sequences, pipeline.trees))
    assert pushdown_rows_against_dense_tapes(pipeline, 4) >= 8


def test_txl_terminals_sentences_end_with_eos():
    """`<s> the dog barks </s>`: the last word predicts `</s>`, which predicts nothing (label 0, PAD)."""
    tree = trees.parse("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))")
    vocab = WordDictionary(["the", "dog", "barks"], ["NP", "S", "VP"])  # ids 4, 5, 6
    (sequence,) = encode_corpus([tree], vocab, dataclasses.replace(SMALL, rule="txl_terminals")).sequences
    inputs, inputs_ttypes, labels, labels_ttypes = sequence
    T = tt.TERMINAL
    assert inputs.tolist() == [vocab.bos_id, 4, 5, 6, EOS_ID] and EOS_ID == 2
    assert inputs_ttypes.tolist() == [tt.BOS, T, T, T, T]
    assert labels.tolist() == [4, 5, 6, EOS_ID, 0]
    assert labels_ttypes.tolist() == [T, T, T, T, tt.PAD]
    assert vocab.decode(inputs) == ["<s>", "the", "dog", "barks", "</s>"]
    # The other rules have no EOS: the syntactic ones end by closing the root; pushdown's tapes cover the words.
    for rule in ("tg", "txl_cc", "pushdown"):
        (other,) = encode_corpus([tree], vocab, dataclasses.replace(SMALL, rule=rule)).sequences
        assert EOS_ID not in other[0] and EOS_ID not in other[2], rule
        assert vocab.decode(other[2][-2:-1]) == ["S)" if rule != "pushdown" else "barks"], rule


@pytest.mark.parametrize("kind", ["words", "sentencepiece"])
def test_txl_terminals_vocabularies_and_pipeline_end_every_sentence_with_eos(small_trees, kind):
    """Whatever the vocabulary: `</s>` is not one of its words, and every sequence is `<s> pieces </s>`."""
    vocab = build_vocabulary([tokens_for_rule(t, "txl_terminals", pos_tags=True) for t in small_trees], kind=kind,
                             size=400)
    if kind == "words":
        assert "</s>" not in vocab.terminals
    pipeline = Pipeline(dataclasses.replace(SMALL, rule="txl_terminals"), vocab, tree_list=small_trees)
    for tree, (inputs, inputs_ttypes, labels, labels_ttypes) in zip(small_trees, pipeline.encoded.sequences):
        assert vocab.decode(inputs) == ["<s>", *tree.leaves(), "</s>"]
        assert np.count_nonzero(inputs == EOS_ID) == 1 and inputs_ttypes[-1] == tt.TERMINAL
        np.testing.assert_array_equal(labels[:-1], inputs[1:])
        np.testing.assert_array_equal(labels_ttypes[:-1], inputs_ttypes[1:])
        assert (labels[-1], labels_ttypes[-1]) == (0, tt.PAD)


def test_worker_processes_give_the_same_batches(small_trees):
    local = take(make(small_trees).iterator(), 4)
    workers = take(make(small_trees, num_workers=1).iterator(), 4)
    assert_batches_equal(local, workers)


def test_too_long_is_an_error_or_skipped_and_counted(small_trees):
    with pytest.raises(ValueError, match="over max_actions=20"):
        make(small_trees, max_actions=20)
    pipeline = make(small_trees, max_actions=20, on_too_long="skip")
    choe_charniak = __import__("tgjax").syntax.actions.choe_charniak
    lengths = [len(pipeline.vocab.encode(choe_charniak(t, pos_tags=True))) for t in small_trees]
    assert pipeline.encoded.skipped_too_long == sum(n > 20 for n in lengths) > 0
    assert len(pipeline.encoded.sequences) == sum(n <= 20 for n in lengths)


def test_bad_config_and_state():
    with pytest.raises(ValueError, match=r"unknown pipeline config key\(s\) \['seq_length'\]"):
        PipelineConfig.from_dict({"seq_length": 3})
    with pytest.raises(ValueError, match="rule: unknown 'tx'"):
        PipelineConfig(rule="tx")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        PipelineConfig(batch_size=0)
    with pytest.raises(FileNotFoundError, match="no such treebank file"):
        Pipeline(PipelineConfig(corpus="/nonexistent/train.txt"))


@given(st.lists(st.integers(1, 6), min_size=1, max_size=40), st.integers(1, 8), st.integers(0, 99))
def test_deal_to_rows_keeps_every_segment_and_balances(num_segments, num_rows, seed):
    rows = deal_to_rows(np.array(num_segments), num_rows, np.random.default_rng(seed))
    reads = sorted(r for row in rows for r in row)
    assert reads == sorted((s, k) for s, n in enumerate(num_segments) for k in range(n))
    loads = [len(r) for r in rows]
    # Greedy to the least-loaded row: rows differ by at most the longest sequence.
    assert max(loads) - min(loads) <= max(num_segments)


def test_seqio_task_yields_the_encoded_sequences(small_trees):
    pytest.importorskip("seqio", reason="the seqio extra is not installed")
    import seqio

    from tgjax.data import seqio_tasks

    config = dataclasses.replace(SMALL, num_sentences=20)
    pipeline = Pipeline(config)
    seqio_tasks.register_treebank_task("tgjax_test_builtin", config, pipeline.vocab)
    ds = seqio.get_mixture_or_task("tgjax_test_builtin").get_dataset(
        sequence_length=None, split="train", shuffle=False)
    examples = list(ds.as_numpy_iterator())
    assert len(examples) == 20
    for example, sequence in zip(examples, pipeline.encoded.sequences):
        for name, value in zip(seqio_tasks.FEATURES, sequence):
            np.testing.assert_array_equal(example[name], value)


def test_treebank_file_with_bad_trees_skip_and_count(tmp_path, capsys):
    from tgjax import cli

    path = tmp_path / "bank.txt"
    path.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))\n(S (NP (DT a) (NN cat)\n"
                    "(S (NP (NNS birds)) (VP (VBP sing)))\n")
    with pytest.raises(ValueError, match=r"bank.txt:3:1: expected .\). to close .\(NP. opened at 2:4"):
        Pipeline(PipelineConfig(corpus=str(path), batch_size=2, seq_len=32, mem_len=32))
    pipeline = Pipeline(PipelineConfig(corpus=str(path), batch_size=2, seq_len=32, mem_len=32, on_bad_tree="skip"))
    assert len(pipeline.trees) == 2 and pipeline.read_report.num_skipped == 1
    assert cli.main(["data", "stats", "--corpus", str(path), "--on-bad-tree", "skip", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 malformed trees skipped" in out and "bank.txt:3:1" in out


def test_tale_of_two_cities_valid_through_the_pipeline(shared_data):
    path = shared_data / "tale_of_two_cities" / "valid.txt"
    pipeline = Pipeline(PipelineConfig(corpus=str(path), batch_size=8, seq_len=256, mem_len=256))
    assert len(pipeline.encoded.sequences) == 346
    source = pipeline.epoch_source(0)
    segments = sum(int((source[step]["seq_index"] >= 0).sum()) for step in range(len(source)))
    rule = masks.TGMasking(256, 256)
    assert segments == len(rule.compact_chunks_many(pipeline.encoded.sequences)[1])
