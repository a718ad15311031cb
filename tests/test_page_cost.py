"""The page-cost benchmark's pure parts: its argument rules and its report (the browser run itself is a
benchmark, not a test)."""

from __future__ import annotations

import pytest

from benchmarks import page_cost


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--moves", "0"], "--moves"),
        (["--moves", "201"], "--moves"),
        (["--moves", "2.5"], "--moves"),
        (["--moves", ""], "--moves"),
        (["--moves", "-3"], "--moves"),
        (["--hidden", ""], "--hidden"),
        (["--epochs", "nan"], "--epochs"),
        (["--timeout", "0"], "--timeout"),
        (["--hidden", "400,x"], "--hidden"),
        (["--hidden", "1,1,1,1,1"], "--hidden"),
    ],
)
def test_bad_arguments_are_refused_with_the_flag_named(argv, flag, capsys):
    with pytest.raises(SystemExit):
        page_cost.parse_args(argv)
    assert flag in capsys.readouterr().err


def test_good_arguments_become_numbers():
    args = page_cost.parse_args(["--moves", "12", "--hidden", "20,30", "--timeout", "5"])
    assert (args.moves, args.hidden, args.timeout) == (12, (20, 30), 5.0)


def test_the_report_gives_per_move_milliseconds_and_the_growth_per_move():
    measured = {
        "chromium_cpu": 0.2,
        "TaskDuration": 0.125,
        "ScriptDuration": 0.08,
        "RecalcStyleDuration": 0.0035,
        "LayoutDuration": 0.004,
        "totals": {"JSHeapUsedSize": (1000.0, 3000.0), "JSEventListeners": (400.0, 410.0), "Nodes": (10.0, 10.0)},
        "wall": 30.0,
        "errors": [],
    }
    text = page_cost.report(measured, "python -m benchmarks.page_cost", 10, "a run")
    assert "| chromium CPU, every process | 200 |" in text
    assert "| renderer main thread: tasks | 125 |" in text
    assert "| of which JavaScript | 80 |" in text
    assert "| of which style | 3.5 |" in text
    assert "| JSHeapUsedSize | 1,000 | 3,000 | +200.0 |" in text
    assert "| JSEventListeners | 400 | 410 | +1.0 |" in text
    assert "| Nodes | 10 | 10 | +0.0 |" in text
    assert "- page errors: 0" in text
