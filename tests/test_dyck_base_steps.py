"""benchmarks/dyck_base_steps.py: the Base-LM's Table 1 and in-distribution accuracy per step count, summarised over
seeds, on made-up scores (nothing is trained)."""

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("dyck_base_steps")


def test_each_step_count_is_summarised_over_seeds_with_the_pushdown_row_beside(tool):
    seeds, steps = [1, 2, 3], [400, 1600]
    scores = {}
    for count, base in ((400, [10.0, 12.0, 14.0]), (1600, [30.0, 33.0, 39.0])):
        for seed, value in zip(seeds, base):
            scores[f"{count}/{seed}"] = {name: value for name in tool.SETS}
            scores[f"{count}/{seed}"]["valid"] = value + 50.0
    summary = tool.summarise(scores, seeds, steps)
    dyck50 = summary["400"]["dyck50"]
    assert dyck50["mean"] == pytest.approx(12.0) and dyck50["sd"] == pytest.approx(2.0)
    assert summary["1600"]["valid"]["text"] == "84.0 ± 4.6" and summary["1600"]["depth"]["values"] == [30.0, 33.0, 39.0]
    record = {"summary": summary, "pushdown": {name: "72.4 ± 8.3" for name in tool.PAPER_SETS}}
    lines = tool.table(record).splitlines()
    assert lines[0].split()[:3] == ["model", "steps", "valid"]
    assert lines[2].split()[:4] == ["Base-LM", "1600", "84.0", "±"]
    assert lines[3].startswith("Pushdown-LM, own tape") and "72.4 ± 8.3" in lines[3]
    assert lines[4].split()[:5] == ["Base-LM,", "paper", "10000", "90.0", "81.0"]  # Table 1's Base-LM, dyck50/100
