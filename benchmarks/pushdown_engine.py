"""Pushdown-LM beam search: the device beam engine against the per-sentence loop it replaced, on one run.

  engine    `tgjax.infer.pushdown_search.PushdownSearch`: `tgjax.infer.device_beam`'s engine (the one TG and
            TXL (CC) use) with the Pushdown family, `--batch` sentences per compiled search (default the
            search's own: 256 hypotheses in all), a hypothesis's caches copied only where it has more than one
            child, attention over the positions held so far, the head's key MLP applied to the query;
  loop      the baseline, kept here as it was: the Pushdown-LM's own loop before the engine served it, one
            compiled `lax.fori_loop` per sentence over positions, the beam's keys and values `[L, K, T, H, dh]`
            gathered by parent at every step, attention over the whole capacity.

Each side runs in its own process (its peak RSS is its own): one warm-up
pass over the sentences (compilation included, timed apart), then
`--repeats` timed passes, the quickest printed. Printed per side: time per
sentence (wall and CPU), the warm-up's seconds, XLA's memory for one
compiled search at the longest sentence (`memory_analysis()`: arguments,
outputs and temporaries; per sentence as well, the engine holding a batch)
and the process's peak RSS; then the ratios loop / engine (above 1: the
engine is better), and whether both found the same best attachments and
log p(x) (largest difference). Sentences are random ids (`--min-length` ..
`--length` tokens, ``<s>`` and ``<eos>`` included) of a random-weight model.

    python benchmarks/pushdown_engine.py                              # tiny model, beam 16, 32 sentences, CPU
    python benchmarks/pushdown_engine.py --beam 300 --sentences 8     # the paper's beam
    python benchmarks/pushdown_engine.py --size bllip --beam 300 --sentences 8 --batch 4     # on an accelerator

Prints the load average beside the numbers (the CPU may be shared).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from tgjax.infer.pushdown_search import (  # noqa: E402
    HYPOTHESES_PER_SEARCH,
    PushdownBeamConfig,
    PushdownSearch,
    _slot_log_probs,
    apply_attachment,
)
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig  # noqa: E402

SIZES = {
    "tiny": {"vocab_size": 200, "d_model": 64, "num_layers": 2, "num_heads": 4, "ffw_hidden_size": 256},
    "bllip": {"vocab_size": 50257, "d_model": 1024, "num_layers": 16, "num_heads": 8, "ffw_hidden_size": 4096},
}
MIB = 2 ** 20


class _Ids:
    bos_id, eos_id = 1, 2


# -----------------------------------------------------------------------------
# The baseline: one sentence's beam as its own loop (the search before the engine served the Pushdown-LM).


class _Beam(NamedTuple):
    scores: jax.Array  # [K] float32; −inf for an empty slot
    attach: jax.Array  # [K, T + 1]
    depth: jax.Array  # [K, T + 1]
    ends: jax.Array  # [K, T + 1]
    keys: jax.Array  # [L, K, T, H, dh]
    values: jax.Array  # [L, K, T, H, dh]
    head_keys: jax.Array  # [K, T, key_dim]


def _layer_step(layer, x, keys, values, tape_row, i):
    """Position i through a layer against the cached keys/values `[K, T, H, dh]` (written at i first)."""
    attention = layer.attention
    q, k, v = attention.project(x)
    keys = jax.lax.dynamic_update_slice_in_dim(keys, k.astype(keys.dtype), i, axis=1)
    values = jax.lax.dynamic_update_slice_in_dim(values, v.astype(values.dtype), i, axis=1)
    steps = jnp.arange(keys.shape[1])
    mask = (steps <= i)[None, None, :]
    attended = attention.attend(attention.scores(q, keys, tape_row[:, None, :], (i - steps)[None, None, :]), mask,
                                values)
    return layer.around_attention(x, attended), keys, values


def _head_row(head, hidden: jax.Array, next_embedding: jax.Array, head_keys: jax.Array, tape_row: jax.Array,
              i: jax.Array) -> jax.Array:
    """Slot logits `[K, T + 1]` of position i (the `AttachmentHead` formula for one query row).

    hidden `[K, d]` (h_i), next_embedding `[d_e]` (token i + 1), head_keys
    `[K, T, kd]` (cached), tape_row `[K, T]`.
    """
    kd = head.key_dim
    projected_q = hidden @ head.query_proj[...]
    e = jnp.broadcast_to(next_embedding, (hidden.shape[0], next_embedding.shape[-1]))
    query = head.query_mlp(jnp.concatenate([projected_q, e], -1), True)
    self_source = projected_q if head.self_key_input == "projection" else query
    self_key = head.self_key_mlp(jnp.concatenate([self_source, e], -1), True)
    mlp = head.key_depth_mlp
    depth_part = head.depth_embedding[...] @ mlp.w1[...][kd:]  # [D, kd]
    index = jnp.clip(tape_row, 0, head.num_depths - 1)
    depth_keys = mlp.hidden(head_keys + depth_part[index] + mlp.b1[...], True)  # [K, T, kd]
    token_scores = jnp.einsum("kc,ktc->kt", query, depth_keys)
    self_scores = jnp.sum(query * self_key, axis=-1)
    T = head_keys.shape[1]
    slots = jnp.arange(T + 1)
    logits = jnp.concatenate([token_scores, jnp.zeros_like(token_scores[:, :1])], axis=1)
    logits = jnp.where(slots[None, :] == i + 1, self_scores[:, None], logits)
    if head.rel_key is not None:
        rel_keys = head.position_table[...] @ head.rel_key[...]  # [P, kd]
        by_distance = query @ rel_keys.T  # [K, P]
        distance = jnp.clip(i + 1 - slots, 0, head.max_relative_position)
        logits = logits + by_distance[:, distance]
    if head.scaled:
        logits = logits / np.sqrt(kd)
    return logits


def _legal_slots(ends: jax.Array, i: jax.Array, final: jax.Array) -> jax.Array:
    """The slots token i + 1 may take, `[K, T + 1]` from the stack's element ends `[K, T + 1]`: ROOT (slot 0)
    alone for the final ``<eos>``, else an element end other than ROOT, or shift (`attachment_head.slot_legality`,
    what training normalises over)."""
    slots = jnp.arange(ends.shape[-1])[None, :]
    words = (ends & (slots <= i) & (slots > 0)) | (slots == i + 1)
    return jnp.where(final, jnp.broadcast_to(slots == 0, ends.shape), words)


@functools.partial(jax.jit, static_argnames=("graphdef", "beam_size", "capacity"))
def loop_search(graphdef, state, tokens, length, *, beam_size: int, capacity: int):
    """The beam over one string `tokens [capacity + 1]` (`length` real): the final beam's scores and attachments."""
    model = nnx.merge(graphdef, state)
    cfg, head, table = model.config, model.head, model.embedding[...]
    K, T, L, H = beam_size, capacity, len(model.layers), cfg.num_heads
    beam = _Beam(jnp.full((K,), -jnp.inf, jnp.float32).at[0].set(0.0), jnp.zeros((K, T + 1), jnp.int32),
                 jnp.zeros((K, T + 1), jnp.int32), jnp.zeros((K, T + 1), bool).at[:, 0].set(True),
                 jnp.zeros((L, K, T, H, cfg.d_model // H), jnp.float32),
                 jnp.zeros((L, K, T, H, cfg.d_model // H), jnp.float32), jnp.zeros((K, T, head.key_dim), jnp.float32))
    slots = jnp.arange(T + 1)

    def body(i, beam):
        tape_row = jnp.minimum(beam.depth[:, :T], 1) if cfg.binary_tape else beam.depth[:, :T]
        x = jnp.broadcast_to(table[tokens[i]] * np.sqrt(cfg.d_model), (K, 1, cfg.d_model))
        new_keys, new_values = [], []
        for index, layer in enumerate(model.layers):
            x, k, v = _layer_step(layer, x, beam.keys[index], beam.values[index], tape_row, i)
            new_keys.append(k)
            new_values.append(v)
        hidden, next_token = x[:, 0], tokens[i + 1]
        word = jax.nn.log_softmax(hidden @ table.T + model.output_bias[...], axis=-1)[:, next_token]
        head_keys = jax.lax.dynamic_update_slice_in_dim(
            beam.head_keys, ((hidden @ head.key_proj[...]) @ head.key_depth_mlp.w1[...][:head.key_dim])[:, None], i,
            axis=1)
        logits = _head_row(head, hidden, table[next_token], head_keys, tape_row, i)
        legal = _legal_slots(beam.ends, i, i + 1 == length - 1)
        slot_lp = _slot_log_probs(logits, legal, (slots <= i + 1)[None], cfg.attachment_normalise)
        candidates = jnp.where(legal, beam.scores[:, None] + word[:, None] + slot_lp, -jnp.inf)
        top, flat = jax.lax.top_k(candidates.reshape(-1), K)
        parent, r = flat // (T + 1), flat % (T + 1)
        attach, depth, ends = jax.vmap(apply_attachment, in_axes=(0, 0, 0, None, 0))(
            beam.attach[parent], beam.depth[parent], beam.ends[parent], i + 1, r)
        return _Beam(top, attach, depth, ends, jnp.stack(new_keys)[:, parent], jnp.stack(new_values)[:, parent],
                     head_keys[parent])

    beam = jax.lax.fori_loop(0, length - 1, body, beam)
    return beam.scores, beam.attach


# -----------------------------------------------------------------------------
# One side per process.


def _mib(analysis) -> float:
    return (analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes) / MIB


def side(args) -> dict:
    config = PushdownLMConfig(**SIZES[args.size], sequence_length=max(args.length, 16), dropout=0.0,
                              embedding_dropout=0.0)
    model = PushdownLM(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    sentences = [np.r_[1, rng.integers(3, config.vocab_size, int(rng.integers(args.min_length, args.length + 1)) - 2),
                       2].astype(np.int32) for _ in range(args.sentences)]
    search = PushdownSearch(model, _Ids(), PushdownBeamConfig(beam_size=args.beam, batch_sentences=args.batch))
    batch = args.batch or max(1, HYPOTHESES_PER_SEARCH // args.beam)  # the engine's sentences per compiled search
    longest = max(sentences, key=len)
    if args.side == "engine":
        names = [f"sentence {i}" for i in range(len(sentences))]

        def run():
            return [(float(np.logaddexp.reduce(f.scores)), f.best_attach.tolist())
                    for f in search._search_strings(sentences, names, prefix=False)]

        program, arguments, _ = search._batch([longest] * batch, batch, args.beam, prefix=False)
        lower = program.lower
        per_call = batch
    else:
        graphdef, state = nnx.split(model)

        def one(ids):
            capacity = search._capacity(len(ids) - 1)
            tokens = np.zeros(capacity + 1, np.int32)
            tokens[:len(ids)] = ids
            scores, attach = jax.device_get(loop_search(graphdef, state, jnp.asarray(tokens), jnp.int32(len(ids)),
                                                        beam_size=args.beam, capacity=capacity))
            scores = np.asarray(scores, np.float64)
            best = int(np.argmax(scores))
            return float(np.logaddexp.reduce(scores[np.isfinite(scores)])), attach[best, :len(ids)].tolist()

        def run():
            return [one(ids) for ids in sentences]

        capacity = search._capacity(len(longest) - 1)
        tokens = np.zeros(capacity + 1, np.int32)
        tokens[:len(longest)] = longest
        arguments = (graphdef, state, jnp.asarray(tokens), jnp.int32(len(longest)))
        lower = functools.partial(loop_search.lower, beam_size=args.beam, capacity=capacity)
        per_call = 1
    start = time.perf_counter()
    run()
    warm = time.perf_counter() - start
    seconds = cpu = float("inf")
    for _ in range(args.repeats):  # the quickest pass: the least disturbed by other work on the machine
        start, start_cpu = time.perf_counter(), time.process_time()
        found = run()
        seconds, cpu = min(seconds, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    memory = _mib(lower(*arguments).compile().memory_analysis())
    return dict(side=args.side, per_sentence=seconds / len(sentences), cpu=cpu / len(sentences), warm=warm,
                memory=memory, batch=per_call,
                memory_per_sentence=memory / per_call, peak_rss=peak_rss, found=found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--beam", type=int, default=16)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--min-length", type=int, default=8, help="fewest tokens per sentence, <s> and <eos> included")
    parser.add_argument("--length", type=int, default=24, help="most tokens per sentence, <s> and <eos> included")
    parser.add_argument("--batch", type=int, default=None,
                        help="the engine's sentences per compiled search (default: its own, 256 hypotheses in all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per side (the quickest is printed)")
    parser.add_argument("--side", choices=("engine", "loop"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(side(args)))
        return 0
    rows = {}
    for name in ("loop", "engine"):
        child = [sys.executable, __file__, "--side", name] + list(argv if argv is not None else sys.argv[1:])
        out = subprocess.run(child, capture_output=True, text=True)
        if out.returncode:
            print(out.stderr[-3000:], file=sys.stderr)
            return out.returncode
        rows[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{args.size} Pushdown-LM, random init; beam {args.beam}; {args.sentences} random sentences of "
          f"{args.min_length}..{args.length} tokens; device {jax.devices()[0].device_kind}; load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, row in rows.items():
        batch = f"{row['batch']} sentences per compiled search" if name == "engine" else "one per compiled loop"
        print(f"{name:>7}: {row['per_sentence'] * 1000:8.1f} ms/sentence ({row['cpu'] * 1000:.1f} CPU-ms; warm-up "
              f"with compilation {row['warm']:.1f} s); "
              f"compiled {row['memory']:.2f} MiB ({row['memory_per_sentence']:.2f} per sentence; {batch}); "
              f"peak RSS {row['peak_rss']:.0f} MiB")
    loop, engine = rows["loop"], rows["engine"]
    same = sum(a[1] == b[1] for a, b in zip(loop["found"], engine["found"]))
    gap = max(abs(a[0] - b[0]) for a, b in zip(loop["found"], engine["found"]))
    print(f"loop / engine: time {loop['per_sentence'] / engine['per_sentence']:.2f}x (CPU time "
          f"{loop['cpu'] / engine['cpu']:.2f}x), warm-up "
          f"{loop['warm'] / engine['warm']:.2f}x, compiled memory per sentence "
          f"{loop['memory_per_sentence'] / engine['memory_per_sentence']:.2f}x, peak RSS "
          f"{loop['peak_rss'] / engine['peak_rss']:.2f}x (above 1: the engine is better); same best attachments "
          f"{same}/{len(loop['found'])}, largest log p(x) difference {gap:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
