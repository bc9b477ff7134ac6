"""The `tgjax` command: one `argparse` tree, parsed once; each command runs as its `args.run(args)`.

    tgjax demo [--workdir runs/demo]                              the main job: four tiny models, one table
    tgjax data prepare  [--corpus builtin|FILE] [--workdir DIR]   treebank -> vocabulary -> one epoch of batches
    tgjax data stats    [--corpus builtin|FILE] [--rule tg] ...   what the pipeline makes of a corpus
    tgjax data export   --split train -o FILE                     write the built-in treebank
    tgjax data show     "<tree>"                                  the paper's Figure 2 table for a tree
    tgjax data deps     --treebank FILE|builtin -o out.conllu     dependencies from head rules, as CoNLL-U
    tgjax data craft-demos --task NAME -o FILE                    bot demonstrations of a Craft task
    tgjax viz mask      "<tree>" -o mask.png                      the STACK/COMPOSE mask as a picture
    tgjax viz tree      "<tree>" -o tree.png                      a tree as a picture
    tgjax viz curves    --workdir DIR [--workdir DIR2] -o curves.png   training curves of runs
    tgjax bench pipeline|train_step|stack_attention [ARGS]       a script of benchmarks/ (source checkout)
    tgjax train [--config tiny|FILE[:ARG]] --workdir DIR [--config.a.b=v ...]   train, or resume in DIR
    tgjax info  [--config tiny|FILE[:ARG]] [--config.a.b=v ...]   parameters (count, mesh placement), resolved config
    tgjax eval  f1|score|ppl|rerank|merge|parse|sg|blimp|unsupervised-parse|dependency|dyck|craft ...
    tgjax sample --workdir DIR [--num-samples N] ...                      well-formed trees from a trained model
    tgjax reproduce CLAIM --budget-s S --output DIR [--resume-from DIR0]   move a paper's claim forward; --ledger

The data (but deps and craft-demos), viz, train, info and bench commands are here. The others live in
their own modules (`MODULE_COMMANDS`): each module's `add_X_arguments(parser)` gives the parser made here
for it its description and arguments and sets `run`; it is imported only when its command is parsed or its
help printed (`CommandParser`), so `tgjax --help` imports no JAX. `--config.KEY=VALUE` overrides are taken out
of the command line before parsing, for the commands that set `takes_overrides` (train, info, demo).
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tgjax.limits import DRAWING_MAX_NODES, check_tree_size
from tgjax.limits import TREEBANK_MAX_WORDS as MAX_WORDS

if TYPE_CHECKING:  # imported where used: `tgjax --help` stays fast
    from tgjax.data.pipeline import PipelineConfig


def _pipeline_config(args) -> PipelineConfig:
    from tgjax.data.pipeline import PipelineConfig

    return PipelineConfig(
        corpus=args.corpus, split=args.split, num_sentences=args.num_sentences, rule=args.rule,
        seq_len=args.seq_len, mem_len=args.mem_len, batch_size=args.batch_size,
        max_actions=args.max_actions, max_words=args.max_words, on_too_long=args.on_too_long,
        on_bad_tree=args.on_bad_tree, seed=args.seed,
        num_workers=args.num_workers,
    )


def _add_pipeline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default="builtin", help="'builtin' or a treebank file (one tree per line or .mrg)")
    p.add_argument("--split", default="train", help="split of the built-in corpus")
    p.add_argument("--num-sentences", type=int, default=None, help="built-in corpus size")
    p.add_argument("--rule", default="tg", choices=("tg", "txl_cc", "txl_terminals", "pushdown"))
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--mem-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-actions", type=int, default=None, help="longest sequence accepted")
    p.add_argument("--max-words", type=int, default=MAX_WORDS,
                   help=f"longest sentence of a treebank file, checked while reading (default {MAX_WORDS:,})")
    p.add_argument("--on-too-long", default="error", choices=("error", "skip"),
                   help="a sentence over --max-words or --max-actions: stop with an error, or skip and count")
    p.add_argument("--on-bad-tree", default="error", choices=("error", "skip"),
                   help="malformed trees in a treebank file: stop with an error, or skip and count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=0, help="grain worker processes")


def _run_epoch(pipeline) -> dict:
    """Iterates one epoch with a progress line; returns what it counted."""
    from tgjax.progress import Progress

    source = pipeline.epoch_source(0)
    progress = Progress(len(source), label="step", noun="step", min_interval=0.5)
    iterator = pipeline.iterator()
    real_positions = padded_positions = segments = tokens = 0
    for step in range(1, len(source) + 1):
        batch = next(iterator)
        real = int(np.count_nonzero(batch["inputs_ttypes"]))
        real_positions += real
        padded_positions += batch["inputs"].size
        segments += int(np.count_nonzero(batch["seq_index"] >= 0))
        tokens += int(np.count_nonzero(batch["inputs"]))
        progress.update(step, totals={"tokens": tokens})
    seconds = progress.close()
    return dict(steps=len(source), segments=segments, real_positions=real_positions,
                padded_positions=padded_positions, seconds=seconds)


def cmd_data_stats(args) -> int:
    from tgjax.data.pipeline import Pipeline

    config = _pipeline_config(args)
    pipeline = Pipeline(config)
    counts = _run_epoch(pipeline)
    _print_summary(pipeline, counts)
    return 0


def _print_summary(pipeline, counts: dict) -> None:
    enc = pipeline.encoded
    lengths = np.array([len(s[0]) for s in enc.sequences])
    rule = pipeline.epoch_source(0).rule
    print(f"corpus            {pipeline.config.corpus} ({pipeline.config.split}): {len(pipeline.trees)} trees")
    print(f"rule              {pipeline.config.rule}: {rule!r}")
    print(f"vocabulary        {pipeline.vocab.size} ids ({type(pipeline.vocab).__name__})")
    too_long_read = 0
    if pipeline.read_report is not None:
        too_long_read = pipeline.read_report.num_too_long
        print(f"reading           {pipeline.read_report.num_skipped} malformed trees skipped, {too_long_read} over "
              f"--max-words {pipeline.config.max_words}")
        for error in (pipeline.read_report.errors + pipeline.read_report.too_long)[:5]:
            print(f"                  {error}")
    print(f"sequences         {len(enc.sequences)} kept, {enc.skipped_too_long + too_long_read} skipped as too long")
    print(f"inputs per seq.   mean {lengths.mean():.1f}, max {lengths.max()}")
    print(f"one epoch         {counts['steps']} steps of {pipeline.config.batch_size} rows, "
          f"{counts['segments']} segments, {counts['seconds']:.1f}s")
    fill = counts["real_positions"] / max(counts["padded_positions"], 1)
    print(f"fill              {fill:.1%} of positions are tokens")
    if hasattr(rule, "smart_memory"):
        stats = pipeline.epoch_source(0).rule.stats
        print(f"memory            stack entries dropped from a full memory: {stats.dropped_stack_entries}")


def cmd_data_prepare(args) -> int:
    """The data side end to end: trees, vocabulary, one epoch of batches, a mask picture."""
    from tgjax.data import corpora
    from tgjax.data.pipeline import Pipeline
    from tgjax.outputs import make_output_folder
    from tgjax.viz import draw_mask

    workdir = make_output_folder(args.workdir, option="--workdir")
    config = _pipeline_config(args)
    if config.corpus == "builtin":
        for split in ("train", "valid", "test"):
            path = workdir / f"{split}.txt"
            n = corpora.write_treebank(path, corpora.get_corpus("builtin", split, seed=config.seed))
            print(f"wrote {n} trees to {path}")
    pipeline = Pipeline(config)
    vocab_path = workdir / "vocab.json"
    pipeline.vocab.save(str(vocab_path))
    print(f"wrote the vocabulary ({pipeline.vocab.size} ids) to {vocab_path}")
    counts = _run_epoch(pipeline)
    _print_summary(pipeline, counts)
    picture = workdir / "mask.png"
    draw_mask(pipeline.trees[0], str(picture), pos_tags=pipeline.pos_tags)
    print(f"drew the STACK/COMPOSE mask of the first tree to {picture}")
    (workdir / "summary.json").write_text(json.dumps(counts, indent=2))
    return 0


def cmd_data_export(args) -> int:
    from tgjax.data import corpora
    from tgjax.outputs import check_output

    check_output(args.output)
    n = corpora.write_treebank(args.output, corpora.get_corpus("builtin", args.split, seed=args.seed,
                                                                num_sentences=args.num_sentences))
    print(f"wrote {n} trees to {args.output}")
    return 0


def cmd_data_show(args) -> int:
    from tgjax.syntax import actions, masks, pos_tags, trees
    from tgjax.syntax import token_types as tt

    check_tree_size(args.tree, args.max_nodes, "tgjax data show")
    tree = trees.parse(args.tree)
    # One tree: tagged iff every word is alone under a node of its own (`tgjax.syntax.pos_tags`).
    tokens = ["<s>"] + actions.choe_charniak(tree, pos_tags=pos_tags.is_tagged(tree))
    types = np.array([tt.BOS] + [actions.token_type(t) for t in tokens[1:]], np.int32)
    # Token k has id k + 1 and label id k + 2 (the next token; 0 after the last).
    ids = np.arange(1, len(tokens) + 1, dtype=np.int32)
    labels = np.append(ids[1:], 0)
    n = len(tokens) + int(np.count_nonzero(types == tt.CLOSING_NT))
    (chunk,) = masks.TGMasking(n, 1).chunks(ids, types, labels, np.append(types[1:], tt.PAD))
    print(f"{'i':>3} {'input':12s} {'type':5s} {'op':8s} {'label':12s} attends")
    for i in range(n):
        compose = chunk.inputs_ttypes[i] == tt.CNT1
        label = tokens[chunk.labels[i] - 1] if chunk.labels[i] else ""
        attends = " ".join(str(j) for j in np.flatnonzero(chunk.attn_mask[i]))
        print(f"{i:3d} {tokens[chunk.inputs[i] - 1]:12s} {tt.NAMES[int(chunk.inputs_ttypes[i])]:5s} "
              f"{'COMPOSE' if compose else 'STACK':8s} {label:12s} {attends}")
    return 0


def cmd_viz_mask(args) -> int:
    from tgjax.outputs import check_output
    from tgjax.syntax import pos_tags, trees
    from tgjax.viz import draw_mask

    check_tree_size(args.tree, args.max_nodes, "tgjax viz mask")  # before parsing: the picture is n x n
    tree = trees.parse(args.tree)
    check_output(args.output, figure=True)
    draw_mask(tree, args.output, pos_tags=pos_tags.is_tagged(tree))  # one tree: tagged iff every word is alone
    print(f"wrote {args.output}")
    return 0


def cmd_viz_tree(args) -> int:
    from tgjax.outputs import check_output
    from tgjax.syntax import trees
    from tgjax.viz import draw_tree

    check_tree_size(args.tree, args.max_nodes, "tgjax viz tree")
    tree = trees.parse(args.tree)
    check_output(args.output, figure=True)
    draw_tree(tree, args.output)
    print(f"wrote {args.output}")
    return 0


def cmd_viz_curves(args) -> int:
    from tgjax.outputs import check_output
    from tgjax.viz import draw_curves

    check_output(args.output, figure=True, inputs=[Path(w) / "metrics.jsonl" for w in args.workdir])
    curves = draw_curves(args.workdir, args.output, labels=args.label)
    for workdir, c in zip(args.workdir, curves):
        steps, losses = c["train"]
        valid_steps, valid_losses = c["valid"]
        last = f"; last validation {valid_losses[-1]:.4f} at step {valid_steps[-1]}" if len(valid_steps) else ""
        print(f"{workdir}: {len(steps)} training records (steps {steps[0] if len(steps) else '-'}.."
              f"{steps[-1] if len(steps) else '-'}){last}"
              + (f"; {len(c['unreadable'])} unreadable line(s) skipped: {c['unreadable'][:10]}"
                 if c["unreadable"] else ""))
    print(f"wrote {args.output}")
    return 0


def cmd_bench(args) -> int:
    scripts = {"pipeline": "pipeline_throughput.py", "train_step": "train_step.py",
               "stack_attention": "stack_attention.py"}
    path = Path(__file__).resolve().parents[1] / "benchmarks" / scripts[args.name]
    if not path.exists():
        print(f"tgjax bench: {path} not found; benchmarks run from a source checkout", file=sys.stderr)
        return 2
    sys.argv = [str(path)] + args.rest
    runpy.run_path(str(path), run_name="__main__")
    return 0


def _load_train_config(args):
    from tgjax.train.config import load_config

    return load_config(args.config, args.overrides)


def cmd_train(args) -> int:
    """Trains (or resumes) in --workdir; progress on stderr, metrics.jsonl and TensorBoard in the workdir."""
    import logging

    from tgjax.train.loop import TrainingDiverged, train

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config = _load_train_config(args)
    from tgjax.train.config import trainer_of
    from tgjax.train.tasks import train_command

    command = train_command(trainer_of(config))  # a family that trains as more than one run has its own
    if command is not None:
        return command(config, args.workdir, quiet=args.quiet)
    try:
        result = train(config, args.workdir, quiet=args.quiet)
    except TrainingDiverged as error:
        print(f"tgjax: error: {error}", file=sys.stderr)
        return 1
    if args.quiet and result.valid_losses:
        step = max(result.valid_losses)
        unigram = result.facts.get("unigram_loss")  # the treebank LM's baseline; other families have none
        if unigram is None:
            print(f"step {result.final_step}: validation {result.valid_losses[step]:.4f}")
        else:
            print(f"step {result.final_step}: validation loss {result.valid_losses[step]:.4f} (unigram {unigram:.4f})")
    return 0


def cmd_info(args) -> int:
    """The model's parameter count, its settings, each parameter's partition on the configured mesh, and the
    resolved config."""
    from tgjax.train.config import to_json_dict
    from tgjax.train.tasks import describe

    config = _load_train_config(args)
    info = describe(config)
    layout = _info_layout(info.build, config)
    specs = layout.partition_specs()
    if args.json:
        partitions = {path: {"shape": list(shape), "spec": repr(spec)} for path, (shape, spec) in specs.items()}
        print(json.dumps({**info.to_json(), "mesh": dict(layout.mesh.shape), "partition_specs": partitions,
                          "config": to_json_dict(config)}, indent=2))
        return 0
    print(f"config       {args.config}" + (f" with {' '.join(args.overrides)}" if args.overrides else ""))
    print(f"model        {info.name}: {info.num_parameters:,} parameters")
    if info.note:
        print(f"             {info.note}")
    print(f"vocabulary   {info.vocab_size:,} ids ({info.vocab_source})")
    print("model config " + ", ".join(f"{k}={v}" for k, v in info.settings.items()))
    marked = sum("model" in _spec_axes(spec) for _, spec in specs.values())
    ways = layout.mesh.shape["model"]
    mesh = " x ".join(f"{axis} {size}" for axis, size in layout.mesh.shape.items())
    how = f"split {ways} ways over 'model'" if ways > 1 else "on the 'model' axis (size 1: whole on each device)"
    print(f"\nparameters on the mesh ({mesh}): {marked} of {len(specs)} {how}")
    width = max(len(path) for path in specs)
    for path, (shape, spec) in specs.items():
        print(f"  {path:<{width}}  {str(list(shape)):<18} {spec}")
    print("\nresolved config:")
    print(str(config).rstrip())
    return 0


def _info_layout(build_model, config):
    """The parameters' layout on this machine's devices under the config's mesh and logical-axis rules."""
    from tgjax.train import sharding as shd
    from tgjax.train.config import ConfigError
    from tgjax.train.params_state import params_layout

    try:
        mesh = shd.make_mesh(config.mesh.data, config.mesh.model)
    except ValueError as error:
        raise ConfigError(f"{error} here (tgjax info lays the parameters out on this machine's devices; on a CPU, "
                          "XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)") from None
    return params_layout(build_model, mesh, shd.config_rules(config))


