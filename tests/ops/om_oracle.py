"""A slow, obvious float64 Ordered Memory, written from released-code.md §3.1 (slots 1..N there,
0..N-1 here with N-1 the root); it shares no code with tgjax.ops.ordered_memory.

Loops over the batch, time and slots; one example at a time, with plain
lists of vectors. The masked softmax is the release's form,
exp(beta - max beta) * mask / sum(...).
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-5


def layer_norm(v, scale, bias):
    mean = sum(v) / len(v)
    var = sum((a - mean) ** 2 for a in v) / len(v)
    return np.array([(a - mean) / math.sqrt(var + EPS) for a in v]) * scale + bias


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def cell(P, v, h):
    D = len(v)
    hidden = np.maximum(np.concatenate([v, h]) @ P["w_1"] + P["b_1"], 0.0)
    g = hidden @ P["w_2"] + P["b_2"]
    gv, gh, gc, u = g[:D], g[D:2 * D], g[2 * D:3 * D], g[3 * D:]
    return layer_norm(sigmoid(gv) * v + sigmoid(gh) * h + sigmoid(gc) * u, P["ln_scale"], P["ln_bias"])


def score(P, x_proj, slot, query_key_norm):
    q = x_proj @ P["w_q"] + P["b_q"]
    k = slot @ P["w_k"] + P["b_k"]
    if query_key_norm:
        q = layer_norm(q, P["ln_q_scale"], P["ln_q_bias"])
        k = layer_norm(k, P["ln_k_scale"], P["ln_k_bias"])
    return (float(np.maximum(q + k, 0.0) @ P["w_score"]) + float(P["b_score"])) / math.sqrt(len(x_proj))


def om_oracle(x, valid, P, n_slots, query_key_norm=False, mask_floor=0.0, padding="carry"):
    """x [B, T, D_in], valid [B, T], P a dict of float64 arrays (OrderedMemoryParams' names).

    Returns outputs [B, T, D], final_output [B, D], pointer, cumulative, reverse_cumulative [B, T, N].
    """
    P = {k: np.asarray(v, np.float64) for k, v in P.items()}
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    N = n_slots
    D = P["b_in"].shape[0]
    outputs = np.zeros((B, T, D))
    final = np.zeros((B, D))
    pointers = np.zeros((B, T, N))
    cums = np.zeros((B, T, N))
    rcums = np.zeros((B, T, N))
    for b in range(B):
        memory = [np.zeros(D) for _ in range(N)]
        candidates = [np.zeros(D) for _ in range(N)]
        prev_cum = None  # None = no previous pointer (the first-step path)
        for t in range(T):
            real = bool(valid[b, t])
            if padding == "carry" and not real:
                continue  # the state passes through padding untouched
            first = prev_cum is None if padding == "carry" else t == 0
            x_proj = layer_norm(x[b, t] @ P["w_in"] + P["b_in"], P["ln_scale"], P["ln_bias"])
            if first:
                p = [0.0] * N
                cum = [0.0] * N
                rcum = [1.0] * N
            else:
                beta = [score(P, x_proj, candidates[i], query_key_norm) for i in range(N)]
                mask = [prev_cum[i + 1] if i + 1 < N else 1.0 for i in range(N)]
                mask = [0.0 if m < mask_floor else m for m in mask]
                top = max(beta)
                weights = [math.exp(beta[i] - top) * mask[i] for i in range(N)]
                total = sum(weights)
                p = [w / total for w in weights]
                cum = [sum(p[: i + 1]) for i in range(N)]
                rcum = [sum(p[i:]) for i in range(N)]
            memory = [(1 - rcum[i]) * memory[i] + rcum[i] * candidates[i] for i in range(N)]
            new_candidates = []
            above = x_proj
            for i in range(N):
                c = (1 - cum[i]) * x_proj + cum[i] * cell(P, above, memory[i])
                new_candidates.append(c)
                above = c
            candidates = new_candidates
            prev_cum = cum
            if not real:  # padding == "zero": the release zeroes everything
                memory = [np.zeros(D) for _ in range(N)]
                candidates = [np.zeros(D) for _ in range(N)]
                prev_cum = [0.0] * N
                continue
            outputs[b, t] = candidates[-1]
            final[b] = candidates[-1]
            pointers[b, t], cums[b, t], rcums[b, t] = p, cum, rcum
    return outputs, final, pointers, cums, rcums
