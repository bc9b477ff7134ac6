"""Unsupervised dependency parsing scores: UDGN's protocol (released-code.md §4.6), and `tgjax eval dependency`.

    tgjax eval dependency --workdir W --treebank FILE [--treebank FILE2 ...]
    tgjax eval dependency --workdir W --treebank builtin [--split test]
    tgjax eval dependency --workdir W --craft test
    tgjax eval dependency --baselines-only --treebank FILE
    tgjax eval dependency --workdir W --treebank wsj23.mrg --gold wsj23.conllx   # heads from a CoNLL file

Gold: dependency trees from the constituency trees by head rules
(`tgjax.data.deps`: `collins` = Collins (1999) as CoreNLP's CollinsHeadFinder
for files, `builtin` = the built-in grammar's exact head marks), keeping only
the release's WORD_TAGS (punctuation, traces, `$`, `#` dropped and heads
climbed past them; the root heads itself). **Neither scheme is Stanford
Dependencies**, which the thesis scored against: Collins makes auxiliaries and
copulas heads, so absolute UAS here is not comparable with the thesis' 52.5.
The scheme is printed beside every number. `--coordination` and
`--dropped-root` choose between CoreNLP's and tgjax's earlier coordination
rule and between one re-chained root and the release's self-headed words when
the root word is dropped (`tgjax.syntax.heads`).

`--gold FILE` (CoNLL-U or CoNLL-X, repeatable, read in order; `tgjax.data.conllu`)
takes the heads from the file instead, as the release reads its `.dep` files
(e.g. Stanford Dependencies from CoreNLP, the thesis' gold): the file's
sentences go with the treebank's trees in order, its tokens are filtered by
the same WORD_TAGS on the file's own POS column (heads climbed the same way),
and the kept words must be the treebank's kept words, sentence by sentence;
the first difference stops the evaluation with one line naming the file, the
sentence and what differs.

The model reads each kept sentence alone (the release's word form:
lower-cased, digit runs -> N), and its parser gives H = p(head of i = j) with
the diagonal set to zero (`tgjax.infer.udgn`). Two decodings:

* **argmax**: pred_i = argmax_j H_ij. It never predicts the root for n >= 2
  (H_ii = 0), so every root counts as an error, as in the release.
* **tree** (Chu-Liu/Edmonds, `tgjax.eval.mst.best_single_root_tree`): scores
  log(H + 1e-9), every word tried as the single root, the best tree kept; the
  root's prediction is itself.

Scores, over all kept words of all sentences (corpus level):
UAS = #(pred_i = gold_i) / #words, the root included;
UUAS = sum over sentences of |{{i, pred_i}} ∩ {{i, gold_i}}| / #words, over
sets of unordered pairs (duplicates collapse; the root's pair is {i}).
Baselines scored by the same code: left chain (each word headed by the word
before it, the first word the root), right chain (by the word after it, the
last word the root), and random projective trees (`random_projective_heads`:
a uniformly chosen root in each span, each side cut at random into
contiguous segments, each a subtree built the same way attached to it),
averaged over `--random-seeds` draws.
MLM perplexity: exp of the masked-token cross-entropy over the same sentences,
pooled over `--mlm-runs` fixed maskings (mask rate 0.3, as training).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tgjax.eval.arguments import check_counts
from tgjax.eval.mst import best_single_root_tree
from tgjax.limits import DEPENDENCY_MAX_WORDS, add_bad_input_args, add_max_words_arg, reader_policy
from tgjax.outputs import check_output, write_json
from tgjax.syntax.heads import COORDINATION_RULES, DROPPED_ROOT_RULES

__all__ = ["add_dependency_arguments", "argmax_heads", "attachment_scores", "left_chain", "main_dependency",
           "random_projective_heads", "right_chain", "run_dependency", "tree_heads"]


# -----------------------------------------------------------------------------
# Decoding and baselines: heads are 0-based word indices, the root heads itself.


def argmax_heads(head_probs: np.ndarray) -> np.ndarray:
    """pred_i = argmax_j H_ij with the diagonal zeroed (the release's argmax mode): head_probs [n, n] -> [n]."""
    h = np.array(head_probs, dtype=np.float64)
    np.fill_diagonal(h, 0.0)
    return np.argmax(h, axis=1)


def tree_heads(head_probs: np.ndarray) -> np.ndarray:
    """The release's tree mode: Chu-Liu/Edmonds on log(H + 1e-9) (diagonal zeroed), every root tried: [n]."""
    h = np.array(head_probs, dtype=np.float64)
    np.fill_diagonal(h, 0.0)
    return best_single_root_tree(np.log(h + 1e-9))[0]


def left_chain(n: int) -> np.ndarray:
    """Each word headed by the word before it; word 0 is the root."""
    return np.maximum(np.arange(n) - 1, 0)


def right_chain(n: int) -> np.ndarray:
    """Each word headed by the word after it; the last word is the root."""
    return np.minimum(np.arange(n) + 1, n - 1)


def random_projective_heads(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random projective tree [n]: a uniform root in the span; each side of it cut into contiguous
    segments (every gap cut with probability 1/2), each segment a subtree built the same way whose
    root is a dependent of the span's root. Every projective tree has probability > 0 (not uniform)."""
    heads = np.empty(n, np.int64)
    stack = [(0, n, -1)]  # a segment [start, end) and the word its root depends on (-1: the sentence root)
    while stack:
        start, end, parent = stack.pop()
        if start >= end:
            continue
        root = int(rng.integers(start, end))
        heads[root] = root if parent < 0 else parent
        for side_start, side_end in ((start, root), (root + 1, end)):
            cuts = [side_start + 1 + k for k in range(side_end - side_start - 1) if rng.random() < 0.5]
            bounds = [side_start, *cuts, side_end]
            stack.extend((a, b, root) for a, b in zip(bounds, bounds[1:]) if a < b)
    return heads


def tree_shape(heads: Sequence[np.ndarray]) -> dict[str, float]:
    """The shape of a set of dependency trees (`heads[i] == i` marks the root), what a parser settles on when its
    UAS does not follow its fit: over the non-root words, the % headed to their right, the % headed by a neighbour
    and the mean head distance; over the sentences of more than one word, the % rooted at the last and at the first
    word (a one-word sentence is rooted at both and says nothing)."""
    right = adjacent = words = root_last = root_first = longer = 0
    distance = 0
    for sentence in heads:
        index = np.arange(len(sentence))
        dependents = sentence != index
        offsets = sentence[dependents] - index[dependents]
        right += int(np.sum(offsets > 0))
        adjacent += int(np.sum(np.abs(offsets) == 1))
        distance += int(np.sum(np.abs(offsets)))
        words += int(np.sum(dependents))
        if len(sentence) > 1:
            longer += 1
            root_last += int(sentence[-1] == len(sentence) - 1)
            root_first += int(sentence[0] == 0)
    per_word, per_sentence = 100.0 / max(words, 1), 100.0 / max(longer, 1)
    return {"head_right": right * per_word, "adjacent": adjacent * per_word, "mean_distance": distance / max(words, 1),
            "root_last": root_last * per_sentence, "root_first": root_first * per_sentence}


@dataclasses.dataclass
class Counts:
    """Corpus sums: words, correctly headed words, matching unordered pairs."""

    words: int = 0
    directed: int = 0
    undirected: int = 0

    def add(self, predicted: np.ndarray, gold: np.ndarray) -> None:
        predicted, gold = np.asarray(predicted), np.asarray(gold)
        if predicted.shape != gold.shape:
            raise ValueError(f"predicted heads for {len(predicted)} words, gold for {len(gold)}")
        self.words += len(gold)
        self.directed += int(np.sum(predicted == gold))
        pairs = lambda heads: {frozenset((i, int(h))) for i, h in enumerate(heads)}  # noqa: E731
        self.undirected += len(pairs(predicted) & pairs(gold))

    @property
    def uas(self) -> float:
        return 100.0 * self.directed / self.words if self.words else float("nan")

    @property
    def uuas(self) -> float:
        return 100.0 * self.undirected / self.words if self.words else float("nan")


def attachment_scores(predicted: Sequence[np.ndarray], gold: Sequence[np.ndarray]) -> tuple[float, float]:
    """(UAS, UUAS) in % over a corpus of sentences (module docstring)."""
    counts = Counts()
    for p, g in zip(predicted, gold, strict=True):
        counts.add(p, g)
    if not counts.words:  # a score over no word is no score
        raise ValueError("no word to score: attachment scores need at least one sentence with words")
    return counts.uas, counts.uuas


def baseline_scores(gold: Sequence[np.ndarray], random_seeds: int = 5) -> dict[str, dict[str, float]]:
    """Left chain, right chain, random projective (mean and sd over `random_seeds` seeded draws)."""
    out = {}
    for name, make in (("left chain", left_chain), ("right chain", right_chain)):
        uas, uuas = attachment_scores([make(len(g)) for g in gold], gold)
        out[name] = {"uas": uas, "uuas": uuas}
    draws = []
    for seed in range(random_seeds):
        rng = np.random.default_rng(seed)
        draws.append(attachment_scores([random_projective_heads(len(g), rng) for g in gold], gold))
    if draws:
        draws = np.array(draws)
        out["random projective"] = {"uas": float(draws[:, 0].mean()), "uuas": float(draws[:, 1].mean()),
                                    "uas_sd": float(draws[:, 0].std()), "uuas_sd": float(draws[:, 1].std()),
                                    "seeds": random_seeds}
    return out


# -----------------------------------------------------------------------------
# Reading the gold treebank.


@dataclasses.dataclass
class GoldTreebank:
    words: list[list[str]]  # the kept words, as in the file
    heads: list[np.ndarray]
    source: str
    scheme: str
    num_trees: int
    report: str  # the head finder's counts (unknown labels, filtered tokens, empty sentences)
    gold_files: list[str] = dataclasses.field(default_factory=list)  # CoNLL files the heads came from, if any

    @property
    def heads_note(self) -> str:
        """Where the gold heads come from, as printed beside the scores."""
        if self.gold_files:
            return f"read from {', '.join(self.gold_files)} (the file's own scheme)"
        return f"{self.scheme} head rules, not Stanford Dependencies"


def _read_trees(paths: Sequence[str], split: str, reading: Reading) -> tuple[list, str]:
    """The trees of the treebank files (or the built-in treebank's split) and a name for them.

    A malformed tree, or one over `reading.max_words` (refused while read, before it is built), stops with
    file:line:column, or is skipped and counted (on stderr) as `reading` says.
    """
    from tgjax.syntax.trees import read_treebank

    if list(paths) == ["builtin"]:
        from tgjax.data.corpora import get_corpus

        return get_corpus("builtin", split), f"built-in treebank ({split})"
    trees = []
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no treebank at {path}")
        policies = dict(on_error=reader_policy(reading.on_bad_tree), on_too_long=reader_policy(reading.on_too_long))
        if "skip" not in policies.values():
            trees.extend(read_treebank(path, max_words=reading.max_words))
            continue
        found, report = read_treebank(path, max_words=reading.max_words, **policies)
        if report.num_skipped or report.num_too_long:
            print(report.summary(max_errors=5), file=sys.stderr)
        trees.extend(found)
    return trees, paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]}, ...)"


