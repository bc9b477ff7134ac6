"""Sentences per second of word-synchronous beam search with a small TG, on the built-in valid split.

The search (`tgjax.infer.beam.WordSynchronousBeamSearch`) parses each
sentence of the built-in treebank's valid split, giving surprisals, p(x) and
the best tree. Timed after a warm-up pass over the same sentences (so that
every shape bucket is compiled); printed: the device, the model, the beam
settings, sentences/s and words/s, model calls and rows scored; and, against
the baseline of recomputing every prefix from scratch (`use_cache=False`,
the simplest correct scorer), the speed-up of incremental scoring with
prefix caches, after checking that both give the same parses.

    python benchmarks/beam_search.py                            # random-init small TG, 64 sentences
    python benchmarks/beam_search.py --workdir runs/tiny        # a trained model (tgjax train)
    python benchmarks/beam_search.py --word-beam 20 --action-beam 100 --sentences 200 --no-baseline

Runs unchanged on CPU, GPU or TPU (whatever `jax.devices()[0]` is).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from tgjax.data.corpora import get_corpus  # noqa: E402
from tgjax.data.vocab import build_word_dictionary  # noqa: E402
from tgjax.infer.beam import BeamConfig, WordSynchronousBeamSearch  # noqa: E402
from tgjax.models import build_model, count_parameters  # noqa: E402
from tgjax.syntax import actions  # noqa: E402

SMALL = dict(d_model=64, num_layers=2, num_heads=4, ffw_hidden_size=256, sequence_length=64, memory_length=64)


def model_and_vocab(args):
    if args.workdir:
        from tgjax.infer.loading import load_model

        loaded = load_model(args.workdir, step=args.step)
        if loaded.rule not in ("tg", "txl_cc"):
            raise SystemExit(f"{loaded.model_name}: beam search needs a syntactic model")
        return loaded.model, loaded.vocab, loaded.rule, f"{loaded.model_name} from {args.workdir}"
    train = get_corpus("builtin", "train")
    vocab = build_word_dictionary([actions.choe_charniak(t, pos_tags=True) for t in train])
    model = build_model("tg", vocab.size, rngs=nnx.Rngs(0), **SMALL)
    return model, vocab, "tg", "tg, random init (d=64, 2 layers, 4 heads, FFN 256)"


def run(search: WordSynchronousBeamSearch, sentences):
    start = time.perf_counter()
    results = search.search(sentences)
    return results, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=None, help="a trained run (default: a random-init small TG)")
    parser.add_argument("--step", default="best")
    parser.add_argument("--sentences", type=int, default=64, help="first N sentences of the built-in valid split")
    parser.add_argument("--word-beam", type=int, default=10)
    parser.add_argument("--action-beam", type=int, default=50)
    parser.add_argument("--fast-track", type=int, default=2)
    parser.add_argument("--batch-sentences", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--no-baseline", action="store_true", help="skip the full-recompute baseline")
    args = parser.parse_args(argv)

    model, vocab, rule, described = model_and_vocab(args)
    sentences = [t.leaves() for t in get_corpus("builtin", "valid")[:args.sentences]]
    words = sum(len(s) for s in sentences)
    config = BeamConfig(word_beam=args.word_beam, action_beam=args.action_beam, fast_track=args.fast_track,
                        batch_sentences=args.batch_sentences, max_batch=args.max_batch)
    print(f"device: {jax.devices()[0].device_kind} ({jax.devices()[0].platform})")
    print(f"model: {described}, {count_parameters(model):,} parameters, vocabulary {vocab.size}")
    print(f"beam: word {config.word_beam}, action {config.action_beam}, fast-track {config.fast_track}, "
          f"{config.batch_sentences} sentences at a time, at most {config.max_batch} rows per call")
    print(f"data: built-in valid split, {len(sentences)} sentences, {words} words")

    timings = {}
    for name, use_cache in (("incremental", True), ("recompute", False)):
        if name == "recompute" and args.no_baseline:
            continue
        search = WordSynchronousBeamSearch(model, vocab, rule, BeamConfig(**{**config.__dict__, "use_cache": use_cache}))
        _, warm = run(search, sentences)  # compiles every bucket
        calls, rows, positions = search.scorer.calls, search.scorer.rows, search.scorer.positions
        results, seconds = run(search, sentences)
        calls, rows = search.scorer.calls - calls, search.scorer.rows - rows
        positions = search.scorer.positions - positions
        timings[name] = (results, seconds)
        print(f"{name:>12}: {len(sentences) / seconds:7.2f} sentences/s  {words / seconds:8.1f} words/s  "
              f"({seconds:.1f}s; warm-up with compilation {warm:.1f}s; {calls} model calls, {rows} rows, "
              f"{positions / max(rows, 1):.1f} new positions per row)")
    if "recompute" in timings:
        (inc, t_inc), (full, t_full) = timings["incremental"], timings["recompute"]
        same = all(a.best_actions == b.best_actions for a, b in zip(inc, full))
        gap = max(float(np.max(np.abs(a.prefix_log_probs - b.prefix_log_probs))) for a, b in zip(inc, full))
        print(f"speed-up of incremental scoring over recomputing every prefix: {t_full / t_inc:.2f}x "
              f"(same best trees: {same}; largest prefix log-prob difference {gap:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
