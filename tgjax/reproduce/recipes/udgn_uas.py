"""udgn-uas: UDGN's induced dependency heads above the chain baselines (thesis §4.3.2, Table 4.2), at the scale
of `configs/udgn_tiny.py` on the built-in treebank.

Five seeds of `udgn_tiny` (63k parameters, 600 steps, about a minute each on 2 CPU cores); each is read with
`tgjax eval dependency` on the built-in test split (its own head marks): UAS of the Chu-Liu/Edmonds tree
beside the right chain, the best baseline there. The thesis' numbers are against Stanford Dependencies on
WSJ23, so only the direction is compared.
"""

from __future__ import annotations

from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import checkpoint_to_score, run_eval_command, seeded_runs

CONFIG = "configs/udgn_tiny.py"
SEEDS = (1111, 2222, 3333, 4444, 5555)  # runs of under 5 minutes: 5 seeds (tgjax.reproduce.verdict)
COMMON = ("checkpointing.max_to_keep=1",)
TINY = ("data.num_train_sentences=64", "data.num_valid_sentences=16", "model.d_model=8", "model.channel_size=4",
        "model.parser_hidden=8", "training.num_steps=8", "evaluation.interval_steps=4",
        "checkpointing.interval_steps=4", "logging.interval_steps=1", "training.token_budget=128")


def runs(tiny: bool) -> list[RunSpec]:
    return seeded_runs("udgn", CONFIG, SEEDS, COMMON, TINY, tiny)


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    from tgjax.eval.dependency import main_dependency

    step = checkpoint_to_score(workdir)
    argv = ["--workdir", str(workdir), "--step", step, "--treebank", "builtin", "--mlm-runs", "1"]
    if tiny:
        argv += ["--limit", "20"]
    result = run_eval_command(main_dependency, argv, workdir / "dependency.json")
    baselines = result["baselines"]
    return {"checkpoint": step, "tree_uas": result["udgn_tree"]["uas"], "argmax_uas": result["udgn_argmax"]["uas"],
            "tree_uuas": result["udgn_tree"]["uuas"], "right_chain_uas": baselines["right chain"]["uas"],
            "left_chain_uas": baselines["left chain"]["uas"], "mlm_perplexity": result["mlm"]["perplexity"]}


RECIPE = Recipe(
    claim_id="udgn-uas",
    description="UDGN dependency induction, 5 seeds of udgn_tiny on the built-in treebank; tree UAS beside the "
                "right chain",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="tree_uas", baseline_metric="right_chain_uas",
                          label="built-in test UAS (Chu-Liu/Edmonds)", finished_only=True),
    eval_reserve_s=lambda tiny: 15.0 if tiny else 60.0,
    calibration_steps=lambda tiny: 2 if tiny else 50,
)