@dataclasses.dataclass(frozen=True)
class Reading:
    """How the gold treebank is read: its length limit and what a bad or too long tree does."""

    max_words: int | None = DEPENDENCY_MAX_WORDS
    on_bad_tree: str = "error"
    on_too_long: str = "error"


def _collins_scheme(nml_as_np: bool, coordination: str) -> str:
    options = ["NML as NP"] if nml_as_np else []
    options += ["coordination past punctuation"] if coordination == "skip_punctuation" else []
    return f"collins ({'; '.join(options)})" if options else "collins"


def read_gold(paths: Sequence[str], *, split: str = "test", heads: str = "auto", nml_as_np: bool = False,
              limit: int | None = None, coordination: str = "corenlp", dropped_root: str = "rechain",
              gold_files: Sequence[str] = (), reading: Reading | None = None) -> GoldTreebank:
    """Gold dependencies of files (or "builtin"), WORD_TAGS kept (module docstring).

    With `gold_files` the heads come from those CoNLL-U / CoNLL-X files, checked against the trees' words.
    """
    from tgjax.data.deps import tree_dependencies
    from tgjax.syntax.heads import WORD_TAGS, HeadReport

    trees, source = _read_trees(paths, split, reading or Reading())
    if limit is not None:
        trees = trees[:limit]
    if gold_files:
        return _gold_from_files(trees, source, gold_files, limited=limit is not None, dropped_root=dropped_root)
    scheme = heads if heads != "auto" else ("builtin" if list(paths) == ["builtin"] else "collins")
    report = HeadReport()
    deps = tree_dependencies(trees, heads=scheme, keep_tags=WORD_TAGS, report=report, nml_as_np=nml_as_np,
                             coordination=coordination, dropped_root=dropped_root)
    deps = [d for d in deps if d is not None]
    if scheme == "collins":
        scheme = _collins_scheme(nml_as_np, coordination)
    return GoldTreebank([d.words for d in deps], [np.asarray(d.heads) for d in deps], source, scheme, len(trees),
                        report.summary())


