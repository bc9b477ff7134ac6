"""One definition of a sequence's segments: the batcher deals exactly the segments the masking rule makes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data.pipeline import BatchSource, EncodedCorpus, PipelineConfig, segments_per_sequence
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

from ..syntax.test_masks import tg_sequences


def sequence(types, num_pad=0, first_id=10):
    """Inputs/labels 4-tuple for token types (BOS first), ids counting up from `first_id`, `num_pad` zeros after."""
    types = np.append(np.asarray(types), np.zeros(num_pad, int))
    ids = np.where(types != tt.PAD, first_id + np.arange(len(types)), 0)
    ids[0] = 1
    return ids, types, np.append(ids[1:], 0), np.append(types[1:], tt.PAD)


# (S a S) after BOS: 5 positions once the closing NT is duplicated, then 3 of padding.
PADDED = sequence([tt.BOS, tt.OPENING_NT, tt.TERMINAL, tt.CLOSING_NT], num_pad=3)
# (S a b c S): 7 positions after duplication, no padding.
UNPADDED = sequence([tt.BOS, tt.OPENING_NT, tt.TERMINAL, tt.TERMINAL, tt.TERMINAL, tt.CLOSING_NT], first_id=50)


def test_trailing_padding_takes_no_segment_by_hand():
    """T = 5: the padded sequence has 5 real positions (one segment), though 8 with its padding."""
    rule = masks.TGMasking(5, 5)
    assert len(rule.chunks(*PADDED)) == 1
    assert segments_per_sequence([PADDED, UNPADDED], rule).tolist() == [1, 2]
    # TXL reads no duplication: 4 real positions of 7, one segment of 4; 6 positions, two.
    txl = masks.TXLMasking(4, 4)
    assert segments_per_sequence([PADDED, UNPADDED], txl).tolist() == [1, 2]


def test_each_batch_row_reads_its_own_sequence_segments():
    """One row, two sequences: every step holds the segment (seq_index, segment_index) names, nothing else."""
    config = PipelineConfig(rule="tg", seq_len=5, mem_len=5, batch_size=1)
    encoded = EncodedCorpus([PADDED, UNPADDED], np.array([0, 1]))
    source = BatchSource(encoded, config, epoch=0)
    rule = masks.TGMasking(5, 5)
    expected = {s: rule.compact_chunks(*encoded.sequences[s]) for s in (0, 1)}
    reads = []
    for step in range(len(source)):
        batch = source[step]
        s, k = int(batch["seq_index"][0]), int(batch["segment_index"][0])
        reads.append((s, k))
        np.testing.assert_array_equal(batch["inputs"][0], expected[s][k].inputs)
        np.testing.assert_array_equal(batch["memory_pos"][0], expected[s][k].memory_pos)
    assert sorted(reads) == [(0, 0), (1, 0), (1, 1)]


@settings(max_examples=40, deadline=None)
@given(st.lists(tg_sequences(), min_size=1, max_size=6), st.integers(1, 9), st.booleans())
def test_num_segments_is_the_count_of_chunks(seqs, T, tg_rule):
    """For random sequences (some with trailing padding), per sequence and batched."""
    rule = masks.TGMasking(T, 4) if tg_rule else masks.TXLMasking(T, 4)
    counts = segments_per_sequence(seqs, rule)
    assert counts.tolist() == [len(rule.chunks(*s)) for s in seqs]
    _, seq_index = rule.compact_chunks_many(seqs)
    assert np.bincount(seq_index, minlength=len(seqs)).tolist() == counts.tolist()
