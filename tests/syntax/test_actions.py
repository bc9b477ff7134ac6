"""Choe–Charniak actions, token types, documents and the TG transform: the paper's Figure 2, errors, properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import random_bare_trees, random_trees
from tgjax.syntax import actions as A
from tgjax.syntax import token_types as tt
from tgjax.syntax.trees import Tree, parse, strip_preterminals

# Figure 2 of Sartran et al. (2022), with the POS tags the linearisation drops.
FIG2_TREE = "(S (NP (DT the) (JJ blue) (NN bird)) (VP (VBZ sings)))"
FIG2_ACTIONS = ["(S", "(NP", "the", "blue", "bird", "NP)", "(VP", "sings", "VP)", "S)"]
# (token, type, label) of the 14 positions after the TG transform.
FIG2_ROWS = [
    ("<s>", tt.BOS, "(S"),
    ("(S", tt.OPENING_NT, "(NP"),
    ("(NP", tt.OPENING_NT, "the"),
    ("the", tt.TERMINAL, "blue"),
    ("blue", tt.TERMINAL, "bird"),
    ("bird", tt.TERMINAL, "NP)"),
    ("NP)", tt.CNT1, None),
    ("NP)", tt.CNT2, "(VP"),
    ("(VP", tt.OPENING_NT, "sings"),
    ("sings", tt.TERMINAL, "VP)"),
    ("VP)", tt.CNT1, None),
    ("VP)", tt.CNT2, "S)"),
    ("S)", tt.CNT1, None),
    ("S)", tt.CNT2, None),
]
VOCAB = {"<pad>": 0, "<s>": 1, "(S": 2, "(NP": 3, "the": 4, "blue": 5, "bird": 6, "NP)": 7,
         "(VP": 8, "sings": 9, "VP)": 10, "S)": 11, "<unk>": 12}


# ---------------------------------------------------------------------------
# Linearisation
# ---------------------------------------------------------------------------


def test_choe_charniak_figure_2():
    assert A.choe_charniak(parse(FIG2_TREE), pos_tags=True) == FIG2_ACTIONS
    assert A.tree_from_choe_charniak(FIG2_ACTIONS).to_string() == "(S (NP the blue bird) (VP sings))"


def test_choe_charniak_of_trees_without_preterminals():
    bare = parse("(S (NP John) (VP (V sings) (ADVP loudly)))", normalise=False)
    # As a POS-tagged tree, (NP John) and (V sings) are pre-terminals and vanish ...
    assert A.choe_charniak(bare, pos_tags=True) == ["(S", "John", "(VP", "sings", "loudly", "VP)", "S)"]
    # ... as a tree without POS tags, every node is a constituent.
    assert A.choe_charniak(bare, pos_tags=False) == [
        "(S", "(NP", "John", "NP)", "(VP", "(V", "sings", "V)", "(ADVP", "loudly", "ADVP)", "VP)", "S)"
    ]
    # The root is never dropped, and mixed children are terminals in place.
    assert A.choe_charniak(parse("(UH hello)"), pos_tags=True) == ["(UH", "hello", "UH)"]
    assert A.choe_charniak(Tree("S", ["a", Tree("NP", [Tree("DT", ["b"]), "c"])]), pos_tags=True) == [
        "(S", "a", "(NP", "b", "c", "NP)", "S)"
    ]


def test_choe_charniak_rejects_tokens_that_would_not_read_back():
    for bad in (Tree("S", [Tree("NN", ["<s>"])]), Tree("S", ["(x"]), Tree("S", ["x)"]), Tree("S", ["a b"]),
                Tree("N P", ["a"]), Tree("", ["a"])):
        with pytest.raises(ValueError):
            A.choe_charniak(bad, pos_tags=True)


@pytest.mark.parametrize(
    "actions, position, message",
    [
        (["(S", "(NP", "a", "VP)", "S)"], 3, "closing 'VP)' does not match the open constituent '(NP' at position 1"),
        (["(S", "a", "S)", "S)"], 3, "closing 'S)' with no constituent open"),
        (["NP)"], 0, "closing 'NP)' with no constituent open"),
        (["(S", "(NP", "a", "NP)"], 4, "end of sequence with '(S' (position 0) still open"),
        (["a", "(S", "b", "S)"], 0, "terminal 'a' outside any constituent"),
        (["(S", "a", "S)", "b"], 3, "terminal 'b' outside any constituent"),
        (["(S", "a", "S)", "(S", "b", "S)"], 3, "'(S' starts a second tree; expected one"),
        (["<s>", "(S", "a", "S)"], 0, "'<s>' (BOS) is not an action; strip BOS and padding first"),
        (["(S", "a", "S)", "<pad>"], 3, "'<pad>' (PAD) is not an action; strip BOS and padding first"),
        ([], 0, "empty action sequence; expected one tree"),
    ],
)
def test_malformed_actions_name_the_position(actions, position, message):
    with pytest.raises(A.ActionSequenceError) as info:
        A.tree_from_choe_charniak(actions)
    assert isinstance(info.value, ValueError)
    assert info.value.position == position
    assert str(info.value) == f"position {position}: {message}"


def test_placeholder_is_a_terminal():
    tree = A.tree_from_choe_charniak(["(S", "<unk>", "dog", "S)"])
    assert tree == Tree("S", ["<unk>", "dog"])


# ---------------------------------------------------------------------------
# Token types
# ---------------------------------------------------------------------------


def test_token_type():
    expected = {
        "(S": tt.OPENING_NT, "(NP": tt.OPENING_NT, "S)": tt.CLOSING_NT, "-LRB-)": tt.CLOSING_NT,
        "<s>": tt.BOS, "<pad>": tt.PAD, "<unk>": tt.PLACEHOLDER,
        "the": tt.TERMINAL, "(": tt.TERMINAL, ")": tt.TERMINAL, "-LRB-": tt.TERMINAL, ":)x": tt.TERMINAL,
    }
    assert {tok: A.token_type(tok) for tok in expected} == expected
    types = A.token_types(list(expected))
    assert types.dtype == np.int32
    assert types.tolist() == list(expected.values())
    assert A.token_types([]).shape == (0,)
    assert A.label_of("(NP") == "NP" == A.label_of("NP)")
    with pytest.raises(ValueError):
        A.label_of("dog")


# ---------------------------------------------------------------------------
# The TG transform
# ---------------------------------------------------------------------------


def test_tg_transform_figure_2_every_row():
    rows = A.tg_transform(FIG2_ACTIONS)
    assert len(rows) == 14
    assert [(r.token, r.ttype, r.label) for r in rows] == FIG2_ROWS
    label_types = [tt.PAD if label is None else A.token_type(label) for _, _, label in FIG2_ROWS]
    assert [r.label_ttype for r in rows] == label_types
    assert label_types[:3] == [tt.OPENING_NT, tt.OPENING_NT, tt.TERMINAL]
    table = A.format_tg_table(rows).splitlines()
    assert table[1].split() == ["0", "<s>", "BOS", "(S"]
    assert table[7].split() == ["6", "NP)", "CNT1"]
    assert table[14].split() == ["13", "S)", "CNT2"]


def test_actions_to_arrays_figure_2():
    inputs, inputs_ttypes, labels, labels_ttypes = A.actions_to_arrays(FIG2_ACTIONS, VOCAB)
    assert inputs.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert inputs_ttypes.tolist() == [1, 2, 2, 3, 3, 3, 4, 2, 3, 4, 4]
    assert labels.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0]
    assert labels_ttypes.tolist() == [2, 2, 3, 3, 3, 4, 2, 3, 4, 4, 0]
    assert all(a.dtype == np.int32 for a in (inputs, inputs_ttypes, labels, labels_ttypes))
    # Duplication of these arrays is the string-level transform, id for id.
    dup = tt.duplicate_closing_nts(inputs, inputs_ttypes, labels, labels_ttypes)
    assert [a.tolist() for a in dup] == [
        [VOCAB[tok] for tok, _, _ in FIG2_ROWS],
        [ttype for _, ttype, _ in FIG2_ROWS],
        [0 if label is None else VOCAB[label] for _, _, label in FIG2_ROWS],
        [tt.PAD if label is None else A.token_type(label) for _, _, label in FIG2_ROWS],
    ]


def test_actions_to_arrays_feed_the_tg_masks():
    from tgjax.syntax import masks

    arrays = A.actions_to_arrays(FIG2_ACTIONS, VOCAB)
    (chunk,) = masks.TGMasking(seq_len=14, mem_len=14).chunks(*arrays)
    assert chunk.inputs.tolist() == [VOCAB[tok] for tok, _, _ in FIG2_ROWS]
    assert chunk.inputs_ttypes.tolist() == [ttype for _, ttype, _ in FIG2_ROWS]
    assert chunk.depth.tolist() == [0, 1, 2, 3, 3, 3, 2, 2, 2, 3, 2, 2, 1, 1]


def test_actions_to_arrays_unknown_tokens():
    inputs, inputs_ttypes, _, labels_ttypes = A.actions_to_arrays(["(S", "parrot", "S)"], VOCAB)
    assert inputs.tolist() == [1, 2, 12, 11]
    assert inputs_ttypes.tolist() == [tt.BOS, tt.OPENING_NT, tt.PLACEHOLDER, tt.CLOSING_NT]
    assert labels_ttypes.tolist() == [tt.OPENING_NT, tt.PLACEHOLDER, tt.CLOSING_NT, tt.PAD]
    with pytest.raises(KeyError, match="position 1: 'parrot'"):
        A.actions_to_arrays(["(S", "parrot", "S)"], VOCAB, unk_token=None)
    with pytest.raises(KeyError, match="<s>"):
        A.actions_to_arrays(["(S", "a", "S)"], {"(S": 0, "a": 1, "S)": 2})


def test_tree_from_tg_figure_2_and_errors():
    tokens = [tok for tok, _, _ in FIG2_ROWS]
    types = [ttype for _, ttype, _ in FIG2_ROWS]
    assert A.actions_from_tg(tokens, types) == FIG2_ACTIONS
    assert A.actions_from_tg(tokens + ["<pad>", "<pad>"]) == FIG2_ACTIONS
    assert A.tree_from_tg(tokens).to_string() == "(S (NP the blue bird) (VP sings))"
    with pytest.raises(A.ActionSequenceError, match="position 6: closing 'NP\\)' \\(CNT1\\) is not followed"):
        A.actions_from_tg(tokens[:7] + tokens[8:])
    swapped = types[:6] + [tt.CNT2, tt.CNT1] + types[8:]
    with pytest.raises(A.ActionSequenceError, match="position 6: closing pair 'NP\\)' has types \\(14, 4\\)"):
        A.actions_from_tg(tokens, swapped)
    with pytest.raises(A.ActionSequenceError, match="position 3: 'the' has type 2"):
        A.actions_from_tg(tokens, types[:3] + [tt.OPENING_NT] + types[4:])
    with pytest.raises(ValueError, match="14 tokens but 13"):
        A.actions_from_tg(tokens, types[:-1])


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


def test_document_mode_by_hand():
    first, second = parse("(S (NP (PRP It)) (VP (VBD rained)))"), parse("(FRAG (INTJ (UH Oh)))")
    actions = A.document_actions([first, second], pos_tags=True)
    assert actions == ["(DOC", "(S", "(NP", "It", "NP)", "(VP", "rained", "VP)", "S)",
                       "(FRAG", "(INTJ", "Oh", "INTJ)", "FRAG)", "DOC)"]
    assert A.split_document_actions(actions) == [actions[1:9], actions[9:14]]
    sentences = A.split_document(A.tree_from_choe_charniak(actions))
    assert sentences == [strip_preterminals(first), strip_preterminals(second)]
    assert A.document_actions([first], pos_tags=True, label="TEXT")[0] == "(TEXT"
    with pytest.raises(ValueError, match="expected a document labelled 'DOC', found 'S'"):
        A.split_document_actions(A.choe_charniak(first, pos_tags=True))
    with pytest.raises(ValueError, match="found the word 'stray'"):
        A.split_document(Tree("DOC", [first, "stray"]))
    with pytest.raises(ValueError, match="at least one sentence"):
        A.make_document([])


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------


@settings(deadline=None)
@given(random_trees(max_depth=5, max_children=4))
def test_choe_charniak_inverse_is_the_tree_without_preterminals(tree):
    actions = A.choe_charniak(tree, pos_tags=True)
    assert A.tree_from_choe_charniak(actions) == strip_preterminals(tree)
    assert [a for a in actions if A.token_type(a) in (tt.TERMINAL, tt.PLACEHOLDER)] == tree.leaves()


@settings(deadline=None)
@given(random_bare_trees(max_depth=5, max_children=4))
def test_choe_charniak_round_trip_without_preterminals(tree):
    actions = A.choe_charniak(tree, pos_tags=False)
    assert A.tree_from_choe_charniak(actions) == tree
    types = A.token_types(actions)
    assert (types == tt.OPENING_NT).sum() == (types == tt.CLOSING_NT).sum()


@settings(deadline=None)
@given(st.lists(random_trees(max_depth=4, max_children=3), min_size=1, max_size=4))
def test_document_split_join_round_trip(sentences):
    actions = A.document_actions(sentences, pos_tags=True)
    assert A.split_document_actions(actions) == [A.choe_charniak(s, pos_tags=True) for s in sentences]
    document = A.tree_from_choe_charniak(actions)
    assert A.split_document(document) == [strip_preterminals(s) for s in sentences]


@settings(deadline=None)
@given(random_trees(max_depth=5, max_children=4))
def test_tg_transform_round_trip(tree):
    actions = A.choe_charniak(tree, pos_tags=True)
    rows = A.tg_transform(actions)
    num_closing = sum(A.token_type(a) == tt.CLOSING_NT for a in actions)
    assert len(rows) == 1 + len(actions) + num_closing
    tokens, types = [r.token for r in rows], [r.ttype for r in rows]
    assert A.actions_from_tg(tokens, types) == actions
    assert A.tree_from_tg(tokens, types) == strip_preterminals(tree)
    # Labels are the next original action: CNT1 and the last position have none.
    assert [r.label for r in rows if r.ttype != tt.CNT1] == actions + [None]
    # The integer arrays, duplicated, are the same sequence as the string rows.
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(["<pad>", "<s>", *actions]))}
    dup = tt.duplicate_closing_nts(*A.actions_to_arrays(actions, vocab))
    assert dup[0].tolist() == [vocab[t] for t in tokens]
    assert dup[1].tolist() == types
    assert dup[2].tolist() == [0 if r.label is None else vocab[r.label] for r in rows]
    assert dup[3].tolist() == [r.label_ttype for r in rows]