@dataclasses.dataclass
class _FileSentence:
    path: str
    number: int  # 1-based, in its file
    deps: object  # tgjax.syntax.heads.Dependencies


def _file_sentences(gold_files: Sequence[str]) -> list[_FileSentence]:
    from tgjax.data.conllu import read_conllu

    out = []
    for path in gold_files:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no gold dependency file at {path}")
        sentences, _ = read_conllu(path)
        out.extend(_FileSentence(path, k, deps) for k, deps in enumerate(sentences, start=1))
    return out


def _word_difference(file_words: list[str], tree_words: list[str]) -> str | None:
    """What differs between a file sentence's kept words and its tree's, or None."""
    for i, (mine, theirs) in enumerate(zip(file_words, tree_words), start=1):
        if mine != theirs:
            return f"word {i} is {mine!r} in the file, {theirs!r} in the treebank"
    if len(file_words) != len(tree_words):
        return f"{len(file_words)} words in the file, {len(tree_words)} in the treebank"
    return None


def _gold_from_files(trees: list, source: str, gold_files: Sequence[str], *, limited: bool,
                     dropped_root: str) -> GoldTreebank:
    """Heads from CoNLL files, the tokens of both sides filtered by WORD_TAGS, the words checked to agree."""
    from tgjax.data.deps import tree_dependencies
    from tgjax.syntax.heads import WORD_TAGS, HeadReport, keep_tagged

    tree_words = [[] if d is None else d.words
                  for d in tree_dependencies(trees, keep_tags=WORD_TAGS, report=HeadReport())]
    sentences = _file_sentences(gold_files)
    if limited:
        sentences = sentences[:len(trees)]
    if len(sentences) != len(trees):
        names = ", ".join(gold_files)
        raise ValueError(f"{names}: {len(sentences)} sentences, but {source} has {len(trees)} trees")
    report = HeadReport()
    words, heads = [], []
    for k, (sentence, expected) in enumerate(zip(sentences, tree_words), start=1):
        kept = keep_tagged(sentence.deps, WORD_TAGS, report, dropped_root=dropped_root)
        found = [] if kept is None else kept.words
        difference = _word_difference(found, expected)
        if difference:
            raise ValueError(f"{sentence.path}: sentence {sentence.number} (tree {k} of {source}), "
                             f"WORD_TAGS kept: {difference}")
        if kept is not None:
            words.append(expected)
            heads.append(np.asarray(kept.heads))
    report.num_trees = len(sentences)
    return GoldTreebank(words, heads, source, "file", len(trees), report.summary(), list(gold_files))


