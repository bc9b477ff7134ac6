"""Train-step time of a Transformer Grammar against Transformer-XL (CC) of the same size, on the same sentences.

Sartran et al. (2022) report TG at least as fast as TXL (CC) per step. Both
models here have the same size and the same segment/memory lengths
(T = M = 128 by default); each step reads the same 8 sentences of the built-in
treebank (TG's segments are longer in positions, because closing
non-terminals are duplicated, but padded to the same T). A training step is
forward + `sequence_loss` + backward + an optax Adam update, one `jax.jit`;
memory is carried from step to step as in training.

Printed: the device kind; per model, the median step time and IQR, steps/s,
model positions/s (non-padding slots of the segment: TG counts both copies of
every closing NT) and sentence tokens/s (BOS + Choe-Charniak actions of the
sentences read, the same for both models); the ratio `tg / txl_cc` of the
median step times, against the bar (<= 1.05); and an epoch-level ratio that
also counts the extra segments TG's longer sequences need over the whole
built-in corpus. `--profile` adds HLO cost analysis of both steps and the time
of the on-device mask rebuild (`attention_inputs`) alone.

    python benchmarks/train_step.py                     # 4 layers, d=256, 4 heads, FFN 1024, T=M=128, batch 8
    python benchmarks/train_step.py --size paper-ptb    # d=192, 16 layers (heads 8, FFN 768, T=M=256)
    python benchmarks/train_step.py --size paper-ptb --rounds 4 --steps 3 --warmup 1   # the same, ~3 min on 2 cores
    python benchmarks/train_step.py --profile           # + cost analysis, rebuild timing
    python benchmarks/train_step.py --trace /tmp/trace  # + a jax.profiler trace of a few steps (TensorBoard)
    python benchmarks/train_step.py --models tg_txl_memory_linear_pos txl_cc   # any other pair (no bar)

The benchmark runs unchanged on CPU, GPU or TPU (whatever `jax.devices()[0]` is).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from tgjax.data.pipeline import Pipeline, PipelineConfig, make_rule, segments_per_sequence  # noqa: E402
from tgjax.models import build_model, model_spec, sequence_loss  # noqa: E402
from tgjax.models.transformer_lm import attention_inputs  # noqa: E402
from tgjax.syntax import masks  # noqa: E402
from tgjax.syntax import token_types as tt  # noqa: E402

BAR = 1.05
MODELS = ("tg", "txl_cc")
SIZES = {
    # The default size: 4 layers, d = 256, 4 heads, FFN 1024, T = M = 128, batch 8.
    "small": dict(d_model=256, num_layers=4, num_heads=4, ffw_hidden_size=1024, sequence_length=128,
                  memory_length=128, batch_size=8),
    # d = 192 and 16 layers as the paper's PTB models; heads, FFN and T = M = 256 are this benchmark's choice.
    "paper-ptb": dict(d_model=192, num_layers=16, num_heads=8, ffw_hidden_size=768, sequence_length=256,
                      memory_length=256, batch_size=8),
}
COMPACT_FIELDS = masks.CompactChunk._fields


def tg_length(sequence) -> int:
    """Positions a sequence takes under TG (closing NTs duplicated)."""
    return len(sequence[0]) + int(np.count_nonzero(sequence[1] == tt.CLOSING_NT))


def make_pipelines(names, sizes, num_sentences):
    """One pipeline per model over the same trees and vocabulary.

    Sentences longer than one TG segment are left out of the timed stream, so
    that both models' streams deal sentences to rows identically (one segment
    each) and every step reads the same sentences. Returns the pipelines, the
    vocabulary, (trees kept, total), per model (segments, steps) of an epoch
    over the whole corpus, and the sentence lengths by kept index.
    """
    T, M, B = sizes["sequence_length"], sizes["memory_length"], sizes["batch_size"]
    base = Pipeline(PipelineConfig(corpus="builtin", batch_size=B, rule="tg", seq_len=T, mem_len=M,
                                   num_sentences=num_sentences))
    all_trees, vocab = base.trees, base.vocab
    keep = [t for t, s in zip(all_trees, base.encoded.sequences) if tg_length(s) <= T]
    pipelines, epoch_segments = {}, {}
    for name in names:
        model = nnx.eval_shape(lambda: build_model(name, vocab.size, rngs=nnx.Rngs(0), **model_sizes(sizes)))
        fields = model_spec(name).pipeline_fields(model.config)
        config = PipelineConfig(corpus="builtin", batch_size=B, num_sentences=num_sentences, **fields)
        pipelines[name] = Pipeline(config, vocab, tree_list=keep)
        # Over the whole corpus (long sentences included): segments, and steps of an epoch.
        full = Pipeline(config, vocab, tree_list=all_trees)
        epoch_segments[name] = (int(segments_per_sequence(full.encoded.sequences, make_rule(config)).sum()),
                                len(full.epoch_source(0)))
    # Sentence tokens (BOS + Choe-Charniak actions, before any duplication) by index in the kept trees,
    # which is what the timed streams' `seq_index` counts.
    lengths = {k: len(seq[0]) for k, seq in enumerate(s for s in base.encoded.sequences if tg_length(s) <= T)}
    return pipelines, vocab, (len(keep), len(all_trees)), epoch_segments, lengths


def model_sizes(sizes):
    return {k: v for k, v in sizes.items() if k != "batch_size"}


def host_batches(pipeline, steps):
    source = pipeline.epoch_source(0)
    if len(source) < steps:
        raise SystemExit(f"only {len(source)} steps in an epoch; ask for fewer --steps or more sentences")
    return [source[i] for i in range(steps)]


def make_train_step(model, batch_size, learning_rate=1e-4):
    """A jitted `(params, opt_state, rest, memory, batch) -> (params, opt_state, rest, memory, loss)`.

    `rest` is the model's non-parameter state (dropout RNG counters, the
    position-encoding table); the state arguments are donated, as in a trainer.
    """
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.adam(learning_rate)
    opt_state = tx.init(params)

    def loss_fn(m, memory, batch):
        logits, new_memory = m(batch, memory, deterministic=False)
        total, events = sequence_loss(logits, batch)
        return total / jnp.maximum(events, 1), new_memory

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2, 3))
    def train_step(params, opt_state, rest, memory, batch):
        m = nnx.merge(graphdef, params, rest)  # dropout keys advance in `rest`
        grad_fn = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.Param), has_aux=True)
        (loss, new_memory), grads = grad_fn(m, memory, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        _, _, new_rest = nnx.split(m, nnx.Param, ...)
        return optax.apply_updates(params, updates), opt_state, new_rest, new_memory, loss

    return graphdef, train_step, [params, opt_state, rest, model.init_memory(batch_size)]


class Runner:
    """One model's compiled step, its state, and its device batches; `run(n)` times n steps one by one."""

    def __init__(self, name, vocab_size, sizes, batches):
        self.name = name
        self.model = build_model(name, vocab_size, rngs=nnx.Rngs(0), **model_sizes(sizes))
        # The model's arrays are donated at the first step: afterwards use graphdef + self.state.
        self.graphdef, self.step_fn, self.state = make_train_step(self.model, sizes["batch_size"])
        self.batches = [{k: jnp.asarray(b[k]) for k in COMPACT_FIELDS} for b in batches]
        self.positions = [int(np.count_nonzero(b["inputs_ttypes"] != tt.PAD)) for b in batches]
        self.next = 0
        self.times: list[float] = []
        self.losses: list[float] = []

    def step(self):
        batch = self.batches[self.next % len(self.batches)]
        self.next += 1
        params, opt_state, rest, memory = self.state
        params, opt_state, rest, memory, loss = self.step_fn(params, opt_state, rest, memory, batch)
        self.state = [params, opt_state, rest, memory]
        return loss, self.state

    def compile(self):
        start = time.perf_counter()
        jax.block_until_ready(self.step())
        return time.perf_counter() - start

    def run(self, n, record=True):
        for _ in range(n):
            start = time.perf_counter()
            loss, _ = jax.block_until_ready(self.step())
            elapsed = time.perf_counter() - start
            if record:
                self.times.append(elapsed)
                self.losses.append(float(loss))


