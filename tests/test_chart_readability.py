"""Small defects of the pictures: mask pictures name their axes, the layers' density lines differ, the
two-moons surface reads "dark = certain" on every panel, Compare's run labels carry their family's colour."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from dashboard import charts


def encodings(spec: Any) -> Iterator[dict]:
    """Every encoding block of a Vega-Lite spec (layers, concatenations)."""
    if isinstance(spec, dict):
        if isinstance(spec.get("encoding"), dict):
            yield spec["encoding"]
        for value in spec.values():
            yield from encodings(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from encodings(value)


def test_mask_pictures_name_their_axes():
    mask = np.random.default_rng(0).random((5, 4)) > 0.5
    for chart in (
        charts.mask_heatmap(mask, "layer 1"),
        charts.weight_heatmap(mask * 0.3, "layer 1"),
        charts.mask_difference(mask, ~mask, "A vs B"),
    ):
        encoding = next(encodings(chart.to_dict()))
        assert encoding["x"]["axis"]["title"] == "input unit (last column: bias)"
        assert encoding["y"]["axis"]["title"] == "output unit"
        assert encoding["x"]["axis"]["labels"] is False  # a title, not a label per unit


def test_each_layer_has_its_own_line_in_the_density_over_epochs():
    labels = ["layer 1 (2 -> 8)", "layer 2 (8 -> 8)", "layer 3 (8 -> 2)"]
    density = np.linspace(1, 0.2, 12).reshape(4, 3)
    spec = charts.density_over_epochs(density, density.mean(axis=1), ["main"] * 4, labels, current=2).to_dict()
    dash = next(e["strokeDash"] for e in encodings(spec) if "strokeDash" in e)
    patterns = [tuple(p) for p in dash["scale"]["range"]]
    assert dash["scale"]["domain"] == [*labels, "all weights"]
    assert len(set(patterns)) == len(labels) + 1  # three layers and the total: four different lines
    assert patterns[-1] == (1, 0)  # all weights solid


def test_the_surface_reads_dark_as_certain_on_every_panel():
    xs = ys = np.linspace(-1, 1, 4)
    n = xs.size * ys.size
    arrays = {
        "predicted": np.zeros(n, int),
        "confidence": np.full(n, 0.9),
        "entropy": np.full(n, 0.2),
        "spread": np.full(n, 0.1),
    }
    spec = charts.decision_surface(xs, ys, arrays, np.zeros((3, 2)), np.array([0, 1, 0]), samples=5).to_dict()
    colours = {e["color"]["field"]: e["color"] for e in encodings(spec) if "field" in e.get("color", {})}
    for field in ("entropy", "spread"):
        scale = colours[field]["scale"]
        # viridis and magma both start dark: low entropy / low spread (certain) is dark
        assert scale["scheme"] in ("viridis", "magma") and not scale.get("reverse", False), field
        assert "dark = certain" in colours[field]["title"]


def test_compare_run_labels_carry_their_family_colour():
    labels, families = ["run a (lbbnn)", "run b (bnn)", "run c (lbbnn, seed 1)"], ["lbbnn", "bnn", "lbbnn"]
    spec = charts.run_key(labels, families).to_dict()
    layers = spec["layer"]
    text = next(layer for layer in layers if layer["mark"]["type"] == "text")
    scale = text["encoding"]["color"]["scale"]
    assert scale["domain"] == labels
    assert scale["range"] == [charts.FAMILY_COLOURS[f] for f in families]