def craft_paths(split: str, craft_dir: str | None = None) -> list[str]:
    """CRAFT's tree files of a split (ids/craft-ids-{train,dev,test}.txt)."""
    shared = Path(__file__).resolve().parents[2].parent / "shared"
    root = Path(craft_dir) if craft_dir else shared / "data" / "craft_treebank"
    name = {"valid": "dev"}.get(split, split)
    ids_path = root / "ids" / f"craft-ids-{name}.txt"
    if not ids_path.is_file():
        raise FileNotFoundError(f"no CRAFT id list at {ids_path} (pass --craft-dir)")
    return [str(root / "penn" / f"{i.strip()}.tree") for i in ids_path.read_text().splitlines() if i.strip()]


# -----------------------------------------------------------------------------
# The evaluation.


def evaluate(gold: GoldTreebank, parser=None, *, random_seeds: int = 5, mlm_runs: int = 5) -> dict:
    """Scores of `parser` (an object with `head_probs(sentences)` and `mlm_loss(sentences, runs)`,
    `tgjax.infer.udgn.UDGNParser`) and the baselines on `gold`."""
    result = {"source": gold.source, "head_scheme": gold.scheme, "gold_heads": gold.heads_note,
              "sentences": len(gold.heads),
              "words": int(sum(len(h) for h in gold.heads)), "trees": gold.num_trees, "head_report": gold.report,
              "baselines": baseline_scores(gold.heads, random_seeds)}
    if parser is not None:
        probs = parser.head_probs(gold.words)
        for mode, decode in (("argmax", argmax_heads), ("tree", tree_heads)):
            uas, uuas = attachment_scores([decode(p) for p in probs], gold.heads)
            result[f"udgn_{mode}"] = {"uas": uas, "uuas": uuas}
        loss, count = parser.mlm_loss(gold.words, runs=mlm_runs)
        if not count:
            raise ValueError(f"{gold.source}: no token was masked in {mlm_runs} maskings: no MLM perplexity")
        result["mlm"] = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "masked_tokens": count,
                         "runs": mlm_runs}
        result["model"] = parser.describe()
    return result


