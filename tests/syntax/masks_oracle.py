"""A slow, step-by-step oracle for the TG/TXL tensors, written from the papers.

Algorithm 1 of Sartran et al. (2022) simulated one token at a time with an
explicit stack, and the per-segment memory bookkeeping of their Appendix A
(Figure 8) with a `seq2mem` dictionary, under the conventions of the authors'
release: BOS is the root at depth 0; both copies of a closing non-terminal sit
at the depth of their opening non-terminal; a CNT1's COMPOSE attends to the
constituent's opening NT and its children that are still on the stack (a
transparent child contributes its own children, recursively), and pops them
unless the constituent is transparent; a CNT2 attends to the stack and
itself but is never pushed. Per-entry Python loops on purpose: this is the
reference that the vectorised `tgjax.syntax.masks` is tested against.
"""

from __future__ import annotations

import numpy as np

from tgjax.syntax import token_types as tt


class _Node:
    def __init__(self, pos, ttype, parent, depth, transparent):
        self.pos, self.ttype, self.parent = pos, ttype, parent
        self.depth, self.transparent = depth, transparent
        self.children = []

    def expanded_children(self):
        """Children, with a transparent child's children listed after it (recursively)."""
        out = []
        for child in self.children:
            out.append(child)
            if child.transparent:
                out.extend(child.expanded_children())
        return out


def oracle_attention(ttypes, transparency_depth=-1):
    """Per position: (attended [(key_pos, depth(query) - depth(key))], depth, stack after).

    `ttypes` is the duplicated sequence (CNT1 = 4, CNT2 = 14), padding last.
    """
    n = len(ttypes)
    root = _Node(0, tt.BOS, None, 0, False)
    nodes = [root]
    parent = root
    for i in range(1, n):
        t = int(ttypes[i])
        if t == tt.PAD:
            continue
        if t == tt.CNT1:
            parent = parent.parent
            assert parent is not None, "closing a constituent that was never opened"
        depth = parent.depth + 1
        node = _Node(i, t, parent, depth, t == tt.OPENING_NT and depth <= transparency_depth)
        parent.children.append(node)
        nodes.append(node)
        if t == tt.OPENING_NT:
            parent = node

    infos = [([], 0, []) for _ in range(n)]
    stack = []
    for k, cur in enumerate(nodes):
        if cur.ttype == tt.CNT1:
            prev = nodes[k - 1]
            constituent = prev.parent if prev.ttype != tt.OPENING_NT else prev
            if prev.ttype == tt.OPENING_NT:
                # Empty constituent "(X X)": only the opening NT itself is a child.
                candidates = [prev]
            else:
                candidates = [constituent] + constituent.expanded_children()
            attended = [node for node in candidates if node in stack]
            if not constituent.transparent:
                for node in attended:
                    stack.remove(node)
            attended.append(cur)
            stack.append(cur)
        else:
            if cur.ttype != tt.CNT2:
                stack.append(cur)
            attended = [node for node in stack if node is not cur] + [cur]
        infos[cur.pos] = (
            [(node.pos, cur.depth - node.depth) for node in attended],
            cur.depth,
            [node.pos for node in stack],
        )
    return infos


def _empty_chunk(x, xt, y, yt, start, T, M):
    """A segment's inputs, with every mask, position and selection still zero (memory empty)."""
    return dict(
        inputs=x[start:start + T], inputs_ttypes=xt[start:start + T],
        labels=y[start:start + T], labels_ttypes=yt[start:start + T],
        attn_mask=np.zeros((T, T), np.int64), attn_relpos=np.zeros((T, M + T), np.int64),
        attn_indicator=np.zeros(T, np.int64), memory_attn_mask=np.zeros((T, M), np.int64),
        memory_padding_mask=np.zeros(M, np.int64), memory_pos=np.full(M, -1, np.int64),
        depth=np.zeros(T, np.int64),
        mem_from_seq=np.zeros((T, M), np.int64), mem_from_mem=np.zeros((M, M), np.int64),
    )


