"""Scoring throughput: sentences/s of `tgjax.infer.scoring.Scorer` for a small TG and TXL (CC).

Both models are freshly initialised (throughput does not depend on the
weights) with the same size, read the same sentences (the built-in
treebank's valid split, 500 sentences) with the same vocabulary, and are
scored exactly as `tgjax eval score` scores: host-side segments
(`compact_chunks_many`), rows dealt longest first, one jitted step per
segment of B rows with the memory carried, per-position log probs mapped
back to actions.

Printed per model: the first pass (compilation included), then the median
and IQR of the timed passes, sentences/s, predictions/s (one per action),
the host's share (the time `compact_chunks_many` takes for the whole split,
measured alone), and the padding share of the positions computed. Last, the
ratio of the median pass times tg / txl_cc.

    python benchmarks/scoring.py                           # d=256, 4 layers, 4 heads, FFN 1024, T=M=64, B=32
    python benchmarks/scoring.py --size tiny               # the tiny config's size (d=64, 2 layers)
    python benchmarks/scoring.py --batch-size 64 --seq-len 128 --repeats 5

Runs unchanged on CPU, GPU or TPU (all local devices share the rows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from tgjax.data import corpora  # noqa: E402
from tgjax.data import pipeline as pl  # noqa: E402
from tgjax.infer.loading import from_model  # noqa: E402
from tgjax.infer.scoring import Scorer, encode_tree  # noqa: E402
from tgjax.models import build_model  # noqa: E402
from tgjax.syntax import token_types as tt  # noqa: E402

MODELS = ("tg", "txl_cc")
SIZES = {
    "small": dict(d_model=256, num_layers=4, num_heads=4, ffw_hidden_size=1024),
    "tiny": dict(d_model=64, num_layers=2, num_heads=4, ffw_hidden_size=256),
}


def run(name: str, vocab, tree_list, args) -> dict:
    model = build_model(name, vocab.size, rngs=nnx.Rngs(params=0, dropout=0), sequence_length=args.seq_len,
                        memory_length=args.mem_len, **SIZES[args.size])
    scorer = Scorer(from_model(model, vocab, name), batch_size=args.batch_size)
    encoded = [encode_tree(vocab, t, scorer.rule, pos_tags=True) for t in tree_list]
    predictions = sum(e.num_ids for e in encoded)

    def one_pass() -> float:
        start = time.perf_counter()
        scorer.piece_logprobs(encoded)  # blocks: the results are fetched to the host
        return time.perf_counter() - start

    first = one_pass()
    times = [one_pass() for _ in range(args.repeats)]
    start = time.perf_counter()
    chunks, seq_of_chunk = scorer.masking.compact_chunks_many([e.arrays for e in encoded])
    host = time.perf_counter() - start
    real = int(np.count_nonzero(chunks.inputs_ttypes != tt.PAD))
    median = statistics.median(times)
    q = np.percentile(times, [25, 75])
    return dict(name=name, first=first, median=median, iqr=q[1] - q[0], sentences=len(encoded),
                predictions=predictions, host=host, segments=len(seq_of_chunk),
                padding=1 - real / chunks.inputs.size, steps=-(-len(seq_of_chunk) // scorer.batch_size))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--mem-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the split (after one untimed)")
    parser.add_argument("--num-sentences", type=int, default=None, help="valid split size (default 500)")
    args = parser.parse_args(argv)

    tree_list = corpora.get_corpus("builtin", "valid", num_sentences=args.num_sentences, seed=0)
    train_trees = corpora.get_corpus("builtin", "train", seed=0)
    vocab = pl.build_vocabulary([pl.tokens_for_rule(t, "tg", pos_tags=True) for t in train_trees])
    device = jax.devices()[0]
    print(f"device: {device.platform} ({device.device_kind}) x {jax.local_device_count()}; size {args.size} "
          f"{SIZES[args.size]}, T={args.seq_len} M={args.mem_len} B={args.batch_size}; built-in valid split, "
          f"{len(tree_list)} sentences")
    results = {}
    for name in MODELS:
        r = run(name, vocab, tree_list, args)
        results[name] = r
        print(f"{name:7s} first pass {r['first']:6.2f}s (compiles) | pass {r['median'] * 1e3:8.1f} ms "
              f"(IQR {r['iqr'] * 1e3:.1f}) | {r['sentences'] / r['median']:8.1f} sentences/s | "
              f"{r['predictions'] / r['median']:9.0f} predictions/s | {r['segments']} segments in {r['steps']} "
              f"steps, {r['padding']:.0%} padding | host segments {r['host'] * 1e3:.1f} ms "
              f"({r['host'] / r['median']:.0%} of a pass)")
    ratio = results["tg"]["median"] / results["txl_cc"]["median"]
    print(f"tg / txl_cc pass time: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
