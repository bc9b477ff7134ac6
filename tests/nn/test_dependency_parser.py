"""tgjax.nn.dependency_parser: the head score against its formula (with a NumPy BiLSTM written
from PyTorch's LSTM equations), row normalisation, padding, and the tag mixture."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.dependency_parser import DependencyParser, reverse_valid


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(x, w_ih, w_hh, b):
    """x [T, D] -> h [T, H], gates i, f, g, o, from zero state."""
    H = w_hh.shape[0]
    h, c = np.zeros(H), np.zeros(H)
    out = []
    for t in range(len(x)):
        gates = x[t] @ w_ih + h @ w_hh + b
        i, f, g, o = gates[:H], gates[H:2 * H], gates[2 * H:3 * H], gates[3 * H:]
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out)


def numpy_head_probs(parser, tokens, length):
    """P [n, n] for one unpadded sentence of `length` tokens, from the module's parameters."""
    p = lambda v: np.asarray(v[...], np.float64)  # noqa: E731
    h = p(parser.embedding)[tokens[:length]]
    for forward, backward in parser.lstm:
        ahead = numpy_lstm(h, p(forward["w_ih"]), p(forward["w_hh"]), p(forward["b"]))
        behind = numpy_lstm(h[::-1], p(backward["w_ih"]), p(backward["w_hh"]), p(backward["b"]))[::-1]
        h = np.concatenate([ahead, behind], axis=-1)
    projected = h @ p(parser.w_f) + p(parser.b_f)
    H = parser.hidden_size
    parent, child = projected[:, :H], projected[:, H:]
    logits = child @ parent.T / np.sqrt(parser.embedding_size)
    logits -= logits.max(-1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


def make_parser(num_layers=2, **kwargs):
    parser = DependencyParser(11, embedding_size=6, hidden_size=5, num_layers=num_layers, rngs=nnx.Rngs(0), **kwargs)
    parser.b_f[...] = jnp.asarray(np.random.default_rng(1).normal(size=parser.b_f.shape), jnp.float32)
    return parser


TOKENS = np.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 0, 0, 0]])
VALID = np.array([[True] * 6, [True] * 3 + [False] * 3])


def test_head_probabilities_match_the_formula_per_sentence_and_ignore_padding():
    parser = make_parser()
    P = np.asarray(parser(jnp.asarray(TOKENS), jnp.asarray(VALID)))
    for b, length in enumerate(VALID.sum(1)):
        want = numpy_head_probs(parser, TOKENS[b], length)
        np.testing.assert_allclose(P[b, :length, :length], want, rtol=2e-5, atol=1e-6)
    # Rows sum to one over the valid keys; padded keys get exactly 0; the diagonal is allowed.
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-5)
    assert np.all(P[1, :, 3:] == 0.0)
    assert np.all(np.diagonal(P, axis1=1, axis2=2)[0] > 0)


def test_scaled_bilinear_score():
    parser = make_parser()
    tokens, valid = jnp.asarray(TOKENS), jnp.asarray(VALID)
    h = np.asarray(parser.encode(tokens, valid, deterministic=True), np.float64)
    projected = h @ np.asarray(parser.w_f[...]) + np.asarray(parser.b_f[...])
    parent, child = projected[..., :5], projected[..., 5:]
    want = np.einsum("bic,bjc->bij", child, parent) / np.sqrt(6)  # the embedding size, not the half size
    got = np.asarray(parser.head_logits(tokens, valid))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1, :, :3], want[1, :, :3], rtol=1e-5, atol=1e-6)
    assert np.all(got[1, :, 3:] == np.finfo(np.float32).min)


def test_reverse_valid_reverses_only_the_real_tokens():
    x = jnp.arange(12).reshape(2, 6)[..., None]
    got = np.asarray(reverse_valid(x, jnp.array([6, 3])))[..., 0]
    assert got.tolist() == [[5, 4, 3, 2, 1, 0], [8, 7, 6, 9, 10, 11]]


def test_tag_mixture_starts_uniform_and_changes_the_embedding():
    parser = make_parser(num_layers=1, num_tags=3)
    tokens = jnp.asarray(TOKENS)
    e = np.asarray(parser.embed(tokens))
    # T = 0: softmax over 4 entries is 1/4 each; the null tag is dropped, so 1/4 of each tag vector.
    want = np.asarray(parser.embedding[...])[TOKENS] + 0.25 * np.asarray(parser.tag_embedding[...]).sum(0)
    np.testing.assert_allclose(e, want, rtol=1e-6, atol=1e-7)
    assert not np.any(np.asarray(parser.tag_logits[...]))
    # A word whose distribution puts all mass on tag 2 gets exactly tag 2's vector.
    parser.tag_logits[...] = parser.tag_logits[...].at[3].set(jnp.array([-1e9, -1e9, 50.0, -1e9]))
    e = np.asarray(parser.embed(jnp.array([[3]])))
    np.testing.assert_allclose(e[0, 0], np.asarray(parser.embedding[...])[3] + np.asarray(parser.tag_embedding[...])[1],
                               rtol=1e-6)


def test_gradients_reach_the_parser_and_dropout_follows_the_mode():
    parser = make_parser(num_layers=1, dropout=0.5)
    tokens, valid = jnp.asarray(TOKENS), jnp.asarray(VALID)

    @nnx.jit
    def grads_of(parser):
        return nnx.grad(lambda m: -jnp.sum(jnp.log(m(tokens, valid, deterministic=True)[0, :, 0] + 1e-9)))(parser)

    grads = grads_of(parser)
    assert np.any(np.asarray(grads["embedding"][...])) and np.any(np.asarray(grads["w_f"][...]))
    run = nnx.jit(lambda m, deterministic: m(tokens, valid, deterministic=deterministic), static_argnums=1)
    assert np.allclose(run(parser, True), run(parser, True))
    assert not np.allclose(run(parser, False), run(parser, False))  # a new dropout draw per call
