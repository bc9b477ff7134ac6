"""`tgjax eval dyck`: accuracy at choosing the right closing bracket (Murty et al., EMNLP 2023, §4.1, Table 1).

    tgjax eval dyck --workdir runs/pushdown_dyck [--sets dyck50,dyck100,dyck200,dyck300,depth]
                    [--tape model|gold] [--beam-size 50] [--among closers|all] [--seed 0] [-o scores.json]

The protocol. "Models are provided an input prefix from a separate Dyck
language, and evaluated on choosing the correct closing bracket" (§4.1). An
example (`tgjax.data.dyck.DyckExample`) is a prefix whose next token must be
the closer of its innermost open bracket; the model reads ``<s> prefix`` and
its prediction is the argmax of its next-token distribution after the prefix
over the closing brackets (``--among closers``, the release's eval_dyck.py,
released-code.md §1.8; ``--among all``: over the whole vocabulary, a stricter
reading). Accuracy = the fraction of examples whose prediction is the target.

The sets (`evaluation_sets`; released-code.md §1.8), drawn afresh from
``--seed`` (the paper's files are not released) with the run's own
automaton (`data.dyck_open_probability`, `data.dyck_max_depth`,
`data.dyck_min_length` of its config), so that a run trained at open
probability 0.3 is scored on strings like its own:

* ``dyck50`` .. ``dyck300``: long-range dependencies, 50 prefixes each,
  nesting no deeper than training (Dyck_{20,10}), ending just before a closer
  whose opener is at least 50 / 100 / 200 / 300 tokens back: "longer-range
  dependencies than seen at training time" (§4.1), apart from depth;
* ``dyck50-release`` .. ``dyck300-release`` (not in the default list): the
  release's construction, prefixes of Dyck_{20,40} strings (at least 50 each),
  94-100% of which nest deeper than 10: Table 1's numbers came from these;
* ``depth``: depth generalisation, 105 prefixes nesting 15..49 deep whose
  target closes the outermost bracket;
* ``valid`` (not in the default list; no paper figure): 500 closers of
  Dyck_{20,10} strings, the training distribution (prefixes of at most 250
  tokens), as the release's training callback reports: whether a model learnt
  the language at all, apart from how far it generalises.

``--sets dyck50,dyck50-release`` reports both constructions side by side.

The stack tape at test time (``--tape``). A Pushdown-LM builds its tape from
its own attachment decisions, synchronously with the tokens (§3.3); the
paper decodes them by beam search, and the release's eval_dyck.py reads the
top hypothesis of a beam of 50 over the prefix and predicts from *its* tape.
``--tape model`` (default) does that (`tgjax.infer.pushdown_search`,
``--beam-size``, 1 = greedy). ``--tape gold`` is a diagnostic that no paper
reports: the tape of the true bracket matching (an oracle parser), which
says how much of an error is the parser's. A Base-LM's layers never read the
tape (only its attachment head does), so its prediction is one
teacher-forced pass whatever ``--tape`` says; the report says "not read".

Paper and release do not disagree here: the paper is silent on the beam
size and on the candidate set, so the release's choices (50, the closers)
are the defaults and the alternatives are switches. The long-range sets
hold 50 examples (the release's, with seed 0: 51 / 59 / 58 / 59) and depth
105, so one example is 1-2 points; prefixes reach 599 tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from tgjax.data import dyck
from tgjax.syntax import stack_tape as stt

RELEASE_SUFFIX = "-release"  # the release's long-range construction (depth-40 strings)
TRAINING_DEPTH_SETS = {f"dyck{length}": length for length in dyck.LONG_RANGE_LENGTHS}
RELEASE_SETS = {f"{name}{RELEASE_SUFFIX}": length for name, length in TRAINING_DEPTH_SETS.items()}
LONG_RANGE_SETS = {**TRAINING_DEPTH_SETS, **RELEASE_SETS}  # name -> the least dependency length
PAPER_SETS = (*TRAINING_DEPTH_SETS, "depth")  # Table 1's, the default
SET_NAMES = (*PAPER_SETS, *RELEASE_SETS, "valid")
TAPE_SOURCES = ("model", "gold")
AMONG = ("closers", "all")
# Table 1 of the paper (accuracy, %).
PAPER_TABLE = {
    "base": {"dyck50": 90.0, "dyck100": 81.0, "dyck200": 40.6, "dyck300": 14.1, "depth": 40.6},
    "pushdown": {"dyck50": 96.5, "dyck100": 88.0, "dyck200": 61.2, "dyck300": 42.9, "depth": 68.3},
}
SET_TITLES = {"dyck50": "Dyck (50)", "dyck100": "Dyck (100)", "dyck200": "Dyck (200)", "dyck300": "Dyck (300)",
              "depth": "Depth Gen. (15-50)", "valid": "In-distribution",
              **{name: f"Dyck ({length}) d40" for name, length in RELEASE_SETS.items()}}


@dataclasses.dataclass(frozen=True)
class TrainingStrings:
    """The automaton a run trained on (its config's `data.dyck_*`); the evaluation sets draw from it."""

    num_types: int = dyck.PAPER_TYPES
    max_depth: int = dyck.PAPER_TRAIN_DEPTH
    open_probability: float = 0.5
    min_length: int = 1

    @classmethod
    def of_run(cls, data: dict) -> TrainingStrings:
        """From a run's `config.data` (a dict); a key it lacks keeps the paper's value."""
        default = cls()
        return cls(int(data.get("dyck_num_types", default.num_types)),
                   int(data.get("dyck_max_depth", default.max_depth)),
                   float(data.get("dyck_open_probability", default.open_probability)),
                   int(data.get("dyck_min_length", default.min_length)))


def parse_set_names(text: str) -> list[str]:
    """``"dyck50,depth"`` -> the names, in the order given; an unknown or repeated name is a ValueError."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in SET_NAMES]
    if unknown or not names:
        raise ValueError(f"--sets: unknown set {', '.join(map(repr, unknown)) or '(none given)'}; "
                         f"expected a comma-separated list of {', '.join(SET_NAMES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--sets: a set is named twice in {text!r}")
    return names


def evaluation_sets(names: Sequence[str], *, seed: int = 0, num_types: int = dyck.PAPER_TYPES,
                    strings: TrainingStrings | None = None) -> dict[str, list[dyck.DyckExample]]:
    """The named sets, each from its own generator ``[seed, code...]`` (code: the length L, and 1 for the
    training-depth construction; 1 for depth; 2 for valid), drawn from the run's automaton ``strings``
    (default: the paper's, with ``num_types`` bracket types)."""
    strings = strings or TrainingStrings(num_types=num_types)
    automaton = dict(num_types=strings.num_types, open_probability=strings.open_probability)
    sets = {}
    for name in names:
        if name in TRAINING_DEPTH_SETS:
            length = LONG_RANGE_SETS[name]
            sets[name] = dyck.long_range_examples(np.random.default_rng([seed, length, 1]), length,
                                                  max_depth=strings.max_depth, **automaton)
        elif name in RELEASE_SETS:
            length = LONG_RANGE_SETS[name]
            sets[name] = dyck.release_long_range_examples(np.random.default_rng([seed, length]), length, **automaton)
        elif name == "depth":
            sets[name] = dyck.depth_generalisation_examples(np.random.default_rng([seed, 1]),
                                                            inserted_depth=strings.max_depth, **automaton)
        elif name == "valid":
            sets[name] = dyck.in_distribution_examples(np.random.default_rng([seed, 2]), max_depth=strings.max_depth,
                                                       min_length=strings.min_length, **automaton)
        else:
            raise ValueError(f"unknown Dyck evaluation set {name!r}; expected one of {SET_NAMES}")
    return sets


def gold_attachments(example: dyck.DyckExample) -> np.ndarray:
    """``[n + 1]`` the true attachments of ``<s> prefix`` (closers reduce with their opener)."""
    return dyck.dyck_attachments(example.prefix, bos=True, name="Dyck prefix", complete=False)


def choose(next_log_probs: np.ndarray, candidate_ids: np.ndarray) -> np.ndarray:
    """``[N]`` the candidate id of highest log-probability per row of ``next_log_probs [N, V]`` (first on ties)."""
    candidate_ids = np.asarray(candidate_ids)
    return candidate_ids[np.argmax(np.asarray(next_log_probs)[:, candidate_ids], axis=-1)]


def accuracy(predicted: np.ndarray, target: np.ndarray) -> float:
    """Fraction of equal entries of two ``[N]`` id arrays (NaN for N = 0)."""
    predicted, target = np.asarray(predicted), np.asarray(target)
    if predicted.shape != target.shape:
        raise ValueError(f"{predicted.shape[0]} predictions for {target.shape[0]} targets")
    return float(np.mean(predicted == target)) if target.size else float("nan")


@dataclasses.dataclass
class SetScore:
    name: str
    accuracy: float  # fraction correct
    num_examples: int
    num_correct: int
    attachment_agreement: float | None  # the tape's attachments equal to the gold ones (tape model), per token
    exact_tapes: float | None  # prefixes whose whole tape is the gold one (tape model)
    seconds: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# A prefix scorer: (ids [n] of `<s> prefix`, gold attachments [n]) -> (log-probs [V] of the next token,
# the attachments [n] of the tape it read, or None when no layer reads a tape).
PrefixScorer = Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], tuple[np.ndarray, list[np.ndarray | None]]]


