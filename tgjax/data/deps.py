"""Dependency trees for a treebank, and the `tgjax data deps` command (no JAX).

    tgjax data deps --treebank FILE -o out.conllu [--heads collins|builtin] [--keep all|words]
    tgjax data deps --treebank builtin --split test -o out.conllu

Scheme: `collins` is Collins (1999) head rules as CoreNLP's CollinsHeadFinder
(`tgjax.syntax.heads`; `--coordination skip_punctuation` moves a coordinated
head on past punctuation, where CoreNLP leaves it), for PTB-style treebanks; `builtin` is the built-in
grammar's own head marks (exact for the built-in treebank, Stanford-basic
style choices). Neither is Stanford Dependencies: Collins makes auxiliaries
and copulas heads, SD makes the main verb or predicate the head, so UAS
against these trees is not comparable with the UDGN thesis' 52.5 (SD). State
the scheme beside every number.

`--keep words` keeps only the release's WORD_TAGS (punctuation, traces, `$`,
`#` dropped, heads climbed past them), as its evaluation does; the default
keeps every token (the tag column lets an evaluator filter later). When the
root word is dropped, `--dropped-root rechain` (default) picks one root among
the words under it; `udgn_release` makes each its own root, as the release
does (several roots: the CoNLL-U reader, which wants trees, refuses such a
sentence).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from tgjax.limits import TREEBANK_MAX_WORDS, add_bad_input_args, add_max_words_arg, reader_policy
from tgjax.syntax.heads import (
    COORDINATION_RULES,
    DROPPED_ROOT_RULES,
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

__all__ = ["add_deps_arguments", "builtin_head_finder", "main_deps", "run_deps", "scheme_name", "tree_dependencies",
           "treebank_dependencies"]

HEAD_SCHEMES = ("collins", "builtin")


def builtin_head_finder(report: HeadReport | None = None) -> TableHeadFinder:
    """The built-in grammar's head marks, on PTB labels (see `tgjax.data.corpora`)."""
    from tgjax.data import corpora

    grammar = corpora.builtin_grammar()
    return TableHeadFinder(grammar_head_table(grammar.rules, corpora.ptb_label, grammar.terminals), report=report)


def tree_dependencies(
    trees: Iterable[Tree], *, heads: str = "collins", keep_tags=None, report: HeadReport | None = None,
    nml_as_np: bool = False, coordination: str = "corenlp", dropped_root: str = "rechain",
) -> list[Dependencies | None]:
    """One entry per tree: its `Dependencies`, or None when `keep_tags` leaves it empty (counted in `report`).

    `nml_as_np`, `coordination`: with `collins`, NML takes NP's rule and how a coordinated head moves
    (`tgjax.syntax.heads.collins_rules`, `COORDINATION_RULES`); `dropped_root`: `DROPPED_ROOT_RULES`.
    """
    if heads not in HEAD_SCHEMES:
        raise ValueError(f"unknown head scheme {heads!r}; expected one of {HEAD_SCHEMES}")
    report = report if report is not None else HeadReport()
    if heads == "builtin":
        finder = builtin_head_finder(report)
    else:
        finder = CollinsHeadFinder(collins_rules(nml_as_np=nml_as_np), report=report, coordination=coordination)
    return [dependencies(tree, finder, keep_tags=keep_tags, report=report, dropped_root=dropped_root)
            for tree in trees]


def scheme_name(heads: str, *, nml_as_np: bool = False, coordination: str = "corenlp") -> str:
    """The head scheme as printed beside a score: `collins with NML as NP, coordination past punctuation`."""
    if heads != "collins":
        return heads
    options = ["with NML as NP"] if nml_as_np else []
    options += ["coordination past punctuation"] if coordination == "skip_punctuation" else []
    return ", ".join(["collins" + (f" {options.pop(0)}" if nml_as_np else ""), *options])


def treebank_dependencies(trees: Iterable[Tree], **options) -> list[Dependencies]:
    """`tree_dependencies` without the sentences `keep_tags` left empty (skipped, counted in `report`)."""
    return [deps for deps in tree_dependencies(trees, **options) if deps is not None]