def _spec_axes(spec) -> set[str]:
    """The mesh axes a `PartitionSpec` uses."""
    axes: set[str] = set()
    for entry in spec:
        axes.update((entry,) if isinstance(entry, str) else (entry or ()))
    return axes


def _add_max_nodes_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-nodes", type=int, default=DRAWING_MAX_NODES,
                   help=f"largest tree taken, in nodes ('('), counted before parsing (default {DRAWING_MAX_NODES:,})")


# The commands whose code lives in a module of their own: (path, "module:function", help). The function adds the
# command's description and arguments to the parser made here for it, and sets `run` (`set_defaults(run=...)`);
# the module is imported only when that command is parsed or its help printed, so `tgjax --help` imports none.
MODULE_COMMANDS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("data", "deps"), "tgjax.data.deps:add_deps_arguments",
     "dependency trees from a treebank by head rules, written as CoNLL-U: --treebank FILE|builtin -o OUT"),
    (("data", "craft-demos"), "tgjax.data.craft_demos_command:add_craft_demos_arguments",
     "bot demonstrations of a Craft task with subtask boundaries: --task NAME [--num 6000] -o FILE"),
    (("eval", "f1"), "tgjax.eval.evalb:add_f1_arguments",
     "parse F1 with EVALB's rules: --gold G --pred P [--params collins|keep_punct]"),
    (("eval", "score"), "tgjax.eval.commands:add_score_arguments",
     "log p per sentence (and per token / per-word surprisal): --workdir W --input FILE"),
    (("eval", "ppl"), "tgjax.eval.commands:add_ppl_arguments",
     "word-perplexity upper bound from proposal trees: --workdir W --proposals P"),
    (("eval", "rerank"), "tgjax.eval.commands:add_rerank_arguments",
     "rerank proposal trees by log p(x, y), F1 vs --gold: --workdir W --proposals P"),
    (("eval", "merge"), "tgjax.eval.commands:add_merge_arguments",
     "combine the per-shard results of an eval job (score, ppl or rerank)"),
    (("eval", "parse"), "tgjax.eval.parse:add_parse_arguments",
     "parse a treebank with the model's beam search; F1 vs gold and right-branching: --workdir W [--treebank FILE]"),
    (("eval", "sg"), "tgjax.eval.parse:add_sg_arguments",
     "SyntaxGym suites: accuracy per suite, circuits, SG score: --workdir W"),
    (("eval", "blimp"), "tgjax.eval.parse:add_blimp_arguments",
     "BLiMP minimal pairs: accuracy per paradigm/field/overall: --workdir W"),
    (("eval", "unsupervised-parse"), "tgjax.eval.unsupervised:add_unsupervised_parse_arguments",
     "trees from an LM's syntactic distances, per layer, F1 beside right/left-branching and balanced: "
     "--workdir W --treebank FILE"),
    (("eval", "dependency"), "tgjax.eval.dependency:add_dependency_arguments",
     "dependency UAS/UUAS of a model's heads (argmax, Chu-Liu/Edmonds) beside chain and random-projective "
     "baselines, MLM perplexity: --workdir W --treebank FILE"),
    (("eval", "dyck"), "tgjax.eval.dyck:add_dyck_arguments",
     "accuracy at closing Dyck prefixes (long-range, depth) beside Pushdown Layers' Table 1: --workdir W "
     "[--sets ...] [--tape model|gold]"),
    (("eval", "craft"), "tgjax.eval.craft:add_craft_arguments",
     "a Craft behaviour-cloned policy: held-out NLL, F1 tol1 / alignment / NMI, success rate and return, the "
     "option x subtask table; --curves-only for any Craft run (PPO too): --workdir W"),
    (("demo",), "tgjax.demo:add_demo_arguments",
     "the main job: train tiny TG, TXL (CC), TXL (terminals) and Pushdown-LM on the built-in treebank; table of "
     "perplexity, parse F1, agreement accuracy"),
    (("reproduce",), "tgjax.reproduce.command:add_reproduce_arguments",
     "train and score a paper's claim within a time budget, resumable; --ledger writes docs/reproduction.md "
     "(its --help lists the claims)"),
    (("sample",), "tgjax.eval.sample_command:add_sample_arguments",
     "sample well-formed trees from a trained model that samples (TG, TXL (CC), Pushdown-LM): --workdir W "
     "[--num-samples N] [--temperature T] [--top-k K] [--top-p P] [--prompt ...]"),
)


