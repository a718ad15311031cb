"""benchmarks/dashboard_latency.py: its statistics and verdicts, and one small run through the browser.

The full benchmark (20 threshold steps, every page, the playground, a 784-400-600-10 run) writes
benchmarks/results/dashboard_latency.md; here a tiny run checks that each measurement happens and
means what it says, not how fast this shared machine is.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from benchmarks import dashboard_latency as bench


def test_summary_matches_numpy_linear_percentiles():
    rng = random.Random(0)
    for n in (1, 2, 3, 7, 20, 101):
        values = [rng.expovariate(5.0) for _ in range(n)]
        stats = bench.summary(values)
        assert stats["n"] == n
        assert stats["p50"] == pytest.approx(float(np.percentile(values, 50)))
        assert stats["p95"] == pytest.approx(float(np.percentile(values, 95)))
        assert stats["max"] == max(values)
    empty = bench.summary([])
    assert empty["n"] == 0 and math.isnan(empty["p95"])


def test_verdict_compares_with_the_target_and_says_when_nothing_was_measured():
    assert bench.verdict(0.299, 0.3) == "PASS"
    assert bench.verdict(0.3, 0.3) == "PASS"
    assert bench.verdict(0.301, 0.3) == "FAIL"
    assert bench.verdict(math.nan, 0.3) == "not measured"


def test_table_reports_targets_verdicts_and_load():
    measured = bench.Measurements(
        threshold={"pruning": [0.1] * 19 + [0.5], "inclusion": [0.2, 0.25, 0.28]},
        first_load={"pruning": 3.0},
        page_loads={"pruning": [1.0, 1.5, 2.5]},
        playground_heading=[0.4, 0.5],
        first_picture=[0.8, 0.9],
        converged=[8.0, math.nan],
        playground_status=["done: epoch 3000/3000, loss -0.29", "training: epoch 75/3000"],
        load_before=(0.5, 0.6, 0.7),
        load_after=(1.5, 1.6, 1.7),
        setting={"dataset": "mnist-small"},
        wall_seconds=12.0,
    )
    text = bench.table(measured)
    # pruning: nineteen 0.1 s and one 0.5 s; p95 sits at order statistic 0.95 * 19 = 18.05: 0.1 + 0.05 * 0.4
    expected_p95 = bench.summary(measured.threshold["pruning"])["p95"]
    assert expected_p95 == pytest.approx(0.1 + (0.5 - 0.1) * (0.95 * 19 - 18))
    row = next(line for line in text.splitlines() if line.startswith("| Pruning"))
    assert f"| {expected_p95 * 1000:.0f} |" in row and row.endswith("PASS |") and "| 500 |" in row
    assert next(line for line in text.splitlines() if line.startswith("| Inclusion")).endswith("PASS |")
    assert next(line for line in text.splitlines() if line.startswith("| pruning |")).endswith("FAIL |")
    assert next(line for line in text.splitlines() if line.startswith("| glossary |")).endswith("not measured |")
    assert next(line for line in text.splitlines() if line.startswith("| first picture")).endswith("PASS |")
    # one playground run never reported done: the converged verdict cannot pass
    assert next(line for line in text.splitlines() if line.startswith("| fit reported done")).endswith("not measured |")
    assert "before 0.50/0.60/0.70, after 1.50/1.60/1.70" in text


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 110 s in CI: the suite's longest test
def test_a_small_benchmark_run_through_the_browser(tmp_path, monkeypatch):
    """Two threshold steps per page (one each way), one load per page, and one playground run on its
    shortest fit (the Epochs slider at its minimum, 100: the default 3000-epoch fit was a third of
    the test), on a tiny MNIST net."""
    from tests.test_browser import chromium_path  # Debian's chromium: skips locally without it, fails under CI

    monkeypatch.setattr(bench, "CHROMIUM", chromium_path())
    setting = bench.Setting(
        dataset="mnist-small",
        hidden=(16,),
        epochs=1,
        repetitions=2,
        page_loads=1,
        playground_runs=1,
        playground_shortest_fit=True,
        timeout_seconds=240,
        max_seconds=900,
    )
    measured = bench.run_benchmark(setting, tmp_path / "cache", tmp_path)
    print(bench.table(measured))
    assert measured.errors == []
    for page in ("pruning", "inclusion"):
        steps = measured.threshold[page]
        assert len(steps) == 2 and all(0 < s < 240 for s in steps)
    assert set(measured.page_loads) == {path or "train" for path, _, _ in bench.PAGES}
    assert all(len(loads) == 1 for loads in measured.page_loads.values())
    assert len(measured.first_picture) == 1
    assert measured.playground_heading[0] <= measured.first_picture[0] < measured.converged[0]
    assert measured.playground_status[0].startswith("done: epoch 100/100")  # the restarted, shortest fit
    assert measured.load_before[0] >= 0 and measured.load_after[0] >= 0
    text = bench.table(measured)
    assert "not measured" not in text.split("## Playground")[0]  # every threshold row and page row measured
