"""Corpora by name, and the built-in synthetic English-like treebank.

The built-in treebank is sampled from a PCFG shipped here as text
(`BUILTIN_GRAMMAR_TEXT`, in the format of `tgjax.syntax.grammar`). Its
non-terminals carry the grammatical number in their names (`NP_sg`, `VP_pl`,
`NN_sg`, `VBP_tr`, ...), so subject–verb agreement is exact: a singular
subject noun phrase always has a singular verb, across prepositional phrases
and relative clauses (subject and object relatives, which nest into centre
embeddings). Nesting is free in objects, but a subject (of a main clause or
of an object relative) has at most one embedding, a PP or a relative clause
with no further PP or relative clause inside, between its head noun and its
verb; `agreement_minimal_pairs(depth=2 or 3)` tests agreement across deeper
nesting than any training sentence has. Trees are returned with Penn-Treebank labels: the part of a name
from the first `_` on is dropped (`NP_sg_base` -> `NP`, `VBZ_tr` -> `VBZ`),
and `PUNCT` becomes `.`, so a PTB tree is its grammar tree relabelled, node
for node.

Every rule with two or more symbols marks its head child (`VP_sg^`), as
Stanford basic dependencies would choose it (nouns head NPs, prepositions
PPs, the clause's verb a relative clause, the adjective a copular VP), so
`tgjax.syntax.heads.grammar_head_table(builtin_grammar().rules, ptb_label, ...)`
gives the built-in treebank's dependencies exactly.

Example tree::

    (S (NP (NP (DT the) (NN dog)) (SBAR (WHNP (WDT that)) (S (NP (DT the) (NNS cats))
       (VP (VBP chase))))) (VP (VBZ sleeps)) (. .))

`get_corpus(name, split)` is the one entry point other code uses;
`register_corpus` adds loaders (treebank files, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable

import numpy as np

from tgjax.syntax.grammar import WeightedCFG
from tgjax.syntax.trees import Tree

__all__ = [
    "BUILTIN_GRAMMAR_TEXT",
    "BUILTIN_SPLIT_SIZES",
    "MAX_SENTENCE_LENGTH",
    "MinimalPair",
    "agreement_minimal_pairs",
    "available_corpora",
    "builtin_grammar",
    "builtin_treebank",
    "get_corpus",
    "ptb_label",
    "register_corpus",
    "to_ptb_tree",
    "write_treebank",
]

# ---------------------------------------------------------------------------
# The lexicon. Every word belongs to exactly one category (except "the",
# a determiner of both numbers), so a word's part of speech and number are
# never ambiguous. Nouns and verbs come as (singular, plural) pairs; the pairs
# give the minimal pairs their verb swap.

NOUNS = (
    ("dog", "dogs"), ("cat", "cats"), ("bird", "birds"), ("horse", "horses"),
    ("farmer", "farmers"), ("teacher", "teachers"), ("student", "students"),
    ("doctor", "doctors"), ("lawyer", "lawyers"), ("pilot", "pilots"),
    ("senator", "senators"), ("author", "authors"), ("artist", "artists"),
    ("baker", "bakers"), ("child", "children"), ("man", "men"), ("woman", "women"),
    ("girl", "girls"), ("boy", "boys"), ("king", "kings"), ("queen", "queens"),
    ("nurse", "nurses"), ("soldier", "soldiers"), ("driver", "drivers"),
    ("singer", "singers"), ("dancer", "dancers"), ("writer", "writers"),
    ("officer", "officers"), ("manager", "managers"), ("painter", "painters"),
    ("sailor", "sailors"), ("actor", "actors"), ("banker", "bankers"),
    ("poet", "poets"), ("mouse", "mice"), ("fox", "foxes"), ("wolf", "wolves"),
    ("rabbit", "rabbits"), ("lion", "lions"), ("tiger", "tigers"),
    ("monkey", "monkeys"), ("goat", "goats"), ("parrot", "parrots"),
    ("neighbor", "neighbors"), ("friend", "friends"), ("chef", "chefs"),
    ("clerk", "clerks"), ("scientist", "scientists"), ("farmhand", "farmhands"),
    ("minister", "ministers"), ("house", "houses"), ("garden", "gardens"),
    ("river", "rivers"), ("table", "tables"), ("tree", "trees"),
    ("window", "windows"), ("bridge", "bridges"), ("school", "schools"),
    ("car", "cars"), ("lake", "lakes"), ("hill", "hills"), ("road", "roads"),
    ("tower", "towers"), ("wall", "walls"), ("door", "doors"), ("boat", "boats"),
    ("village", "villages"), ("castle", "castles"), ("forest", "forests"),
    ("library", "libraries"),
)
TRANSITIVE_VERBS = (
    ("sees", "see"), ("likes", "like"), ("chases", "chase"), ("follows", "follow"),
    ("admires", "admire"), ("helps", "help"), ("watches", "watch"), ("knows", "know"),
    ("loves", "love"), ("hates", "hate"), ("visits", "visit"), ("meets", "meet"),
    ("praises", "praise"), ("finds", "find"), ("greets", "greet"), ("trusts", "trust"),
    ("calls", "call"), ("thanks", "thank"), ("blames", "blame"), ("avoids", "avoid"),
    ("remembers", "remember"), ("ignores", "ignore"), ("attacks", "attack"),
    ("protects", "protect"), ("fears", "fear"), ("pushes", "push"), ("pulls", "pull"),
    ("teaches", "teach"), ("hears", "hear"), ("carries", "carry"),
)
INTRANSITIVE_VERBS = (
    ("sleeps", "sleep"), ("laughs", "laugh"), ("smiles", "smile"), ("runs", "run"),
    ("swims", "swim"), ("sings", "sing"), ("dances", "dance"), ("waits", "wait"),
    ("arrives", "arrive"), ("falls", "fall"), ("cries", "cry"), ("jumps", "jump"),
    ("walks", "walk"), ("talks", "talk"), ("shouts", "shout"), ("sits", "sit"),
    ("rests", "rest"), ("leaves", "leave"), ("works", "work"), ("wanders", "wander"),
)
COPULAS = (("is", "are"),)
ADJECTIVES = (
    "big", "small", "old", "young", "happy", "sad", "tall", "short", "quiet", "loud",
    "clever", "lazy", "brave", "angry", "kind", "proud", "busy", "strange", "famous",
    "friendly", "gentle", "nervous", "polite", "rich", "poor", "hungry", "tired",
    "lucky", "curious", "calm", "careful", "honest", "wise", "silly", "shy", "bold",
    "cheerful", "grumpy", "green", "red",
)
MANNER_ADVERBS = (
    "quickly", "slowly", "quietly", "loudly", "happily", "sadly", "calmly", "eagerly",
    "gladly", "rarely",
)
DEGREE_ADVERBS = ("very", "quite", "rather", "extremely", "really")
PREPOSITIONS = (
    "near", "behind", "beside", "with", "under", "above", "from", "by", "without",
    "beyond", "across", "around", "toward", "inside", "outside", "among", "against",
)
SINGULAR_DETERMINERS = ("the", "this", "every", "each")
PLURAL_DETERMINERS = ("the", "these", "those", "some", "all")
WH_DETERMINERS = ("that", "which")
WH_PRONOUNS = ("who",)

# Structural rules, written once per number where agreement matters. The
# weights keep sentences short (mean ≈ 9 words) while recursion through PPs
# and relative clauses (including centre-embedded object relatives) stays
# frequent enough to matter; sentences are capped at MAX_SENTENCE_LENGTH.
_STRUCTURE = """\
# Sentences: subject and verb phrase agree in number. Subjects are NP_x_subj
# (below): at most one embedding between the subject's head and its verb.
S -> NP_sg_subj VP_sg^ PUNCT 1 | NP_pl_subj VP_pl^ PUNCT 1
PUNCT -> '.'

