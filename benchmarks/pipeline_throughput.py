"""Input tokens/s of the TG data path on one core: dense chunks, compact chunks, the slow oracle.

TG rules with smart memory, T = M = 256, sentence level, on the Tale of Two
Cities treebank (../shared/data/tale_of_two_cities/train.txt; the built-in
treebank when that file is absent). "Input tokens" are the model inputs
before closing non-terminals are duplicated (BOS + Choe–Charniak actions),
as in the authors' figure of about 87,000 tokens/s for their C++ extension
(32,000 through its Python data path) on one core of this kind of machine.

Bars: dense >= 250,000 tokens/s, compact >= 1,000,000 tokens/s.

    python benchmarks/pipeline_throughput.py [--sentences N] [--batch 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for the oracle in tests/

import numpy as np  # noqa: E402

from tests.syntax.masks_oracle import oracle_tg_chunks  # noqa: E402
from tgjax.data import corpora  # noqa: E402
from tgjax.syntax import actions, masks, trees  # noqa: E402
from tgjax.syntax import token_types as tt  # noqa: E402

AUTHORS_CPP_TOKENS_PER_S = 87_000
BAR_DENSE = 250_000
BAR_COMPACT = 1_000_000


def load_sequences(limit: int | None):
    path = REPO.parent / "shared" / "data" / "tale_of_two_cities" / "train.txt"
    if path.exists():
        tree_list, name = trees.read_treebank(path), str(path)
    else:
        tree_list, name = corpora.get_corpus("builtin", "train"), "built-in treebank (train)"
    tree_list = tree_list[:limit] if limit else tree_list
    vocab: dict[str, int] = {}
    sequences = []
    for tree in tree_list:
        tokens = actions.choe_charniak(tree, pos_tags=True)  # PTB-style tagged trees
        ids = [vocab.setdefault(tok, len(vocab) + 4) for tok in tokens]
        types = [actions.token_type(tok) for tok in tokens]
        inputs = np.array([1] + ids, np.int32)
        ttypes = np.array([tt.BOS] + types, np.int32)
        sequences.append((inputs, ttypes, np.append(inputs[1:], 0), np.append(ttypes[1:], tt.PAD)))
    return sequences, name


def throughput(fn, sequences, batch: int, repeat: int = 1) -> float:
    tokens = sum(len(s[0]) for s in sequences)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for b in range(0, len(sequences), batch):
            fn(sequences[b:b + batch])
        best = min(best, time.perf_counter() - start)
    return tokens / best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=None, help="use the first N trees (default: all)")
    parser.add_argument("--oracle-sentences", type=int, default=150)
    parser.add_argument("--batch", type=int, default=128, help="sequences per chunks_many call")
    args = parser.parse_args(argv)

    sequences, name = load_sequences(args.sentences)
    T = M = 256
    rule = masks.TGMasking(T, M, smart_memory=True)
    print(f"corpus: {name}: {len(sequences)} sentences, {sum(len(s[0]) for s in sequences)} input tokens")
    print("TG rules, smart memory, T = M = 256, one core\n")

    oracle_part = sequences[: args.oracle_sentences]
    oracle = throughput(lambda seqs: [oracle_tg_chunks(*s, T, M) for s in seqs], oracle_part, 1)
    dense_one = throughput(lambda seqs: [rule.chunks(*s) for s in seqs], sequences[:1000], 1)
    dense = throughput(rule.chunks_many, sequences, args.batch, repeat=2)
    compact_one = throughput(lambda seqs: [rule.compact_chunks(*s) for s in seqs], sequences[:1000], 1)
    compact = throughput(rule.compact_chunks_many, sequences, args.batch, repeat=2)

    rows = [
        ("slow oracle (Algorithm 1 + Figure 8, per entry)", oracle, None),
        ("dense, .chunks() one sequence per call", dense_one, None),
        (f"dense, .chunks_many() {args.batch} per call", dense, BAR_DENSE),
        ("compact, .compact_chunks() one sequence per call", compact_one, None),
        (f"compact, .compact_chunks_many() {args.batch} per call", compact, BAR_COMPACT),
    ]
    print(f"{'path':55s} {'tokens/s':>12s} {'x oracle':>9s} {'x C++ 87k':>10s}  bar")
    for label, rate, bar in rows:
        verdict = "" if bar is None else (f">= {bar:,}: " + ("PASS" if rate >= bar else "FAIL"))
        print(f"{label:55s} {rate:12,.0f} {rate / oracle:9.1f} {rate / AUTHORS_CPP_TOKENS_PER_S:10.2f}  {verdict}")
    print(f"\nratio dense / oracle: {dense / oracle:.1f}x;  compact / oracle: {compact / oracle:.1f}x")
    print(f"stack entries dropped from a full memory: {rule.stats.dropped_stack_entries}")


if __name__ == "__main__":
    main()
