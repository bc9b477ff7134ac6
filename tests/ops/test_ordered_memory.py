"""tgjax.ops.ordered_memory against the equations of released-code.md §3.1 (tests/ops/om_oracle.py),
its pointer properties, padding, gradients, and tree extraction on hand-worked pointers."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ops.om_oracle import om_oracle
from tgjax.ops import ordered_memory_scan
from tgjax.ops.ordered_memory import (
    RELEASE,
    OrderedMemoryParams,
    initial_state,
    ordered_memory_step,
    pointer_distances,
    pointer_tree,
    project_inputs,
)

OPTIONS = ("n_slots", "query_key_norm", "mask_floor", "padding")
scan = jax.jit(ordered_memory_scan, static_argnames=OPTIONS + ("attention_dropout", "cell_dropout"))
project = jax.jit(project_inputs)


def random_params(rng, D_in, D, scale=1.0):
    shapes = dict(w_in=(D_in, D), b_in=(D,), ln_scale=(D,), ln_bias=(D,), w_q=(D, D), b_q=(D,), w_k=(D, D),
                  b_k=(D,), ln_q_scale=(D,), ln_q_bias=(D,), ln_k_scale=(D,), ln_k_bias=(D,), w_score=(D,),
                  b_score=(), w_1=(2 * D, 4 * D), b_1=(4 * D,), w_2=(4 * D, 4 * D), b_2=(4 * D,))
    params = {name: rng.normal(size=shape) * scale for name, shape in shapes.items()}
    for name in ("ln_scale", "ln_q_scale", "ln_k_scale"):
        params[name] = 1.0 + 0.3 * rng.normal(size=(D,))
    # Scores large enough that pointers are neither uniform nor one-hot.
    params["w_score"] = params["w_score"] * 3.0
    return params


def as_params(params):
    return OrderedMemoryParams(**{k: np.asarray(v) for k, v in params.items()})


def random_valid(rng, B, T, kind):
    valid = np.ones((B, T), bool)
    for b in range(B):
        n = rng.integers(0, T + 1)
        if kind == "right":
            valid[b, n:] = False
        elif kind == "left":
            valid[b, : T - n] = False
        elif kind == "holes":
            valid[b] = rng.random(T) < 0.7
    return valid


# Each example compiles its own scan (its shapes and options are static). In CI every combination of the options
# (query_key_norm x mask_floor x padding), each at shapes of its own (B, D_in, D, N spread over their ranges),
# three random examples apiece (seed, padding layout), and N = 1 and T = 0; 30 random examples with -m slow.
OPTION_CASES = [(qk_norm, floor, padding, dict(B=1 + k % 3, T=6, D_in=1 + k % 4, D=2 + (k // 3) % 4, N=2 + k % 4))
                for k, (qk_norm, floor, padding) in enumerate(
                    itertools.product([False, True], [0.0, 1e-5, 0.2], ["carry", "zero"]))]
OPTION_CASES += [(False, 0.0, "carry", dict(B=2, T=6, D_in=2, D=3, N=1)),
                 (True, 1e-5, "zero", dict(B=2, T=0, D_in=2, D=3, N=3))]


@pytest.mark.parametrize("qk_norm, floor, padding, shape", OPTION_CASES)
@settings(max_examples=3, deadline=None)
@given(pad_kind=st.sampled_from(["none", "right", "left", "holes"]), seed=st.integers(0, 2**31 - 1))
def test_matches_the_equations_in_float64(qk_norm, floor, padding, shape, pad_kind, seed):
    check_against_the_equations(**shape, qk_norm=qk_norm, floor=floor, padding=padding, pad_kind=pad_kind, seed=seed)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(0, 6), D_in=st.integers(1, 4), D=st.integers(2, 5),
       N=st.integers(1, 5), qk_norm=st.booleans(), floor=st.sampled_from([0.0, 1e-5, 0.2]),
       padding=st.sampled_from(["carry", "zero"]), pad_kind=st.sampled_from(["none", "right", "left", "holes"]),
       seed=st.integers(0, 2**31 - 1))
def test_matches_the_equations_in_float64_at_random_shapes(B, T, D_in, D, N, qk_norm, floor, padding, pad_kind,
                                                           seed):
    check_against_the_equations(B, T, D_in, D, N, qk_norm, floor, padding, pad_kind, seed)


def check_against_the_equations(B, T, D_in, D, N, qk_norm, floor, padding, pad_kind, seed):
    rng = np.random.default_rng(seed)
    params = random_params(rng, D_in, D)
    x = rng.normal(size=(B, T, D_in))
    valid = random_valid(rng, B, T, pad_kind)
    options = dict(n_slots=N, query_key_norm=qk_norm, mask_floor=floor, padding=padding)
    with jax.enable_x64(True):
        got = scan(x, valid, as_params(params), **options)
        got = [np.asarray(a) for a in got]
    want = om_oracle(x, valid, params, **options)
    names = ("outputs", "final_output", "pointer", "cumulative", "reverse_cumulative")
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-11, err_msg=name)


def run(seed=0, B=3, T=9, D_in=3, D=4, N=5, valid=None, dtype=np.float64, **options):
    rng = np.random.default_rng(seed)
    params = random_params(rng, D_in, D)
    x = rng.normal(size=(B, T, D_in))
    valid = np.ones((B, T), bool) if valid is None else valid
    with jax.enable_x64(dtype == np.float64):
        out = scan(x.astype(dtype), valid, as_params({k: v.astype(dtype) for k, v in params.items()}),
                   n_slots=N, **options)
        return [np.asarray(a) for a in out], x, params


@pytest.mark.parametrize("options", [{}, RELEASE], ids=["thesis", "release"])
def test_pointer_is_a_distribution_that_moves_at_most_one_slot_up(options):
    (outputs, _, pointer, cumulative, reverse, *_), _, _ = run(seed=1, B=4, T=12, N=6, **options)
    # First step: no pointer; every later step: a distribution.
    assert np.all(pointer[:, 0] == 0) and np.all(reverse[:, 0] == 1)
    np.testing.assert_allclose(pointer[:, 1:].sum(-1), 1.0, rtol=1e-12)
    assert np.all(pointer >= 0)
    # Step 2 sees pi_1 = 0: only the root slot is reachable.
    np.testing.assert_array_equal(pointer[:, 1, :-1], 0.0)
    # The topmost slot with mass rises by at most one slot per step.
    top = np.argmax(pointer > 0, axis=-1)  # [B, T], first nonzero slot
    assert np.all(top[:, 2:] >= top[:, 1:-1] - 1)
    # ... and it does rise sometimes, so the check above is not vacuous.
    assert np.any(top[:, 2:] < top[:, 1:-1])


def test_commits_are_cumulative_sums():
    # The shapes of test_pointer_is_a_distribution_that_moves_at_most_one_slot_up[thesis]: its compiled scan.
    (_, _, pointer, cumulative, reverse, *_), _, _ = run(seed=2, B=4, T=12, N=6)
    np.testing.assert_allclose(cumulative, np.cumsum(pointer, -1), atol=1e-12)
    np.testing.assert_allclose(reverse[:, 1:], np.cumsum(pointer[:, 1:, ::-1], -1)[..., ::-1], atol=1e-12)
    assert np.all(np.diff(cumulative, axis=-1) >= -1e-12)  # rises towards the root
    assert np.all(np.diff(reverse, axis=-1) <= 1e-12)  # falls towards the root
    np.testing.assert_allclose(cumulative[:, 1:, -1], 1.0, rtol=1e-12)
    np.testing.assert_allclose(reverse[:, 1:, 0], 1.0, rtol=1e-12)
    # pi and pi~ overlap exactly on the pointer: pi + pi~ - p = 1.
    np.testing.assert_allclose((cumulative + reverse - pointer)[:, 1:], 1.0, atol=1e-12)


def test_padding_does_not_change_the_output():
    """Thesis default: left, right and interior padding leave every real step's output unchanged."""
    rng = np.random.default_rng(5)
    D_in, D, N, T = 3, 4, 5, 6
    params = as_params(random_params(rng, D_in, D))
    x = rng.normal(size=(1, T, D_in))
    with jax.enable_x64(True):
        plain = scan(x, np.ones((1, T), bool), params, n_slots=N)
        for layout in ("LLRRRRRR", "RRRRRRLL", "RRLRRLRR", "LRRRRRRL"):
            slots = np.array([c == "R" for c in layout])
            padded_x = rng.normal(size=(1, len(layout), D_in)) * 5.0  # junk at the padding
            padded_x[0, slots] = x[0]
            got = scan(padded_x, slots[None], params, n_slots=N)
            np.testing.assert_allclose(np.asarray(got.outputs)[0, slots], np.asarray(plain.outputs)[0], rtol=1e-12)
            np.testing.assert_allclose(np.asarray(got.final_output), np.asarray(plain.final_output), rtol=1e-12)
            np.testing.assert_allclose(np.asarray(got.pointer)[0, slots], np.asarray(plain.pointer)[0], atol=1e-14)
            assert np.all(np.asarray(got.outputs)[0, ~slots] == 0)
            # Examples of a batch do not interact: the padded one next to the plain one.
            both = scan(np.concatenate([padded_x, padded_x]), np.stack([slots, np.ones_like(slots)]), params,
                        n_slots=N)
            np.testing.assert_allclose(np.asarray(both.final_output)[0], np.asarray(plain.final_output)[0],
                                       rtol=1e-12)