# Noun phrases: a base NP (determiner, up to two adjectives, noun), or a base
# NP modified by a PP or a relative clause. The head (and so the number) is
# always the base NP's noun.
NP_sg -> DT_sg NN_sg^ 0.42 | DT_sg JJ NN_sg^ 0.15 | DT_sg JJ JJ NN_sg^ 0.03
      | NP_sg_base^ PP 0.2 | NP_sg_base^ SBAR_sg 0.2
NP_pl -> DT_pl NNS_pl^ 0.32 | DT_pl JJ NNS_pl^ 0.12 | DT_pl JJ JJ NNS_pl^ 0.03 | NNS_pl^ 0.08 | JJ NNS_pl^ 0.03
      | NP_pl_base^ PP 0.2 | NP_pl_base^ SBAR_pl 0.2
NP_sg_base -> DT_sg NN_sg^ 0.7 | DT_sg JJ NN_sg^ 0.25 | DT_sg JJ JJ NN_sg^ 0.05
NP_pl_base -> DT_pl NNS_pl^ 0.55 | DT_pl JJ NNS_pl^ 0.2 | DT_pl JJ JJ NNS_pl^ 0.05 | NNS_pl^ 0.15 | JJ NNS_pl^ 0.05

# Prepositional phrases: the object may have either number (an attractor).
PP -> IN^ NP_sg 1 | IN^ NP_pl 1

