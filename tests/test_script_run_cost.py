"""The cheaper script runs draw what the page drew before: the specs built once and reused (the training
curves' template, the sidebar's family key, the playback's charts) equal the specs built afresh."""

from __future__ import annotations

import pytest

from dashboard import altair_spec, cache, charts  # cache first: it imports cache_charts


def panel_rows(spec: dict) -> list[list[dict]]:
    """Each panel's rows, whatever its dataset is named (Altair names them by a hash of the rows)."""
    datasets = spec["datasets"]
    return [datasets[panel["data"]["name"]] for panel in spec["hconcat"]]


def without_data(spec: dict) -> dict:
    return {
        **{k: v for k, v in spec.items() if k != "datasets"},
        "hconcat": [{k: v for k, v in panel.items() if k != "data"} for panel in spec["hconcat"]],
    }


HISTORIES = [
    [{"phase": "train", "loss": 2.5, "density": 1.0}],
    [{"phase": "warm-start", "loss": 3.0 / e, "density": 1.0} for e in range(1, 4)]
    + [{"phase": "train", "loss": 1.0 / e, "density": 0.5 / e, "seconds": 2.0} for e in range(1, 40)],
    [{"phase": "train", "loss": 0.7, "density": None}, {"phase": "post-train", "loss": 0.6, "density": 0.1}],
]


@pytest.mark.parametrize("history", HISTORIES, ids=["one", "phases", "missing-density"])
@pytest.mark.parametrize("method", ["lbbnn", None])
def test_the_training_curves_template_gives_the_spec_built_afresh(history, method):
    fresh = altair_spec.spec(charts.training_curves(history, colour=charts.family_colour(method)))
    templated = cache.training_curves_chart(history, method)
    assert without_data(templated) == without_data(fresh)
    assert panel_rows(templated) == panel_rows(fresh)
    # the shared template is not changed by a call (another history's rows never leak into it)
    other = cache.training_curves_chart(HISTORIES[0], method)
    alone = altair_spec.spec(charts.training_curves(HISTORIES[0], colour=charts.family_colour(method)))
    assert panel_rows(other) == panel_rows(alone)
    assert panel_rows(cache.training_curves_chart(history, method)) == panel_rows(fresh)
