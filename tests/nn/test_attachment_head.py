"""The attachment head against a per-pair formula (Fig. 8), its legal-slot masks and switches.

The oracle loops over (position i, candidate j), forms the 3-D key
MLP_c([k_j; β[W_i[j]]]) for that pair, and scores it, in float64; the module
computes MLP_c once per (token, depth value) and gathers.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.nn.attachment_head import (
    AttachmentHead,
    attachment_log_probs,
    attachment_loss,
    legal_attachments,
    slot_legality,
)
from tgjax.nn.attention import sinusoidal_encoding
from tgjax.syntax import stack_tape as stt

D_MODEL, EMBED, DEPTHS = 8, 6, 4


def f64(a):
    return np.asarray(a, np.float64)


def mlp(module, x):
    return np.maximum(x @ f64(module.w1[...]) + f64(module.b1[...]), 0) @ f64(module.w2[...]) + f64(module.b2[...])


def oracle_logits(head: AttachmentHead, hidden, next_emb, tape) -> np.ndarray:
    hidden, next_emb = f64(hidden), f64(next_emb)
    B, T, _ = hidden.shape
    beta = f64(head.depth_embedding[...])
    out = np.full((B, T, T + 1), np.nan)
    for b in range(B):
        for i in range(T):
            q_proj = hidden[b, i] @ f64(head.query_proj[...])
            q = mlp(head.query_mlp, np.r_[q_proj, next_emb[b, i]])
            source = q_proj if head.self_key_input == "projection" else q
            k_self = mlp(head.self_key_mlp, np.r_[source, next_emb[b, i]])
            for j in range(i + 1):
                k_j = hidden[b, j] @ f64(head.key_proj[...])
                depth = min(int(tape[b, i, j]), head.num_depths - 1)
                out[b, i, j] = q @ mlp(head.key_depth_mlp, np.r_[k_j, beta[depth]])
            out[b, i, i + 1] = q @ k_self
            if head.rel_key is not None:
                for c in range(i + 2):
                    pe = sinusoidal_encoding(np.array([i + 1 - c]), D_MODEL)[0].astype(np.float64)
                    out[b, i, c] += q @ (pe @ f64(head.rel_key[...]))
            if head.scaled:
                out[b, i, : i + 2] /= math.sqrt(head.key_dim)
    return out


def make(seed=0, **kwargs):
    return AttachmentHead(D_MODEL, EMBED, num_depths=DEPTHS, depth_dim=5, key_dim=12, rngs=nnx.Rngs(seed), **kwargs)


def inputs(seed, B=2, T=5):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(B, T, D_MODEL)).astype(np.float32)
    nxt = rng.normal(size=(B, T, EMBED)).astype(np.float32)
    tape = np.tril(rng.integers(0, DEPTHS + 2, size=(B, T, T))).astype(np.int32)
    return hidden, nxt, tape


@pytest.mark.parametrize("switches", [
    {},
    {"scaled": False, "self_key_input": "query", "relative_positions": True},
])
def test_matches_per_pair_formula(switches):
    head = make(**switches)
    hidden, nxt, tape = inputs(1)
    got = np.asarray(head(jnp.asarray(hidden), jnp.asarray(nxt), jnp.asarray(tape)))
    want = oracle_logits(head, hidden, nxt, tape)
    defined = ~np.isnan(want)
    np.testing.assert_allclose(got[defined], want[defined], rtol=2e-4, atol=2e-4)


def test_query_chunks_give_the_same_scores_and_gradients():
    hidden, nxt, tape = (jnp.asarray(a) for a in inputs(4, T=7))
    whole, chunked = make(), make(query_chunk=3)  # 7 rows: blocks of 3, 3, 1 (+2 padding)
    np.testing.assert_allclose(np.asarray(chunked(hidden, nxt, tape)), np.asarray(whole(hidden, nxt, tape)),
                               rtol=1e-5, atol=1e-5)
    grad = lambda head: jax.grad(lambda h: jnp.sum(jnp.tanh(head(h, nxt, tape))))(hidden)  # noqa: E731
    np.testing.assert_allclose(np.asarray(grad(chunked)), np.asarray(grad(whole)), rtol=1e-4, atol=1e-5)


def test_each_switch_changes_what_it_should():
    hidden, nxt, tape = (jnp.asarray(a) for a in inputs(2))
    base = np.asarray(make()(hidden, nxt, tape))
    T = base.shape[1]
    token_slots = np.tril(np.ones((T, T + 1), bool))  # c <= i
    shift_slots = np.eye(T, T + 1, k=1, dtype=bool)
    # No scaling: every slot grows by sqrt(key_dim), nothing else changes.
    np.testing.assert_allclose(np.asarray(make(scaled=False)(hidden, nxt, tape))[:, token_slots | shift_slots],
                               base[:, token_slots | shift_slots] * math.sqrt(12), rtol=1e-4, atol=1e-5)
    # k_self from the query: only the shift slot moves.
    other = np.asarray(make(self_key_input="query")(hidden, nxt, tape))
    np.testing.assert_allclose(other[:, token_slots], base[:, token_slots], rtol=1e-5, atol=1e-6)
    assert not np.allclose(other[:, shift_slots], base[:, shift_slots])
    # The relative-position term moves every slot.
    rel = np.asarray(make(relative_positions=True)(hidden, nxt, tape))
    assert not np.isclose(rel[:, token_slots], base[:, token_slots]).any()
    with pytest.raises(ValueError, match="self_key_input"):
        make(self_key_input="both")


@st.composite
def binary_trees(draw, max_leaves=16):
    n = draw(st.integers(1, max_leaves))

    def build(lo, hi):
        if lo == hi:
            return lo
        mid = draw(st.integers(lo, hi - 1))
        return (build(lo, mid), build(mid + 1, hi))

    return build(0, n - 1)


# "The dog is happy": attach = [0, 0, 2, 1] (dog -> The, is shifts, happy -> dog).
DOG_ATTACH = np.array([0, 0, 2, 1])


def test_legal_candidates_the_dog_is_happy():
    """By hand: The {The}; dog {The, dog}; is {[The dog]=1, is}; happy {dog, is, happy}, not The (Fig. 2)."""
    want = np.array([[1, 0, 0, 0],
                     [1, 1, 0, 0],
                     [0, 1, 1, 0],
                     [0, 1, 1, 1]], bool)
    np.testing.assert_array_equal(np.asarray(legal_attachments(jnp.asarray(DOG_ATTACH[None])))[0], want)


# <s> The dog is happy <eos>: the data's layout, ROOT first and <eos> attaching to it.
ROOTED_DOG_ATTACH = np.array([0, 1, 1, 3, 2, 0])


def legal_sets(legal: np.ndarray) -> list[set[int]]:
    return [set(np.flatnonzero(row).tolist()) for row in legal]


def test_the_root_rule_the_dog_is_happy():
    """By hand: no word may take ROOT (slot 0), though it is on the stack; <eos> takes ROOT alone."""
    legal = np.asarray(slot_legality(jnp.asarray(ROOTED_DOG_ATTACH[None])))[0]
    assert legal_sets(legal) == [{1}, {1, 2}, {2, 3}, {2, 3, 4}, {0}]


def test_the_root_rule_in_a_window_of_two_sentences():
    """<s> a b <eos> <s> c d <eos>: the second <s> shifts, c cannot reach the first sentence, <eos> its own ROOT."""
    attach = np.array([0, 1, 1, 0, 4, 5, 5, 4])
    roots = np.isin(np.arange(8), [0, 4])
    legal = np.asarray(slot_legality(jnp.asarray(attach[None]), jnp.asarray(roots[None])))[0]
    assert legal_sets(legal) == [{1}, {1, 2}, {0}, {4}, {5}, {5, 6}, {4}]


@settings(max_examples=20, deadline=None)
@given(tree=binary_trees(max_leaves=12))
def test_training_legality_is_the_searchs(tree):
    """`slot_legality` (training's softmax) equals the search's and the sampler's sets (`allowed_slots`)."""
    from tgjax.infer.pushdown_oracle import allowed_slots

    attach = np.r_[0, stt.attachments(tree) + 1, 0]
    n = attach.size
    padded = np.r_[attach, np.arange(n, 16)]  # one compile for every example
    legal = np.asarray(slot_legality(jnp.asarray(padded[None])))[0]
    tape = stt.IncrementalStackTape()
    tape.step(0)
    for k in range(1, n):
        assert legal_sets(legal[k - 1:k])[0] == set(allowed_slots(tape.candidates(), k, final=k == n - 1).tolist())
        assert legal[k - 1, attach[k]]
        tape.step(int(attach[k]))


@settings(max_examples=30, deadline=None)
@given(tree=binary_trees())
def test_legal_candidates_match_the_stack(tree):
    """Every row equals the incremental stack's candidates, and the gold label is always legal."""
    attach = stt.attachments(tree)
    # Padded to 16 with shifts (one compile for every example); padding never pops a real element.
    padded = np.r_[attach, np.arange(len(attach), 16)]
    legal = np.asarray(legal_attachments(jnp.asarray(padded[None])))[0]
    tape = stt.IncrementalStackTape()
    for k, r in enumerate(attach):
        want = np.zeros(16, bool)
        want[tape.candidates()] = True
        np.testing.assert_array_equal(legal[k], want)
        assert legal[k, r]
        tape.step(int(r))


def test_masking_modes():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5, 6)).astype(np.float32))
    legal = slot_legality(jnp.asarray(ROOTED_DOG_ATTACH[None]))
    paper = np.asarray(attachment_log_probs(logits, legal))
    train = np.asarray(attachment_log_probs(logits, legal, normalise_over="causal", mask_illegal=False))
    infer = np.asarray(attachment_log_probs(logits, legal, normalise_over="causal", mask_illegal=True))
    legal_np = np.asarray(legal)[0]
    causal = np.tril(np.ones((5, 6), bool), k=1)
    # Paper: a distribution over the legal slots only.
    np.testing.assert_allclose(np.exp(paper[0]).sum(-1), 1.0, rtol=1e-6)
    assert np.isneginf(paper[0][~legal_np]).all()
    # Release training: over all causal slots, illegal ones included.
    np.testing.assert_allclose(np.exp(train[0]).sum(-1), 1.0, rtol=1e-6)
    assert np.isfinite(train[0][causal]).all() and np.isneginf(train[0][~causal]).all()
    # Release inference: the training values on legal slots, −inf elsewhere, not renormalised.
    np.testing.assert_allclose(infer[0][legal_np], train[0][legal_np])
    assert np.isneginf(infer[0][~legal_np]).all()
    row2 = np.exp(infer[0, 2]).sum()  # position 2 ("is" next): ROOT and "The" are illegal but causal
    assert row2 < 1 - 1e-4
    assert paper[0, 4, 0] == 0.0  # <eos> has one legal slot, ROOT
    # Loss: the mean of −log p(gold) over weighted positions, by hand.
    labels = jnp.asarray(ROOTED_DOG_ATTACH[None, 1:])
    weights = jnp.asarray([[0.0, 1.0, 1.0, 0.0, 0.0]])
    want = -(paper[0, 1, 1] + paper[0, 2, 3]) / 2
    np.testing.assert_allclose(float(attachment_loss(jnp.asarray(paper), labels, weights)), want, rtol=1e-6)
