"""The main job: what the syntactic bias does, on the built-in treebank, on a laptop.

    tgjax demo --workdir runs/demo [--config.training.num_steps=300 ...]

Trains four small models on the built-in synthetic treebank with the same
settings (`configs/tiny.py` with `DEMO_SETTINGS`; only `model.name` changes): a Transformer
Grammar (`tg`), Transformer-XL over Choe–Charniak actions (`txl_cc`) and
over the words alone (`txl_terminals`); and a Pushdown-LM (`pushdown_lm`,
`configs/pushdown_tiny.py` with the same layers, steps and schedule,
`PUSHDOWN_SETTINGS`; the overrides given apply where its config has the key,
the others are listed). Then, for each, on held-out data:

* validation word perplexity, per word, the end of the sentence included:
  exact for TXL (terminals); for the syntactic models, from the beam's
  log p(x) = log Σ_y p(x, y) over the trees it finds, a lower bound on
  p(x), so their perplexity is an upper bound (the Pushdown-LM: its beam
  over (word, attachment), `tgjax.infer.pushdown_search`, `PUSHDOWN_BEAM`);
* parse F1 (EVALB, COLLINS.prm; labelled and unlabelled) of the beam's best
  trees for the validation sentences against their gold trees, beside a
  right-branching baseline (TXL (terminals) cannot parse; the Pushdown-LM's
  parses are unlabelled and binary: unlabelled F1 only);
* accuracy on subject–verb agreement minimal pairs generated from the
  built-in grammar (`corpora.agreement_minimal_pairs`): a pair is right when
  log p(good) > log p(bad); "simple" pairs have a bare subject ("the dogs
  bark"), "attractor" pairs a noun of the other number between the subject's
  head and the verb, in a PP or a relative clause ("the dogs near the cat
  bark"). A TG reaches the head noun only through composed constituents, one
  level of nesting per layer, so it needs three layers to see through
  [NP [NP the dogs] [PP near the cat]]: the models here have three;
* generalisation: the same accuracy on pairs whose subject nests 2 or 3
  embeddings between its head and the verb ("the dogs near the cat near the
  houses bark", nested relative clauses), every noun in between of the other
  number (`agreement_minimal_pairs(depth=...)`). No training sentence has
  more than one embedding there (the built-in grammar caps its subjects), so
  these pairs ask for agreement across deeper nesting than was ever seen
  between a subject and its verb, the same for every model;

and prints one table. Re-running the command resumes or reuses the
trained runs in the workdir (each model's run is in `WORKDIR/<model>`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from tgjax.outputs import make_output_folder

MODELS = ("tg", "txl_cc", "txl_terminals", "pushdown_lm")
# configs/tiny.py with three layers (see the module docstring) and 1,500 steps: a few minutes a model.
DEMO_SETTINGS = ("model.num_layers=3", "training.num_steps=1500",
                 "training.lr_schedule.kwargs.cosine_cycle_length=1400", "evaluation.interval_steps=500",
                 "checkpointing.interval_steps=500")
# configs/pushdown_tiny.py on the same footing: three layers, the same steps and schedule. The built-in
# treebank's tapes reach depth 22, so a depth table of 24 clips nothing and halves the attachment head's
# per-depth key MLP (its [B, T, depths, 2d] table is most of a step's work at this size).
PUSHDOWN_SETTINGS = ("model.num_layers=3", "model.num_depths=24", "training.num_steps=1500",
                     "training.lr_schedule.kwargs.cosine_cycle_length=1400", "evaluation.interval_steps=500",
                     "checkpointing.interval_steps=500")
PUSHDOWN_BEAM = 20  # hypotheses over (word, attachment); the paper's 300 is for BLLIP's ambiguity
DEPTHS = (2, 3)  # the generalisation columns: embeddings between subject and verb (training has <= 1)
TITLES = {"tg": "TG", "txl_cc": "TXL (CC)", "txl_terminals": "TXL (terminals)", "pushdown_lm": "Pushdown-LM"}


@dataclasses.dataclass
class ModelReport:
    """One row of the table."""

    model: str
    num_parameters: int
    train_seconds: float
    valid_loss: float  # nats per prediction event (the trainer's validation loss, best checkpoint)
    word_perplexity: float  # per word, end of sentence included (an upper bound for syntactic models)
    exact_perplexity: bool
    labeled_f1: float | None
    unlabeled_f1: float | None
    simple_accuracy: float  # agreement, bare subjects
    agreement_accuracy: float  # agreement across an attractor
    agreement_by_construction: dict[str, float]
    deep_accuracy: dict[int, float]  # depth (2, 3) -> agreement across that many nested embeddings
    deep_by_construction: dict[int, dict[str, float]]
    eval_seconds: float


@dataclasses.dataclass
class DemoReport:
    rows: list[ModelReport]
    baseline_labeled_f1: float
    baseline_unlabeled_f1: float
    num_valid_sentences: int
    num_simple_pairs: int
    num_pairs: int
    num_deep_pairs: int  # per depth
    depths: tuple[int, ...]

    def format(self) -> str:
        depth_titles = "".join(f"{f'depth {d}':>10}" for d in self.depths)
        lines = [
            f"Held-out results on the built-in treebank ({self.num_valid_sentences} validation sentences; "
            f"agreement minimal pairs: {self.num_simple_pairs} simple, {self.num_pairs} with an attractor, "
            f"{self.num_deep_pairs} at each depth)",
            "",
            f"{'':<17}{'':>9}{'':>9}{'':>11}{'parse F1':>20}{'agreement':>{20 + 10 * len(self.depths)}}",
            f"{'model':<17}{'params':>9}{'train s':>9}{'valid ppl':>11}{'labelled':>10}{'unlab.':>10}"
            f"{'simple':>10}{'attractor':>10}{depth_titles}",
        ]
        for r in self.rows:
            ppl = f"{r.word_perplexity:.2f}" + ("" if r.exact_perplexity else "*")
            f1 = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
            deep = "".join(f"{100 * r.deep_accuracy[d]:>9.1f}%" for d in self.depths)
            lines.append(f"{TITLES.get(r.model, r.model):<17}{r.num_parameters:>9,}{r.train_seconds:>9.0f}{ppl:>11}"
                         f"{f1(r.labeled_f1):>10}{f1(r.unlabeled_f1):>10}{100 * r.simple_accuracy:>9.1f}%"
                         f"{100 * r.agreement_accuracy:>9.1f}%{deep}")
        lines.append(f"{'right-branching':<17}{'':>9}{'':>9}{'':>11}{self.baseline_labeled_f1:>10.2f}"
                     f"{self.baseline_unlabeled_f1:>10.2f}")
        lines += [
            "",
            "valid ppl: per-word perplexity of the validation sentences, end of sentence included; "
            "* = upper bound",
            "  (log p(x) summed over the trees word-synchronous beam search finds); exact for TXL (terminals);",
            f"  Pushdown-LM: over the parses its beam of {PUSHDOWN_BEAM} (word, attachment) hypotheses keeps.",
            "F1: EVALB (COLLINS.prm) of the beam's best tree against the gold tree.",
            "agreement: log p(good) > log p(bad) on minimal pairs; simple: a bare subject; attractor: a noun of",
            "  the other number between the subject's head and the verb; by construction: "
            + _by_construction(self.rows, lambda r: r.agreement_by_construction),
            "depth d: d nested PPs or relative clauses between the subject's head and the verb, every noun in",
            "  between of the other number; no training subject has more than 1. By construction:",
        ]
        lines += [f"  depth {d}: " + _by_construction(self.rows, lambda r, d=d: r.deep_by_construction[d])
                  for d in self.depths]
        return "\n".join(lines)


def _by_construction(rows: list[ModelReport], accuracies) -> str:
    """'TG pp 100%, ...; TXL (CC) ...' from `accuracies(row)`: construction -> accuracy."""
    return "; ".join(f"{TITLES.get(r.model, r.model)} " + ", ".join(
        f"{c} {100 * a:.0f}%" for c, a in accuracies(r).items()) for r in rows)


def _train_one(name: str, workdir: Path, overrides: list[str], stream: TextIO) -> tuple[int, float, float]:
    """Trains (or resumes / reuses) `name` in `workdir`; returns (parameters, seconds, best validation loss)."""
    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    if name == "pushdown_lm":
        config = _pushdown_config(overrides, stream)
    else:
        config = load_config("tiny", [f"model.name={name}", *DEMO_SETTINGS, *overrides])
    print(f"\n== training {TITLES[name]} ({name}) in {workdir}", file=stream, flush=True)
    start = time.perf_counter()
    result = train(config, workdir, stream=stream)
    seconds = time.perf_counter() - start
    best = result.best_valid_loss if result.best_valid_loss is not None else math.nan
    return result.num_parameters, seconds, best


def _pushdown_config(overrides: list[str], stream: TextIO):
    """configs/pushdown_tiny.py + `PUSHDOWN_SETTINGS` + the overrides its config has a key for (the rest listed)."""
    from tgjax.train.config import load_config

    base = load_config("pushdown_tiny", PUSHDOWN_SETTINGS)
    applicable, skipped = [], []
    for override in overrides:
        (applicable if _has_key(base, override.split("=", 1)[0]) else skipped).append(override)
    if skipped:
        print(f"   Pushdown-LM: {len(skipped)} override(s) its config has no key for, not applied: "
              f"{' '.join(skipped)}", file=stream, flush=True)
    return load_config("pushdown_tiny", [*PUSHDOWN_SETTINGS, *applicable])


def _has_key(config, dotted: str) -> bool:
    """Whether `config` has the key `a.b.c` (a key whose value is None, unset, counts: it exists)."""
    node = config
    for part in dotted.split("."):
        if not hasattr(node, "keys") or part not in node:
            return False
        node = node[part]
    return True


def agreement_accuracy(scorer, pairs) -> tuple[float, dict[str, float]]:
    """Accuracy of log p(good) > log p(bad), overall and per construction."""
    from tgjax.eval.parse import search_with_progress

    sentences = [p.good_words for p in pairs] + [p.bad_words for p in pairs]
    results = search_with_progress(scorer, sentences)
    log_probs = np.array([r.log_prob for r in results])
    good, bad = log_probs[: len(pairs)], log_probs[len(pairs):]
    correct = good > bad
    by_construction = {}
    for construction in dict.fromkeys(p.construction for p in pairs):
        mask = np.array([p.construction == construction for p in pairs])
        by_construction[construction] = float(correct[mask].mean())
    return float(correct.mean()), by_construction


@dataclasses.dataclass
class Evaluation:
    """What `evaluate_model` measures for one trained model (see `ModelReport` for the fields)."""

    word_perplexity: float
    exact_perplexity: bool
    f1s: tuple  # (labelled, unlabelled, right-branching labelled, unlabelled); Nones for TXL (terminals)
    simple_accuracy: float
    agreement_accuracy: float
    agreement_by_construction: dict[str, float]
    deep_accuracy: dict[int, float]
    deep_by_construction: dict[int, dict[str, float]]
    seconds: float


def evaluate_model(workdir: Path, valid_trees, simple_pairs, pairs, deep_pairs: dict[int, list], beam_config,
                   stream: TextIO, search: str = "auto") -> Evaluation:
    """Perplexity, F1 and agreement of the best checkpoint in `workdir`; `deep_pairs`: depth -> pairs. A model
    that scores by the chain rule (`LoadedModel.scores_exactly`) gets its exact perplexity and no F1.

    `search`: the TG / TXL (CC) beam engine, "auto", "device" or "host" (`tgjax.infer.api.word_scorer`)."""
    import tgjax
    from tgjax.infer.pushdown_search import PushdownBeamConfig

    start = time.perf_counter()
    model = tgjax.load(workdir)
    scorer = model.scorer(beam=beam_config, pushdown=PushdownBeamConfig(beam_size=PUSHDOWN_BEAM), search=search)
    title = TITLES.get(model.model_name, model.model_name)
    num_pairs = len(simple_pairs) + len(pairs) + sum(map(len, deep_pairs.values()))
    print(f"== evaluating {title}: "
          f"{len(valid_trees)} validation sentences, {num_pairs} minimal pairs", file=stream, flush=True)
    perplexity, f1s = perplexity_and_f1(model, scorer, valid_trees)
    simple_accuracy, _ = agreement_accuracy(scorer, simple_pairs)
    accuracy, by_construction = agreement_accuracy(scorer, pairs)
    deep = {depth: agreement_accuracy(scorer, depth_pairs) for depth, depth_pairs in deep_pairs.items()}
    return Evaluation(perplexity, model.scores_exactly, f1s, simple_accuracy, accuracy, by_construction,
                      {d: a for d, (a, _) in deep.items()}, {d: by for d, (_, by) in deep.items()},
                      time.perf_counter() - start)


def perplexity_and_f1(model, scorer, trees) -> tuple[float, tuple]:
    """(word perplexity of `trees`' sentences, per word with the end of sentence, F1s) for a loaded model and its
    scorer: exact by the chain rule where the model scores exactly (`LoadedModel.scores_exactly`; F1s all None),
    else the upper bound from the beam's p(x) summed over the parses it keeps, with the F1s of those parses
    (labelled, unlabelled, right-branching labelled, unlabelled; labelled None for the Pushdown-LM's binary
    trees)."""
    from tgjax.eval.parse import parse_treebank

    if model.scores_exactly:  # the chain rule (TXL (terminals), and the word LMs of benchmarks/lm_table.py)
        results = scorer.search([t.leaves() for t in trees])  # exact and fast: no progress needed
        words = sum(len(r.words) for r in results)
        return math.exp(-sum(r.log_prob for r in results) / words), (None, None, None, None)
    report = parse_treebank(scorer, trees)
    labeled = None if model.rule == "pushdown" else report.labeled_f1  # unlabelled parses
    return report.perplexity_bound(), (labeled, report.unlabeled_f1, report.baseline_labeled_f1,
                                       report.baseline_unlabeled_f1)


def default_beam_config():
    """The TG / TXL (CC) beam of the demo: the built-in grammar is nearly unambiguous given the words, so a small
    beam finds its trees."""
    from tgjax.infer.beam import BeamConfig

    return BeamConfig(word_beam=5, action_beam=25, fast_track=1, batch_sentences=16)


def evaluation_data(num_valid: int = 100, num_simple_pairs: int = 60, num_pairs: int = 120, num_deep_pairs: int = 60,
                    depths=DEPTHS) -> tuple[list, list, list, dict[int, list]]:
    """What every model is evaluated on: (the first `num_valid` validation trees, the bare-subject pairs, the
    pairs with an attractor, depth -> the pairs with that many nested embeddings), the same on every call."""
    from tgjax.data.corpora import agreement_minimal_pairs, get_corpus

    valid_trees = get_corpus("builtin", "valid")[:num_valid]
    simple_pairs = agreement_minimal_pairs(num_simple_pairs, seed=1, constructions=("simple",))
    pairs = agreement_minimal_pairs(num_pairs, seed=0)
    deep_pairs = {depth: agreement_minimal_pairs(num_deep_pairs, seed=0, depth=depth) for depth in depths}
    return valid_trees, simple_pairs, pairs, deep_pairs


def run_demo(workdir: str | Path, *, models=MODELS, overrides: list[str] = (), num_valid: int = 100,
             num_simple_pairs: int = 60, num_pairs: int = 120, num_deep_pairs: int = 60, depths=DEPTHS,
             beam_config=None, stream: TextIO | None = None, search: str = "auto") -> DemoReport:
    """Trains `models` on the built-in treebank in `workdir/<model>` and evaluates them (module docstring)."""
    stream = stream or sys.stderr
    workdir = make_output_folder(workdir, option="--workdir")  # before the evaluation data and any training
    beam_config = beam_config or default_beam_config()
    valid_trees, simple_pairs, pairs, deep_pairs = evaluation_data(num_valid, num_simple_pairs, num_pairs,
                                                                   num_deep_pairs, depths)
    rows, baseline = [], (math.nan, math.nan)
    for name in models:
        num_parameters, train_seconds, valid_loss = _train_one(name, workdir / name, list(overrides), stream)
        e = evaluate_model(workdir / name, valid_trees, simple_pairs, pairs, deep_pairs, beam_config, stream, search)
        if e.f1s[2] is not None:
            baseline = (e.f1s[2], e.f1s[3])
        rows.append(ModelReport(name, num_parameters, train_seconds, valid_loss, e.word_perplexity,
                                e.exact_perplexity, e.f1s[0], e.f1s[1], e.simple_accuracy, e.agreement_accuracy,
                                e.agreement_by_construction, e.deep_accuracy, e.deep_by_construction, e.seconds))
        deep = ", ".join(f"{100 * a:.1f}% at depth {d}" for d, a in e.deep_accuracy.items())
        print(f"   {TITLES[name]}: valid ppl {e.word_perplexity:.2f}, agreement {100 * e.simple_accuracy:.1f}% "
              f"simple, {100 * e.agreement_accuracy:.1f}% with an attractor, {deep} ({e.seconds:.0f}s)",
              file=stream, flush=True)
    return DemoReport(rows, baseline[0], baseline[1], len(valid_trees), len(simple_pairs), len(pairs),
                      num_deep_pairs, tuple(depths))


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax demo`'s description and arguments, on the parser `tgjax.cli` made for it; it takes
    `--config.KEY=VALUE` overrides (`args.overrides`, taken out of the command line before parsing)."""
    titles = [TITLES[m] for m in MODELS]
    parser.description = (
        f"The main job, what the syntactic bias does: train {len(MODELS)} small models ({', '.join(titles[:-1])} "
        f"and {titles[-1]}) with the same settings on the built-in treebank, then print one table of their validation "
        "word perplexity, parse F1 (beside right-branching) and subject-verb agreement accuracy (bare subjects, "
        "attractors, deeper nesting than training). Re-running resumes or reuses the runs in WORKDIR/<model>.")
    parser.add_argument("--workdir", default="runs/demo", help="one run per model in WORKDIR/<model>")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, from " + ", ".join(MODELS))
    parser.add_argument("--valid-sentences", type=int, default=100, help="validation sentences for ppl and F1")
    parser.add_argument("--simple-pairs", type=int, default=60, help="agreement minimal pairs, bare subjects")
    parser.add_argument("--pairs", type=int, default=120, help="agreement minimal pairs with an attractor")
    parser.add_argument("--deep-pairs", type=int, default=60,
                        help="agreement minimal pairs at each depth (2 and 3 nested embeddings)")
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    parser.add_argument("--search", default="auto", choices=("auto", "device", "host"),
                        help="the TG / TXL (CC) beam engine: device (tgjax.infer.device_beam), host "
                             "(tgjax.infer.beam) or auto (default: device, the faster on CPU and accelerators)")
    parser.epilog = ("Any --config.SECTION.KEY=VALUE (as for tgjax train) applies to every model, "
                     "e.g. --config.training.num_steps=300.")
    parser.set_defaults(run=functools.partial(run_demo_command, parser=parser), takes_overrides=True)


def main(argv: list[str] | None = None) -> int:
    """`tgjax demo ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax demo")
    add_demo_arguments(parser)
    from tgjax.train.config import ConfigError, parse_override_args

    try:
        overrides, argv = parse_override_args(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as error:
        parser.error(str(error))
    args = parser.parse_args(argv)
    args.overrides = overrides
    return run_demo_command(args, parser)


def chosen_models(text: str, parser: argparse.ArgumentParser, known: Sequence[str] = MODELS) -> list[str]:
    """`--models A,B`: the names, each one of `known` (else the parser's usage error, naming them)."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(models) - set(known))
    if unknown or not models:
        parser.error(f"--models: unknown {unknown}; expected some of {list(known)}")
    return models


def run_demo_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Checks the arguments, runs the demo (`run_demo` with `args.overrides`) and prints its table."""
    models = chosen_models(args.models, parser)
    if min(args.valid_sentences, args.simple_pairs, args.pairs, args.deep_pairs) < 1:
        parser.error("--valid-sentences, --simple-pairs, --pairs and --deep-pairs must be positive")
    start = time.perf_counter()
    report = run_demo(args.workdir, models=models, overrides=args.overrides, num_valid=args.valid_sentences,
                      num_simple_pairs=args.simple_pairs, num_pairs=args.pairs, num_deep_pairs=args.deep_pairs,
                      search=args.search)
    print()
    print(report.format())
    print(f"\n(total {time.perf_counter() - start:.0f}s; runs, TensorBoard logs and metrics in {args.workdir}/)")
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