# Relative clauses. Subject relatives: the clause's verb agrees with the
# modified noun. Object relatives: the clause has its own subject (either
# number, possibly modified again: centre embedding) and a transitive verb
# with the object gap.
SBAR_sg -> WHNP S_sg_subjrel^ 1 | WHNP S_objrel^ 1
SBAR_pl -> WHNP S_pl_subjrel^ 1 | WHNP S_objrel^ 1
S_sg_subjrel -> VP_sg
S_pl_subjrel -> VP_pl
S_objrel -> NP_sg_subj VP_sg_gap^ 1 | NP_pl_subj VP_pl_gap^ 1
VP_sg_gap -> VBZ_tr
VP_pl_gap -> VBP_tr
WHNP -> WDT 0.7 | WP 0.3

# Verb phrases: intransitive (alone, with an adverb or a PP), transitive
# (object of either number), copular (adjective phrase or PP).
VP_sg -> VBZ_intr 0.22 | VBZ_intr^ ADVP 0.08 | VBZ_intr^ PP 0.1
      | VBZ_tr^ NP_sg 0.2 | VBZ_tr^ NP_pl 0.2 | VBZ_cop ADJP^ 0.15 | VBZ_cop^ PP 0.05
VP_pl -> VBP_intr 0.22 | VBP_intr^ ADVP 0.08 | VBP_intr^ PP 0.1
      | VBP_tr^ NP_sg 0.2 | VBP_tr^ NP_pl 0.2 | VBP_cop ADJP^ 0.15 | VBP_cop^ PP 0.05
ADJP -> JJ 0.8 | RB_degree JJ^ 0.2
ADVP -> RB_manner

# Subjects (of main clauses and of object relatives): the noun phrases above,
# with at most one embedding (a PP or a relative clause) between the head noun
# and the verb: a modifier's own phrases are base NPs and verb phrases without
# a PP (VP_x_bare). Objects nest freely, so training sees deep nesting, but
# never a subject–verb dependency across more than one embedding; the
# `agreement_minimal_pairs(depth=2 or 3)` pairs test that generalisation.
NP_sg_subj -> DT_sg NN_sg^ 0.42 | DT_sg JJ NN_sg^ 0.15 | DT_sg JJ JJ NN_sg^ 0.03
      | NP_sg_base^ PP_bare 0.2 | NP_sg_base^ SBAR_sg_bare 0.2
NP_pl_subj -> DT_pl NNS_pl^ 0.32 | DT_pl JJ NNS_pl^ 0.12 | DT_pl JJ JJ NNS_pl^ 0.03 | NNS_pl^ 0.08 | JJ NNS_pl^ 0.03
      | NP_pl_base^ PP_bare 0.2 | NP_pl_base^ SBAR_pl_bare 0.2
