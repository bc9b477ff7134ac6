"""pushdown-dyck-table1: the Pushdown-LM closes Dyck prefixes better than the Base-LM, on longer dependencies and
deeper nesting than training (Murty et al. 2023, §4.1, Table 1), at the paper's recipe: an accelerator's claim.

Three seeds each of `configs/pushdown_dyck.py` (6 layers of d 128 on 100k Dyck_(20,10) strings, 10,000 steps,
the release's attachment head: the recipe Table 1 came from) and of its Base-LM (`:base`, the same model with no
pushdown layer, still trained with the attachment head); then the same seeds with the paper's head
(`:paper-head`, Fig. 8's scores, the softmax over the legal slots), shown beside and not judged. Every run
batches by length (`training.bucket_lengths`, `training.group_by_length`: the padding cut, the numbers those of
a padded run up to the batches' order).

A finished run is scored by `tgjax eval dyck` at its best validation checkpoint on Table 1's five sets (the
long-range sets built at the training depth, and depth 15-50), the Pushdown-LMs reading their own tape (the top of
a beam of 50 over the prefix: the release's protocol), the Base-LM one teacher-forced pass. Each set is a part of
the claim, judged over the seeds against the paper's number (one example is 1-2 points: tolerance 2); the claim
holds where every set shows it.

The runs train one after another (`Recipe.one_run_at_a_time`): a run's checkpoints with Adam's moments are
~16 MB, so a pack holds the one unfinished run, and the own-tape beam is scored once, when a run finishes. The
Pushdown-LM and Base-LM seeds come first, the paper head's last.
"""

from __future__ import annotations

from pathlib import Path

from tgjax.eval.dyck import PAPER_SETS, PAPER_TABLE, main_dyck
from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import run_eval_command, seeded_runs

CONFIG = "configs/pushdown_dyck.py"
SEEDS = (42, 43, 44)  # 42: the release's
COMMON = ("training.bucket_lengths=true", "training.group_by_length=true", "checkpointing.max_to_keep=1")
TINY = ("model.d_model=16", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=32",
        "model.head_depth_dim=8", "model.sequence_length=32", "data.dyck_max_length=30", "data.dyck_num_train=40",
        "data.dyck_num_valid=8", "training.batch_size=8", "evaluation.batch_size=8", "training.num_steps=4",
        "training.lr_schedule.kwargs.warmup_steps=1", "training.lr_schedule.kwargs.cosine_cycle_length=3",
        "evaluation.interval_steps=2", "checkpointing.interval_steps=2", "logging.interval_steps=1",
        "logging.tensorboard=false")
SETS = PAPER_SETS  # Table 1's columns: dyck50 .. dyck300, depth
PAPER_HEAD_GROUP = "paper_head"
BEAM_SIZE = 50  # the release's beam over the prefix


def runs(tiny: bool) -> list[RunSpec]:
    """Per seed the Pushdown-LM ("pushdown-seedN") then the Base-LM ("base-seedN", baseline group "base"); then
    each seed of the Pushdown-LM with the paper's head ("paper_head-seedN", shown beside)."""
    pushdown = seeded_runs("pushdown", CONFIG, SEEDS, COMMON, TINY, tiny)
    base = seeded_runs("base", f"{CONFIG}:base", SEEDS, COMMON, TINY, tiny, role="baseline", group="base")
    paper_head = seeded_runs(PAPER_HEAD_GROUP, f"{CONFIG}:paper-head", SEEDS, COMMON, TINY, tiny, role="baseline",
                             group=PAPER_HEAD_GROUP)
    interleaved = [spec for pair in zip(pushdown, base) for spec in pair]
    return interleaved + paper_head


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    """Accuracy (%) on each of Table 1's sets as "accuracy/SET", at the best validation checkpoint."""
    argv = ["--workdir", str(workdir), "--step", "best", "--sets", ",".join(SETS), "--quiet",
            "--beam-size", str(2 if tiny else BEAM_SIZE), *(["--limit", "1"] if tiny else [])]
    result = run_eval_command(main_dyck, argv, workdir / "dyck_table1.json")
    scores = {f"accuracy/{name}": 100.0 * result["scores"][name]["accuracy"] for name in SETS}
    examples = {name: result["scores"][name]["num_examples"] for name in SETS}
    return {**scores, "checkpoint": result["step"], "tape": result["tape"], "examples": examples}


RECIPE = Recipe(
    claim_id="pushdown-dyck-table1",
    description="Pushdown-LM against the Base-LM on Table 1's Dyck sets, 3 seeds each of pushdown_dyck.py (the "
                "paper's recipe, the release's head; 10,000 steps), the paper's head beside; own-tape accuracy of "
                "the best validation checkpoint per set, each set judged over the seeds; one run at a time "
                "(accelerator scale)",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="accuracy", baseline_metric="accuracy",
                          label="closing-bracket accuracy, %", tolerance=2.0,
                          paper_by_part=tuple((name, PAPER_TABLE["pushdown"][name]) for name in SETS),
                          beside_groups=(PAPER_HEAD_GROUP,)),
    # The own-tape beam of 50 over Table 1's 305 prefixes (up to 599 tokens): 136-158 s a set on an H200 shared
    # by seven evaluations, so, alone on it, about 4 minutes kept for a run's scoring with its compiling (the paper
    # head's runs are "baseline" runs with a beam too; a Base-LM needs far less, one forward pass a set). The
    # reserve must stay well inside one call's budget, or no chunk could ever finish a run.
    eval_reserve_s=lambda tiny: 30.0 if tiny else 240.0,
    calibration_steps=lambda tiny: 2 if tiny else 200,
    parts=SETS,
    parts_are_test_sets=True,
    one_run_at_a_time=True,
    scale="paper",
)
