"""The language models side by side: one table on the built-in treebank, the same data and steps for each.

Trains, with the same number of steps, at about the same size (the
parameter counts are printed), on the built-in synthetic treebank's 5,000
training sentences:

* TG, TXL (CC) and TXL (terminals): `configs/tiny.py` with 3 layers of
  d = 64 (the demo's models, `tgjax.demo`), warm-up then cosine over the steps;
* Pushdown-LM: `configs/pushdown_tiny.py` with 3 layers of d = 48, FFN 192
  (the attachment head's per-depth key MLP makes d = 64 about 1.7x the TG's
  parameters) and 24 depths, the same schedule; its Base-LM (`base_lm`, the
  paper's §4.1 baseline): the same with `model.pushdown_layers=none`, no layer
  reading the stack tape, the attachment head still trained beside it;
* ON-LSTM: `configs/onlstm_tiny.py` with embeddings 64, 2 layers of 128
  (chunk 8), trained for the same steps instead of epochs (SGD, NT-ASGD);
* Tf+Sup, a transformer with a superposition stack in its middle layer:
  `configs/stack_lm_tiny.py` with d = 64, FFN 256 (3 layers, m = 32).

Each family keeps its own batches (16 of them: rows of 64 actions for TG and
TXL (CC), of 64 words for TXL (terminals), sentences for the Pushdown-LM and
Tf+Sup, BPTT segments of about 20 words for the ON-LSTM) and its own
optimiser. Then, for each model's best checkpoint (`tgjax.load(...).scorer()`,
the `SentenceScorer` of its family), on the same held-out sentences and pairs
(`tgjax.demo.evaluation_data`, evaluated by `tgjax.demo.evaluate_model`):

* word perplexity of the first `--valid-sentences` validation sentences, per
  word, the end of the sentence included: exact (the chain rule) for TXL
  (terminals), ON-LSTM and Tf+Sup; for TG, TXL (CC) and the Pushdown-LM an
  upper bound, from the beam's log p(x) = log Σ_y p(x, y) over the parses it
  keeps (the ppl column says which);
* subject-verb agreement accuracy (log p(good) > log p(bad)) on minimal pairs
  with 0 (a bare subject), 1, 2 and 3 embeddings between the subject's head
  and its verb, every noun in between of the other number; training subjects
  have at most 1;
* parse F1 where the family parses: EVALB (COLLINS.prm) of the beam's best
  trees against the gold trees for TG and TXL (CC) (labelled and
  unlabelled) and the Pushdown-LM (unlabelled, binary trees); for the
  ON-LSTM, the corpus F1 of `tgjax eval unsupervised-parse` (its greedy trees
  from one layer's distances, punctuation dropped and unary chains collapsed
  on both sides), of its top layer (`ONLSTM_LAYER`, fixed in advance: no
  layer is chosen on the sentences it is scored on).

With `--seeds N` (N >= 2) every model is trained N times (its config's seed
+ 0 .. N-1) and each cell is the mean ± the sample standard deviation.
Re-running resumes or reuses the trained runs (`WORKDIR/steps<S>/seed<k>/<model>`).
Progress goes to stderr, the table to stdout. At the defaults (1,500 steps, the
demo's; about 180k parameters each; 100 sentences, 45 pairs per depth) one
seed took 13-16 minutes on 2 shared CPU cores (docs/evaluation.md has the
table).

    python benchmarks/lm_table.py [--steps 1500] [--seeds 1] [--out FILE.json] [--workdir runs/lm_table]
        [--models tg,txl_cc,...] [--valid-sentences 100] [--pairs 45]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tgjax import demo  # noqa: E402

MODELS = ("tg", "txl_cc", "txl_terminals", "pushdown_lm", "base_lm", "onlstm_lm", "stack_lm")
TITLES = {**demo.TITLES, "base_lm": "Base-LM", "onlstm_lm": "ON-LSTM", "stack_lm": "Tf+Sup"}
DEPTHS = (0, 1, 2, 3)  # embeddings between the subject's head and its verb
WARMUP_STEPS = 100  # TG / TXL / Pushdown-LM: linear warm-up, then cosine over the remaining steps
TRAIN_SENTENCES, VALID_SENTENCES = 5000, 500  # the built-in treebank's default splits, for every family
# family -> (config, overrides) at about the TG's 184,538 parameters (`training.num_steps` and the intervals added).
SIZES = {
    "lm": ("tiny", ("model.num_layers=3",)),
    "pushdown_lm": ("pushdown_tiny", ("model.num_layers=3", "model.num_depths=24", "model.d_model=48",
                                      "model.ffw_hidden_size=192")),
    "onlstm_lm": ("onlstm_tiny", ("model.embedding_size=64", "model.hidden_size=128")),
    "stack_lm": ("stack_lm_tiny", ("model.d_model=64", "model.feedforward_size=256")),
}


def family(name: str) -> str:
    if name == "base_lm":  # the Pushdown paper's Base-LM: the Pushdown-LM without the depth term (§4.1)
        return "pushdown_lm"
    return name if name in ("pushdown_lm", "onlstm_lm", "stack_lm") else "lm"


def model_config(name: str, steps: int, seed_offset: int = 0):
    """The training config of `name` for `steps` steps (module docstring), its seed moved by `seed_offset`."""
    from tgjax.train.config import load_config

    config_name, overrides = SIZES[family(name)]
    interval = max(1, steps // 4)
    common = [*overrides, f"training.num_steps={steps}", f"checkpointing.interval_steps={interval}",
              f"data.num_train_sentences={TRAIN_SENTENCES}", f"data.num_valid_sentences={VALID_SENTENCES}"]
    if family(name) in ("lm", "pushdown_lm"):
        common += [f"training.lr_schedule.kwargs.warmup_steps={min(WARMUP_STEPS, steps // 2)}",
                   f"training.lr_schedule.kwargs.cosine_cycle_length={max(1, steps - min(WARMUP_STEPS, steps // 2))}"]
    if family(name) != "onlstm_lm":  # the ON-LSTM validates at the end of every epoch
        common.append(f"evaluation.interval_steps={interval}")
    if name in ("tg", "txl_cc", "txl_terminals"):
        common.append(f"model.name={name}")
    if name == "base_lm":
        common.append("model.pushdown_layers=none")
    config = load_config(config_name, common)
    if family(name) == "onlstm_lm":
        config.training.num_epochs = None  # steps, not epochs (an override cannot set None over an int)
    config.training.seed = config.training.seed + seed_offset
    return config


@dataclasses.dataclass
class Measurement:
    """One model, one seed."""

    model: str
    seed: int
    num_parameters: int
    steps: int
    train_seconds: float
    eval_seconds: float
    word_perplexity: float
    exact_perplexity: bool
    labeled_f1: float | None
    unlabeled_f1: float | None
    agreement: dict[int, float]  # depth -> accuracy
    agreement_by_construction: dict[int, dict[str, float]]
    f1_note: str = ""  # the ON-LSTM: which layer, per-layer F1s


@dataclasses.dataclass
class Table:
    measurements: list[Measurement]  # grouped by model, in model order
    num_seeds: int
    num_valid_sentences: int
    num_pairs: int  # per depth
    right_branching: dict[str, float]  # protocol -> unlabelled F1 of right-branching trees

    def format(self) -> str:
        return format_table(self)


def mean_sd(values: Sequence[float | None], digits: int = 2, scale: float = 1.0) -> str:
    """'12.34' for one value, '12.34 ± 0.56' (the sample sd) for several, '' when there is none."""
    present = [scale * v for v in values if v is not None]
    if not present:
        return ""
    if len(present) == 1:
        return f"{present[0]:.{digits}f}"
    return f"{statistics.mean(present):.{digits}f} ± {statistics.stdev(present):.{digits}f}"


def format_table(table: Table) -> str:
    by_model: dict[str, list[Measurement]] = {}
    for m in table.measurements:
        by_model.setdefault(m.model, []).append(m)
    header = ["model", "params", "steps", "word ppl", "ppl", *(f"agr. d{d} %" for d in DEPTHS), "F1 lab.",
              "F1 unlab.", "train s", "eval s"]
    rows = []
    for name, ms in by_model.items():
        exact = {m.exact_perplexity for m in ms}
        rows.append([TITLES.get(name, name), f"{ms[0].num_parameters:,}", str(ms[0].steps),
                     mean_sd([m.word_perplexity for m in ms]),
                     "exact" if exact == {True} else "bound" if exact == {False} else "mixed",
                     *(mean_sd([m.agreement[d] for m in ms], 1, 100.0) for d in DEPTHS),
                     mean_sd([m.labeled_f1 for m in ms]),
                     mean_sd([m.unlabeled_f1 for m in ms]) + ("†" if name == "onlstm_lm" and ms[0].unlabeled_f1
                                                               is not None else ""),
                     f"{statistics.mean(m.train_seconds for m in ms):.0f}",
                     f"{statistics.mean(m.eval_seconds for m in ms):.0f}"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    align = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    seeds = (f"mean ± sd over {table.num_seeds} seeds" if table.num_seeds > 1 else "1 seed")
    lines = [f"Built-in treebank, {table.num_valid_sentences} validation sentences, {table.num_pairs} agreement "
             f"pairs per depth; {seeds}", "", align(header), align(["-" * w for w in widths])]
    lines += [align(r) for r in rows]
    lines += [
        "",
        "word ppl: per word, end of sentence included; exact: the chain rule; bound: an upper bound from the beam's",
        "  p(x) summed over the parses it keeps (TG / TXL (CC): word-synchronous beam; Pushdown-LM: "
        f"{demo.PUSHDOWN_BEAM} (word, attachment) hypotheses).",
        "agr. dN: log p(good) > log p(bad) with N embeddings between the subject's head and its verb (training <= 1).",
        "F1: EVALB (COLLINS.prm) of the beam's best trees against the gold trees; the Pushdown-LM's are binary "
        "(unlabelled only).",
    ]
    if "evalb" in table.right_branching:
        lines.append(f"  right-branching: {table.right_branching['evalb']:.2f} unlabelled.")
    notes = [m.f1_note for m in table.measurements if m.model == "onlstm_lm" and m.f1_note]
    if notes:
        rb = table.right_branching.get("unsupervised")
        lines.append("† ON-LSTM: corpus F1 of tgjax eval unsupervised-parse (greedy trees from one layer's distances, "
                     "punctuation dropped, unary chains collapsed), its top layer, fixed in advance"
                     + (f"; right-branching {rb:.2f} by the same protocol" if rb is not None else "") + ".")
        lines += [f"  {note}" for note in notes]
    lines.append("train s, eval s: wall seconds in this invocation, mean over seeds (a run reused from the workdir: "
                 "its loading only).")
    return "\n".join(lines)


ONLSTM_LAYER = 2  # the top one of the table's 2-layer ON-LSTM, fixed before any run (never chosen on its scores)


def onlstm_f1(workdir: Path, valid_trees) -> tuple[float | None, str, float]:
    """(corpus F1 of layer `ONLSTM_LAYER`, each layer's in words, right-branching's) by `tgjax eval
    unsupervised-parse`'s protocol on `valid_trees` (the words as the model read them in training)."""
    import tgjax
    from tgjax.eval import unsupervised

    treebank = unsupervised.prepare_treebank(valid_trees, "built-in treebank (valid)")
    parser = tgjax.load(workdir).parser(parses="distances")
    rows = unsupervised.run(treebank, parser, word_form="raw")
    layers = {name: s.corpus_f1 for name, s in rows.items() if name.startswith("layer")}
    note = ", ".join(f"{name} {'none' if f1 is None else f'{f1:.2f}'}" for name, f1 in layers.items())
    rb = rows["right-branching"].corpus_f1
    return layers.get(f"layer {ONLSTM_LAYER}"), note, (math.nan if rb is None else rb)


