"""A slow, obvious ON-LSTM in NumPy float64, written from the equations (papers/README.md).

It shares no code with tgjax.ops.onlstm: it takes the weights in the release's
PyTorch layout ([out, in], i.e. ih.0.weight [G, D] and hh.weight [G, H]),
loops over batch elements, time steps and units, and computes each gate
of each unit on its own.
"""

from __future__ import annotations

import numpy as np


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _softmax(v):
    e = np.exp(v - np.max(v))
    return e / e.sum()


def onlstm_oracle(x, h0, c0, ih_weight, ih_bias, hh_weight, hh_bias, chunk_size):
    """x [B, T, D], h0/c0 [B, H], ih_weight [G, D], hh_weight [G, H], biases [G].

    Returns (h [B, T, H], hT [B, H], cT [B, H], master_forget [B, T, K], master_input [B, T, K]).
    """
    x = np.asarray(x, np.float64)
    h0, c0 = np.asarray(h0, np.float64), np.asarray(c0, np.float64)
    ih_weight, ih_bias = np.asarray(ih_weight, np.float64), np.asarray(ih_bias, np.float64)
    hh_weight, hh_bias = np.asarray(hh_weight, np.float64), np.asarray(hh_bias, np.float64)
    B, T, _ = x.shape
    H = h0.shape[1]
    K = H // chunk_size
    hs = np.zeros((B, T, H))
    master_forgets = np.zeros((B, T, K))
    master_inputs = np.zeros((B, T, K))
    h_final, c_final = np.zeros((B, H)), np.zeros((B, H))
    for b in range(B):
        h, c = h0[b].copy(), c0[b].copy()
        for t in range(T):
            pre = ih_weight @ x[b, t] + ih_bias + hh_weight @ h + hh_bias
            # Column blocks: master input, master forget (K each), then o, c^, i, f (H each).
            master_input_pre = pre[0:K]
            master_forget_pre = pre[K:2 * K]
            o_pre = pre[2 * K:2 * K + H]
            cand_pre = pre[2 * K + H:2 * K + 2 * H]
            i_pre = pre[2 * K + 2 * H:2 * K + 3 * H]
            f_pre = pre[2 * K + 3 * H:2 * K + 4 * H]
            master_forget = np.cumsum(_softmax(master_forget_pre))
            master_input = 1.0 - np.cumsum(_softmax(master_input_pre))
            new_c = np.zeros(H)
            new_h = np.zeros(H)
            for j in range(H):
                k = j // chunk_size  # the chunk of unit j
                overlap = master_forget[k] * master_input[k]
                forget_hat = _sigmoid(f_pre[j]) * overlap + (master_forget[k] - overlap)
                input_hat = _sigmoid(i_pre[j]) * overlap + (master_input[k] - overlap)
                new_c[j] = forget_hat * c[j] + input_hat * np.tanh(cand_pre[j])
                new_h[j] = _sigmoid(o_pre[j]) * np.tanh(new_c[j])
            h, c = new_h, new_c
            hs[b, t] = h
            master_forgets[b, t] = master_forget
            master_inputs[b, t] = master_input
        h_final[b], c_final[b] = h, c
    return hs, h_final, c_final, master_forgets, master_inputs


def plain_lstm_oracle(x, h0, c0, ih_weight, ih_bias, hh_weight, hh_bias, chunk_size):
    """A textbook LSTM in the ON-LSTM's gate layout, the master-gate columns ignored: c = f c + i tanh(c^),
    h = o tanh(c). Returns (h [B, T, H], hT, cT, forget chunk means [B, T, K], input chunk means [B, T, K])."""
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    H = np.asarray(h0).shape[1]
    K = H // chunk_size
    hs, forget_means, input_means = np.zeros((B, T, H)), np.zeros((B, T, K)), np.zeros((B, T, K))
    h_final, c_final = np.zeros((B, H)), np.zeros((B, H))
    for b in range(B):
        h, c = np.asarray(h0, np.float64)[b].copy(), np.asarray(c0, np.float64)[b].copy()
        for t in range(T):
            pre = (np.asarray(ih_weight, np.float64) @ x[b, t] + ih_bias + np.asarray(hh_weight, np.float64) @ h
                   + hh_bias)
            o, cand, i, f = (pre[2 * K + n * H:2 * K + (n + 1) * H] for n in range(4))
            forget, inp = _sigmoid(f), _sigmoid(i)
            c = forget * c + inp * np.tanh(cand)
            h = _sigmoid(o) * np.tanh(c)
            hs[b, t] = h
            forget_means[b, t] = [forget[k * chunk_size:(k + 1) * chunk_size].mean() for k in range(K)]
            input_means[b, t] = [inp[k * chunk_size:(k + 1) * chunk_size].mean() for k in range(K)]
        h_final[b], c_final[b] = h, c
    return hs, h_final, c_final, forget_means, input_means