PP_bare -> IN^ NP_sg_base 1 | IN^ NP_pl_base 1
SBAR_sg_bare -> WHNP S_sg_subjrel_bare^ 1 | WHNP S_objrel_bare^ 1
SBAR_pl_bare -> WHNP S_pl_subjrel_bare^ 1 | WHNP S_objrel_bare^ 1
S_sg_subjrel_bare -> VP_sg_bare
S_pl_subjrel_bare -> VP_pl_bare
S_objrel_bare -> NP_sg_base VP_sg_gap^ 1 | NP_pl_base VP_pl_gap^ 1
VP_sg_bare -> VBZ_intr 0.22 | VBZ_intr^ ADVP 0.08 | VBZ_tr^ NP_sg_base 0.2 | VBZ_tr^ NP_pl_base 0.2 | VBZ_cop ADJP^ 0.15
VP_pl_bare -> VBP_intr 0.22 | VBP_intr^ ADVP 0.08 | VBP_tr^ NP_sg_base 0.2 | VBP_tr^ NP_pl_base 0.2 | VBP_cop ADJP^ 0.15
"""


def _lexicon_rules(label: str, words) -> str:
    return f"{label} -> " + " | ".join(f"'{w}'" for w in words) + "\n"


def _build_grammar_text() -> str:
    lexicon = [
        "\n# The lexicon (uniform weights within each category).\n",
        _lexicon_rules("DT_sg", SINGULAR_DETERMINERS),
        _lexicon_rules("DT_pl", PLURAL_DETERMINERS),
        _lexicon_rules("NN_sg", [sg for sg, _ in NOUNS]),
        _lexicon_rules("NNS_pl", [pl for _, pl in NOUNS]),
        _lexicon_rules("VBZ_tr", [sg for sg, _ in TRANSITIVE_VERBS]),
        _lexicon_rules("VBP_tr", [pl for _, pl in TRANSITIVE_VERBS]),
        _lexicon_rules("VBZ_intr", [sg for sg, _ in INTRANSITIVE_VERBS]),
        _lexicon_rules("VBP_intr", [pl for _, pl in INTRANSITIVE_VERBS]),
        _lexicon_rules("VBZ_cop", [sg for sg, _ in COPULAS]),
        _lexicon_rules("VBP_cop", [pl for _, pl in COPULAS]),
        _lexicon_rules("JJ", ADJECTIVES),
        _lexicon_rules("RB_manner", MANNER_ADVERBS),
        _lexicon_rules("RB_degree", DEGREE_ADVERBS),
        _lexicon_rules("IN", PREPOSITIONS),
        _lexicon_rules("WDT", WH_DETERMINERS),
        _lexicon_rules("WP", WH_PRONOUNS),
    ]
    return _STRUCTURE + "".join(lexicon)


BUILTIN_GRAMMAR_TEXT = _build_grammar_text()
MAX_SENTENCE_LENGTH = 30
BUILTIN_SPLIT_SIZES = {"train": 5000, "valid": 500, "test": 500}
_SPLIT_IDS = {"train": 0, "valid": 1, "test": 2}
_TREEBANK_STREAM = 0x7467  # separates the treebank's random streams from the minimal pairs'
_PAIRS_STREAM = 0x6D70

_SINGULAR_OF = {pl: sg for table in (TRANSITIVE_VERBS, INTRANSITIVE_VERBS, COPULAS) for sg, pl in table}
_PLURAL_OF = {sg: pl for table in (TRANSITIVE_VERBS, INTRANSITIVE_VERBS, COPULAS) for sg, pl in table}


@functools.lru_cache(maxsize=1)
def builtin_grammar() -> WeightedCFG:
    """The built-in English-like PCFG (number features in its non-terminal names)."""
    return WeightedCFG.from_string(BUILTIN_GRAMMAR_TEXT, source="tgjax.data.corpora.BUILTIN_GRAMMAR_TEXT")


def ptb_label(name: str) -> str:
    """Grammar non-terminal -> Penn Treebank label: `NP_sg_base` -> `NP`, `PUNCT` -> `.`."""
    return "." if name == "PUNCT" else name.split("_", 1)[0]


def to_ptb_tree(tree: Tree) -> Tree:
    """A copy of a grammar tree with PTB labels (see `ptb_label`)."""
    return Tree(
        ptb_label(tree.label),
        [to_ptb_tree(c) if isinstance(c, Tree) else c for c in tree.children],
    )


def builtin_treebank(split: str, num_sentences: int | None = None, seed: int = 0) -> list[Tree]:
    """Sentences of the built-in treebank, as PTB-labelled trees.

    Args:
      split: "train", "valid" or "test"; each has its own random stream
        derived from `seed`, so the splits are independent draws.
      num_sentences: how many (default `BUILTIN_SPLIT_SIZES[split]`: 5000 /
        500 / 500). Draws are sequential, so a smaller count is a prefix of a
        larger one.
      seed: the corpus seed; the same (split, seed) gives the same trees.

    Returns:
      Trees drawn from the grammar conditioned on length <= MAX_SENTENCE_LENGTH
      (exactly: a length from the truncated length distribution, then a tree
      of that length), each ending in `(. .)`. Sentences may repeat (short
      ones often do), within and across splits, as in any sample.
    """
    if split not in _SPLIT_IDS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(_SPLIT_IDS)}")
    count = BUILTIN_SPLIT_SIZES[split] if num_sentences is None else num_sentences
    if count < 0:
        raise ValueError(f"num_sentences must be >= 0, got {count}")
    grammar = builtin_grammar()
    rng = np.random.default_rng(np.random.SeedSequence([_TREEBANK_STREAM, seed, _SPLIT_IDS[split]]))
    return [
        to_ptb_tree(grammar.sample_in_length_range(rng, 1, MAX_SENTENCE_LENGTH)) for _ in range(count)
    ]


def write_treebank(path: str | os.PathLike, trees: list[Tree]) -> int:
    """Writes one bracketed tree per line (UTF-8; whole or not at all); returns the number written."""
    from tgjax.outputs import atomic_write

    with atomic_write(path) as f:
        for tree in trees:
            f.write(tree.to_string() + "\n")
    return len(trees)


# ---------------------------------------------------------------------------
# Agreement minimal pairs.

CONSTRUCTIONS = ("pp", "subject_relative", "object_relative")  # with an attractor (the default)
ALL_CONSTRUCTIONS = ("simple", *CONSTRUCTIONS)  # "simple": no attractor, the control


@dataclasses.dataclass(frozen=True)
class MinimalPair:
    """A grammatical sentence and its ungrammatical twin.

    The two differ in exactly one word, the main verb (at `verb_index`), whose
    number is flipped; between the subject's head noun and that verb sit
    `depth` attractor nouns of the opposite number, in nested PPs or relative
    clauses (none for "simple").

    Attributes:
      good, bad: PTB-labelled trees (the bad tree is the good one with the
        verb and its tag, VBZ <-> VBP, swapped).
      construction: "pp", "subject_relative" or "object_relative".
      subject_number: "sg" or "pl" (the head noun's, and the good verb's).
      verb_index: position of the verb in the word sequence.
      depth: embeddings (PPs or relative clauses, nested) between the
        subject's head and the verb: 0 for "simple", else each one holds an
        attractor.
    """

    good: Tree
    bad: Tree
    construction: str
    subject_number: str
    verb_index: int
    depth: int = 1

    @property
    def good_words(self) -> list[str]:
        return self.good.leaves()

    @property
    def bad_words(self) -> list[str]:
        return self.bad.leaves()


def agreement_minimal_pairs(
    num: int, seed: int = 0, constructions: tuple[str, ...] = CONSTRUCTIONS, depth: int = 1
) -> list[MinimalPair]:
    """Subject–verb agreement minimal pairs with attractors of the opposite number.

    Pair i uses `constructions[i % len(constructions)]`; the subject's number
    is drawn at random. The subject is built from grammar samples:

    * pp:               [the dog]_sg [near [the cats]_pl]  VERB ...
    * subject_relative: [the dog]_sg [that chases [the cats]_pl]  VERB ...
    * object_relative:  [the dog]_sg [that [the cats]_pl chase]  VERB ...
    * simple (a control, not in the default): [the dog]_sg VERB ...

    and the verb phrase is a sample of the subject's number. With `depth`
    d > 1 the attractor is modified again the same way, d embeddings in all,
    each with one more attractor; every attractor has the number opposite to
    the head's (a verb inside a relative clause agrees with its own subject):

    * pp, depth 2:               the dog near the cats near the houses VERB ...
    * subject_relative, depth 2: the dog that chases the cats that see the mice VERB ...
    * object_relative, depth 2:  the dog that the cats that the mice chase see VERB ...

    Depth 1 pairs are generated by the built-in grammar (every good sentence;
    the bad one is not: its only candidate subject has the other number).
    Deeper ones are not, by design: its subjects have at most one embedding.
    """
    for c in constructions:
        if c not in ALL_CONSTRUCTIONS:
            raise ValueError(f"unknown construction {c!r}; expected some of {ALL_CONSTRUCTIONS}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1 (the number of embeddings between head and verb), got {depth}")
    if depth > 1 and "simple" in constructions:
        raise ValueError("the 'simple' construction has no embedding: it takes no depth > 1")
    grammar = builtin_grammar()
    rng = np.random.default_rng(np.random.SeedSequence([_PAIRS_STREAM, seed] + ([depth] if depth > 1 else [])))
    pairs = []
    for i in range(num):
        construction = constructions[i % len(constructions)]
        number = ("sg", "pl")[int(rng.integers(2))]
        other = _OTHER_NUMBER[number]

        head = grammar.sample(rng, f"NP_{number}_base")
        if construction == "simple":
            subject = Tree(f"NP_{number}", head.children)
        else:
            modifier = _nested_modifier(grammar, rng, construction, number, other, depth)
            subject = Tree(f"NP_{number}", [head, modifier])
        verb_phrase = grammar.sample(rng, f"VP_{number}")
        good = Tree("S", [subject, verb_phrase, Tree("PUNCT", ["."])])
        bad = Tree("S", [subject, _verb_number_swapped(verb_phrase, number), good.children[2]])
        pairs.append(
            MinimalPair(
                good=to_ptb_tree(good),
                bad=to_ptb_tree(bad),
                construction=construction,
                subject_number=number,
                verb_index=len(subject.leaves()),
                depth=0 if construction == "simple" else depth,
            )
        )
    return pairs


_OTHER_NUMBER = {"sg": "pl", "pl": "sg"}
_VERB_TAG = {"sg": "VBZ", "pl": "VBP"}


def _nested_modifier(grammar: WeightedCFG, rng, construction: str, number: str, other: str, depth: int) -> Tree:
    """A PP or relative clause (grammar labels) modifying an NP of `number`.

    Its noun phrase, the attractor (of number `other`), is itself modified
    the same way `depth - 1` more times, each time by a phrase whose
    attractor has the number `other` too.
    """
    attractor = grammar.sample(rng, f"NP_{other}_base")
    if depth > 1:
        inner = _nested_modifier(grammar, rng, construction, other, other, depth - 1)
        attractor = Tree(f"NP_{other}", [attractor, inner])
    else:
        attractor = Tree(f"NP_{other}", attractor.children)  # NP_x has the same base rules
    if construction == "pp":
        return Tree("PP", [grammar.sample(rng, "IN"), attractor])
    if construction == "subject_relative":
        verb = grammar.sample(rng, f"{_VERB_TAG[number]}_tr")
        clause = Tree(f"S_{number}_subjrel", [Tree(f"VP_{number}", [verb, attractor])])
    else:  # object_relative: the attractor is the clause's subject, its verb agrees with it
        verb = grammar.sample(rng, f"{_VERB_TAG[other]}_tr")
        clause = Tree("S_objrel", [attractor, Tree(f"VP_{other}_gap", [verb])])
    return Tree(f"SBAR_{number}", [grammar.sample(rng, "WHNP"), clause])


def _verb_number_swapped(verb_phrase: Tree, number: str) -> Tree:
    """`verb_phrase` (of `number`) with its verb, the first child, in the other number (word and tag)."""
    verb_node = verb_phrase.children[0]
    word = verb_node.children[0]
    swapped_word = _PLURAL_OF[word] if number == "sg" else _SINGULAR_OF[word]
    swapped_label = _VERB_TAG[_OTHER_NUMBER[number]] + verb_node.label[3:]  # VBZ_tr <-> VBP_tr, ...
    return Tree(verb_phrase.label, [Tree(swapped_label, [swapped_word]), *verb_phrase.children[1:]])


# ---------------------------------------------------------------------------
# The registry.

CorpusLoader = Callable[..., list[Tree]]
_REGISTRY: dict[str, CorpusLoader] = {}


def register_corpus(name: str, loader: CorpusLoader, *, overwrite: bool = False) -> None:
    """Registers `loader(split, **kwargs) -> list[Tree]` under `name`."""
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"corpus {name!r} is already registered (pass overwrite=True to replace it)")
    _REGISTRY[name] = loader


def available_corpora() -> list[str]:
    return sorted(_REGISTRY)


def get_corpus(name: str, split: str, **kwargs) -> list[Tree]:
    """The trees of corpus `name`, split `split`; kwargs go to the loader."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown corpus {name!r}; registered: {available_corpora()}")
    return _REGISTRY[name](split, **kwargs)


register_corpus("builtin", builtin_treebank)
