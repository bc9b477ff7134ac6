"""The one progress line (tgjax.progress): its text at a given elapsed time, and where and when it prints."""

import io

import pytest

from tgjax.progress import Progress, format_duration


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_format_duration():
    assert format_duration(0) == "0m00s"
    assert format_duration(125.4) == "2m05s"
    assert format_duration(3 * 3600 + 62) == "3h01m02s"
    assert format_duration(float("inf")) == "?" and format_duration(float("nan")) == "?"


def test_rates_and_eta_over_the_whole_run():
    progress = Progress(100, label="step", noun="step")
    # 50 steps in 10 s: 5 steps/s, 50 left -> 10 s; 12,340 tokens / 10 s
    assert progress.line(50, 10.0, totals={"tokens": 12_340}) == \
        "step  50/100 | 5.00 steps/s | 1,234 tokens/s | ETA 0m10s"


def test_a_resumed_run_leaves_earlier_steps_out_of_its_rate():
    progress = Progress(100, start=40)
    # 10 steps in 10 s since the resume: 1 step/s, 50 left -> 50 s
    assert progress.line(50, 10.0).endswith("| 1.00 steps/s | ETA 0m50s")


def test_measured_rates_replace_computed_ones_but_not_the_eta():
    progress = Progress(1000)
    text = progress.line(500, 100.0, rates={"steps": 9.5, "tokens": 4321.0}, fields=["loss  3.1000", "lr 1.00e-03"])
    # the ETA uses the whole run's 5 steps/s (pauses included), not the window's 9.5
    assert text == "step  500/1000 | 9.50 steps/s | 4,321 tokens/s | loss  3.1000 | lr 1.00e-03 | ETA 1m40s"


def test_an_unknown_total_has_no_eta():
    assert Progress(None, label="scored", noun="sentence").line(7, 2.0) == "scored 7 | 3.50 sentences/s"


def test_a_log_gets_a_line_per_update_and_a_terminal_one_line_redrawn():
    log = io.StringIO()
    progress = Progress(3, stream=log)
    for step in (1, 2, 3):
        progress.update(step)
    progress.message("validation: loss 1.0")
    progress.close()
    lines = log.getvalue().splitlines()
    assert [line.split(" |")[0] for line in lines[:3]] == ["step 1/3", "step 2/3", "step 3/3"]
    assert lines[3] == "validation: loss 1.0" and "\r" not in log.getvalue()

    terminal = Terminal()
    progress = Progress(3, stream=terminal)
    progress.update(1)
    progress.update(2)
    progress.message("checkpoint saved")
    progress.update(3)
    progress.close()
    text = terminal.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n")
    assert "\ncheckpoint saved\n\rstep 3/3" in text  # the message starts a fresh line and is not overwritten


def test_min_interval_drops_updates_but_never_the_last():
    log = io.StringIO()
    progress = Progress(5, stream=log, min_interval=3600.0)
    for step in range(1, 6):
        progress.update(step)
    assert [line.split(" |")[0] for line in log.getvalue().splitlines()] == ["step 1/5", "step 5/5"]


def test_disabled_prints_nothing():
    log = Terminal()
    progress = Progress(2, stream=log, enabled=False)
    progress.update(2)
    progress.message("x")
    assert progress.close() >= 0.0
    assert log.getvalue() == ""


@pytest.mark.parametrize("total", [None, 10])
def test_no_time_elapsed_gives_no_division_by_zero(total):
    assert "0.00 steps/s" in Progress(total).line(0, 0.0, totals={"tokens": 5})