def add_deps_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax data deps`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = ("Dependency trees from a treebank's constituency trees by head rules (Collins' or the "
                          "built-in grammar's head marks), written as CoNLL-U. Neither scheme is Stanford "
                          "Dependencies.")
    parser.add_argument("--treebank", required=True, help="a treebank file (PTB brackets), or 'builtin'")
    parser.add_argument("-o", "--output", required=True, help="the CoNLL-U file to write")
    parser.add_argument("--heads", default="auto", choices=("auto", *HEAD_SCHEMES),
                        help="head scheme: auto = builtin for the built-in treebank, collins for files")
    parser.add_argument("--keep", default="all", choices=("all", "words"),
                        help="all tokens, or only the release's WORD_TAGS (punctuation and traces dropped)")
    parser.add_argument("--nml-as-np", action="store_true",
                        help="collins: give NML (CRAFT's nominal modifiers) NP's rule, as CoreNLP's "
                             "ModCollinsHeadFinder; by default NML is unknown to the table (leftmost child, counted)")
    parser.add_argument("--coordination", default="corenlp", choices=COORDINATION_RULES,
                        help="collins: a coordinated head as CoreNLP moves it (default), or on past punctuation")
    parser.add_argument("--dropped-root", default="rechain", choices=DROPPED_ROOT_RULES,
                        help="--keep words, root word dropped: one root re-chained (default), or each word "
                             "under it its own root (the UDGN release)")
    parser.add_argument("--split", default="test", help="split of the built-in treebank")
    parser.add_argument("--num-sentences", type=int, default=None, help="built-in treebank size")
    parser.add_argument("--seed", type=int, default=0)
    add_max_words_arg(parser, TREEBANK_MAX_WORDS)
    add_bad_input_args(parser)
    parser.set_defaults(run=run_deps)


def main_deps(argv: list[str] | None = None) -> int:
    """`tgjax data deps ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax data deps")
    add_deps_arguments(parser)
    return run_deps(parser.parse_args(argv))


def run_deps(args: argparse.Namespace) -> int:
    from tgjax.data import conllu, corpora
    from tgjax.outputs import check_output
    from tgjax.syntax import trees as trees_lib

    try:
        check_output(args.output, inputs=[] if args.treebank == "builtin" else [args.treebank])
        if args.treebank == "builtin":
            trees = corpora.get_corpus("builtin", args.split, seed=args.seed, num_sentences=args.num_sentences)
            source = f"built-in treebank ({args.split}, {len(trees)} trees)"
        elif "skip" in (args.on_bad_tree, args.on_too_long):
            trees, read_report = trees_lib.read_treebank(args.treebank, max_words=args.max_words,
                                                         on_error=reader_policy(args.on_bad_tree),
                                                         on_too_long=reader_policy(args.on_too_long))
            print(read_report.summary(max_errors=5), file=sys.stderr)
            source = args.treebank
        else:  # a tree over --max-words is refused while read, before it is built
            trees = trees_lib.read_treebank(args.treebank, max_words=args.max_words)
            source = args.treebank
        scheme = args.heads if args.heads != "auto" else ("builtin" if args.treebank == "builtin" else "collins")
        report = HeadReport()
        sentences = treebank_dependencies(
            trees, heads=scheme, keep_tags=WORD_TAGS if args.keep == "words" else None, report=report,
            nml_as_np=args.nml_as_np, coordination=args.coordination, dropped_root=args.dropped_root,
        )
        count = conllu.write_conllu(args.output, sentences)
    except (ValueError, OSError) as error:
        print(f"tgjax data deps: error: {error}", file=sys.stderr)
        return 2
    print(f"{source}: {report.summary()}")
    scheme = scheme_name(scheme, nml_as_np=args.nml_as_np, coordination=args.coordination)
    scheme += f", {args.dropped_root} for a dropped root" if args.keep == "words" else ""
    print(f"wrote {count} sentences to {args.output} (head scheme: {scheme}, tokens kept: {args.keep})")
    return 0
