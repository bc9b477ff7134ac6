"""The commands' default length limits and the two bad-input flags they share.

Every command that reads sentences refuses one longer than its limit while
reading it, before anything that grows with its length (actions, masks, a
beam, an n x n attention) is built: a single 10 MB line otherwise asks for
tens of GB. Each limit is sized so that the command stays within a few GB on
its default settings; `--max-words` (and `data.max_words` in training) raises
it. The same two flags name the same policies everywhere:

    --on-too-long error|skip   a sentence over the limit: stop (default), or skip and count it
    --on-bad-tree error|skip   a malformed record: stop at the first (default, file:line:column),
                               or skip and count them (the first few locations are printed)

No JAX or NumPy here: `tgjax --help` imports it.
"""

from __future__ import annotations

import argparse

# Treebank commands that stream a sentence through a Transformer-XL memory (data stats, train, eval score /
# ppl / rerank): one epoch of a 25,000-word sentence stays under about 1.5 GB (50,000 words: 2.9 GB).
TREEBANK_MAX_WORDS = 25_000
PARSE_MAX_WORDS = 300  # eval parse: the beam's time grows with the sentence's length
UNSUPERVISED_MAX_WORDS = 1_000  # eval unsupervised-parse: an ON-LSTM reads the whole sentence at once
DEPENDENCY_MAX_WORDS = 1_000  # eval dependency: UDGN's n x n attention and the n x n arc scores
MINIMAL_PAIR_MAX_WORDS = 200  # eval blimp / sg: one item is one short sentence (BLiMP's longest has ~30 words)
# viz mask / tree, data show: one tree given on the command line, counted in brackets (nodes) before it is
# parsed; the mask is an actions x actions picture (a 2,000-deep tree ended in std::bad_alloc).
DRAWING_MAX_NODES = 1_000


def add_max_words_arg(parser: argparse.ArgumentParser, default: int, what: str = "sentence") -> None:
    parser.add_argument("--max-words", type=int, default=default,
                        help=f"longest {what} read, in words, checked while reading (default {default:,})")


def add_bad_input_args(parser: argparse.ArgumentParser, *, too_long: bool = True) -> None:
    """`--on-bad-tree` (malformed records) and, with `too_long`, `--on-too-long` (sentences over --max-words)."""
    parser.add_argument("--on-bad-tree", default="error", choices=("error", "skip"),
                        help="a malformed record: stop at the first with file:line:column (default), or skip and "
                             "count them")
    if too_long:
        parser.add_argument("--on-too-long", default="error", choices=("error", "skip"),
                            help="a sentence over --max-words: stop with an error naming its file and line "
                                 "(default), or skip and count it")


def reader_policy(flag_value: str) -> str:
    """A flag's 'error' / 'skip' as the readers' 'raise' / 'skip'."""
    return "skip" if flag_value == "skip" else "raise"


def max_words_of(data) -> int | None:
    """A training config's `data.max_words` (configs saved before it existed: the treebank default)."""
    return data.get("max_words", TREEBANK_MAX_WORDS)


def words_of_line(line: str, max_words: int | None, source: str, number: int) -> list[str]:
    """The words of one line of plain text; a line over `max_words` is refused (file:line) before it is split."""
    # Counting blanks first: a 10 MB line is refused without making a list of a million strings.
    if max_words is not None and line.count(" ") + line.count("\t") >= max_words and len(line.split()) > max_words:
        from tgjax.syntax.trees import SentenceTooLong, too_long_reason

        raise SentenceTooLong(source, number, 1, too_long_reason(max_words))
    return line.split()


def check_tree_size(text: str, max_nodes: int, command: str) -> None:
    """Refuses a bracketed tree with more than `max_nodes` nodes, counted as its '(' before it is parsed."""
    nodes = text.count("(")
    if nodes > max_nodes:
        raise ValueError(f"the tree has {nodes:,} nodes; {command} takes at most {max_nodes:,} (the picture or "
                         f"table grows with the square of its actions; --max-nodes raises the limit)")


def check_prompt(prompt: str, max_words: int, max_actions: int) -> None:
    """Refuses a `tgjax sample --prompt` (Choe-Charniak tokens, e.g. "(S (NP the") with more words than
    `max_words` or more tokens than `max_actions` (a sample holds its prompt), counted before it is read."""
    tokens = prompt.split()
    # Choe-Charniak: "(NP" opens, "NP)" closes, anything else is a word.
    words = sum(1 for token in tokens if not (len(token) > 1 and (token[0] == "(" or token[-1] == ")")))
    if words > max_words:
        raise ValueError(f"--prompt: expected a prompt of at most {max_words:,} words (the command's length limit: "
                         f"--max-words raises it), found {words:,}")
    if len(tokens) > max_actions:
        raise ValueError(f"--prompt: expected at most {max_actions:,} actions, found {len(tokens):,} (a sample holds "
                         f"its prompt: --max-actions raises the limit)")


def check_max_words(value: int | None, name: str = "--max-words") -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


__all__ = ["DEPENDENCY_MAX_WORDS", "DRAWING_MAX_NODES", "MINIMAL_PAIR_MAX_WORDS", "PARSE_MAX_WORDS",
           "TREEBANK_MAX_WORDS", "UNSUPERVISED_MAX_WORDS",
           "add_bad_input_args", "add_max_words_arg", "check_max_words", "check_prompt", "check_tree_size",
           "max_words_of",
           "reader_policy", "words_of_line"]
