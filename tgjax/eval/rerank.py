"""Parse reranking (§3.2 of the paper): the most likely proposal tree under the model, and its F1.

For each sentence, the proposals of a proposal file (the format of
`tgjax.infer.perplexity`) are scored by log p(x, y) and the highest is kept
(the first in file order on ties; duplicates do not change the choice). The
chosen trees are written as they appear in the proposal file (POS tags
included, which EVALB needs), one per line, and scored against gold trees
with `tgjax.eval.evalb.evalb` (COLLINS.prm by default).

    results = list(rerank(scorer, read_proposals("proposals.txt")))
    f1 = rerank_f1([r.best_tree for r in results], gold_trees).all.bracketing_fmeasure

TXL (terminals) models give every tree of a sentence the same score and
cannot rerank: refused.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence

from tgjax.eval.evalb import EvalbResult, evalb
from tgjax.infer.perplexity import ProposalBlock, ProposalError, ProposalScores, score_proposals
from tgjax.infer.scoring import DEFAULT_CHUNK_SIZE, SequenceScorer
from tgjax.syntax import trees


def rerank(scorer: SequenceScorer, blocks: Iterable[ProposalBlock], *, chunk_size: int = DEFAULT_CHUNK_SIZE
           ) -> Iterator[ProposalScores]:
    """Each sentence's proposals scored; `.best` / `.best_tree` is the argmax of log p(x, y)."""
    if scorer.rule == "txl_terminals":
        raise ValueError("a TXL (terminals) model scores words only: every proposal tree of a sentence gets the same "
                         "probability, so it cannot rerank parses (use a TG or TXL (CC) model)")
    yield from score_proposals(scorer, blocks, chunk_size=chunk_size)


def rerank_record(result: ProposalScores) -> dict:
    """One JSON line: index, chosen proposal (position among the kept ones, and file line), its tree and log p."""
    return {"index": result.index, "best": result.best, "best_line": result.block.lines[result.best],
            "best_logp": float(result.logps[result.best]), "best_tree": result.best_tree.to_string(),
            "num_proposals": int(len(result.logps)), "num_duplicates": result.num_duplicates,
            "num_words": result.num_words}


def read_gold(path: str | os.PathLike) -> list[trees.Tree]:
    """The gold treebank (any layout `read_treebank` reads); an empty file is an error."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such gold treebank {path!r}")
    return trees.read_treebank(path)


def rerank_f1(best_trees: Sequence[str | trees.Tree], gold: Sequence[trees.Tree], *, params: str = "collins",
              gold_source: str = "gold") -> EvalbResult:
    """EVALB of the chosen trees against the gold ones (same order, same count)."""
    if len(best_trees) != len(gold):
        raise ProposalError(f"{gold_source}: {len(gold)} gold trees but {len(best_trees)} reranked sentences; the "
                            f"gold file must hold one tree per proposal block, in the same order")
    for i, (b, g) in enumerate(zip(best_trees, gold)):
        b_tree = trees.parse(b) if isinstance(b, str) else b
        if b_tree.leaves() != g.leaves():
            raise ProposalError(f"{gold_source}: sentence {i}: the gold words {' '.join(g.leaves()[:8])!r}... differ "
                                f"from the proposals' {' '.join(b_tree.leaves()[:8])!r}...")
    return evalb(list(gold), list(best_trees), params)


def rerank_summary(records: Iterable[dict]) -> dict:
    sentences = proposals = duplicates = 0
    for r in records:
        sentences += 1
        proposals += r["num_proposals"]
        duplicates += r["num_duplicates"]
    return {"sentences": sentences, "num_proposals": proposals, "num_duplicates_removed": duplicates}


def f1_summary(result: EvalbResult) -> dict:
    """The headline EVALB figures (all sentences) as a dict."""
    a = result.all
    f1 = None if math.isnan(a.bracketing_fmeasure) else a.bracketing_fmeasure  # no bracket: none scored, not NaN
    return {"f1": f1, "recall": a.bracketing_recall, "precision": a.bracketing_precision,
            "complete_match": a.complete_match, "evalb_sentences": a.num_sentences,
            "evalb_error_sentences": a.num_error_sentences, "evalb_skip_sentences": a.num_skip_sentences}
