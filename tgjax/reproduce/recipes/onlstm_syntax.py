"""onlstm-targeted-syntax: ON-LSTM above a plain LSTM on long-term subject-verb agreement (thesis §3.4.3, Table
3.3: across a prepositional phrase 0.67 / 0.68, a subject relative 0.66 / 0.60, an object relative 0.57 / 0.52;
simple agreement, short-term, 0.99 / 1.00), at the scale of `benchmarks/lm_table.py`'s ON-LSTM on the built-in
treebank.

Five seeds of `configs/onlstm_tiny.py` at lm_table.py's size (embeddings 64, 2 layers of 128, chunk 8; 5,000
training sentences, 10 epochs: about 1,500 SGD steps, a minute a run on 2 CPU cores), and five seeds of the same
config as a plain LSTM (`model.ordered=False`: the master gates fixed at 1; the same sizes, data, optimiser and
epochs), the thesis' baseline. Each run's best-validation checkpoint scores the built-in grammar's agreement
minimal pairs (`tgjax.data.corpora.agreement_minimal_pairs`, the demo's sets) by the chain rule, log p(good) >
log p(bad): the three constructions of the thesis' long-term rows, agreement across a prepositional phrase, a
subject relative and an object relative (40 pairs each, every attractor of the other number; the grammar's own
depth), pooled, is the judged number; each construction, simple agreement (the short-term control, 60 pairs)
and the same constructions two and three embeddings deep (deeper than any training sentence, 60 pairs each) are
kept beside. The thesis' suite (Marvin & Linzen's, regenerated) and its Wikipedia LMs are not here: only the
direction is compared.
"""

from __future__ import annotations

from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import checkpoint_to_score, metrics_records, onlstm_and_lstm_runs

CONFIG = "configs/onlstm_tiny.py"
SEEDS = (141, 142, 143, 144, 145)  # runs of under 5 minutes: 5 seeds (tgjax.reproduce.verdict)
# benchmarks/lm_table.py's ON-LSTM (SIZES["onlstm_lm"]) on its data, for 10 epochs (about its 1,500 steps).
COMMON = ("checkpointing.max_to_keep=1", "model.embedding_size=64", "model.hidden_size=128",
          "data.num_train_sentences=5000", "data.num_valid_sentences=500", "training.num_epochs=10")
TINY = ("data.num_train_sentences=64", "data.num_valid_sentences=16", "model.embedding_size=8",
        "model.hidden_size=16", "model.chunk_size=4", "training.num_epochs=2", "logging.interval_steps=1",
        "training.batch_size=8")
# Pairs per set (the demo's sizes; `tiny`: a few of each): simple, across one embedding, 2 and 3 embeddings deep.
NUM_SIMPLE, NUM_ACROSS, NUM_DEEP = 60, 120, 60
TINY_PAIRS = (3, 6, 3)  # simple, across one embedding, each depth deeper
DEEP = (2, 3)


def runs(tiny: bool) -> list[RunSpec]:
    return onlstm_and_lstm_runs(CONFIG, SEEDS, COMMON, TINY, tiny)


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    import tgjax
    from tgjax import demo

    simple, across, deep = TINY_PAIRS if tiny else (NUM_SIMPLE, NUM_ACROSS, NUM_DEEP)
    _, simple_pairs, across_pairs, deep_pairs = demo.evaluation_data(0, simple, across, deep, DEEP)
    step = checkpoint_to_score(workdir)
    model = tgjax.load(workdir, step)
    scorer = model.scorer()  # the chain rule: exact log p(words </s>)
    accuracy, by_construction = demo.agreement_accuracy(scorer, across_pairs)
    simple_accuracy, _ = demo.agreement_accuracy(scorer, simple_pairs)
    scores = {"checkpoint": step, "step": model.step, "across_accuracy": 100.0 * accuracy,
              **{f"across_{c}": 100.0 * a for c, a in by_construction.items()},
              "simple_accuracy": 100.0 * simple_accuracy, "pairs": len(across_pairs)}
    for depth, pairs in deep_pairs.items():
        scores[f"depth{depth}_accuracy"] = 100.0 * demo.agreement_accuracy(scorer, pairs)[0]
    # How well the scored checkpoint fits the language (per token, `</s>` included): agreement may follow it.
    at_step = [r for r in metrics_records(workdir) if r.get("split") == "valid" and r.get("step") == model.step]
    if at_step:
        scores["valid_perplexity"] = at_step[-1]["perplexity"]
    return scores


RECIPE = Recipe(
    claim_id="onlstm-targeted-syntax",
    description="ON-LSTM against a plain LSTM (model.ordered=False) on the built-in grammar's agreement across a "
                "prepositional phrase, a subject relative and an object relative (pooled), 5 seeds each at "
                "lm_table.py's ON-LSTM size; each construction, simple agreement and 2-3 embeddings deep beside",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="across_accuracy", baseline_metric="across_accuracy",
                          label="built-in agreement across one embedding (PP, subject and object relatives), %",
                          finished_only=True),
    # 600 exact sentence scores a run: seconds on 2 cores.
    eval_reserve_s=lambda tiny: 15.0 if tiny else 30.0,
    calibration_steps=lambda tiny: 2 if tiny else 40,
)