def format_result(result: dict) -> str:
    lines = [f"{result['source']}: {result['sentences']} sentences, {result['words']} words (WORD_TAGS kept); "
             f"gold heads: {result['gold_heads']}",
             f"  {result['head_report']}"]
    if "model" in result:
        lines.append(f"  model: {result['model']}")
    lines.append(f"  {'':<26}{'UAS':>8}{'UUAS':>8}")
    rows = [(f"UDGN {m}", result[f"udgn_{m}"]) for m in ("argmax", "tree") if f"udgn_{m}" in result]
    rows += list(result["baselines"].items())
    for name, r in rows:
        extra = f"  (sd {r['uas_sd']:.2f} / {r['uuas_sd']:.2f} over {r['seeds']} seeds)" if "uas_sd" in r else ""
        lines.append(f"  {name:<26}{r['uas']:8.2f}{r['uuas']:8.2f}{extra}")
    if "mlm" in result:
        m = result["mlm"]
        lines.append(f"  MLM perplexity {m['perplexity']:.2f} (loss {m['loss']:.4f}, {m['masked_tokens']} masked "
                     f"tokens over {m['runs']} maskings at rate 0.3)")
    return "\n".join(lines)


def _head_parser(workdir: str, step: str, *, batch_size: int):
    """The parser of `tgjax.load(workdir, step)`, which must give heads (a UDGN's)."""
    from tgjax.infer.api import load

    return load(workdir, step).parser(command="tgjax eval dependency", parses="heads", batch_size=batch_size)


