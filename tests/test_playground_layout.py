"""The Playground's layout and axes: its charts are stacked one per row (side by side they overflowed
a 1400-px window) and each fits that window's main area; the histogram's axes are fixed, so two fits
with very different statistics draw them on the same axes, and no weight drops out of it."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import playground_charts
from tests.test_dashboard_app import APP, TIMEOUT, fresh_caches  # noqa: F401


def picture(statistics, statistic="inclusion_probability", default=0.5):
    return {"statistics": statistics, "statistic": statistic, "default": default}


def axes(spec):
    return [
        (panel["layer"][0]["encoding"]["x"]["scale"]["domain"], panel["layer"][0]["encoding"]["y"]["scale"]["domain"])
        for panel in spec["concat"]
    ]


def counts(spec):
    return [
        sum(row["count"] for row in spec["datasets"][panel["layer"][0]["data"]["name"]]) for panel in spec["concat"]
    ]


@pytest.mark.parametrize("statistic", ["inclusion_probability", "signal_to_noise", "log_alpha"])
def test_the_histogram_axes_do_not_move_between_fits(statistic):
    rng = np.random.default_rng(0)
    shapes = [(64, 2), (64, 65), (1, 65)]
    early = [rng.uniform(0.4, 0.6, size=s) for s in shapes]  # a fit just started: everything in the middle
    late = [rng.choice([0.0, 30.0], size=s) * rng.uniform(0.9, 1.0, size=s) - 10 for s in shapes]  # spread out
    first = playground_charts.histogram_spec(picture(early, statistic))
    second = playground_charts.histogram_spec(picture(late, statistic))
    assert axes(first) == axes(second)
    low, high = playground_charts.STATISTIC_DOMAINS[statistic]
    assert axes(first)[0] == ([low, high], [0, 64 * 65])
    # values beyond the range are counted in the end bins, never dropped
    assert counts(second) == [int(np.prod(s)) for s in shapes]


@pytest.mark.slow
def test_the_playground_charts_fit_a_1400_px_window_one_per_row(tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("views/playground.py").run()
    at.slider(key="play_epochs").set_value(100).run()
    training = at.session_state["playground_job"][1]
    training.join(timeout=120)
    at.run()
    assert not at.exception
    kinds = ("arrow_vega_lite_chart", "vega_lite_chart")
    charts = [chart for kind in kinds for chart in at.get(kind)]
    assert len(charts) >= 3  # the main chart, the network graph, the histogram
    for column in at.columns:  # no chart shares a row with another
        assert not [chart for kind in kinds for chart in column.get(kind)]
    import json

    for chart in charts:
        spec = json.loads(chart.proto.spec)
        assert playground_charts.spec_width(spec) <= playground_charts.MAIN_WIDTH_AT_1400, spec.get("title")
