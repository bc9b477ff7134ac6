"""Word perplexity: the paper's upper bound from proposal trees (§3.1), exact for TXL (terminals).

Sentence level (the primary path). A syntactic LM gives p(x, y); p(x) = Σ_y
p(x, y) over every tree of x is intractable, so, as the paper does, sum over
a small set Y'_x of J distinct proposal trees (from a separate parser):

    log p(x) >= log Σ_{y ∈ Y'_x} p(x, y)        (a lower bound, since Y'_x ⊂ Y_x)
    PPL <= exp(−Σ_x log Σ_{y ∈ Y'_x} p(x, y) / N_w)

with N_w the number of words. Use the same proposals for every model.
For TXL (terminals) p(x) is computed exactly from the words followed by the
end-of-sentence token `</s>` (as in training), and the proposals only supply
the sentence. Either way the end of the sentence (closing the root, or
`</s>`) is counted in log p(x) but not in N_w, as in the TG paper.

Proposal files
--------------
One block per sentence, in corpus order; a block is J >= 1 lines, one
bracketed tree per line; blocks are separated by one or more blank lines.
POS tags are optional but decided for the whole file (`pos_tags`: "yes",
"no", or "auto": tagged iff every word of every proposal is alone under a
node of its own; a file that mixes both is refused, naming the line): the
models drop tags, and in a file without them a node over a single word is a
constituent (`tgjax.syntax.pos_tags`). Every proposal of a block must have the
same words as the block's first (else an error names the file, block and
line); the words are the sentence. An empty file is an error. A malformed
proposal stops the reading, naming file, line, column and block, or (with a
`tgjax.syntax.trees.ReadReport` given, `--on-bad-tree skip`) is left out and
recorded there; a block whose every proposal is malformed is left out whole
(the other blocks keep their indices).

Duplicates. The bound holds for a set of *distinct* trees: a tree counted
twice adds its probability twice and can push the "bound" above p(x). So
proposals that are the same tree for the model (the same Choe–Charniak
actions; in a tagged file, trees that differ only in POS tags are the same
tree to a model that does not read tags; without tags, `(S (NP a) b)` and
`(S a b)` differ) are kept once, by default, and the number removed is
reported (`num_duplicates`). `dedup=False` counts every line (a tree given
twice then adds log 2 to its own term), so its perplexity is no bound and is
reported as `word_perplexity_with_duplicates`.

Document level (the paper's approximation). For a document of sentences
s_1..s_n, each with its proposals, sentence i is scored given a single-path
prefix: the greedily chosen best proposal (under the model) of each earlier
sentence, in order, under the document node (`(DOC`, configurable):

    log p(x_i | x_<i) ≈ log Σ_j p(x_i, y_ij | (DOC ŷ_1 .. ŷ_{i−1})
    ŷ_i = argmax_j p(x_i, y_ij | (DOC ŷ_1 .. ŷ_{i−1})

where the probability of a sentence's proposal is that of its own actions
(the first sentence's also count `(DOC`, the last's the closing `DOC)`), so
the document's bound is Σ_i of these. Models are left to right, so the
prefix's probabilities do not depend on what follows and each step scores
J sequences of the prefix plus one proposal. The greedy prefix makes this
an approximation, not a bound, so its perplexity is reported as
`word_perplexity_greedy_documents`. In document proposal files a
line holding only `<doc>` starts a new document (before the first block it
may be omitted).

For TXL (terminals) a document is read as one sequence of its sentences,
each ended by `</s>`: `<s> x_1 </s> x_2 </s> ... x_n </s>`, and sentence i's
term is log p(x_i </s> | x_<i) exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from scipy.special import logsumexp

from tgjax.infer.scoring import DEFAULT_CHUNK_SIZE, Encoded, SequenceScorer, encode, sequence_tokens
from tgjax.limits import TREEBANK_MAX_WORDS
from tgjax.syntax import actions, trees
from tgjax.syntax import pos_tags as tagging

DOCUMENT_MARKER = "<doc>"


class ProposalError(ValueError):
    """A proposal file that cannot be used; the message names the file, block and line."""


@dataclasses.dataclass
class ProposalBlock:
    """The proposals of one sentence.

    index: the block's position in the file (0-based; the sentence index).
    trees: the distinct proposals (all of them with `dedup=False`), in file order.
    lines: the 1-based line number of each kept proposal.
    words: the sentence.
    num_duplicates: proposals dropped as repeats of an earlier one.
    document: the document it belongs to (document files; else the block index).
    source: the file it was read from.
    pos_tags: whether the file's trees are read as tagged (decided for the whole file).
    """

    index: int
    trees: list[trees.Tree]
    lines: list[int]
    words: list[str]
    num_duplicates: int = 0
    document: int = 0
    source: str = "proposals"  # the file it was read from, for messages
    pos_tags: bool = True

    @property
    def num_proposals(self) -> int:
        return len(self.trees)


def _parse_line(path: str, line_no: int, block: int, text: str, max_words: int | None,
                report: trees.ReadReport | None = None) -> trees.Tree | None:
    """The proposal on one line; a malformed one raises `ProposalError`, or with a `report` is recorded there
    (and None returned). A proposal over `max_words` always raises."""
    try:
        tree = trees.parse(text, source=path, first_line=line_no, max_words=max_words)
    except trees.TreeSyntaxError as e:
        if report is None:
            raise ProposalError(f"{path}:{e.line}:{e.column}: block {block}: {e.reason} "
                                f"(proposal files hold one tree per line)") from None
        report.errors.append(trees.TreeSyntaxError(path, e.line, e.column, f"block {block}: {e.reason}"))
        return None
    except trees.SentenceTooLong as e:
        raise ProposalError(f"{path}:{e.line}:{e.column}: block {block}: {e.reason} "
                            f"(proposal files hold one tree per line)") from None
    if report is not None:
        report.num_trees += 1
    return tree


def _proposal_lines(path: str, documents: bool) -> Iterator[tuple[int, int, str]]:
    """(block index, line number, text) of every proposal line, as `read_proposals` numbers the blocks."""
    block, in_block = 0, False
    with contextlib.closing(trees.text_lines(path)) as f:  # decoding errors name file:line:col
        for line_no, line in enumerate(f, start=1):
            text = line.strip()
            if not text or (documents and text == DOCUMENT_MARKER):
                block, in_block = block + in_block, False
                continue
            in_block = True
            yield block, line_no, line.rstrip()  # unstripped on the left: columns as in the file


def proposals_pos_tags(path: str | os.PathLike, setting: str | bool, *, documents: bool = False,
                       max_words: int | None = TREEBANK_MAX_WORDS, skip_bad_trees: bool = False) -> bool:
    """Whether a proposal file's trees are tagged (`tgjax.syntax.pos_tags.resolve` over every line of it).

    "yes" and "auto" parse the whole file once, so every shard decides the same way. `skip_bad_trees`:
    malformed proposals are left out of the decision (`read_proposals` reports them), not an error.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such proposal file {path!r}")
    ignored = trees.ReadReport(path) if skip_bad_trees else None
    parsed = ((_parse_line(path, line_no, block, text, max_words, ignored), f"{path}:{line_no}")
              for block, line_no, text in _proposal_lines(path, documents))
    return tagging.resolve(setting, ((tree, where) for tree, where in parsed if tree is not None))