def run_table(workdir: Path, *, models: Sequence[str] = MODELS, steps: int, seeds: int = 1,
              num_valid: int = 100, num_pairs: int = 45, search: str = "auto",
              stream: TextIO | None = None) -> Table:
    """Trains and evaluates every model for every seed (module docstring)."""
    from tgjax.train.loop import train

    stream = stream or sys.stderr
    valid_trees, simple_pairs, pairs, deep_pairs = demo.evaluation_data(
        num_valid, num_pairs, num_pairs, num_pairs, tuple(d for d in DEPTHS if d >= 2))
    beam = demo.default_beam_config()
    measurements, right_branching = [], {}
    for seed in range(seeds):  # every model of a seed before the next seed: a stopped run leaves whole tables
        for name in models:
            run_dir = workdir / f"steps{steps}" / f"seed{seed}" / name
            config = model_config(name, steps, seed)
            print(f"\n== training {TITLES[name]} ({name}), seed {config.training.seed}, {steps} steps, in {run_dir}",
                  file=stream, flush=True)
            start = time.perf_counter()
            result = train(config, run_dir, stream=stream)
            train_seconds = time.perf_counter() - start
            e = demo.evaluate_model(run_dir, valid_trees, simple_pairs, pairs, deep_pairs, beam, stream, search)
            labeled, unlabeled, note = e.f1s[0], e.f1s[1], ""
            if e.f1s[3] is not None:
                right_branching["evalb"] = e.f1s[3]
            if name == "onlstm_lm":
                unlabeled, note, right_branching["unsupervised"] = onlstm_f1(run_dir, valid_trees)
                note = f"seed {config.training.seed}: {note}"
            agreement = {0: e.simple_accuracy, 1: e.agreement_accuracy, **e.deep_accuracy}
            by_construction = {1: e.agreement_by_construction, **e.deep_by_construction}
            m = Measurement(name, int(config.training.seed), result.num_parameters, steps, train_seconds, e.seconds,
                            e.word_perplexity, e.exact_perplexity, labeled, unlabeled, agreement, by_construction,
                            note)
            measurements.append(m)
            print(f"   {TITLES[name]}: {m.num_parameters:,} parameters, word ppl {m.word_perplexity:.2f} "
                  f"({'exact' if m.exact_perplexity else 'bound'}), agreement "
                  + ", ".join(f"d{d} {100 * a:.1f}%" for d, a in agreement.items())
                  + (f", F1 {unlabeled:.2f}" if unlabeled is not None else "")
                  + f" (train {train_seconds:.0f}s, eval {e.seconds:.0f}s)", file=stream, flush=True)
    return Table(measurements, seeds, len(valid_trees), num_pairs, right_branching)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/lm_table.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500, help="training steps of every model (default 1500)")
    parser.add_argument("--seeds", type=int, default=1, help="runs per model; N >= 2: mean ± sd (default 1)")
    parser.add_argument("--out", default=None, help="also write every measurement and the table as JSON here")
    parser.add_argument("--workdir", default="runs/lm_table", help="runs in WORKDIR/steps<S>/seed<k>/<model>")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, from " + ", ".join(MODELS))
    parser.add_argument("--valid-sentences", type=int, default=100, help="held-out sentences for ppl and F1")
    parser.add_argument("--pairs", type=int, default=45, help="agreement minimal pairs per depth (default 45)")
    parser.add_argument("--search", default="auto", choices=("auto", "device", "host"),
                        help="the TG / TXL (CC) beam engine (tgjax demo --search)")
    args = parser.parse_args(argv)
    models = demo.chosen_models(args.models, parser, MODELS)
    if min(args.steps, args.seeds, args.valid_sentences, args.pairs) < 1:
        parser.error("--steps, --seeds, --valid-sentences and --pairs must be positive")
    start = time.perf_counter()
    table = run_table(Path(args.workdir), models=models, steps=args.steps, seeds=args.seeds,
                      num_valid=args.valid_sentences, num_pairs=args.pairs, search=args.search)
    text = table.format()
    seconds = time.perf_counter() - start
    print(text)
    print(f"\n(total {seconds:.0f}s; runs in {args.workdir}/)")
    if args.out:
        record = dataclasses.asdict(table)
        record.update(table=text, total_seconds=seconds, argv=sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