def add_dependency_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval dependency`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = ("Unsupervised dependency parsing scores of a UDGN (mlm) run, UDGN's protocol: UAS / UUAS "
                          "of the model's heads (argmax and Chu-Liu/Edmonds) against gold heads from head rules "
                          "or a CoNLL file, beside chain and random-projective baselines, and the MLM perplexity.")
    parser.add_argument("--workdir", default=None, help="a trained mlm (UDGN) run")
    parser.add_argument("--step", default="best", help="checkpoint: best (default), latest, or a step")
    parser.add_argument("--baselines-only", action="store_true", help="score the baselines only (no --workdir)")
    parser.add_argument("--treebank", action="append", default=None,
                        help="bracketed treebank file (repeat for several), or 'builtin'")
    parser.add_argument("--craft", default=None, choices=("train", "valid", "test"),
                        help="CRAFT's articles of this split (instead of --treebank)")
    parser.add_argument("--craft-dir", default=None, help="the CRAFT treebank (default ../shared/data/craft_treebank)")
    parser.add_argument("--split", default="test", help="split of the built-in treebank (default test)")
    parser.add_argument("--heads", default="auto", choices=("auto", "collins", "builtin"),
                        help="gold head scheme: auto = builtin for the built-in treebank, collins for files")
    parser.add_argument("--nml-as-np", action="store_true", help="collins: NML takes NP's rule (CRAFT)")
    parser.add_argument("--coordination", default="corenlp", choices=COORDINATION_RULES,
                        help="collins: a coordinated head as CoreNLP moves it (default), or on past punctuation")
    parser.add_argument("--dropped-root", default="rechain", choices=DROPPED_ROOT_RULES,
                        help="when the root word is dropped: one root re-chained among the words under it "
                             "(default), or each its own root (udgn_release, the release's convention)")
    parser.add_argument("--gold", action="append", default=None,
                        help="gold heads from this CoNLL-U / CoNLL-X file (repeat for several, in order), "
                             "aligned to the treebank's trees; instead of head rules")
    parser.add_argument("--limit", type=int, default=None, help="first N trees only")
    add_max_words_arg(parser, DEPENDENCY_MAX_WORDS)
    add_bad_input_args(parser)
    parser.add_argument("--random-seeds", type=int, default=5, help="draws of the random projective baseline")
    parser.add_argument("--mlm-runs", type=int, default=5, help="random maskings for the MLM perplexity")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass")
    parser.add_argument("--output", "-o", default=None, help="write the scores as one JSON object here")
    parser.set_defaults(run=functools.partial(run_dependency, parser=parser))


def main_dependency(argv: Sequence[str] | None = None, *, load=None) -> int:
    """`tgjax eval dependency ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval dependency")
    add_dependency_arguments(parser)
    return run_dependency(parser.parse_args(argv), parser, load=load)


def run_dependency(args: argparse.Namespace, parser: argparse.ArgumentParser, *, load=None) -> int:
    """`tgjax eval dependency`; `load(workdir, step, batch_size=...)` (for tests) replaces `_head_parser`."""
    if (args.workdir is None) == (not args.baselines_only):
        parser.error("give --workdir, or --baselines-only")
    if (args.treebank is None) == (args.craft is None):
        parser.error("give --treebank FILE (or builtin), or --craft SPLIT")
    if args.gold and (args.heads != "auto" or args.nml_as_np or args.coordination != "corenlp"):
        parser.error("--heads, --nml-as-np and --coordination choose head rules; --gold reads the heads from a file")
    try:
        check_counts(limit=args.limit, random_seeds=args.random_seeds, mlm_runs=args.mlm_runs,
                     batch_size=args.batch_size)
        paths = args.treebank if args.treebank else craft_paths(args.craft, args.craft_dir)
        if args.output:
            check_output(args.output, inputs=[*paths, *(args.gold or [])])
        gold = read_gold(paths, split=args.split, heads=args.heads, nml_as_np=args.nml_as_np, limit=args.limit,
                         coordination=args.coordination, dropped_root=args.dropped_root, gold_files=args.gold or (),
                         reading=Reading(args.max_words, args.on_bad_tree, args.on_too_long))
        if not any(len(h) for h in gold.heads):
            raise ValueError(f"{gold.source}: no sentence with words to score ({gold.report})")
        if args.craft:
            gold.source = f"CRAFT {args.craft} ({len(paths)} articles)"
        model = None
        if args.workdir:
            model = (load or _head_parser)(args.workdir, args.step, batch_size=args.batch_size)
        result = evaluate(gold, model, random_seeds=args.random_seeds, mlm_runs=args.mlm_runs)
        if args.output:
            write_json(args.output, result)
    except (ValueError, OSError) as error:
        print(f"tgjax eval dependency: error: {error}", file=sys.stderr)
        return 2
    print(format_result(result))
    return 0

