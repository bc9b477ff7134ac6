"""benchmarks/udgn_collapse.py: the shape of a set of dependency trees, the parser's normalised entropy, and the
report's verdict on a collapsed run; hand-worked trees and made-up trajectories (nothing is trained)."""

import io

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("udgn_collapse")


def test_a_uniform_parser_has_entropy_one_and_a_certain_one_zero(tool):
    uniform = [np.full((n, n), 1.0 / n) for n in (2, 5, 9)]
    certain = [np.eye(4)[[1, 3, 3, 3]]]
    assert tool.sharpness(uniform) == pytest.approx(1.0)
    assert tool.sharpness(certain) == pytest.approx(0.0, abs=1e-9)
    # Half the words certain, half uniform over 2 of 4 heads: (0 + 0 + log 2 / log 4 * 2) / 4 = 0.25.
    mixed = np.array([[0, 1, 0, 0], [0, 0, 1, 0], [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    assert tool.sharpness([mixed]) == pytest.approx(0.25)


def _row(variant, seed, uas, path):
    return {"variant": variant, "seed": seed, "test": {"tree_uas": uas, "mlm_perplexity": 50.0,
                                                        "right_chain_uas": 44.54},
            "trajectory": [{"step": s, "valid_tree_uas": u, "head_right": r, "root_last": last, "entropy": 0.5}
                           for s, u, r, last in path]}


def test_the_report_counts_a_run_collapsed_by_its_last_checkpoint_only(tool):
    rows = [_row("tiny", 1, 60.0, [(100, 23, 99, 98), (200, 55, 70, 20)]),  # escaped: not collapsed at the end
            _row("tiny", 2, 20.0, [(100, 23, 99, 98), (200, 23, 95, 90)]),  # stayed
            _row("tiny", 3, 30.0, [(100, 23, 70, 20), (200, 25, 85, 60)])]  # right-heavy, but not rooted last
    out = io.StringIO()
    tool.report(rows, 80.0, 70.0, stream=out)
    text = out.getvalue()
    assert "| tiny | 3 | 36.67 ± 20.82 |" in text and "1 of 3 (2) |" in text
    assert "23 / 95 / 90 / 0.50 *" in text and "25 / 85 / 60 / 0.50 |" in text


def test_early_commitment_reads_only_the_first_collapsed_stretch(tool):
    def point(right, last, entropy):
        return {"head_right": right, "root_last": last, "entropy": entropy}

    # Collapsed at 0.9 then 0.4, escapes, collapses again at 0.1: the first stretch's lowest is 0.4.
    path = [point(10, 0, 1.0), point(99, 99, 0.9), point(95, 90, 0.4), point(60, 20, 0.6), point(99, 99, 0.1)]
    assert tool.first_collapse_entropy(path, 80.0, 70.0) == pytest.approx(0.4)
    assert tool.first_collapse_entropy(path[:1] + path[3:4], 80.0, 70.0) is None