def test_release_padding_quirk():
    """Release: right padding is harmless; left padding forces the first pointer to the root (§3.6 quirk 1)."""
    rng = np.random.default_rng(6)
    params = as_params(random_params(rng, 2, 3))
    x = rng.normal(size=(1, 5, 2))
    with jax.enable_x64(True):
        plain = scan(x, np.ones((1, 5), bool), params, n_slots=4, **RELEASE)
        right = scan(np.concatenate([x, x[:, :2]], 1), np.array([[1, 1, 1, 1, 1, 0, 0]], bool), params,
                     n_slots=4, **RELEASE)
        left = scan(np.concatenate([x[:, :2], x], 1), np.array([[0, 0, 1, 1, 1, 1, 1]], bool), params,
                    n_slots=4, **RELEASE)
    np.testing.assert_allclose(np.asarray(right.outputs)[0, :5], np.asarray(plain.outputs)[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(right.final_output), np.asarray(plain.final_output), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(left.pointer)[0, 2], [0, 0, 0, 1])
    assert not np.allclose(np.asarray(left.final_output), np.asarray(plain.final_output), atol=1e-3)


@pytest.mark.parametrize("options", [{}, RELEASE], ids=["thesis", "release"])
def test_steps_by_hand_equal_the_scan(options):
    rng = np.random.default_rng(10)
    params = as_params(random_params(rng, 3, 4))
    x = rng.normal(size=(2, 6, 3))
    valid = np.array([[0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 0]], bool)
    with jax.enable_x64(True):
        whole = scan(x, valid, params, n_slots=5, **options)
        state = initial_state(2, 5, 4, jnp.float64)
        step = jax.jit(functools.partial(ordered_memory_step, **options))  # one program, not op by op
        outputs, pointers = np.asarray(whole.outputs), np.asarray(whole.pointer)  # sliced in NumPy
        for t in range(6):
            state, (output, pointer, *_) = step(params, state, project(params, x[:, t]), valid[:, t])
            np.testing.assert_allclose(np.asarray(output), outputs[:, t], rtol=1e-12)
            np.testing.assert_allclose(np.asarray(pointer), pointers[:, t], atol=1e-14)
    np.testing.assert_allclose(np.asarray(state.last_output), np.asarray(whole.final_output), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(state.memory), np.asarray(whole.memory), rtol=1e-12)


def test_first_output_is_the_projected_input():
    """Step 1 commits nothing and every candidate is x~_1, so o_1 = LN(x_1 W_in + b_in)."""
    (outputs, *_), x, params = run(seed=3, B=4, T=12, N=6)  # test_commits_are_cumulative_sums' compiled scan
    z = x[:, 0] @ params["w_in"] + params["b_in"]
    z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(outputs[:, 0], z * params["ln_scale"] + params["ln_bias"], rtol=1e-10)


def test_float32_matches_the_float64_oracle():
    (outputs, final, pointer, *_), x, params = run(seed=4, B=2, T=8, D=8, N=6, dtype=np.float32)
    assert outputs.dtype == np.float32
    want = om_oracle(x, np.ones((2, 8), bool), params, 6)
    np.testing.assert_allclose(outputs, want[0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(pointer, want[2], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("options", [{}, RELEASE], ids=["thesis", "release"])
def test_gradients_are_finite(options):
    rng = np.random.default_rng(7)
    params = as_params({k: v.astype(np.float32) for k, v in random_params(rng, 3, 4).items()})
    x = jnp.asarray(rng.normal(size=(2, 7, 3)), jnp.float32)
    valid = np.array([[1] * 7, [0, 0, 1, 1, 1, 0, 1]], bool)

    def loss(params, x):
        out = ordered_memory_scan(x, valid, params, n_slots=5, dropout_key=jax.random.key(0),
                                  attention_dropout=0.2, cell_dropout=0.1, **options)
        return jnp.sum(out.final_output ** 2) + jnp.sum(out.outputs)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x)
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in leaves)
    assert any(np.any(np.asarray(g) != 0) for g in leaves[:-1])
    # The scorer gets gradient (through the pointer), not only the cell.
    assert np.any(np.asarray(grads[0].w_score) != 0)


def test_dropout_only_with_a_key():
    rng = np.random.default_rng(8)
    params = as_params({k: v.astype(np.float32) for k, v in random_params(rng, 3, 4).items()})
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    plain = scan(x, None, params, n_slots=4)
    zero_rate = scan(x, None, params, n_slots=4, dropout_key=jax.random.key(1))
    dropped = scan(x, None, params, n_slots=4, dropout_key=jax.random.key(1), attention_dropout=0.3,
                   cell_dropout=0.3)
    np.testing.assert_allclose(np.asarray(zero_rate.outputs), np.asarray(plain.outputs), rtol=1e-6)
    assert not np.allclose(np.asarray(dropped.outputs), np.asarray(plain.outputs))


def test_bad_arguments():
    params = as_params(random_params(np.random.default_rng(0), 2, 3))
    with pytest.raises(ValueError, match="padding"):
        ordered_memory_scan(np.zeros((1, 2, 2)), None, params, n_slots=3, padding="left")
    with pytest.raises(ValueError, match="w_in"):
        ordered_memory_scan(np.zeros((1, 2, 5)), None, params, n_slots=3)
    with pytest.raises(ValueError, match="valid"):
        ordered_memory_scan(np.zeros((1, 2, 2)), np.ones((1, 3), bool), params, n_slots=3)
    with pytest.raises(ValueError, match="n_slots"):
        ordered_memory_scan(np.zeros((1, 2, 2)), None, params, n_slots=0)


# Tree extraction (released-code.md §3.2), N = 6 slots, 1-based (6 = root).
@pytest.mark.parametrize("distances, tree", [
    ([6], "a"),
    ([6, 6], ["a", "b"]),
    ([6, 6, 6], [["a", "b"], "c"]),  # the §3.1 test vector, y_3 = N: left-branching
    ([6, 6, 5], ["a", ["b", "c"]]),  # y_3 = N - 1: right-branching
    ([6, 6, 6, 6], [[["a", "b"], "c"], "d"]),
    ([6, 6, 5, 4], ["a", ["b", ["c", "d"]]]),
    ([6, 6, 5, 6], [["a", ["b", "c"]], "d"]),
    ([6, 6, 6, 5], [["a", "b"], ["c", "d"]]),
    ([6, 6, 5, 5, 6], [["a", [["b", "c"], "d"]], "e"]),
])
def test_tree_from_hand_made_pointers(distances, tree):
    assert pointer_tree(distances, "abcde"[: len(distances)]) == tree


def test_distances_from_pointer_distributions():
    N = 4
    pointer = np.zeros((2, 5, N))
    pointer[0, 0] = 0  # first step: no pointer, read as the root
    pointer[0, 1] = [0, 0, 0, 1]
    pointer[0, 2] = [0, 0.6, 0.3, 0.1]  # soft: argmax
    pointer[0, 3] = [0.2, 0.1, 0.1, 0.6]
    pointer[1, 2] = [0, 0, 0, 1]  # example 1 is left-padded: steps 2..4 real
    pointer[1, 3] = [0, 0, 0.9, 0.1]
    valid = np.array([[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]], bool)
    distances = pointer_distances(pointer, valid)
    assert distances == [[4, 4, 2, 4], [4, 3, 1]]
    assert pointer_tree(distances[0], "wxyz") == [["w", ["x", "y"]], "z"]
    assert pointer_tree([], []) == []
    assert pointer_tree([4, 4, 3], "abc", label="X").to_string() == "(X a (X b c))"
    assert pointer_tree([4], "a", label="X").to_string() == "(X a)"
    # A 3000-word right-branching chain: no recursion limit on the way.
    deep = pointer_tree([3000, 3000] + list(range(2999, 1, -1)), label="X")
    assert len(deep.leaves()) == 3000 and deep.children[0] == "0"
    with pytest.raises(ValueError, match="words"):
        pointer_tree([4, 4], "abc")


def _draw_binary_tree(data, words: list[str]):
    if len(words) == 1:
        return words[0]
    split = data.draw(st.integers(1, len(words) - 1))
    return [_draw_binary_tree(data, words[:split]), _draw_binary_tree(data, words[split:])]


def _pointer_slots(tree, num_words: int) -> list[int]:
    """Pointer slots that `pointer_tree` parses into `tree`: its shift-reduce derivation (post-order), the reduces
    before word t giving d_t = d_{t-1} - 1 + reduces, from the root slot N = num_words + 1."""
    reduce = object()
    slots, reduces, work = [], 0, [tree]
    while work:  # post-order: left subtree, right subtree, then the node's reduce (a stack, so pushed reversed)
        node = work.pop()
        if node is reduce:
            reduces += 1
        elif isinstance(node, list):
            work.extend([reduce, node[1], node[0]])
        else:  # a word's shift
            slots.append(num_words + 1 if not slots else slots[-1] - 1 + reduces)
            reduces = 0
    return slots


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 9))
def test_pointer_tree_reaches_every_binary_tree_the_greedy_distance_split_only_some(data, n):
    """`pointer_tree` and `tgjax.syntax.distance.tree_from_distances` are two builders, not one: every binary tree
    is some pointer slots' parse; the greedy split rebuilds a tree from its canonical distances iff it is reachable
    by it (`distances_from_tree` refuses the others), and some are not."""
    from tgjax.syntax.distance import distances_from_tree, tree_from_distances

    words = list("abcdefghi"[:n])
    tree = _draw_binary_tree(data, words)
    assert pointer_tree(_pointer_slots(tree, n), words) == tree
    try:
        canonical = distances_from_tree(tree)
    except ValueError:
        return  # a tree the greedy split never builds
    assert tree_from_distances(canonical, words) == tree


def test_a_tree_of_pointers_that_no_distances_split_into():
    from tgjax.syntax.distance import distances_from_tree

    tree = [["a", "b"], [["c", "d"], "e"]]
    assert pointer_tree(_pointer_slots(tree, 5), "abcde") == tree
    with pytest.raises(ValueError):
        distances_from_tree(tree)


def test_tree_from_the_ops_own_pointers():
    (_, _, pointer, *_), _, _ = run(seed=9, B=2, T=7, N=8)
    for distances in pointer_distances(pointer):
        tree = pointer_tree(distances)
        leaves = []

        def collect(node):
            if isinstance(node, list):
                assert len(node) == 2  # binary
                for child in node:
                    collect(child)
            else:
                leaves.append(node)

        collect(tree)
        assert leaves == list(range(7))
