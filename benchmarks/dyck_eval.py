"""`tgjax eval dyck --tape model`: prefixes searched together against one at a time.

  grouped   `tgjax.eval.dyck.model_tape_scorer`: `--parallel` prefixes per compiled beam loop
            (`PushdownSearch.prefix_attachments`), then one padded teacher-forced pass under the tapes found;
  single    the previous scorer: `PushdownSearch.prefix` per prefix (a beam loop and a pass for each).

A random-weight Pushdown-LM of the Dyck recipe's shape (6 layers, d 128, 8 heads, binary tape; `--layers`,
`--d-model` to shrink it) or a trained one (`--workdir`), on the first `--examples` prefixes of one of the
evaluation's sets. Each side runs the prefixes once to compile and is then timed on the same prefixes; the
printed ratio is single time / grouped time, and both must find the same tapes.

    python benchmarks/dyck_eval.py                                      # CPU: beam 10, 8 dyck50 prefixes
    python benchmarks/dyck_eval.py --beam 50 --examples 32 --parallel 16    # an accelerator
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from flax import nnx

from tgjax.data import dyck
from tgjax.eval import dyck as ed
from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig


def model_of(args, vocab):
    if args.workdir:
        import tgjax

        return tgjax.load(args.workdir).restore().model
    config = PushdownLMConfig(vocab_size=vocab.size, d_model=args.d_model, num_layers=args.layers, num_heads=8,
                              ffw_hidden_size=4 * args.d_model, sequence_length=512, num_depths=2,
                              binary_tape=True, dropout=0.0, embedding_dropout=0.0)
    return PushdownLM(config, rngs=nnx.Rngs(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=None, help="a trained Dyck run (default: random weights)")
    parser.add_argument("--set", default="dyck50", help="dyck50 | dyck100 | dyck200 | dyck300 | depth")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--beam", type=int, default=10)
    parser.add_argument("--parallel", type=int, default=8, help="prefixes per compiled search (grouped side)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=128)
    args = parser.parse_args()
    vocab = dyck.dyck_vocabulary(20)
    model = model_of(args, vocab)
    examples = ed.evaluation_sets([args.set])[args.set][:args.examples]
    ids = [np.asarray([vocab.bos_id] + [vocab.id_of(t) for t in e.prefix], np.int32) for e in examples]
    gold = [ed.gold_attachments(e) for e in examples]
    grouped = ed.model_tape_scorer(model, vocab, beam_size=args.beam, num_parallel=args.parallel)
    search = PushdownSearch(model, vocab, PushdownBeamConfig(beam_size=args.beam, bucket=64))

    def single(rows, _gold):
        results = [search.prefix(row) for row in rows]
        return np.stack([r.log_probs[-1] for r in results]), [np.asarray(r.best_attach) for r in results]

    def timed(scorer):
        def run():
            out = []
            for first in range(0, len(ids), args.parallel):
                out.append(scorer(ids[first:first + args.parallel], gold[first:first + args.parallel]))
            return out
        start = time.perf_counter()
        run()  # compiles
        warm = time.perf_counter() - start
        start = time.perf_counter()
        out = run()
        return time.perf_counter() - start, warm, [t for _, tapes in out for t in tapes]

    lengths = [len(i) for i in ids]
    print(f"{args.set}: {len(ids)} prefixes of {min(lengths)}..{max(lengths)} tokens; beam {args.beam}; "
          f"model {'from ' + args.workdir if args.workdir else f'random, {args.layers} x {args.d_model}'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    grouped_s, grouped_warm, grouped_tapes = timed(grouped)
    single_s, single_warm, single_tapes = timed(single)
    same = sum(np.array_equal(a, b) for a, b in zip(grouped_tapes, single_tapes))
    print(f"  grouped ({args.parallel} per search): {len(ids) / grouped_s:8.2f} prefixes/s ({grouped_s:.1f} s; "
          f"first run with compilation {grouped_warm:.1f} s)")
    print(f"  single (one per search):   {len(ids) / single_s:8.2f} prefixes/s ({single_s:.1f} s; "
          f"first run with compilation {single_warm:.1f} s)")
    print(f"grouped / single: {single_s / grouped_s:.2f}x prefixes/s; same tapes {same}/{len(ids)}")


if __name__ == "__main__":
    main()
