"""benchmarks/lm_table.py: its configs and its table (mean ± sd over seeds), without training anything."""

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def lm_table():
    yield from load_benchmark("lm_table")


def test_mean_sd_is_the_value_alone_or_the_mean_and_sample_sd(lm_table):
    assert lm_table.mean_sd([0.5]) == "0.50"
    assert lm_table.mean_sd([0.5, 0.75, 1.0], 1, 100.0) == "75.0 ± 25.0"  # sample sd (n - 1)
    assert lm_table.mean_sd([None, None]) == ""
    assert lm_table.mean_sd([31.0, None, 33.0]) == "32.00 ± 1.41"


def _measurement(lm_table, model, seed, ppl, exact, f1, accuracy, note=""):
    return lm_table.Measurement(model, seed, 184_538, 800, 10.0, 5.0, ppl, exact, f1, f1,
                                {0: 1.0, 1: accuracy, 2: accuracy / 2, 3: 0.25}, {}, note)


def test_table_has_one_row_per_model_with_the_seeds_summarised(lm_table):
    measurements = [_measurement(lm_table, "tg", 1, 30.0, False, 99.0, 0.9),
                    _measurement(lm_table, "tg", 2, 32.0, False, 97.0, 0.7),
                    _measurement(lm_table, "txl_terminals", 1, 31.0, True, None, 0.8),
                    _measurement(lm_table, "txl_terminals", 2, 31.0, True, None, 0.8),
                    _measurement(lm_table, "onlstm_lm", 141, 33.0, True, 40.0, 0.6, "layer 1 40.00"),
                    _measurement(lm_table, "onlstm_lm", 142, 35.0, True, 44.0, 0.4, "layer 1 44.00")]
    text = lm_table.Table(measurements, 2, 100, 60, {"evalb": 51.0, "unsupervised": 50.0}).format()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("model"))
    tg = next(line for line in lines if line.startswith("TG "))
    terminals = next(line for line in lines if line.startswith("TXL (terminals)"))
    onlstm = next(line for line in lines if line.startswith("ON-LSTM"))
    assert "mean ± sd over 2 seeds" in lines[0]
    assert len({len(header), len(tg), len(terminals), len(onlstm)}) == 1  # the columns line up
    assert "31.00 ± 1.41" in tg and "bound" in tg and "80.0 ± 14.1" in tg and "98.00 ± 1.41" in tg
    assert "31.00 ± 0.00" in terminals and "exact" in terminals
    assert terminals.split()[-2:] == ["10", "5"]  # no F1: blank cells, then the seconds
    assert onlstm.split()[-4:] == ["±", "2.83†", "10", "5"] and "184,538" in onlstm and " 800 " in onlstm
    assert "right-branching: 51.00" in text and "right-branching 50.00 by the same protocol" in text
    assert "layer 1 44.00" in text


def test_configs_match_the_steps_and_move_the_seed(lm_table):
    tg = lm_table.model_config("txl_cc", 400, 0)
    assert tg.model.name == "txl_cc" and tg.model.num_layers == 3 and tg.training.num_steps == 400
    assert tg.training.lr_schedule.kwargs.warmup_steps + tg.training.lr_schedule.kwargs.cosine_cycle_length == 400
    onlstm = lm_table.model_config("onlstm_lm", 400, 2)
    assert onlstm.training.num_epochs is None and onlstm.training.num_steps == 400
    assert onlstm.training.seed == lm_table.model_config("onlstm_lm", 400, 0).training.seed + 2
    for name in lm_table.MODELS:
        config = lm_table.model_config(name, 400)
        assert config.data.num_train_sentences == lm_table.TRAIN_SENTENCES
    assert lm_table.model_config("stack_lm", 400).model.stack == "superposition"
    pushdown, base = (lm_table.model_config(name, 400).to_dict() for name in ("pushdown_lm", "base_lm"))
    assert (pushdown["model"].pop("pushdown_layers"), base["model"].pop("pushdown_layers")) == ("all", "none")
    assert pushdown == base  # the Base-LM is the Pushdown-LM without the depth term, nothing else
