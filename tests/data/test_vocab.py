"""Vocabularies: SentencePiece with non-terminal symbols, and the word dictionary."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import vocab as vb
from tgjax.syntax import token_types as tt

LABELS = ["S", "NP", "VP", "PP", "SBAR", "ADJP"]
NOUNS = ["bird", "birds", "dog", "dogs", "cat", "table", "garden", "teacher", "children"]
VERBS = ["sings", "sing", "barks", "sees", "saw", "likes", "runs", "sleeps"]
OTHER = ["the", "a", "blue", "happy", "small", "on", "in", "near", "that", "quickly", "."]
WORDS = NOUNS + VERBS + OTHER
LETTERS = sorted({c for w in WORDS for c in w} - {"."})


def _random_cc(rng: random.Random, depth: int = 0) -> list[str]:
    """One random well-formed CC sequence over LABELS and WORDS."""
    label = rng.choice(LABELS if depth else ["S"])
    out = [f"({label}"]
    for _ in range(rng.randint(1, 3)):
        if depth < 3 and rng.random() < 0.4:
            out += _random_cc(rng, depth + 1)
        else:
            out.append(rng.choice(WORDS))
    return out + [f"{label})"]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    rng = random.Random(0)
    lines = [" ".join(_random_cc(rng)) for _ in range(400)]
    lines.append("(S (NP the blue bird NP) (VP sings VP) S)")
    return lines


@pytest.fixture(scope="module")
def spm_bytes(corpus) -> vb.SentencePieceVocabulary:
    return vb.train_sentencepiece(corpus, 400, byte_fallback=True)


@pytest.fixture(scope="module")
def spm_plain(corpus) -> vb.SentencePieceVocabulary:
    return vb.train_sentencepiece(corpus, 120, byte_fallback=False)


@pytest.fixture(scope="module")
def word_dict(corpus) -> vb.WordDictionary:
    return vb.build_word_dictionary(corpus)


# Random CC sequences: a bracket skeleton with words drawn by `word_strategy`.
def cc_sequences(word_strategy):
    leaf = word_strategy.map(lambda w: [w])

    def node(children):
        return st.tuples(st.sampled_from(LABELS), st.lists(children, min_size=1, max_size=3)).map(
            lambda t: [f"({t[0]}"] + [tok for child in t[1] for tok in child] + [f"{t[0]})"]
        )

    return st.recursive(leaf, node, max_leaves=12).map(lambda toks: toks if len(toks) > 1 else ["(S", *toks, "S)"])


seen_words = st.sampled_from(WORDS)
# Never seen in training, but made of training characters.
new_words_seen_chars = st.text(alphabet=LETTERS, min_size=1, max_size=12)
# Anything a treebank word may be: no whitespace, no brackets (PTB escapes them), no "▁".
any_words = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), blacklist_characters="()\u2581"),
    min_size=1,
    max_size=10,
).filter(lambda w: not any(c.isspace() for c in w) and w not in vb.RESERVED_TOKENS)


def _check_types(vocab: vb.Vocabulary, tokens: list[str]) -> None:
    ids, source = vocab.encode_with_alignment(tokens)
    types = vocab.token_types(ids)
    for i, token in enumerate(tokens):
        mine = types[source == i]
        expected = vb.string_token_type(token)
        if expected in (tt.OPENING_NT, tt.CLOSING_NT):
            assert mine.tolist() == [expected], token  # one id per non-terminal
        elif mine.tolist() == [tt.PLACEHOLDER]:
            assert ids[source == i].tolist() == [vocab.unk_id]
        else:
            assert (mine == expected).all() and mine.size >= 1, token


# ---------------------------------------------------------------------------
# SentencePiece.


def test_spm_reserved_ids_nts_and_example(spm_bytes):
    vocab = spm_bytes
    sp = vocab.processor
    assert [sp.id_to_piece(i) for i in range(4)] == ["<PAD>", "<s>", "</s>", "<XXX>"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    line = "(S (NP the blue bird NP) (VP sings VP) S)"
    ids = vocab.encode(line)
    assert ids.dtype == np.int32
    assert vocab.decode(ids) == line.split()
    types = vocab.token_types(ids)
    assert types[0] == tt.OPENING_NT and types[-1] == tt.CLOSING_NT
    assert (types == tt.OPENING_NT).sum() == 3 and (types == tt.CLOSING_NT).sum() == 3
    # Every label has exactly one opening and one closing id.
    table = vocab.token_types(np.arange(vocab.size))
    assert (table == tt.OPENING_NT).sum() == len(LABELS) == (table == tt.CLOSING_NT).sum()
    assert table[:4].tolist() == [tt.PAD, tt.BOS, tt.TERMINAL, tt.PLACEHOLDER]


def test_spm_bos_eos_and_alignment(spm_bytes):
    ids, source = spm_bytes.encode_with_alignment(["(S", "birds", "S)"], add_bos=True, add_eos=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert source[0] == -1 and source[-1] == -1
    assert spm_bytes.decode(ids) == ["<s>", "(S", "birds", "S)", "</s>"]
    assert spm_bytes.token_types(ids)[[0, -1]].tolist() == [tt.BOS, tt.TERMINAL]


@settings(max_examples=80, deadline=None)
@given(cc_sequences(st.one_of(seen_words, new_words_seen_chars, any_words)))
def test_spm_byte_fallback_round_trips_anything(spm_bytes, tokens):
    assert spm_bytes.decode(spm_bytes.encode(tokens)) == tokens
    assert spm_bytes.decode(spm_bytes.encode(" ".join(tokens))) == tokens
    _check_types(spm_bytes, tokens)


@settings(max_examples=60, deadline=None)
@given(cc_sequences(st.one_of(seen_words, new_words_seen_chars)))
def test_spm_without_bytes_round_trips_words_of_seen_characters(spm_plain, tokens):
    assert spm_plain.decode(spm_plain.encode(tokens)) == tokens
    _check_types(spm_plain, tokens)


def test_spm_without_bytes_maps_unseen_characters_to_unk(spm_plain):
    ids = spm_plain.encode(["(NP", "the", "zebra", "NP)"])  # no "z" in training
    assert spm_plain.decode(ids) == ["(NP", "the", "<XXX>", "NP)"]
    assert spm_plain.token_types(ids).tolist() == [tt.OPENING_NT, tt.TERMINAL, tt.PLACEHOLDER, tt.CLOSING_NT]


def test_spm_words_split_into_pieces(spm_plain):
    ids, source = spm_plain.encode_with_alignment(["(S", "birdsdogscats", "S)"])
    assert (source == 1).sum() > 1  # a long unseen word takes several pieces
    assert spm_plain.decode(ids) == ["(S", "birdsdogscats", "S)"]


def test_spm_save_load(spm_bytes, tmp_path):
    path = tmp_path / "cc.model"
    spm_bytes.save(path)
    assert (tmp_path / "cc.model.json").exists()
    for loaded in (vb.SentencePieceVocabulary.load(path), vb.load_vocabulary(path)):
        assert isinstance(loaded, vb.SentencePieceVocabulary)
        line = "(S (NP a small teacher NP) (VP naps VP) S)"
        np.testing.assert_array_equal(loaded.encode(line), spm_bytes.encode(line))
        np.testing.assert_array_equal(loaded.token_types(np.arange(loaded.size)),
                                      spm_bytes.token_types(np.arange(spm_bytes.size)))


def test_spm_errors(spm_bytes, tmp_path):
    with pytest.raises(ValueError, match=r"token 1: unknown non-terminal '\(QP'"):
        spm_bytes.encode("(S (QP dogs QP) S)")
    with pytest.raises(ValueError, match="contains a non-terminal"):
        spm_bytes.encode(["(S", "x(NPy", "S)"])
    with pytest.raises(ValueError, match="without whitespace"):
        spm_bytes.encode(["(S", "two words", "S)"])
    with pytest.raises(ValueError, match="out of range"):
        spm_bytes.decode([spm_bytes.size])
    with pytest.raises(ValueError, match="empty training set"):
        vb.train_sentencepiece([], 100)
    with pytest.raises(ValueError, match="no words"):
        vb.train_sentencepiece(["(S S)"], 100)
    with pytest.raises(ValueError, match="too small"):
        vb.train_sentencepiece(["(S a b c S)"], 100, byte_fallback=True)
    (tmp_path / "orphan.model").write_bytes(b"x")
    with pytest.raises(ValueError, match="missing sidecar"):
        vb.load_vocabulary(tmp_path / "orphan.model")


# ---------------------------------------------------------------------------
# Word dictionary.


def test_word_dictionary_ranges(word_dict):
    d = word_dict
    assert d.tokens[:4] == list(vb.RESERVED_TOKENS)
    assert d.terminal_range == (4, 4 + len(WORDS))
    assert d.opening_range == (d.terminal_range[1], d.terminal_range[1] + len(LABELS))
    assert d.closing_range == (d.opening_range[1], d.size)
    types = d.token_types(np.arange(d.size))
    ranges = [(d.terminal_range, tt.TERMINAL), (d.opening_range, tt.OPENING_NT), (d.closing_range, tt.CLOSING_NT)]
    for (lo, hi), kind in ranges:
        assert (types[lo:hi] == kind).all()
        assert all(vb.string_token_type(d.tokens[i]) == kind for i in range(lo, hi))
    # A label's closing NT is at the same offset as its opening one.
    n_labels = len(LABELS)
    for label in LABELS:
        assert d.encode([f"{label})"])[0] == d.encode([f"({label}"])[0] + n_labels


@settings(max_examples=80, deadline=None)
@given(cc_sequences(st.one_of(seen_words, any_words)))
def test_word_dictionary_round_trip_or_unk(word_dict, tokens):
    decoded = word_dict.decode(word_dict.encode(tokens))
    expected = [t if (t in WORDS or vb.string_token_type(t) != tt.TERMINAL) else vb.UNK_TOKEN for t in tokens]
    assert decoded == expected
    assert len(word_dict.encode(tokens)) == len(tokens)  # one id per token
    _check_types(word_dict, tokens)


def test_word_dictionary_min_count_max_size_and_save(tmp_path):
    lines = ["(S a a a b b c S)", "(S (NP a b NP) S)"]
    d = vb.build_word_dictionary(lines, min_count=2)
    assert d.terminals == ["a", "b"]  # by count; c (seen once) is UNK
    assert d.decode(d.encode("(S c S)")) == ["(S", "<XXX>", "S)"]
    small = vb.build_word_dictionary(lines, max_size=4 + 1 + 4)  # reserved, one word, 2 labels x 2
    assert small.terminals == ["a"] and small.size == 9
    with pytest.raises(ValueError, match="too small"):
        vb.build_word_dictionary(lines, max_size=6)
    path = tmp_path / "dict.json"
    d.save(path)
    for loaded in (vb.WordDictionary.load(path), vb.load_vocabulary(path)):
        assert isinstance(loaded, vb.WordDictionary)
        assert loaded.tokens == d.tokens


def test_word_dictionary_errors(word_dict, tmp_path):
    with pytest.raises(ValueError, match=r"token 2: unknown non-terminal 'QP\)'"):
        word_dict.encode(["(S", "dogs", "QP)", "S)"])
    with pytest.raises(ValueError, match="empty training set"):
        vb.build_word_dictionary([])
    with pytest.raises(ValueError, match="empty training set"):
        vb.build_word_dictionary(["(S S)", ""])
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="expected 'tgjax.word_dictionary/1'"):
        vb.load_vocabulary(bad)
