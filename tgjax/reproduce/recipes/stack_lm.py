"""stack-ptb-table2: Tf+Nd models sentences with a lower cross-entropy than both the plain transformer and Tf+Sup
(DuSell & Chiang 2024, §7, Table 2), at the scale of `configs/stack_lm_tiny.py` on the built-in treebank (PTB is
licensed and not here).

Five seeds each of the paper's three models: Tf+Nd (`stack_lm_tiny.py:nondeterministic`), Tf (the same file with
no stack, `model.stack=none`) and Tf+Sup (the file's default, superposition stack attention); runs of 300 steps
take about a minute each on 2 CPU cores, so five seeds (`tgjax.reproduce.verdict`). Each run is read at its best
validation checkpoint, as the paper selects by validation cross-entropy, and scored on the built-in test split by
its exact `SentenceScorer`: nats per predicted token (the words and `<eos>`), lower is better. Tf+Nd is judged
against whichever of Tf and Tf+Sup has the lower mean, as the claim is "below both".
"""

from __future__ import annotations

from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import checkpoint_to_score, seeded_runs

CONFIG = "configs/stack_lm_tiny.py"
SEEDS = (11, 12, 13, 14, 15)  # runs of under 5 minutes: 5 seeds
COMMON = ("checkpointing.max_to_keep=1",)
TINY = ("data.num_train_sentences=32", "data.num_valid_sentences=8", "model.num_layers=1", "model.d_model=8",
        "model.num_heads=2", "model.feedforward_size=16", "training.num_steps=6", "training.batch_size=4",
        "evaluation.interval_steps=3", "checkpointing.interval_steps=3", "logging.interval_steps=1")
TEST_SENTENCES = 500  # the built-in test split's size (tiny: 20)


def runs(tiny: bool) -> list[RunSpec]:
    """Tf+Nd's seeds ("tf_nd-seedN"), then the same seeds of Tf ("tf-seedN") and of Tf+Sup ("tf_sup-seedN"),
    each a baseline group."""
    return (seeded_runs("tf_nd", f"{CONFIG}:nondeterministic", SEEDS, COMMON, TINY, tiny)
            + seeded_runs("tf", CONFIG, SEEDS, (*COMMON, "model.stack=none"), TINY, tiny, role="baseline", group="tf")
            + seeded_runs("tf_sup", f"{CONFIG}:superposition", SEEDS, COMMON, TINY, tiny, role="baseline",
                          group="tf_sup"))


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    import tgjax
    from tgjax.data.corpora import builtin_treebank

    step = checkpoint_to_score(workdir)
    model = tgjax.load(workdir, step)
    sentences = [tree.leaves() for tree in builtin_treebank("test", 20 if tiny else TEST_SENTENCES)]
    results = model.scorer().search(sentences)
    tokens = sum(len(words) + 1 for words in sentences)  # each word and <eos>
    cross_entropy = -sum(r.log_prob for r in results) / tokens
    return {"checkpoint": model.step, "test_cross_entropy": cross_entropy, "test_sentences": len(sentences)}


RECIPE = Recipe(
    claim_id="stack-ptb-table2",
    description="Tf+Nd against Tf and Tf+Sup on the built-in treebank's sentences, 5 seeds each of stack_lm_tiny; "
                "test cross-entropy per token of the best validation checkpoint, judged against the better of the two",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="test_cross_entropy", baseline_metric="test_cross_entropy",
                          label="built-in test cross-entropy, nats per token", higher_is_better=False),
    eval_reserve_s=lambda tiny: 10.0 if tiny else 30.0,
    calibration_steps=lambda tiny: 2 if tiny else 50,
)