def oracle_tg_chunks(inputs, inputs_ttypes, labels, labels_ttypes, seq_len, mem_len,
                     smart_memory=True, distinct_compose=False, transparency_depth=-1,
                     linear_relpos=False):
    """Dense chunks as dicts of arrays, one per segment (Figure 8, generalised to M != T)."""
    T, M = seq_len, mem_len
    x, xt, y, yt = tt.duplicate_closing_nts(inputs, inputs_ttypes, labels, labels_ttypes)
    n = len(x)
    num_chunks = -(-n // T)
    total = num_chunks * T
    pad = lambda a: np.concatenate([a, np.zeros(total - n, a.dtype)])
    x, xt, y, yt = pad(x), pad(xt), pad(y), pad(yt)
    infos = oracle_attention(xt, transparency_depth)
    infos += [([], 0, [])] * (total - n)

    chunks = []
    seq2mem = {}  # sequence position -> memory slot, for the current segment
    mem_valid = np.zeros(M, np.int64)
    mem_pos = np.full(M, -1, np.int64)
    last_nonpad = 0
    dropped = set()
    for c in range(num_chunks):
        start = c * T
        if (x[start:start + T] == 0).all():
            break
        ch = _empty_chunk(x, xt, y, yt, start, T, M)
        ch["memory_padding_mask"], ch["memory_pos"] = mem_valid.copy(), mem_pos.copy()
        if not smart_memory:
            # Shifted memory: slot s holds sequence position start - M + s.
            seq2mem = {start - M + s: s for s in range(M) if mem_valid[s]}
        for q in range(T):
            i = start + q
            attended, depth, _ = infos[i]
            if x[i] > 0:
                last_nonpad = i
            ch["depth"][q] = depth
            if distinct_compose and xt[i] == tt.CNT1:
                ch["attn_indicator"][q] = 1
            for j, rel in attended:
                if linear_relpos:
                    rel = i - j
                if j >= start:
                    ch["attn_mask"][q, j - start] = 1
                    ch["attn_relpos"][q, M + j - start] = rel
                elif j in seq2mem:
                    ch["memory_attn_mask"][q, seq2mem[j]] = 1
                    ch["attn_relpos"][q, seq2mem[j]] = rel
        new_valid = np.zeros(M, np.int64)
        new_pos = np.full(M, -1, np.int64)
        if smart_memory:
            stack_now = infos[last_nonpad][2]
            next_seq2mem = {}
            slot = M - 1
            for j in reversed(stack_now):
                if slot < 0:
                    dropped.add(j)
                    continue
                if j >= start:
                    ch["mem_from_seq"][j - start, slot] = 1
                elif j in seq2mem:
                    ch["mem_from_mem"][seq2mem[j], slot] = 1
                else:
                    continue  # too far back: dropped at an earlier segment
                next_seq2mem[j] = slot
                new_valid[slot] = 1
                new_pos[slot] = j
                slot -= 1
            seq2mem = next_seq2mem
        else:
            for s in range(M):
                p = start + T - M + s
                if p >= start:
                    if x[p] > 0:
                        ch["mem_from_seq"][p - start, s] = 1
                        new_valid[s], new_pos[s] = 1, p
                elif mem_valid[s + T]:
                    ch["mem_from_mem"][s + T, s] = 1
                    new_valid[s], new_pos[s] = 1, p
        mem_valid, mem_pos = new_valid, new_pos
        chunks.append(ch)
    for k, ch in enumerate(chunks):
        ch["beginning_of_seq"] = int(k == 0)
        ch["end_of_seq"] = int(k == len(chunks) - 1)
    return chunks, len(dropped)


def oracle_txl_chunks(inputs, inputs_ttypes, labels, labels_ttypes, seq_len, mem_len):
    """TXL baseline: causal mask, relative position i - j, memory = the previous M positions."""
    T, M = seq_len, mem_len
    n = len(inputs)
    num_chunks = -(-n // T)
    total = num_chunks * T
    pad = lambda a: np.concatenate([np.asarray(a), np.zeros(total - n, np.asarray(a).dtype)])
    x, xt, y, yt = pad(inputs), pad(inputs_ttypes), pad(labels), pad(labels_ttypes)
    chunks = []
    for c in range(num_chunks):
        start = c * T
        if (x[start:start + T] == 0).all():
            break
        ch = _empty_chunk(x, xt, y, yt, start, T, M)
        for s in range(M):
            p = start - M + s
            if p >= 0:
                ch["memory_pos"][s] = p
                ch["memory_padding_mask"][s] = int(x[p] > 0)
            # Next memory: slot s holds start + T - M + s.
            p_next = start + T - M + s
            if p_next >= start:
                ch["mem_from_seq"][p_next - start, s] = 1
            elif p_next >= 0:
                ch["mem_from_mem"][s + T, s] = 1
        for q in range(T):
            i = start + q
            for j in range(max(0, start - M), i + 1):
                if j >= start:
                    ch["attn_mask"][q, j - start] = 1
                else:
                    ch["memory_attn_mask"][q, j - (start - M)] = 1
                ch["attn_relpos"][q, j - (start - M)] = i - j
        chunks.append(ch)
    for k, ch in enumerate(chunks):
        ch["beginning_of_seq"] = int(k == 0)
        ch["end_of_seq"] = int(k == len(chunks) - 1)
    return chunks
