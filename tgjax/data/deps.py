"""Dependency trees for a treebank, and the `tgjax data deps` command (no JAX).

    tgjax data deps --treebank FILE -o out.conllu [--heads collins|builtin] [--keep all|words]
    tgjax data deps --treebank builtin --split test -o out.conllu

Scheme: `collins` is Collins (1999) head rules as CoreNLP's CollinsHeadFinder
(`tgjax.syntax.heads`), for PTB-style treebanks; `builtin` is the built-in
grammar's own head marks (exact for the built-in treebank, Stanford-basic
style choices). Neither is Stanford Dependencies: Collins makes auxiliaries
and copulas heads, SD makes the main verb or predicate the head, so UAS
against these trees is not comparable with the UDGN thesis' 52.5 (SD). State
the scheme beside every number.

`--keep words` keeps only the release's WORD_TAGS (punctuation, traces, `$`,
`#` dropped, heads climbed past them), as its evaluation does; the default
keeps every token (the tag column lets an evaluator filter later).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from tgjax.syntax.heads import (
    WORD_TAGS,
    CollinsHeadFinder,
    Dependencies,
    HeadReport,
    TableHeadFinder,
    collins_rules,
    dependencies,
    grammar_head_table,
)
from tgjax.syntax.trees import Tree

__all__ = ["builtin_head_finder", "main_deps", "treebank_dependencies"]

HEAD_SCHEMES = ("collins", "builtin")


def builtin_head_finder(report: HeadReport | None = None) -> TableHeadFinder:
    """The built-in grammar's head marks, on PTB labels (see `tgjax.data.corpora`)."""
    from tgjax.data import corpora

    grammar = corpora.builtin_grammar()
    return TableHeadFinder(grammar_head_table(grammar.rules, corpora.ptb_label, grammar.terminals), report=report)


def treebank_dependencies(
    trees: Iterable[Tree], *, heads: str = "collins", keep_tags=None, report: HeadReport | None = None,
    nml_as_np: bool = False,
) -> list[Dependencies]:
    """One `Dependencies` per tree; sentences left empty by `keep_tags` are skipped and counted in `report`.

    `nml_as_np`: with `collins`, NML takes NP's rule (`tgjax.syntax.heads.collins_rules`).
    """
    if heads not in HEAD_SCHEMES:
        raise ValueError(f"unknown head scheme {heads!r}; expected one of {HEAD_SCHEMES}")
    report = report if report is not None else HeadReport()
    if heads == "builtin":
        finder = builtin_head_finder(report)
    else:
        finder = CollinsHeadFinder(collins_rules(nml_as_np=nml_as_np), report=report)
    out = []
    for tree in trees:
        deps = dependencies(tree, finder, keep_tags=keep_tags, report=report)
        if deps is not None:
            out.append(deps)
    return out


def main_deps(argv: list[str] | None = None) -> int:
    from tgjax.data import conllu, corpora
    from tgjax.syntax import trees as trees_lib

    parser = argparse.ArgumentParser(prog="tgjax data deps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--treebank", required=True, help="a treebank file (PTB brackets), or 'builtin'")
    parser.add_argument("-o", "--output", required=True, help="the CoNLL-U file to write")
    parser.add_argument("--heads", default="auto", choices=("auto", *HEAD_SCHEMES),
                        help="head scheme: auto = builtin for the built-in treebank, collins for files")
    parser.add_argument("--keep", default="all", choices=("all", "words"),
                        help="all tokens, or only the release's WORD_TAGS (punctuation and traces dropped)")
    parser.add_argument("--nml-as-np", action="store_true",
                        help="collins: give NML (CRAFT's nominal modifiers) NP's rule, as CoreNLP's "
                             "ModCollinsHeadFinder; by default NML is unknown to the table (leftmost child, counted)")
    parser.add_argument("--split", default="test", help="split of the built-in treebank")
    parser.add_argument("--num-sentences", type=int, default=None, help="built-in treebank size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--on-bad-tree", default="error", choices=("error", "skip"),
                        help="malformed trees in the file: stop with an error, or skip and count")
    args = parser.parse_args(argv)
    try:
        if args.treebank == "builtin":
            trees = corpora.get_corpus("builtin", args.split, seed=args.seed, num_sentences=args.num_sentences)
            source = f"built-in treebank ({args.split}, {len(trees)} trees)"
        elif args.on_bad_tree == "skip":
            trees, read_report = trees_lib.read_treebank(args.treebank, on_error="skip")
            print(read_report.summary(), file=sys.stderr)
            source = args.treebank
        else:
            trees = trees_lib.read_treebank(args.treebank)
            source = args.treebank
        scheme = args.heads if args.heads != "auto" else ("builtin" if args.treebank == "builtin" else "collins")
        report = HeadReport()
        sentences = treebank_dependencies(
            trees, heads=scheme, keep_tags=WORD_TAGS if args.keep == "words" else None, report=report,
            nml_as_np=args.nml_as_np,
        )
        count = conllu.write_conllu(args.output, sentences)
    except (ValueError, OSError) as error:
        print(f"tgjax data deps: error: {error}", file=sys.stderr)
        return 2
    print(f"{source}: {report.summary()}")
    scheme += " with NML as NP" if args.nml_as_np and scheme == "collins" else ""
    print(f"wrote {count} sentences to {args.output} (head scheme: {scheme}, tokens kept: {args.keep})")
    return 0
