"""Sentences per second of word-synchronous beam search: the host search against the device engine.

One run parses the same sentences with the host-steered search
(`tgjax.infer.beam.WordSynchronousBeamSearch`, one jitted model call per
action step, beam bookkeeping in NumPy) and with the device engine
(`tgjax.infer.device_beam.DeviceBeamSearch`, the whole search one compiled
`lax.while_loop`), each timed after a warm-up pass over the same sentences
(every shape compiled), and prints sentences/s of both, their ratio, and
whether they found the same best trees and log p(x) (largest difference).

Default: the setting the 5x bar is measured at. A TG of the ToTC config's sizes (4 layers,
d = 128, 4 heads, FFN 512; random init unless `--workdir`) with the ToTC
training vocabulary (words seen once are UNK), word beam 5 / action beam 20 /
fast-track 1, the first 64 test sentences of ../shared/data/tale_of_two_cities
(the built-in valid split when that is absent), searched together.

    python benchmarks/beam_search.py                          # host vs device, the bar (>= 5x)
    python benchmarks/beam_search.py --workdir runs/tg_totc   # a trained model
    python benchmarks/beam_search.py --scaling 50/500,100/1000 --sentences 4 --min-words 20 --max-words 20
        # device only: time per sentence and peak memory at two beam sizes (each in its own process)
    python benchmarks/beam_search.py --recompute-baseline     # also the host search recomputing every prefix

Runs unchanged on CPU, GPU or TPU (whatever `jax.devices()[0]` is).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from tgjax.data.corpora import get_corpus  # noqa: E402
from tgjax.data.vocab import build_word_dictionary  # noqa: E402
from tgjax.infer.beam import BeamConfig, WordSynchronousBeamSearch  # noqa: E402
from tgjax.infer.device_beam import DeviceBeamSearch  # noqa: E402
from tgjax.models import build_model, count_parameters  # noqa: E402
from tgjax.syntax import actions  # noqa: E402
from tgjax.syntax.trees import read_treebank  # noqa: E402

TOTC = REPO.parent / "shared" / "data" / "tale_of_two_cities"
TOTC_SIZES = dict(d_model=128, num_layers=4, num_heads=4, ffw_hidden_size=512, sequence_length=64, memory_length=64)


DATA_DIR = TOTC  # --data replaces it


def corpus(split: str):
    """ToTC trees of a split (`--data DIR`: DIR/{train,test}.txt), or the built-in treebank's (with a note)."""
    path = DATA_DIR / f"{split}.txt"
    if path.exists():
        return read_treebank(path), f"ToTC {split}"
    print(f"note: {path} not found; using the built-in treebank", file=sys.stderr)
    return get_corpus("builtin", "valid" if split == "test" else split), f"built-in {split}"


def model_and_vocab(args):
    if args.workdir:
        import tgjax

        model = tgjax.load(args.workdir, step=args.step)
        if model.rule not in ("tg", "txl_cc"):
            raise SystemExit(f"{model.model_name}: beam search needs a syntactic model (TG or TXL (CC))")
        loaded = model.restore()
        return loaded.model, loaded.vocab, loaded.rule, f"{loaded.model_name} from {args.workdir}"
    train, _ = corpus("train")
    vocab = build_word_dictionary([actions.choe_charniak(t, pos_tags=True) for t in train], min_count=2)
    model = build_model("tg", vocab.size, rngs=nnx.Rngs(0), **TOTC_SIZES)
    return model, vocab, "tg", "tg, random init (ToTC sizes: d=128, 4 layers, 4 heads, FFN 512)"


def sentences_of(args):
    trees, name = corpus("test")
    chosen = [t.leaves() for t in trees if args.min_words <= len(t.leaves()) <= args.max_words][:args.sentences]
    return chosen, name


def timed(search, sentences):
    start = time.perf_counter()
    results = search.search(sentences)
    return results, time.perf_counter() - start


def compare(a, b) -> str:
    same = sum(x.best_actions == y.best_actions for x, y in zip(a, b))
    gap = max(abs(x.log_prob - y.log_prob) for x, y in zip(a, b))
    return f"same best trees: {same}/{len(a)}; largest log p(x) difference {gap:.1e}"


