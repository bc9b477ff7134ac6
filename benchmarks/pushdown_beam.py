"""Pushdown-LM synchronous inference: the device beam against the host oracle beam.

  device  `tgjax.infer.pushdown_search.PushdownSearch`: one compiled loop per sentence, keys/values cached;
  host    `tgjax.infer.pushdown_oracle.host_beam`: a whole teacher-forced pass per hypothesis and step (the
          tests' reference; what a straightforward implementation of eq. 7 costs).

Random-weight models of two sizes: `tiny` (pushdown_tiny's d 64, 2 layers) and
`bllip` (the paper's BLLIP model: 16 layers, d 1024, 8 heads, FFN 4096; for a
GPU). Sentences are random ids of `--length` tokens. Each side gets one
warm-up sentence (compilation) before it is timed; the printed ratio is host
time / device time per sentence at the same beam, and both sides' log p(x)
must agree (1e-3). `--no-host` times the device side alone (the oracle is
far too slow at BLLIP size or beam 300).

    python benchmarks/pushdown_beam.py                                   # tiny, beam 8, 12 tokens, CPU
    python benchmarks/pushdown_beam.py --size bllip --beam 300 --length 40 --sentences 4 --no-host   # GPU

Prints load average beside the numbers (the CPU is shared).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
from flax import nnx

from tgjax.infer.pushdown_oracle import host_beam
from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig

SIZES = {
    "tiny": {"vocab_size": 200, "d_model": 64, "num_layers": 2, "num_heads": 4, "ffw_hidden_size": 256},
    "bllip": {"vocab_size": 50257, "d_model": 1024, "num_layers": 16, "num_heads": 8, "ffw_hidden_size": 4096},
}


class _Ids:
    bos_id, eos_id = 1, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--beam", type=int, default=8)
    parser.add_argument("--length", type=int, default=12, help="tokens per sentence, <s> and <eos> included")
    parser.add_argument("--sentences", type=int, default=3)
    parser.add_argument("--no-host", action="store_true", help="time the device beam only")
    args = parser.parse_args()
    config = PushdownLMConfig(**SIZES[args.size], sequence_length=max(args.length, 16), dropout=0.0,
                              embedding_dropout=0.0)
    model = PushdownLM(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    sentences = [np.r_[1, rng.integers(3, config.vocab_size, args.length - 2), 2] for _ in range(args.sentences + 1)]
    search = PushdownSearch(model, _Ids(), PushdownBeamConfig(beam_size=args.beam))

    def timed(run):
        run(sentences[0])  # compilation
        start = time.perf_counter()
        values = [run(s) for s in sentences[1:]]
        return (time.perf_counter() - start) / args.sentences, values

    device_seconds, device_logp = timed(lambda s: search.search_ids(s).log_prob)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.size}: beam {args.beam}, {args.length} tokens, {args.sentences} sentences; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"device beam: {device_seconds:.3f} s/sentence ({args.length / device_seconds:.1f} tokens/s); "
          f"peak RSS {rss:.0f} MiB")
    if args.no_host:
        return
    host_seconds, host_logp = timed(lambda s: host_beam(model, s, args.beam).log_prob)
    gap = max(abs(a - b) for a, b in zip(device_logp, host_logp))
    print(f"host oracle beam: {host_seconds:.3f} s/sentence; max |log p(x) difference| {gap:.1e}")
    print(f"ratio host / device: {host_seconds / device_seconds:.1f}x")
    assert gap < 1e-3, gap


if __name__ == "__main__":
    main()
