"""benchmarks/onlstm_totc_parse.py: its runs, the layer it chooses (on validation, never on test) and its table,
without training."""

import pytest

from tests.benchmark_scripts import load_benchmark
from tgjax.reproduce.recipes import onlstm_parse
from tgjax.train.config import load_config


@pytest.fixture(scope="module")
def totc():
    yield from load_benchmark("onlstm_totc_parse")


def test_runs_are_the_small_totc_config_with_only_the_gates_differing(totc):
    specs = totc.runs(["onlstm", "lstm"], [141, 142])
    assert [s.name for s in specs] == ["onlstm-seed141", "onlstm-seed142", "lstm-seed141", "lstm-seed142"]
    onlstm, lstm = (load_config(s.config, list(s.overrides)).to_dict() for s in (specs[0], specs[2]))
    assert (onlstm["model"]["embedding_size"], onlstm["model"]["hidden_size"]) == (100, 200)
    assert onlstm["training"]["num_epochs"] == 16 and onlstm["training"]["seed"] == 141
    assert onlstm["model"].pop("ordered") is True and lstm["model"].pop("ordered") is False
    assert onlstm == lstm
    assert [s.name for s in totc.runs(["lstm"], [7])] == ["lstm-seed7"]
    (longer,) = totc.runs(["onlstm"], [141], epochs=24)  # the same run, continued: only the epochs differ
    assert longer.name == "onlstm-e24-seed141"
    longer_config = load_config(longer.config, list(longer.overrides)).to_dict()
    assert longer_config["training"].pop("num_epochs") == 24
    onlstm["model"]["ordered"] = True
    del onlstm["training"]["num_epochs"]
    assert longer_config == onlstm
    (finer,) = totc.runs(["onlstm"], [141], chunk_size=2)  # finer master gates: only the chunk size differs
    assert finer.name == "onlstm-c2-seed141"
    finer_config = load_config(finer.config, list(finer.overrides)).to_dict()
    assert finer_config["model"].pop("chunk_size") == 2 and onlstm["model"].pop("chunk_size") == 10
    del finer_config["training"]["num_epochs"]
    assert finer_config == onlstm
    assert totc.runs(["onlstm"], [141], epochs=24, chunk_size=2)[0].name == "onlstm-c2-e24-seed141"


def test_the_layer_is_chosen_by_its_validation_f1_not_its_test_f1(totc):
    assert totc.choose_layer is onlstm_parse.choose_layer  # the recipe's rule, shared
    assert onlstm_parse.choose_layer({"layer 1": 30.0, "layer 2": 41.5, "layer 3": 41.0}) == "layer 2"
    assert onlstm_parse.choose_layer({"layer 1": None, "layer 2": 10.0, "layer 3": 12.0}) == "layer 3"
    with pytest.raises(ValueError, match="no layer"):  # nothing to choose by: no layer reported over nothing
        onlstm_parse.choose_layer({"layer 1": None, "layer 2": None})


def test_summary_gives_each_model_its_mean_and_sd_and_each_seeds_gap_to_right_branching(totc):
    def row(name, chosen, layers, rb, ppl):
        return {"name": name, "valid_perplexity": ppl, "chosen_layer": chosen, "right_branching_corpus_f1": rb,
                "chosen_layer_corpus_f1": layers[int(chosen[-1]) - 1],
                "layers_corpus_f1": {f"layer {i + 1}": f1 for i, f1 in enumerate(layers)}}

    rows = [row("onlstm-seed1", "layer 2", (20.0, 40.0, 30.0), 35.0, 80.0),
            row("onlstm-seed2", "layer 3", (22.0, 38.0, 44.0), 35.0, 90.0),
            row("lstm-seed1", "layer 1", (36.0, 30.0, 20.0), 35.0, 70.0)]
    text = totc.summary(rows)
    assert "| **onlstm** (2 seeds) | 85.00 ± 7.07 | 2, 3 | 42.00 ± 2.83 | 21.00 ± 1.41 | 39.00 ± 1.41 |" in text
    assert "| **lstm** (1 seed) | 70.00 | 1 | 36.00 |" in text
    assert "onlstm: the chosen layer minus right-branching, per seed +5.00 / +9.00; mean +7.00" in text
    assert "| onlstm-seed2 | 90.0 | 3 | 44.00 | 22.00 | 38.00 | 44.00 | 35.00 |" in text
    assert "<= 10 words" not in text  # no run was scored on the short sentences
    for r, short in zip(rows, (60.0, 64.0, 50.0)):
        r.update(chosen_layer_corpus_f1_short=short, right_branching_corpus_f1_short=66.0)
    assert "onlstm, sentences of <= 10 words: the chosen layer 62.00 ± 2.83 vs right-branching 66.00 ± 0.00" in (
        totc.summary(rows))
