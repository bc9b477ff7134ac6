"""tg-ppl-bound: the syntactic LMs' word perplexity (a bound, from p(x) summed over parses) against TXL (terminals)'
exact perplexity (Sartran et al. 2022, Table 1: TG 61.8 ± 0.2, TXL (CC) 61.2 ± 0.3, TXL (terminals) 62.6 ± 0.2
on PTB), at the demo's scale on the built-in treebank.

Five seeds each of TG, TXL (terminals) and TXL (CC): `configs/tiny.py` with the demo's settings
(`tgjax.demo.DEMO_SETTINGS`: 3 layers of d = 64, 1,500 steps, warm-up then cosine; about 3 minutes a run on 2
CPU cores), the seeds of `benchmarks/lm_table.py` (the config's seed + 0 .. 4) so its 3-seed table is these
runs' first three. Each run's best-validation checkpoint is scored on the built-in *test* split (500 sentences,
4,297 words), per word with the end of sentence, as `tgjax.demo` does: exact by the chain rule for TXL
(terminals); for TG and TXL (CC) an upper bound, from the demo's word-synchronous beam's p(x) summed over the
parses it keeps (the paper sums over 300 RNNG proposal trees; there are none here). TG is judged against TXL
(terminals), lower being better; TXL (CC), the paper's other syntactic model, is shown beside, not judged. The
paper's numbers are PTB's, so only the direction is compared.
"""

from __future__ import annotations

from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import checkpoint_to_score, seeded_runs

CONFIG = "configs/tiny.py"
FIRST_SEED = 1  # configs/tiny.py's training.seed: lm_table.py's seed 0 run
SEEDS = tuple(FIRST_SEED + k for k in range(5))  # runs of under 5 minutes: 5 seeds (tgjax.reproduce.verdict)
TINY = ("data.num_train_sentences=64", "data.num_valid_sentences=16", "model.d_model=16", "model.num_heads=2",
        "model.ffw_hidden_size=32", "model.num_layers=1", "training.num_steps=6", "evaluation.interval_steps=3",
        "checkpointing.interval_steps=3", "logging.interval_steps=1",
        "training.lr_schedule.kwargs.warmup_steps=2", "training.lr_schedule.kwargs.cosine_cycle_length=4")
TINY_TEST_SENTENCES = 8
MODELS = (("tg", "model"), ("txl_terminals", "baseline"), ("txl_cc", "baseline"))  # (model.name, role)


def _common(name: str) -> tuple[str, ...]:
    from tgjax.demo import DEMO_SETTINGS  # here, not at import: `tgjax --help` stays fast

    return ("checkpointing.max_to_keep=1", *DEMO_SETTINGS, f"model.name={name}")


def runs(tiny: bool) -> list[RunSpec]:
    specs = []
    for name, role in MODELS:
        specs += seeded_runs(name, CONFIG, SEEDS, _common(name), TINY, tiny, role=role,
                             group=name if role == "baseline" else "")
    return specs


def test_trees(tiny: bool) -> list:
    """The sentences every run is scored on: the built-in test split (its first few with `tiny`)."""
    from tgjax.data.corpora import get_corpus

    trees = get_corpus("builtin", "test")
    return trees[:TINY_TEST_SENTENCES] if tiny else trees


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    import tgjax
    from tgjax import demo

    step = checkpoint_to_score(workdir)
    model = tgjax.load(workdir, step)
    scorer = model.scorer(beam=demo.default_beam_config(), search="auto")
    trees = test_trees(tiny)
    perplexity, f1s = demo.perplexity_and_f1(model, scorer, trees)
    scores = {"checkpoint": step, "step": model.step, "word_perplexity": perplexity,
              "perplexity": "exact" if model.scores_exactly else "bound",
              "sentences": len(trees), "words": sum(len(t.leaves()) for t in trees)}
    if f1s[1] is not None:  # the syntactic models' parses come with the bound: kept, not judged
        scores.update(labeled_f1=f1s[0], unlabeled_f1=f1s[1])
    return scores


RECIPE = Recipe(
    claim_id="tg-ppl-bound",
    description="TG's word perplexity bound against TXL (terminals)' exact perplexity, 5 seeds each of the demo's "
                "models (configs/tiny.py, 3 layers of d 64, 1,500 steps) on the built-in treebank's test split; "
                "TXL (CC)'s bound beside, not judged",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="word_perplexity", baseline_metric="word_perplexity",
                          label="built-in test word perplexity (TG: bound; TXL (terminals): exact)",
                          higher_is_better=False, finished_only=True, beside_groups=("txl_cc",)),
    # Every run is scored after training, so each keeps its reserve until then: the beam over the 500 test
    # sentences took 15-44 s a syntactic run on 2 cores (the first with compiling), the exact scorer under 6 s.
    eval_reserve_s=lambda tiny: 20.0 if tiny else 45.0,
    calibration_steps=lambda tiny: 2 if tiny else 50,
)