class CommandParser(argparse.ArgumentParser):
    """A parser of the `tgjax` tree. With `arguments="module:function"`, `function(self)` adds the command's
    arguments (and description, and `run`) the first time this parser parses or formats its help: the module,
    JAX perhaps with it, is imported only for its own command."""

    def __init__(self, *args, arguments: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._arguments = arguments

    def _add_arguments(self) -> None:
        if self._arguments is not None:
            import importlib

            module, function = self._arguments.split(":")
            self._arguments = None
            getattr(importlib.import_module(module), function)(self)

    def parse_known_args(self, args=None, namespace=None):
        self._add_arguments()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._add_arguments()
        return super().format_usage()

    def format_help(self) -> str:
        self._add_arguments()
        return super().format_help()


def _command(parent, name: str, help_text: str, **kwargs) -> argparse.ArgumentParser:
    """A command of this module; its description, unless given, is its help as a sentence."""
    kwargs.setdefault("description", help_text[0].upper() + help_text[1:] + ".")
    return parent.add_parser(name, help=help_text, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The one `tgjax` command tree; each command's `run(args)` is its `args.run`."""
    parser = CommandParser(prog="tgjax", description="Syntactic language models at scale in JAX/Flax.")
    commands = parser.add_subparsers(dest="command", required=True)
    subcommands: dict[str, argparse._SubParsersAction] = {}

    def group(name: str, help_text: str):
        subcommands[name] = _command(commands, name, help_text).add_subparsers(dest="what", required=True)
        return subcommands[name]

    data = group("data", "the host-side data pipeline, and data sets of other tasks")
    p = _command(data, "prepare", "trees, vocabulary, one epoch of batches, a mask picture")
    _add_pipeline_args(p)
    p.add_argument("--workdir", default="runs/builtin",
                   help="where the trees, vocab.json, mask.png and summary.json go (default runs/builtin)")
    p.set_defaults(run=cmd_data_prepare)
    p = _command(data, "stats", "run one epoch of the pipeline and summarise it")
    _add_pipeline_args(p)
    p.set_defaults(run=cmd_data_stats)
    p = _command(data, "export", "write a split of the built-in treebank, one tree per line")
    p.add_argument("--split", default="train")
    p.add_argument("--num-sentences", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(run=cmd_data_export)
    p = _command(data, "show", "the Figure 2 table (input, type, attention, label) of a tree")
    p.add_argument("tree", help='a bracketed tree, e.g. "(S (NP the blue bird) (VP sings))"')
    _add_max_nodes_arg(p)
    p.set_defaults(run=cmd_data_show)

    viz = group("viz", "pictures")
    p = _command(viz, "mask", "draw the STACK/COMPOSE mask of a tree (Figure 2b)")
    p.add_argument("tree")
    p.add_argument("-o", "--output", default="mask.png")
    _add_max_nodes_arg(p)
    p.set_defaults(run=cmd_viz_mask)
    p = _command(viz, "tree", "draw a tree (e.g. a parse from tgjax eval parse or tgjax sample)")
    p.add_argument("tree")
    p.add_argument("-o", "--output", default="tree.png")
    _add_max_nodes_arg(p)
    p.set_defaults(run=cmd_viz_tree)
    p = _command(viz, "curves", "training and validation loss against step of one or more runs")
    p.add_argument("--workdir", action="append", required=True, help="a run (repeat to compare runs)")
    p.add_argument("--label", action="append", default=None, help="a name per --workdir for the legend")
    p.add_argument("-o", "--output", default="curves.png")
    p.set_defaults(run=cmd_viz_curves)

    config_help = ("config file (configs/NAME.py, a path, or FILE.py:ARG); override any key with "
                   "--config.SECTION.KEY=VALUE, e.g. --config.training.num_steps=100")
    p = _command(commands, "train", "train a model from a config (resumes from DIR's checkpoints)",
                 description="Train a model. Re-running the same command on a workdir that holds checkpoints "
                             "resumes from the newest good one.")
    p.add_argument("--config", default="tiny", help=config_help + " (default: tiny)")
    p.add_argument("--workdir", required=True, help="checkpoints, vocabulary, metrics.jsonl, tensorboard/")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=cmd_train, takes_overrides=True)
    p = _command(commands, "info", "parameter count, each parameter's placement on the mesh, and the resolved "
                                    "config of a training config")
    p.add_argument("--config", default="tiny", help=config_help + " (default: tiny)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=cmd_info, takes_overrides=True)

    group("eval", "evaluations of trained models")
    for path, arguments, help_text in MODULE_COMMANDS:
        parent = subcommands[path[0]] if len(path) == 2 else commands
        parent.add_parser(path[-1], help=help_text, arguments=arguments)

    p = _command(commands, "bench", "run a benchmark from benchmarks/ (a source checkout)")
    p.add_argument("name", choices=("pipeline", "train_step", "stack_attention"),
                   help="benchmarks/pipeline_throughput.py, train_step.py or stack_attention.py")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the script's own arguments (its --help lists them)")
    p.set_defaults(run=cmd_bench)
    return parser


def _one_line_errors(run, args: argparse.Namespace) -> int:
    """Runs a command; a bad input or an output it cannot write that escaped its own handler is one line."""
    try:
        return int(run(args) or 0)
    except (ValueError, FileNotFoundError) as error:  # tgjax.outputs.OutputError is a ValueError
        print(f"tgjax: error: {error}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """`tgjax ARGV`: parses once on the command tree and runs the command (`args.run`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if any(arg.startswith("--config.") for arg in argv):
        # `--config.a.b=v` overrides (train, info, demo) are not argparse options: take them out first.
        from tgjax.train.config import parse_override_args

        try:
            overrides, argv = parse_override_args(argv)
        except ValueError as error:
            print(f"tgjax: error: {error}", file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    if overrides and not getattr(args, "takes_overrides", False):
        command = " ".join(filter(None, (args.command, getattr(args, "what", None))))
        print(f"tgjax: error: --config.KEY=VALUE overrides are for train and info (and demo), not {command}",
              file=sys.stderr)
        return 2
    args.overrides = overrides
    args.argv = argv  # the command line after `tgjax` (what `tgjax reproduce` records)
    return _one_line_errors(args.run, args)


if __name__ == "__main__":
    sys.exit(main())