def read_proposals(path: str | os.PathLike, *, dedup: bool = True, documents: bool = False,
                   shard: tuple[int, int] = (0, 1), pos_tags: str | bool = "auto",
                   max_words: int | None = TREEBANK_MAX_WORDS,
                   report: trees.ReadReport | None = None) -> Iterator[ProposalBlock]:
    """Streams the blocks of a proposal file (see the module docstring); errors name file, block and line.

    With `shard=(I, N)` only the blocks of sentences (documents, in document
    files) whose index % N == I are parsed and yielded; indices stay global.
    `pos_tags`: "yes", "no", "auto" (decided over the whole file first,
    `proposals_pos_tags`), or a bool already decided. With a `report`,
    malformed proposals (of this shard's blocks) are skipped and recorded there.
    """
    path = os.fspath(path)
    tagged = proposals_pos_tags(path, pos_tags, documents=documents, max_words=max_words,
                                skip_bad_trees=report is not None)
    document = 0
    seen_block_in_document = False
    block_index = 0
    current: list[tuple[int, str]] = []

    def finish() -> ProposalBlock | None:
        nonlocal block_index
        key_index = document if documents else block_index
        if key_index % shard[1] != shard[0]:  # another shard's: not parsed
            block_index += 1
            current.clear()
            return None
        kept, lines, keys = [], [], set()
        words = None
        duplicates = 0
        for line_no, text in current:
            tree = _parse_line(path, line_no, block_index, text, max_words, report)
            if tree is None:  # malformed, skipped and recorded
                continue
            leaves = tree.leaves()
            if words is None:
                words, first_line = leaves, line_no
            elif leaves != words:
                where = next((k for k, (a, b) in enumerate(zip(leaves, words)) if a != b), min(len(leaves), len(words)))
                raise ProposalError(
                    f"{path}:{line_no}: block {block_index}: the proposal's words differ from the block's first "
                    f"proposal (line {first_line}) at word {where}: {len(leaves)} words "
                    f"{' '.join(leaves[max(where - 2, 0):where + 3])!r}... vs {len(words)} words "
                    f"{' '.join(words[max(where - 2, 0):where + 3])!r}...")
            if dedup:
                key = tuple(actions.choe_charniak(tree, pos_tags=tagged))
                if key in keys:
                    duplicates += 1
                    continue
                keys.add(key)
            kept.append(tree)
            lines.append(line_no)
        if not kept:  # every proposal of the block was malformed (skipped, recorded): the sentence is left out
            block_index += 1
            current.clear()
            return None
        block = ProposalBlock(block_index, kept, lines, words, duplicates, document if documents else block_index, path,
                              tagged)
        block_index += 1
        current.clear()
        return block

    with contextlib.closing(trees.text_lines(path)) as f:  # decoding errors name file:line:col
        for line_no, line in enumerate(f, start=1):
            text = line.strip()
            if documents and text == DOCUMENT_MARKER:
                if current and (block := finish()) is not None:
                    yield block
                if seen_block_in_document:
                    document += 1
                seen_block_in_document = False
                continue
            if not text:
                if current and (block := finish()) is not None:
                    yield block
                continue
            current.append((line_no, line.rstrip()))  # columns as in the file
            seen_block_in_document = True
        if current and (block := finish()) is not None:
            yield block
    if block_index == 0:
        raise ProposalError(f"{path}: no proposals (the file is empty)")
    if report is not None and report.num_trees == 0 and report.errors:
        raise ProposalError(f"{path}: no proposals left: every one is malformed ({report.num_skipped} skipped; the "
                            f"first: {report.errors[0]})")


