"""tg-parse-f1: TG's parses against TXL (CC)'s (Sartran et al. 2022, Table 1: bracketing F1 93.7 ± 0.1 against
93.6 ± 0.1 on PTB, reranking RNNG proposal trees), at `configs/tg_totc.py`'s scale on Tale of Two Cities.

Three seeds each of TG and TXL (CC): `configs/tg_totc.py` (4 layers of d = 128, 3,000 steps; 15-18 minutes a run on
2 CPU cores alone), the same config, seeds and steps for both. Each run's best-validation checkpoint parses the
treebank's *test* split (`test.txt` beside the config's `valid.txt`, 293 sentences) with the word-synchronous beam
at twice `tgjax eval parse`'s default width (word 20, action 100, fast-track 4; `BEAM`): not the paper's reranking,
as there are no proposal trees here. At the default width (word 10, action 50, fast-track 2) a third of TG's wrong
parses were search errors, trees the model scores below the gold one (`tgjax.eval.search_errors`), and doubling it
raised one TG seed's labelled F1 by 4 points: the wider beam compares the models more than their searches. TG is
judged against TXL (CC) by labelled F1 (EVALB, COLLINS.prm), higher being better; unlabelled F1, the beam's
perplexity bound, right-branching's F1 and the split of the wrong parses into search and model errors are kept
beside. A run's workdir holds two checkpoints of some 20 MB each, so the runs train one after another and a pack
carries the one unfinished run. `--tiny` trains on a slice of the built-in treebank instead (the test needs no
shared data).
"""

from __future__ import annotations

from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import checkpoint_to_score, seeded_runs

CONFIG = "configs/tg_totc.py"
SEEDS = (1, 2, 3)  # 1: the config's own training.seed; runs of over five minutes: 3 seeds (tgjax.reproduce.verdict)
TINY = ("data.train_path=builtin", "data.valid_path=builtin", "data.num_train_sentences=64",
        "data.num_valid_sentences=16", "data.min_word_count=1", "model.d_model=16", "model.num_heads=2",
        "model.ffw_hidden_size=32", "model.num_layers=1", "training.num_steps=6", "training.batch_size=8",
        "evaluation.interval_steps=3", "checkpointing.interval_steps=3", "logging.interval_steps=1",
        "training.lr_schedule.kwargs.warmup_steps=2", "training.lr_schedule.kwargs.cosine_cycle_length=4")
TINY_TEST_SENTENCES = 4
MODELS = (("tg", "model"), ("txl_cc", "baseline"))  # (model.name, role)
BEAM = dict(word_beam=20, action_beam=100, fast_track=4)  # twice tgjax eval parse's default (module docstring)


def runs(tiny: bool) -> list[RunSpec]:
    specs = []
    for name, role in MODELS:
        specs += seeded_runs(name, CONFIG, SEEDS, ("checkpointing.max_to_keep=1", f"model.name={name}"), TINY, tiny,
                             role=role)
    return specs


def test_treebank() -> Path:
    """The Tale of Two Cities test split: `test.txt` beside the config's validation file."""
    from tgjax.train.config import load_config

    return Path(load_config(CONFIG, []).data.valid_path).with_name("test.txt")


def test_trees(tiny: bool) -> list:
    """The gold trees every run parses: the test split (the built-in one's first few with `tiny`)."""
    from tgjax.eval.parse import read_gold_file
    from tgjax.limits import PARSE_MAX_WORDS

    if tiny:
        from tgjax.data.corpora import get_corpus

        return get_corpus("builtin", "test")[:TINY_TEST_SENTENCES]
    return read_gold_file(str(test_treebank()), PARSE_MAX_WORDS)


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    import tgjax
    from tgjax.eval import search_errors
    from tgjax.eval.parse import parse_treebank
    from tgjax.infer.api import sentence_scorer
    from tgjax.infer.beam import BeamConfig

    step = checkpoint_to_score(workdir)
    model = tgjax.load(workdir, step)
    model.require("parser", command="tgjax reproduce tg-parse-f1", parses="trees")
    scorer = sentence_scorer([model], command="tgjax reproduce tg-parse-f1", beam=BeamConfig(**BEAM),
                             search="auto")
    trees = test_trees(tiny)
    report = parse_treebank(scorer, trees)
    errors = search_errors.count_search_errors(model.tree_scorer(command="tgjax reproduce tg-parse-f1"), trees,
                                               report.predicted)
    return {"checkpoint": step, "step": model.step, "labeled_f1": report.labeled_f1,
            "unlabeled_f1": report.unlabeled_f1, "right_branching_labeled_f1": report.baseline_labeled_f1,
            "right_branching_unlabeled_f1": report.baseline_unlabeled_f1,
            "word_perplexity_bound": report.perplexity_bound(), "search_errors": errors.to_json(),
            "sentences": len(trees), "words": sum(len(t.leaves()) for t in trees)}


RECIPE = Recipe(
    claim_id="tg-parse-f1",
    description="TG's labelled parse F1 against TXL (CC)'s, 3 seeds each of configs/tg_totc.py (4 layers of d 128, "
                "3,000 steps) on Tale of Two Cities, the test split parsed with the beam at twice tgjax eval parse's "
                "default width (word 20, action 100, fast-track 4)",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="labeled_f1", baseline_metric="labeled_f1",
                          label="Tale of Two Cities test labelled F1 (word-synchronous beam 20/100/4, not reranking)",
                          higher_is_better=True, finished_only=True),
    # `BEAM` over the 293 test sentences took 729 s for a TG beside a training run on 2 cores (the default
    # width: 236-380 s a run alone, up to 714 s beside other work).
    eval_reserve_s=lambda tiny: 30.0 if tiny else 1800.0,
    calibration_steps=lambda tiny: 2 if tiny else 50,
    one_run_at_a_time=True,
)
