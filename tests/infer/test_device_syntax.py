"""The device syntax state against the host masking rules, position by position.

For random well-formed Choe–Charniak sequences (hypothesis), the state is
walked action by action as the device engine walks it (advance, then the
model call commits the pending positions); at every layout position the
attention row, relative positions and liveness that the model would rebuild
from `model_fields` equal those of the host rule's single-segment layout of
the whole sequence (`TGMasking` / `TXLMasking`, as `PrefixScorer` lays it
out), and the allowed actions equal an independent restatement of the rules.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.infer import device_syntax as ds
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

BOS_ID = 1
OPEN_BASE, CLOSE_BASE, WORD_BASE = 10, 20, 30
T = 128  # host segment length (longer than any sequence drawn)


@functools.cache
def _jitted(caps: ds.Caps, tg: bool, stack_only: bool = False):
    open_ids = jnp.arange(caps.num_labels, dtype=jnp.int32) + OPEN_BASE
    close_ids = jnp.arange(caps.num_labels, dtype=jnp.int32) + CLOSE_BASE

    @jax.jit
    def step(layout, tree, action, word_ids, word_types, num_pieces):
        layout = ds.commit(layout, True, caps, stack_only)
        new_layout = ds.advance_layout(layout, tree, action, caps, tg, open_ids, close_ids, word_ids, word_types,
                                       num_pieces)
        new_tree, record = ds.advance_tree(tree, action, caps)
        return new_layout, new_tree, record

    @jax.jit
    def fields(layout, tree):
        P = caps.max_pieces
        return ds.model_fields(layout, tree, caps, tg, jnp.zeros(P, jnp.int32), jnp.zeros(P, jnp.int32), 0)

    allowed = jax.jit(lambda tree, finishing: ds.allowed(tree, caps, finishing))
    return step, fields, allowed


def oracle_allowed(stack, opens, L, max_open, max_consecutive, finishing):
    """The rules as `ChoeCharniakFamily.allowed` states them, over a Python stack of (label, non_empty)."""
    if finishing:
        return [False] * L + [bool(stack), False]
    can_open = len(stack) < max_open and opens < max_consecutive
    can_close = len(stack) >= 2 and stack[-1][1]
    return [can_open] * L + [can_close, bool(stack)]


@st.composite
def walks(draw):
    """A random well-formed sequence, as (caps, actions, words' pieces) with the walk's own allowed checks."""
    # Few distinct caps (each compiles its own step).
    L, max_open, max_consecutive, max_pieces = draw(st.sampled_from([(2, 3, 2, 1), (1, 4, 3, 2)]))
    n = draw(st.integers(1, 5))
    words = [[WORD_BASE + draw(st.integers(0, 5)) for _ in range(draw(st.integers(1, max_pieces)))]
             for _ in range(n)]
    caps = ds.Caps(L, max_open, max_consecutive, T, max_pieces)
    actions, stack, opens, t = [], [], 0, 0
    while True:
        finishing = t == n
        if finishing and not stack:
            break
        ok = oracle_allowed(stack, opens, L, max_open, max_consecutive, finishing)
        choices = [a for a in range(L + 2) if ok[a]]
        a = draw(st.sampled_from(choices))
        actions.append((a, finishing, [list(s) for s in stack], opens, t))
        if a < L:
            stack.append((a, False))
            opens += 1
        elif a == L:
            stack.pop()
            if stack:
                stack[-1] = (stack[-1][0], True)
            opens = 0
        else:
            stack[-1] = (stack[-1][0], True)
            opens, t = 0, t + 1
    return caps, actions, words


def host_layout(caps, actions, words, tg):
    """The rule's compact and dense single segment of BOS + the actions (ids, types), and each action's positions."""
    L = caps.num_labels
    ids, types, stack = [BOS_ID], [tt.BOS], []
    t = 0
    for a, *_ in actions:
        if a < L:
            ids.append(OPEN_BASE + a)
            types.append(tt.OPENING_NT)
            stack.append(a)
        elif a == L:
            ids.append(CLOSE_BASE + stack.pop())
            types.append(tt.CLOSING_NT)
        else:
            ids.extend(words[t])
            types.extend([tt.TERMINAL] * len(words[t]))
            t += 1
    seq = (np.array(ids, np.int32), np.array(types, np.int32), np.array(ids[1:] + [0], np.int32),
           np.array(types[1:] + [tt.PAD], np.int32))
    rule = masks.TGMasking(T, 1, smart_memory=False) if tg else masks.TXLMasking(T, 1)
    compact, _ = rule.compact_chunks_many([seq])
    dense = masks.expand(compact)
    return jax.tree.map(lambda x: np.asarray(x)[0], compact), jax.tree.map(lambda x: np.asarray(x)[0], dense)


def check_walk(caps, actions, words, tg, stack_only=False):
    step, fields, allowed_fn = _jitted(caps, tg, stack_only)
    compact, dense = host_layout(caps, actions, words, tg)
    layout, tree = ds.initial_layout(caps, BOS_ID), ds.initial_tree(caps)
    L, P = caps.num_labels, caps.max_pieces
    position = 0  # host layout position of the next pending one
    records = []

    def check_window(layout, tree):
        f, reads, _ = fields(layout, tree)
        f = {k: np.asarray(v) for k, v in f.items()}
        n = int(layout.num_pending)
        length = int(layout.length)
        assert length == position
        mem_mask, mem_rel = masks.attention_from_vectors(
            f["position"], f["inputs_ttypes"], f["depth"], f["memory_pos"], f["memory_depth"],
            f["memory_push_time"], f["memory_pop_time"], causal=not tg, linear_relpos=not tg)
        seq_mask, seq_rel = masks.attention_from_vectors(
            f["position"], f["inputs_ttypes"], f["depth"], f["position"], f["depth"], f["push_time"], f["pop_time"],
            causal=not tg, linear_relpos=not tg)
        held = f["memory_pos"] >= 0
        memory = f["memory_pos"][held]
        if stack_only:
            # The stack: every cached key a query from `length` on can still attend (pushed, not popped before
            # it), in order, and nothing else.
            push, pop = np.asarray(layout.key_push)[:length], np.asarray(layout.key_pop)[:length]
            np.testing.assert_array_equal(memory, np.flatnonzero((push != ds.NEVER) & (pop >= length)))
        else:
            np.testing.assert_array_equal(memory, np.arange(length))
        for s in range(n):
            i = length + s
            assert f["inputs"][s] == compact.inputs[i] and f["inputs_ttypes"][s] == compact.inputs_ttypes[i]
            row = np.zeros(T, bool)
            rel = np.zeros(T, np.int64)
            # The memory slots' columns at their positions (columns of keys not held stay 0).
            row[memory], rel[memory] = mem_mask[s, held], mem_rel[s, held]
            row[length:length + n], rel[length:length + n] = seq_mask[s, :n], seq_rel[s, :n]
            np.testing.assert_array_equal(row, dense.attn_mask[i].astype(bool), err_msg=f"mask row {i}")
            np.testing.assert_array_equal(rel, dense.attn_relpos[i, 1:], err_msg=f"relpos row {i}")
            # Liveness of every earlier key at time i: pushed and not yet popped.
            host_live = (compact.push_time[:i] <= i) & (i < compact.pop_time[:i])
            dev_live = (np.asarray(layout.key_push)[:i] <= i) & (i < np.asarray(layout.key_pop)[:i])
            np.testing.assert_array_equal(dev_live, host_live, err_msg=f"liveness at {i}")
        np.testing.assert_array_equal(np.asarray(layout.key_depth)[length:length + n], compact.depth[length:length + n])
        assert int(reads[0]) == n - 1  # the last pending position predicts the next action

    check_window(layout, tree)
    position += 1
    for a, finishing, stack, opens, t in actions:
        ok = oracle_allowed([tuple(e) for e in stack], opens, L, caps.max_open_nts, caps.max_consecutive_opens,
                            finishing)
        np.testing.assert_array_equal(np.asarray(allowed_fn(tree, finishing)), ok)
        word = words[min(t, len(words) - 1)]
        word_ids = np.zeros(P, np.int32)
        word_ids[:len(word)] = word
        word_types = np.where(np.arange(P) < len(word), tt.TERMINAL, tt.PAD).astype(np.int32)
        layout, tree, record = step(layout, tree, a, word_ids, word_types, len(word))
        records.append(int(record))
        check_window(layout, tree)
        position += int(layout.num_pending)
    # Popped keys: where the host's pop time has passed, the device wrote the same time.
    layout = ds.commit(layout, True, caps, stack_only)
    host_pop = compact.pop_time[:position]
    np.testing.assert_array_equal(np.asarray(layout.key_pop)[:position],
                                  np.where(host_pop < position, host_pop, ds.NEVER) if tg else ds.NEVER)
    assert int(tree.depth) == 0
    return records


@settings(max_examples=40, deadline=None)
@given(walks())
def test_tg_rows_relpos_liveness_and_allowed_equal_the_host_rule(walk):
    check_walk(*walk, tg=True)


@settings(max_examples=40, deadline=None)
@given(walks())
def test_tg_stack_only_memory_is_the_stack_and_gives_the_same_rows(walk):
    """The stack-only memory map holds exactly the keys still attendable, and the rebuilt rows are the host's."""
    check_walk(*walk, tg=True, stack_only=True)


@settings(max_examples=20, deadline=None)
@given(walks())
def test_txl_cc_causal_rows_equal_the_host_rule(walk):
    check_walk(*walk, tg=False)


def test_figure2_records_and_pops_by_hand():
    """(S (NP the hungry cat) (VP meows) .) — pops written by hand from Algorithm 1."""
    caps = ds.Caps(2, 4, 3, T, 1)
    L = 2
    S, NP = 0, 1
    # actions: (S (NP the hungry cat NP) (S? no: VP as label 0 reused) meows ) . S)
    seq = [S, NP, L + 1, L + 1, L + 1, L, S, L + 1, L, L + 1, L]
    words = [[WORD_BASE + k] for k in range(5)]
    actions, t = [], 0
    for a in seq:
        actions.append((a, False, [], 0, t))
        t += a == L + 1
    step, _, _ = _jitted(caps, True)
    layout, tree = ds.initial_layout(caps, BOS_ID), ds.initial_tree(caps)
    records = []
    for a, *_ in actions:
        w = words[min(sum(r == 2 * L for r in records), 4)]
        layout, tree, record = step(layout, tree, a, np.array(w, np.int32), np.array([tt.TERMINAL], np.int32), 1)
        records.append(int(record))
    assert records == [0, 1, 4, 4, 4, L + NP, 0, 4, L + S, 4, L + S]
    layout = ds.commit(layout, True, caps)
    # Layout: 0 BOS, 1 (S, 2 (NP, 3 the, 4 hungry, 5 cat, 6 NP)1, 7 NP)2, 8 (S, 9 meows, 10 S)1, 11 S)2,
    # 12 ., 13 S)1, 14 S)2. The CNT1 at 6 pops 2..5; at 10 pops 8, 9; at 13 pops 1, 6, 10, 12.
    pop = np.asarray(layout.key_pop)[:15]
    expected = np.full(15, ds.NEVER)
    expected[[2, 3, 4, 5]] = 6
    expected[[8, 9]] = 10
    expected[[1, 6, 10, 12]] = 13
    np.testing.assert_array_equal(pop, expected)
    np.testing.assert_array_equal(np.asarray(layout.key_depth)[:15], [0, 1, 2, 3, 3, 3, 2, 2, 2, 3, 2, 2, 2, 1, 1])