def score_set(name: str, examples: Sequence[dyck.DyckExample], vocab, scorer, *, among: str = "closers",
              batch_size: int = 16, progress: Callable[[int], None] | None = None) -> SetScore:
    """Accuracy of `scorer` on one set. `vocab`: `tgjax.data.dyck.dyck_vocabulary`'s (ids of the tokens)."""
    if among not in AMONG:
        raise ValueError(f"--among: expected one of {AMONG}, got {among!r}")
    closer_ids = np.asarray([vocab.id_of(t) for t in dyck.closers(len(vocab.symbols) // 2)])
    candidates = closer_ids if among == "closers" else np.arange(vocab.size)
    start = time.perf_counter()
    predicted, agreed, counted, exact, read = [], 0, 0, 0, 0
    for first in range(0, len(examples), batch_size):
        chunk = examples[first:first + batch_size]
        ids = [np.asarray([vocab.bos_id] + [vocab.id_of(t) for t in e.prefix], np.int32) for e in chunk]
        gold = [gold_attachments(e) for e in chunk]
        log_probs, used = scorer(ids, gold)
        predicted.append(choose(log_probs, candidates))
        for g, u in zip(gold, used):
            if u is None:
                continue
            read += 1
            # Position 0 (<s>) always shifts; the prefix's tokens are 1..n-1.
            agreed += int(np.count_nonzero(u[1:] == g[1:]))
            counted += len(g) - 1
            exact += int(np.array_equal(u, g))
        if progress is not None:
            progress(len(chunk))
    targets = np.asarray([vocab.id_of(e.target) for e in examples])
    predicted = np.concatenate(predicted) if predicted else np.zeros(0, np.int64)
    correct = int(np.count_nonzero(predicted == targets))
    return SetScore(name, accuracy(predicted, targets), len(examples), correct,
                    agreed / counted if counted else None, exact / read if read else None,
                    time.perf_counter() - start)


# -----------------------------------------------------------------------------
# Scorers (JAX from here on, imported lazily so that the metric above stays NumPy).


def tape_of(attach: np.ndarray, binary: bool) -> np.ndarray:
    """``[n, n]`` the tape a model reads after the attachments ``[n]`` (binary: 1 where reduced)."""
    depths, _ = stt.replay(np.asarray(attach))
    return (depths > 0).astype(np.int32) if binary else depths.astype(np.int32)


class TeacherForcedScorer:
    """Next-token log-probabilities after each prefix under a given tape, in padded batches (one pass each).

    Lengths are padded up to a multiple of `bucket` (one compilation per bucket).
    """

    def __init__(self, model, *, bucket: int = 64):
        import jax
        from flax import nnx

        self.model, self.bucket = model, bucket
        graphdef, state = nnx.split(model)

        def last_log_probs(state, batch, last):
            logits = nnx.merge(graphdef, state)(batch, deterministic=True)["lm_logits"]  # [B, T, V]
            rows = jax.numpy.take_along_axis(logits, last[:, None, None], axis=1)[:, 0]  # [B, V]
            return jax.nn.log_softmax(rows.astype(jax.numpy.float32), axis=-1)

        self._state = state
        self._last_log_probs = jax.jit(last_log_probs)

    def log_probs(self, ids: Sequence[np.ndarray], attach: Sequence[np.ndarray]) -> np.ndarray:
        """``[B, V]`` log p(next token | <s> prefix; the tape of ``attach``) for each of the B prefixes."""
        import jax.numpy as jnp

        longest = max(len(i) for i in ids)
        T = -(-longest // self.bucket) * self.bucket
        B = len(ids)
        inputs = np.zeros((B, T), np.int32)
        weights = np.zeros((B, T), np.float32)
        tape = np.zeros((B, T, T), np.int32)
        for b, (row, labels) in enumerate(zip(ids, attach)):
            n = len(row)
            if len(labels) != n:
                raise ValueError(f"prefix {b}: {len(labels)} attachments for {n} tokens")
            inputs[b, :n], weights[b, :n] = row, 1.0
            tape[b, :n, :n] = tape_of(labels, self.model.config.binary_tape)
        batch = {"inputs": jnp.asarray(inputs), "targets": jnp.zeros((B, T), jnp.int32),
                 "weights": jnp.asarray(weights), "tape": jnp.asarray(tape)}
        last = jnp.asarray([len(i) - 1 for i in ids], jnp.int32)
        return np.asarray(self._last_log_probs(self._state, batch, last))


def gold_tape_scorer(model, *, reads_tape: bool = True, bucket: int = 64) -> PrefixScorer:
    """The tape of the true matching (``--tape gold``); ``reads_tape=False`` (Base-LM) reports no tape."""
    forced = TeacherForcedScorer(model, bucket=bucket)

    def score(ids, gold):
        return forced.log_probs(ids, gold), [g if reads_tape else None for g in gold]

    return score


def model_tape_scorer(model, vocab, *, beam_size: int = 50, bucket: int = 64, num_parallel: int = 16
                      ) -> PrefixScorer:
    """The model's own attachments (``--tape model``): the top hypothesis of a beam over the prefix.

    The next-token distribution is the one under that hypothesis's tape, as the release's eval_dyck.py.
    `num_parallel` prefixes are searched by one compiled loop (`PushdownSearch.prefix_attachments`), and
    their next-token distributions come from one teacher-forced pass under the tapes found.
    """
    from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch

    search = PushdownSearch(model, vocab, PushdownBeamConfig(beam_size=beam_size, bucket=bucket))
    forced = TeacherForcedScorer(model, bucket=bucket)

    def score(ids, gold):
        found = [np.asarray(attach, np.int32) for attach, _ in
                 search.prefix_attachments(ids, num_parallel=num_parallel)]
        return forced.log_probs(ids, found), found

    return score


# -----------------------------------------------------------------------------
# The command.


def is_base_lm(model) -> bool:
    """Base-LM: no layer reads the stack tape (its attachment head still does)."""
    return model.config.pushdown_layers == ()


def check_dyck_run(loaded) -> int:
    """The run's number of bracket types; a ValueError naming the workdir unless it is a Dyck run.

    `loaded`: a `tgjax.infer.pushdown_loading.LoadedPushdown` (`tgjax.load(workdir).restore()`).
    """
    where = f"{loaded.workdir} (step {loaded.step})"
    data = (loaded.meta.get("config") or {}).get("data") or {}
    if data.get("source") != "dyck":
        raise ValueError(f"{where}: trained on data.source={data.get('source')!r}, not Dyck strings; "
                         f"tgjax eval dyck reads runs of configs/pushdown_dyck.py (data.source='dyck')")
    num_types = int(data.get("dyck_num_types", dyck.PAPER_TYPES))
    if list(getattr(loaded.vocab, "tokens", ())) != list(dyck.dyck_vocabulary(num_types).tokens):
        raise ValueError(f"{where}: its vocabulary is not the Dyck vocabulary of {num_types} bracket types")
    return num_types


def format_table(kind: str, scores: dict[str, SetScore]) -> str:
    """Ours beside the paper's Table 1 column for `kind` ("base" or "pushdown"), in %."""
    paper = PAPER_TABLE[kind]
    lines = [f"{'set':20s} {'ours':>7s} {'paper':>7s} {'n':>5s}  tape attachments = gold (tokens / prefixes)"]
    for name, s in scores.items():
        tape = ("not read" if s.attachment_agreement is None
                else f"{100 * s.attachment_agreement:.1f}% / {100 * s.exact_tapes:.1f}%")
        figure = paper.get(name.removesuffix(RELEASE_SUFFIX))  # both constructions beside Table 1's figure
        reported = f"{figure:7.1f}" if figure is not None else f"{'—':>7s}"  # no paper figure in distribution
        lines.append(f"{SET_TITLES[name]:20s} {100 * s.accuracy:7.1f} {reported} {s.num_examples:5d}  {tape}")
    return "\n".join(lines)


def add_dyck_arguments(p: argparse.ArgumentParser) -> None:
    """`tgjax eval dyck`'s description and arguments, on the parser `tgjax.cli` made for it."""
    p.description = ("Accuracy at choosing the right closing bracket after Dyck prefixes (Pushdown Layers, Table 1): "
                     "long-range dependencies (dyck50..dyck300) and depth generalisation (depth), beside the "
                     "paper's numbers.")
    p.add_argument("--workdir", required=True, help="a Dyck run of configs/pushdown_dyck.py (Pushdown-LM or :base)")
    p.add_argument("--step", default="best", help="checkpoint: best (default), latest, or a step")
    p.add_argument("--sets", default=",".join(PAPER_SETS),
                   help=f"comma-separated, of {', '.join(SET_NAMES)} (default: Table 1's, {', '.join(PAPER_SETS)}, "
                        "the long-range sets nesting no deeper than training; dyck50-release..: the release's "
                        "depth-40 construction; valid: 500 closers of training-distribution strings, no paper "
                        "figure)")
    p.add_argument("--tape", choices=TAPE_SOURCES, default="model",
                   help="the stack tape a Pushdown-LM reads: model (its own attachment decisions by beam search, "
                        "the paper and release; default) or gold (the true matching: a diagnostic, not the "
                        "paper's protocol). Base-LM reads no tape")
    p.add_argument("--beam-size", type=int, default=50, help="beam over the prefix for --tape model (release: 50; "
                                                                "1 = greedy)")
    p.add_argument("--among", choices=AMONG, default="closers",
                   help="the prediction is the argmax over the closing brackets (default, the release) or over all "
                        "tokens")
    p.add_argument("--seed", type=int, default=0, help="seed of the evaluation sets (default 0)")
    p.add_argument("--limit", type=int, default=None, help="first N examples of each set only (a quick look)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="prefixes per forward pass, and per compiled beam search with --tape model (default 16)")
    p.add_argument("-o", "--output", default=None, help="write the scores as one JSON object here")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run_dyck)


def _restore_run(workdir: str, *, step: str):
    """`tgjax.load(workdir, step).restore()` of a Pushdown-LM run (`LoadedPushdown`); another family is refused."""
    from tgjax.infer.api import load

    model = load(workdir, step)
    model.require_family("pushdown_lm", command="tgjax eval dyck",
                         reads="Pushdown-LM runs on Dyck strings (configs/pushdown_dyck.py)")
    return model.restore()


def main_dyck(argv: Sequence[str] | None = None, *, load=None) -> int:
    """`tgjax eval dyck ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval dyck")
    add_dyck_arguments(parser)
    return run_dyck(parser.parse_args(argv), load=load)


def run_dyck(args: argparse.Namespace, *, load=None) -> int:
    """Returns 0, or 2 with a one-line error for bad input.

    `load(workdir, step=...)` (tests) replaces `_restore_run`: the restored Pushdown-LM.
    """
    from tgjax.infer.loading import CheckpointError
    from tgjax.outputs import OutputError, check_output, write_json

    try:
        names = parse_set_names(args.sets)
        if args.beam_size < 1:
            raise ValueError(f"--beam-size: expected at least 1, got {args.beam_size}")
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit: expected at least 1, got {args.limit}")
        if args.batch_size < 1:
            raise ValueError(f"--batch-size: expected at least 1, got {args.batch_size}")
        if args.output:
            check_output(args.output)
        loaded = (load or _restore_run)(args.workdir, step=args.step)
        num_types = check_dyck_run(loaded)
        vocab = dyck.dyck_vocabulary(num_types)
        strings = TrainingStrings.of_run((loaded.meta.get("config") or {}).get("data") or {})
        sets = evaluation_sets(names, seed=args.seed, strings=strings)
        base = is_base_lm(loaded.model)
        if base:
            scorer, tape = gold_tape_scorer(loaded.model, reads_tape=False), "not read (Base-LM)"
        elif args.tape == "gold":
            scorer, tape = gold_tape_scorer(loaded.model), "gold (the true matching; a diagnostic)"
        else:
            scorer = model_tape_scorer(loaded.model, vocab, beam_size=args.beam_size, num_parallel=args.batch_size)
            tape = f"the model's own attachments (top of a beam of {args.beam_size})"
    except (ValueError, RuntimeError, OSError, CheckpointError) as error:
        print(f"tgjax eval dyck: error: {error}", file=sys.stderr)
        return 2
    kind = "base" if base else "pushdown"
    print(f"{loaded.describe()}; tape: {tape}; prediction: argmax over {args.among}; sets from seed {args.seed}, "
          f"open probability {strings.open_probability}, training depth {strings.max_depth}")
    longest = max((len(e.prefix) + 1 for examples in sets.values() for e in examples), default=0)  # <s> prefix
    clip = loaded.model.config.max_relative_position
    if longest > clip:  # the head's distance from the last position to <s> is `longest`
        print(f"note: prefixes reach {longest} positions but this model clips relative distances at {clip} "
              f"(model.max_relative_position); farther tokens all look {clip} away")
    from tgjax.progress import Progress

    scores = {}
    for name, examples in sets.items():
        examples = examples[:args.limit] if args.limit else examples
        bar = Progress(len(examples), label=name, noun="example", enabled=not args.quiet, min_interval=1.0)
        done = [0]

        def progress(n, bar=bar, done=done):
            done[0] += n
            bar.update(done[0])

        scores[name] = score_set(name, examples, vocab, scorer, among=args.among, batch_size=args.batch_size,
                                 progress=progress)
        bar.message(f"{name}: {len(examples)} prefixes, accuracy {100 * scores[name].accuracy:.1f}% "
                    f"({scores[name].seconds:.0f}s)")
        bar.close()
    print(format_table(kind, scores))
    if args.output:
        record = {"workdir": str(loaded.workdir), "step": loaded.step, "model": kind, "tape": tape,
                  "beam_size": args.beam_size if kind == "pushdown" and args.tape == "model" else None,
                  "among": args.among, "seed": args.seed, "limit": args.limit,
                  "strings": dataclasses.asdict(strings),
                  "scores": {n: s.as_dict() for n, s in scores.items()},
                  "paper": PAPER_TABLE[kind]}
        try:
            write_json(args.output, record)
        except OutputError as error:
            print(f"tgjax eval dyck: error: {error}", file=sys.stderr)
            return 2
    return 0