def quartiles(xs):
    q = np.percentile(xs, [25, 50, 75])
    return q[1], q[2] - q[0]


def cost(runner):
    lowered = runner.step_fn.lower(*runner.state, runner.batches[0])
    analysis = lowered.compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return analysis or {}


def time_interleaved(calls, n=30, chunk=5):
    """Median seconds of each `(fn, args)`, timed in alternating chunks (so background load hits all alike)."""
    for fn, args in calls:
        jax.block_until_ready(fn(*args))
    times = [[] for _ in calls]
    for k in range(n // chunk):
        order = list(enumerate(calls)) if k % 2 == 0 else list(enumerate(calls))[::-1]
        for i, (fn, args) in order:
            for _ in range(chunk):
                start = time.perf_counter()
                jax.block_until_ready(fn(*args))
                times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def profile(runners, step_medians):
    print("\nprofile")
    print(f"{'':24s}" + "".join(f"{r.name:>14s}" for r in runners))
    costs = [cost(r) for r in runners]
    for key, label, scale in [("flops", "HLO GFLOP / step", 1e-9),
                              ("bytes accessed", "HLO GB accessed / step", 1e-9),
                              ("transcendentals", "transcendentals (M)", 1e-6)]:
        print(f"{label:24s}" + "".join(f"{c.get(key, float('nan')) * scale:14.3f}" for c in costs))
    rebuild_calls, forward_calls = [], []
    for r in runners:
        config = r.model.config
        rebuild_calls.append((jax.jit(lambda b, c=config: attention_inputs(c, b)), (r.batches[0],)))

        @jax.jit
        def fwd(params, rest, memory, batch, graphdef=r.graphdef):
            logits, new_memory = nnx.merge(graphdef, params, rest)(batch, memory, deterministic=True)
            return sequence_loss(logits, batch)[0], new_memory

        forward_calls.append((fwd, (r.state[0], r.state[2], r.state[3], r.batches[0])))
    rebuild = time_interleaved(rebuild_calls, n=100)
    forward = time_interleaved(forward_calls, n=30)
    print(f"{'mask rebuild alone (ms)':24s}" + "".join(f"{t * 1e3:14.3f}" for t in rebuild))
    print(f"{'forward+loss (ms)':24s}" + "".join(f"{t * 1e3:14.3f}" for t in forward))
    print(f"{'train step median (ms)':24s}" + "".join(f"{t * 1e3:14.3f}" for t in step_medians))
    for r in runners:
        lo, hi = r.model.config.relative_range
        print(f"  {r.name}: relative-position table P = {hi - lo + 1} rows "
              f"(range [{lo}, {hi}]), by-position term [B, H, T, P]")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=None, help="override the size's batch")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model per round")
    parser.add_argument("--rounds", type=int, default=20, help="rounds, alternating which model goes first")
    parser.add_argument("--batches", type=int, default=20, help="distinct batches per model (cycled)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after compiling")
    parser.add_argument("--sentences", type=int, default=None, help="built-in corpus size (default: the split's)")
    parser.add_argument("--profile", action="store_true", help="HLO cost analysis and rebuild/forward timings")
    parser.add_argument("--models", nargs=2, default=list(MODELS), metavar=("A", "B"),
                        help="the pair to compare, A / B (default: tg txl_cc; the bar applies to that pair)")
    parser.add_argument("--trace", default=None, help="write a jax.profiler trace of 5 steps per model here")
    args = parser.parse_args(argv)

    sizes = dict(SIZES[args.size])
    if args.batch_size:
        sizes["batch_size"] = args.batch_size
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({device.platform}, {jax.device_count()} device(s)); jax {jax.__version__}")
    print(f"size {args.size}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))

    names = tuple(args.models)
    a_name, b_name = names
    pipelines, vocab, (kept, total), epoch_segments, lengths = make_pipelines(names, sizes, args.sentences)
    steps_per_round = args.steps
    batches = {name: host_batches(p, args.batches) for name, p in pipelines.items()}
    same = all(np.array_equal(a["seq_index"], b["seq_index"]) for a, b in zip(*batches.values()))
    if not same:
        raise SystemExit("the two streams read different sentences; cannot compare")
    sentence_tokens = [sum(lengths[int(i)] for i in b["seq_index"] if i >= 0) for b in batches[b_name]]
    print(f"data: built-in treebank, {kept} of {total} sentences fit one TG segment of {sizes['sequence_length']} "
          f"(the timed stream); vocabulary {vocab.size}; every step reads the same sentences in both models")

    runners = [Runner(name, vocab.size, sizes, batches[name]) for name in names]
    for r in runners:
        print(f"  {r.name}: compile + first step {r.compile():.1f} s; "
              f"{sum(r.positions) / len(r.positions):.0f} positions/step of "
              f"{sizes['batch_size'] * sizes['sequence_length']}")
        r.run(args.warmup, record=False)
    for k in range(args.rounds):
        order = runners if k % 2 == 0 else runners[::-1]
        for r in order:
            r.run(steps_per_round)

    tokens_per_step = sum(sentence_tokens) / len(sentence_tokens)
    print(f"\n{args.rounds} rounds x {steps_per_round} steps per model, alternating; "
          f"{tokens_per_step:.0f} sentence tokens/step in both")
    w = max(8, *(len(n) for n in names))
    print(f"{'model':{w}s} {'median ms':>10s} {'IQR ms':>8s} {'steps/s':>8s} {'positions/s':>12s} "
          f"{'sentence tok/s':>15s} {'loss first->last':>17s}")
    medians = {}
    for r in runners:
        med, iqr = quartiles(r.times)
        medians[r.name] = med
        positions = sum(r.positions) / len(r.positions)
        print(f"{r.name:{w}s} {med * 1e3:10.2f} {iqr * 1e3:8.2f} {1 / med:8.2f} {positions / med:12,.0f} "
              f"{tokens_per_step / med:15,.0f} {r.losses[0]:8.3f}->{r.losses[-1]:.3f}")
    ratio = medians[a_name] / medians[b_name]
    a, b = np.asarray(runners[0].times), np.asarray(runners[1].times)
    per_round = [np.median(a[k * steps_per_round:(k + 1) * steps_per_round]) /
                 np.median(b[k * steps_per_round:(k + 1) * steps_per_round]) for k in range(args.rounds)]
    verdict = f"bar <= {BAR}: {'PASS' if ratio <= BAR else 'FAIL'}" if names == MODELS else "(no bar for this pair)"
    print(f"\nratio {a_name} / {b_name} (median step time, equal T): {ratio:.3f}   {verdict}")
    print(f"  robustness: ratio of lower quartiles {np.percentile(a, 25) / np.percentile(b, 25):.3f}, "
          f"of minima {a.min() / b.min():.3f}; median of {args.rounds} per-round ratios {np.median(per_round):.3f} "
          f"(IQR {np.percentile(per_round, 25):.3f}-{np.percentile(per_round, 75):.3f})")
    (seg_a, steps_a), (seg_b, steps_b) = epoch_segments[a_name], epoch_segments[b_name]
    print(f"whole corpus: {a_name} {seg_a} segments ({steps_a} steps/epoch), {b_name} {seg_b} ({steps_b} steps/epoch); "
          f"epoch time ratio {a_name} / {b_name} = {ratio * steps_a / steps_b:.3f}")

    if args.profile:
        profile(runners, [medians[r.name] for r in runners])
    if args.trace:
        jax.profiler.start_trace(args.trace)
        for r in runners:
            with jax.profiler.TraceAnnotation(f"{r.name}_steps"):
                r.run(5, record=False)
        jax.profiler.stop_trace()
        print(f"trace written to {args.trace} (tensorboard --logdir {args.trace})")
    return 0 if ratio <= BAR or names != MODELS else 1


if __name__ == "__main__":
    sys.exit(main())
