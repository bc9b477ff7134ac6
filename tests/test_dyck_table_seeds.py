"""benchmarks/dyck_table_seeds.py: each Table 1 set summarised over seeds and judged by the ledger's rule, on made-up
scores (nothing is trained)."""

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("dyck_table_seeds")


def _scores(tool, seeds, pushdown, gold, base) -> dict:
    """Every set's accuracy per seed: Pushdown own tape `pushdown[i]`, gold tape `gold[i]`, Base `base[i]`; depth
    alone is reversed (the Base-LM ahead there)."""
    scores = {}
    for i, seed in enumerate(seeds):
        for key, values in (("pushdown/model", pushdown), ("pushdown/gold", gold), ("base/model", base)):
            scores[f"{key}/{seed}"] = {name: values[i] for name in tool.PAPER_SETS}
        scores[f"pushdown/model/{seed}"]["depth"], scores[f"base/model/{seed}"]["depth"] = base[i], pushdown[i]
    return scores


def test_each_set_is_the_mean_and_sd_over_seeds_and_judged_own_tape_against_base(tool):
    seeds = [1, 2, 3]
    scores = _scores(tool, seeds, pushdown=[60.0, 62.0, 64.0], gold=[90.0, 90.0, 90.0], base=[40.0, 41.0, 45.0])
    summary = tool.summarise(scores, seeds, ["pushdown", "base"], longest_s=600.0)
    dyck50 = summary["dyck50"]
    own = dyck50["pushdown/model"]
    assert own["mean"] == pytest.approx(62.0) and own["sd"] == pytest.approx(2.0)
    assert dyck50["base/model"]["mean"] == pytest.approx(42.0) and dyck50["pushdown/gold"]["text"] == "90.0 ± 0.0"
    # 20 points above the Base-LM against a spread of 2.65: in direction, 34.5 from the paper's 96.5.
    assert dyck50["verdict"] == "in direction" and "96.5" in dyck50["why"]
    assert summary["depth"]["verdict"] == "contradicted"  # the Base-LM ahead by more than the spread
    # The gold tape is a diagnostic: never judged, however high.
    table = tool.table({"summary": summary, "models": ["pushdown", "base"]})
    assert table.splitlines()[1].split()[:2] == ["dyck50", "90.0"] and "in direction" in table.splitlines()[1]


def test_runs_under_five_minutes_need_five_seeds(tool):
    seeds = [1, 2, 3]
    scores = _scores(tool, seeds, pushdown=[60.0, 62.0, 64.0], gold=[90.0] * 3, base=[40.0, 41.0, 45.0])
    summary = tool.summarise(scores, seeds, ["pushdown", "base"], longest_s=200.0)
    assert summary["dyck50"]["verdict"] == "not yet" and "fewer than 5" in summary["dyck50"]["why"]


def test_the_paper_head_is_judged_against_the_release_head(tool):
    seeds = [1, 2, 3, 4, 5]
    scores = _scores(tool, seeds, pushdown=[60.0, 62.0, 64.0, 61.0, 63.0], gold=[90.0] * 5,
                     base=[40.0, 41.0, 45.0, 42.0, 44.0])
    for i, seed in enumerate(seeds):  # the paper's head 10 points above the release's everywhere but dyck300
        scores[f"paper_head/model/{seed}"] = {name: scores[f"pushdown/model/{seed}"][name] + 10.0
                                              for name in tool.PAPER_SETS}
        scores[f"paper_head/model/{seed}"]["dyck300"] = [62.0, 60.0, 66.0, 58.0, 64.0][i]
    summary = tool.summarise(scores, seeds, ["pushdown", "base", "paper_head"], longest_s=200.0)
    assert summary["dyck50"]["heads"][0] == "in direction" and "+10.00" in summary["dyck50"]["heads"][1]
    assert summary["dyck300"]["heads"][0] == "not yet"  # +0.0 against a spread of 3.16
    # The Pushdown-LM's verdict against the Base-LM is still the release head's.
    assert summary["dyck50"]["verdict"] == "in direction" and "+19.60" in summary["dyck50"]["why"]
