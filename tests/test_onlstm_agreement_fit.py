"""benchmarks/onlstm_agreement_fit.py: the recipe's runs for more epochs, and its table, without training."""

import pytest

from tests.benchmark_scripts import load_benchmark
from tgjax.train.config import load_config


@pytest.fixture(scope="module")
def fit():
    yield from load_benchmark("onlstm_agreement_fit")


def test_runs_are_the_recipes_with_only_the_epochs_changed(fit):
    from tgjax.reproduce.recipes import onlstm_syntax

    specs = fit.runs(["onlstm", "lstm"], [141, 142], 30)
    assert [s.name for s in specs] == ["onlstm-e30-seed141", "onlstm-e30-seed142", "lstm-e30-seed141",
                                       "lstm-e30-seed142"]
    recipe = {s.name: s for s in onlstm_syntax.runs(tiny=False)}
    for spec in specs:
        ours = load_config(spec.config, list(spec.overrides)).to_dict()
        theirs = load_config(recipe[spec.name.replace("-e30", "")].config,
                             list(recipe[spec.name.replace("-e30", "")].overrides)).to_dict()
        assert ours["training"].pop("num_epochs") == 30 and theirs["training"].pop("num_epochs") == 10
        assert ours == theirs


def test_summary_gives_each_run_each_models_mean_and_sd_and_the_rank_correlation(fit):
    rows = [{"name": f"onlstm-e30-seed{s}", **{c: 0.0 for c in fit.COLUMNS}} for s in (1, 2, 3)]
    for row, (ppl, acc) in zip(rows, [(22.0, 100.0), (30.0, 40.0), (26.0, 60.0)]):
        row.update(valid_perplexity=ppl, across_accuracy=acc)
    text = fit.summary(rows)
    assert "| **onlstm-e30** (3 seeds) | 26.00 ± 4.00 | 66.67 ± 30.55 |" in text
    assert "3 runs: -1.00" in text  # perplexity up, agreement down, rank for rank
    assert text.count("| onlstm-e30-seed") == 3