def scaling_child(args) -> int:
    """One beam size in this process: time per sentence and peak RSS, as one JSON line."""
    model, vocab, rule, _ = model_and_vocab(args)
    sentences, _ = sentences_of(args)
    word_beam, action_beam = (int(x) for x in args.child.split("/"))
    config = BeamConfig(word_beam=word_beam, action_beam=action_beam, fast_track=args.fast_track,
                        batch_sentences=args.batch_sentences)
    search = DeviceBeamSearch(model, vocab, rule, config)
    _, warm = timed(search, sentences[:1] * min(len(sentences), args.batch_sentences))  # compiles the shape
    results, seconds = timed(search, sentences)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(json.dumps(dict(beam=args.child, seconds=seconds, per_sentence=seconds / len(sentences), warm=warm,
                          peak_rss_gb=rss_gb, words=sum(len(s) for s in sentences),
                          log_p=[r.log_prob for r in results], stats=search.last_stats), default=str))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=None, help="a trained run (default: a random-init ToTC-size TG)")
    parser.add_argument("--step", default="best")
    parser.add_argument("--data", default=str(TOTC),
                        help="a directory with train.txt and test.txt treebanks (default: ../shared/data/"
                             "tale_of_two_cities; the built-in treebank when absent)")
    parser.add_argument("--sentences", type=int, default=64, help="first N test sentences (within the word limits)")
    parser.add_argument("--min-words", type=int, default=1)
    parser.add_argument("--max-words", type=int, default=10 ** 9)
    parser.add_argument("--word-beam", type=int, default=5)
    parser.add_argument("--action-beam", type=int, default=20)
    parser.add_argument("--fast-track", type=int, default=1)
    parser.add_argument("--batch-sentences", type=int, default=16,
                        help="sentences per compiled device search (the host search: --host-batch)")
    parser.add_argument("--host-batch", type=int, default=64, help="the host search's batch_sentences")
    parser.add_argument("--max-batch", type=int, default=256, help="the host search's most rows per model call")
    parser.add_argument("--recompute-baseline", action="store_true",
                        help="also the host search recomputing every prefix (use_cache=False)")
    parser.add_argument("--no-host", action="store_true", help="the device engine only")
    parser.add_argument("--scaling", default=None, help="device only: beam sizes W/A,W/A to compare (one process each)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global DATA_DIR
    DATA_DIR = Path(args.data)
    if args.child:
        return scaling_child(args)

    sentences, data_name = sentences_of(args)
    words = sum(len(s) for s in sentences)
    print(f"device: {jax.devices()[0].device_kind} ({jax.devices()[0].platform})")
    print(f"data: {data_name}, {len(sentences)} sentences, {words} words "
          f"(lengths {min(map(len, sentences))}..{max(map(len, sentences))})")
    if args.scaling:
        rows = []
        for beam in args.scaling.split(","):
            child = [sys.executable, __file__, "--child", beam] + [a for a in (argv or sys.argv[1:])
                                                                    if not a.startswith("--scaling")
                                                                    and a != args.scaling]
            out = subprocess.run(child, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                return out.returncode
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"beam {row['beam']:>9}: {row['per_sentence']:.2f} s/sentence ({row['seconds']:.1f}s for "
                  f"{len(sentences)} sentences, compile {row['warm']:.0f}s), peak RSS {row['peak_rss_gb']:.2f} GB, "
                  f"stats {row['stats']}")
        if len(rows) >= 2:
            (w0, a0), (w1, a1) = (map(int, rows[0]["beam"].split("/"))), (map(int, rows[-1]["beam"].split("/")))
            print(f"time per sentence grew {rows[-1]['per_sentence'] / rows[0]['per_sentence']:.2f}x for a "
                  f"{a1 / a0:.2f}x action beam ({a0} -> {a1}; word beam {w0} -> {w1})")
        return 0

    model, vocab, rule, described = model_and_vocab(args)
    config = BeamConfig(word_beam=args.word_beam, action_beam=args.action_beam, fast_track=args.fast_track,
                        batch_sentences=args.host_batch, max_batch=args.max_batch)
    print(f"model: {described}, {count_parameters(model):,} parameters, vocabulary {vocab.size}")
    print(f"beam: word {config.word_beam}, action {config.action_beam}, fast-track {config.fast_track}")

    device = DeviceBeamSearch(model, vocab, rule, BeamConfig(**{**config.__dict__,
                                                                "batch_sentences": args.batch_sentences}))
    _, warm = timed(device, sentences)
    steps = device.steps
    device_results, device_seconds = timed(device, sentences)
    print(f"{'device':>10}: {len(sentences) / device_seconds:7.2f} sentences/s  {words / device_seconds:8.1f} words/s"
          f"  ({device_seconds:.1f}s; warm-up with compilation {warm:.1f}s; {args.batch_sentences} sentences per "
          f"compiled search; {device.steps - steps} action steps; stats {device.last_stats})")
    if args.no_host:
        return 0
    host = WordSynchronousBeamSearch(model, vocab, rule, config)
    _, host_warm = timed(host, sentences)
    calls = host.scorer.calls
    host_results, host_seconds = timed(host, sentences)
    print(f"{'host':>10}: {len(sentences) / host_seconds:7.2f} sentences/s  {words / host_seconds:8.1f} words/s  "
          f"({host_seconds:.1f}s; warm-up with compilation {host_warm:.1f}s; {host.scorer.calls - calls} model calls, "
          f"{args.host_batch} sentences at a time)")
    print(f"device / host: {host_seconds / device_seconds:.2f}x sentences/s ({compare(host_results, device_results)})")
    if args.recompute_baseline:
        full = WordSynchronousBeamSearch(model, vocab, rule, BeamConfig(**{**config.__dict__, "use_cache": False}))
        timed(full, sentences)
        full_results, full_seconds = timed(full, sentences)
        print(f"{'recompute':>10}: {len(sentences) / full_seconds:7.2f} sentences/s; host incremental over it "
              f"{full_seconds / host_seconds:.2f}x ({compare(full_results, host_results)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