def check_sentence(block: ProposalBlock, words: Sequence[str], where: str) -> None:
    """Raises when a block's words are not the reference sentence's (e.g. a gold tree's)."""
    if list(words) != block.words:
        raise ProposalError(f"{where}: block {block.index} (line {block.lines[0]}) has the words "
                            f"{' '.join(block.words[:8])!r}... but the reference sentence is "
                            f"{' '.join(list(words)[:8])!r}...")


# -----------------------------------------------------------------------------
# Sentence level.


@dataclasses.dataclass
class ProposalScores:
    """One sentence's proposals scored: the bound, the best proposal, every log p(x, y_j).

    For TXL (terminals), `logps` holds the single exact log p(x) (`</s>` included) and `bound` equals it.
    """

    index: int
    bound: float  # log Σ_j p(x, y_j)
    logps: np.ndarray  # [J] log p(x, y_j) of the kept proposals (block order)
    best: int  # position in `logps` of the highest (the first on ties)
    num_words: int
    num_unk: int
    num_duplicates: int
    block: ProposalBlock

    @property
    def best_tree(self) -> trees.Tree:
        return self.block.trees[self.best]


def score_proposals(scorer: SequenceScorer, blocks: Iterable[ProposalBlock], *,
                    chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[ProposalScores]:
    """Scores every block's proposals (batched over blocks, `chunk_size` sequences at a time)."""
    terminals = scorer.rule == "txl_terminals"
    pending: list[tuple[ProposalBlock, list[Encoded]]] = []
    pending_size = 0

    def flush():
        flat = [e for _, es in pending for e in es]
        scores = scorer.score_encoded(flat)
        position = 0
        for block, es in pending:
            logps = np.array([s.logp for s in scores[position:position + len(es)]], np.float64)
            unk = scores[position].num_unk
            position += len(es)
            best = int(np.argmax(logps))
            yield ProposalScores(block.index, float(logsumexp(logps)), logps, best, len(block.words), unk,
                                 block.num_duplicates, block)
        pending.clear()

    for block in blocks:
        if terminals:  # exact: the words then `</s>` (every proposal of a block has the same words)
            encoded = [encode(scorer.vocab, sequence_tokens(block.trees[0], scorer.rule, pos_tags=block.pos_tags))]
        else:
            encoded = []
            for tree, line in zip(block.trees, block.lines):
                try:
                    encoded.append(encode(scorer.vocab, sequence_tokens(tree, scorer.rule, pos_tags=block.pos_tags)))
                except ValueError as e:
                    raise ProposalError(f"{block.source}:{line}: block {block.index}: {e}") from e
        pending.append((block, encoded))
        pending_size += len(encoded)
        if pending_size >= chunk_size:
            yield from flush()
            pending_size = 0
    if pending:
        yield from flush()


# -----------------------------------------------------------------------------
# Document level.


def _documents(blocks: Iterable[ProposalBlock]) -> Iterator[list[ProposalBlock]]:
    for _, group in itertools.groupby(blocks, key=lambda b: b.document):
        yield list(group)


def score_documents(scorer: SequenceScorer, blocks: Iterable[ProposalBlock], *, label: str = actions.DOCUMENT_LABEL,
                    documents_per_batch: int = 16) -> Iterator[ProposalScores]:
    """The greedy-prefix bound of each sentence of each document (see the module docstring).

    Yields one `ProposalScores` per sentence, in order; `bound` is
    log Σ_j p(x_i, y_ij | prefix), `best` the greedy choice. Documents are
    processed `documents_per_batch` at a time, sentence i of each in one batch.
    """
    opening, closing = actions.opening(label), actions.closing(label)
    batch: list[list[ProposalBlock]] = []
    for document in itertools.chain(_documents(blocks), [None]):
        if document is not None:
            batch.append(document)
            if len(batch) < documents_per_batch:
                continue
        if not batch:
            break
        yield from _score_document_batch(scorer, batch, opening, closing)
        batch = []


def _num_unk(scorer, block: ProposalBlock) -> int:
    """Words of the sentence that the vocabulary maps to UNK."""
    return encode(scorer.vocab, block.words).num_unk


def _score_document_batch(scorer, documents, opening, closing) -> Iterator[ProposalScores]:
    terminals = scorer.rule == "txl_terminals"
    results: dict[tuple[int, int], ProposalScores] = {}
    if terminals:  # exact: one sequence per document, `x_1 </s> x_2 </s> ...`, split by sentence
        sentences = [[sequence_tokens(b.trees[0], scorer.rule, pos_tags=b.pos_tags) for b in doc] for doc in documents]
        encoded = [encode(scorer.vocab, [t for tokens in doc for t in tokens]) for doc in sentences]
        for doc, tokens, score in zip(documents, sentences, scorer.score_encoded(encoded)):
            bounds = np.split(score.token_logprobs, np.cumsum([len(t) for t in tokens])[:-1])
            for i, (block, lp) in enumerate(zip(doc, bounds)):
                value = float(math.fsum(lp))
                results[(block.document, i)] = ProposalScores(block.index, value, np.array([value]), 0,
                                                              len(block.words), _num_unk(scorer, block),
                                                              block.num_duplicates, block)
    else:
        prefixes = [[opening] for _ in documents]
        for i in range(max(len(d) for d in documents)):
            encoded, spans = [], []
            for d, doc in enumerate(documents):
                if i >= len(doc):
                    continue
                block = doc[i]
                last = i == len(doc) - 1
                for tree, line in zip(block.trees, block.lines):
                    sentence = actions.choe_charniak(tree, pos_tags=block.pos_tags)
                    tokens = prefixes[d] + sentence + ([closing] if last else [])
                    try:
                        encoded.append(encode(scorer.vocab, tokens))
                    except ValueError as e:
                        raise ProposalError(f"{block.source}:{line}: block {block.index}: {e}") from e
                    spans.append(0 if i == 0 else len(prefixes[d]))
            scores = scorer.score_encoded(encoded)
            position = 0
            for d, doc in enumerate(documents):
                if i >= len(doc):
                    continue
                block = doc[i]
                n = block.num_proposals
                logps = np.array([math.fsum(s.token_logprobs[spans[position + j]:]) for j, s in
                                  enumerate(scores[position:position + n])], np.float64)
                best = int(np.argmax(logps))
                results[(block.document, i)] = ProposalScores(block.index, float(logsumexp(logps)), logps, best,
                                                              len(block.words), _num_unk(scorer, block),
                                                              block.num_duplicates, block)
                prefixes[d] = prefixes[d] + actions.choe_charniak(block.trees[best], pos_tags=block.pos_tags)
                position += n
    for doc in documents:
        for i in range(len(doc)):
            yield results[(doc[i].document, i)]
