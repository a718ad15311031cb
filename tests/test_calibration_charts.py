"""The calibration and decision charts (dashboard/calibration_charts.py), read back from the
Vega-Lite spec, and the backend door that feeds them (core's calibration, trust and partner modules,
re-exported by dashboard/backend.py), against
core's metrics, brute force and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from core.predict.metrics import classification as C
from core.predict.metrics import regression as R
from dashboard import altair_spec, backend
from dashboard import calibration_charts as charts
from dashboard import charts as figures


def rows_of(spec: dict, *fields: str) -> list[dict]:
    """Every dataset row of a spec that holds all of `fields`."""
    return [row for rows in spec.get("datasets", {}).values() for row in rows if all(f in row for f in fields)]


def titles(spec: dict) -> list[str]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            title = node.get("title")
            if isinstance(title, str):
                found.append(title)
            elif isinstance(title, dict) and "text" in title:
                found.append(title["text"] + " | " + str(title.get("subtitle", "")))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return found


def classifier(n=3000, classes=4, seed=0, temperature=2.0):
    """Overconfident probabilities (labels drawn from a flatter softmax than the one reported)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * 2
    truth = np.exp(logits / temperature) / np.exp(logits / temperature).sum(1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(truth, 1)).sum(1).clip(0, classes - 1)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return probs, y


# --- reliability diagram ---------------------------------------------------------------------------


def test_reliability_diagram_carries_core_bins_and_their_ece():
    probs, y = classifier()
    table = C.reliability(probs, y, 15)
    spec = altair_spec.spec(
        charts.reliability_diagram(table["edges"], table["count"], table["confidence"], table["accuracy"], table["ece"])
    )
    rows = rows_of(spec, "bin_low", "count", "accuracy")
    filled = np.flatnonzero(table["count"] > 0)
    assert len(rows) == len(filled)
    for row, index in zip(rows, filled):
        assert row["count"] == table["count"][index]
        assert row["bin_low"] == pytest.approx(index / 15) and row["bin_high"] == pytest.approx((index + 1) / 15)
        assert row["accuracy"] == pytest.approx(table["accuracy"][index])
        assert row["gap"] == pytest.approx(table["accuracy"][index] - table["confidence"][index])
    # The ECE in the title is the count-weighted mean |gap| of the drawn bins.
    drawn = sum(r["count"] * abs(r["gap"]) for r in rows) / sum(r["count"] for r in rows)
    assert drawn == pytest.approx(table["ece"])
    assert any(f"ECE {table['ece']:.4f}" in t for t in titles(spec))
    assert table["ece"] > 0.05  # the data are overconfident: the diagram has something to show


# --- risk-coverage ---------------------------------------------------------------------------------


def test_risk_coverage_chart_thins_the_curve_and_keeps_its_ends():
    probs, y = classifier(n=5000)
    curve = C.risk_coverage(probs, y)
    assert len(curve["coverage"]) > charts.MAX_CURVE_POINTS
    at = backend.doubt_point(probs, y, 0.95)
    spec = altair_spec.spec(
        charts.risk_coverage_curve(
            curve["coverage"], curve["risk"], curve["aurc"], {"0.95": at}, threshold=curve["threshold"]
        )
    )
    rows = rows_of(spec, "coverage", "risk", "threshold")
    assert len(rows) <= charts.MAX_CURVE_POINTS
    assert rows[0]["coverage"] == pytest.approx(curve["coverage"][0])
    assert rows[-1]["coverage"] == pytest.approx(1.0) and rows[-1]["risk"] == pytest.approx(1 - C.accuracy(probs, y))
    # Each drawn point is a point of core's curve.
    index = {round(c, 12): r for c, r in zip(curve["coverage"], curve["risk"])}
    assert all(index[round(r["coverage"], 12)] == pytest.approx(r["risk"]) for r in rows)
    marks = rows_of(spec, "decision", "level")
    assert marks == [
        {
            "decision": "0.95",
            "level": 0.95,
            "coverage": pytest.approx(at["coverage"]),
            "risk": pytest.approx(at["risk"]),
        }
    ]
    assert any(f"AURC {curve['aurc']:.4f}" in t for t in titles(spec))
    (scale,) = [e["scale"] for e in _encodings(spec, "color") if "scale" in e]
    assert scale["domain"] == ["0.95"] and scale["range"][0] == charts.MARK_COLOUR  # 0.95 in red


def test_doubt_point_is_the_brute_force_decision():
    probs, y = classifier(n=400, seed=3)
    for level in (0.5, 0.8, 0.95, 0.999):
        decided = [i for i in range(len(y)) if max(probs[i]) > level]
        point = backend.doubt_point(probs, y, level)
        assert point["count"] == len(decided) and point["coverage"] == pytest.approx(len(decided) / len(y))
        if decided:
            errors = sum(int(np.argmax(probs[i]) != y[i]) for i in decided)
            assert point["risk"] == pytest.approx(errors / len(decided))
        else:
            assert point["risk"] is None


# --- entropy split -----------------------------------------------------------------------------------


def test_entropy_split_means_add_up_and_match_a_hand_computed_case():
    # Two draws that disagree completely on a binary input: total log 2, aleatoric 0, epistemic log 2.
    draws = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    split = backend.entropy_split_means(draws)
    assert split["aleatoric"] == pytest.approx(0.0) and split["epistemic"] == pytest.approx(np.log(2))
    # Draws that agree: no epistemic part.
    same = np.repeat(np.array([[[0.3, 0.7], [0.5, 0.5]]]), 5, axis=0)
    split = backend.entropy_split_means(same)
    assert split["epistemic"] == pytest.approx(0.0, abs=1e-12)
    assert split["aleatoric"] == pytest.approx(np.mean([stats.entropy([0.3, 0.7]), np.log(2)]))
    parts = {"in": backend.entropy_split_means(same), "out": backend.entropy_split_means(draws)}
    spec = altair_spec.spec(charts.entropy_split_bars(parts, max_entropy=np.log(2)))
    rows = rows_of(spec, "set", "part", "nats")
    assert len(rows) == 4
    for name, values in parts.items():
        drawn = {r["part"].split(" ")[0]: r["nats"] for r in rows if r["set"] == name}
        assert drawn["aleatoric"] + drawn["epistemic"] == pytest.approx(values["total"])


# --- regression -------------------------------------------------------------------------------------------


def gaussian_regression(n=4000, scale=1.0, seed=0):
    """Targets drawn from N(m, 1); the predictive says N(m, scale^2) (one draw: R = 1)."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=n)
    y = mean + rng.normal(size=n)
    return {"mean_per_draw": mean[None], "std_per_draw": np.full((1, n), scale)}, y


def test_regression_calibration_is_diagonal_for_a_calibrated_predictive_and_exact_in_width():
    arrays, y = gaussian_regression()
    numbers = backend.regression_calibration(arrays, y, (0.5, 0.9, 0.95))
    assert numbers["curve"]["mean_abs_gap"] < 0.02  # binomial sd at n = 4000 is <= 0.008
    for level, values in numbers["intervals"].items():
        assert values["coverage"] == pytest.approx(float(level), abs=0.03)
        assert values["width"] == pytest.approx(2 * stats.norm.ppf(0.5 + float(level) / 2), rel=1e-9)
    assert numbers["pit"]["density"].mean() == pytest.approx(1.0)
    assert numbers["pit"]["ks_statistic"] < 0.03


def test_too_narrow_predictive_has_the_closed_form_coverage_and_a_u_shaped_pit():
    arrays, y = gaussian_regression(scale=0.5)
    numbers = backend.regression_calibration(arrays, y, (0.9,))
    # Truth N(m, 1), interval m +/- 0.5 z: coverage 2 Phi(0.5 z) - 1.
    expected = 2 * stats.norm.cdf(0.5 * stats.norm.ppf(0.95)) - 1
    assert numbers["intervals"]["0.9"]["coverage"] == pytest.approx(expected, abs=0.025)
    density = numbers["pit"]["density"]
    assert density[0] > 1.5 and density[-1] > 1.5 and density[len(density) // 2] < 0.8
    spec = altair_spec.spec(
        charts.pit_histogram_chart(numbers["pit"]["edges"], density, numbers["pit"]["ks_statistic"])
    )
    rows = rows_of(spec, "pit_low", "pit_high", "density")
    assert sum(r["density"] * (r["pit_high"] - r["pit_low"]) for r in rows) == pytest.approx(1.0)
    curve = numbers["curve"]
    spec = altair_spec.spec(charts.calibration_curve_chart(curve["nominal"], curve["observed"], curve["mean_abs_gap"]))
    rows = rows_of(spec, "nominal", "observed")
    assert [r["nominal"] for r in rows] == pytest.approx(list(R.CURVE_LEVELS))
    assert all(r["observed"] < r["nominal"] for r in rows)  # too narrow: below the diagonal everywhere
    table = charts.interval_table(numbers["intervals"])
    assert list(table["level"]) == [0.9] and table["coverage - level"][0] == pytest.approx(expected - 0.9, abs=0.025)


# --- the gap lesson -----------------------------------------------------------------------------------------


def test_gap_ratio_of_a_band_twice_as_wide_in_the_gaps_is_two():
    x_train = np.concatenate([np.linspace(-1, -0.5, 20), np.linspace(0.5, 1, 20)])[:, None]
    x_grid = np.linspace(-1, 1, 201)[:, None]
    distance = np.abs(x_grid[:, 0][:, None] - x_train[None, :, 0]).min(1)
    band = np.where(distance > 0.1 * 2, 2.0, 1.0)
    assert backend.gap_ratio(x_grid, x_train, band) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "diagnostics, trusted",
    [
        ({"function_rhat_max": 1.005, "function_ess_min": 450.0}, True),
        ({"function_rhat_max": 1.01, "function_ess_min": 400.0}, True),  # the targets are inclusive
        ({"function_rhat_max": 1.12, "function_ess_min": 10.0}, False),  # the toy-sine-gaps reference
        ({"function_rhat_max": 1.005, "function_ess_min": 399.0}, False),
        ({"function_rhat_max": 1.005, "function_ess_min": 900.0, "noise_rhat": 1.02}, False),
        ({}, False),  # no diagnostics: never trusted
    ],
)
def test_a_reference_is_trusted_only_within_the_diagnostic_targets(diagnostics, trusted):
    warning = backend.reference_warning(diagnostics)
    assert (warning is None) == trusted
    if not trusted:
        assert "not the truth" in warning


def test_gap_panels_print_each_ratio_and_warn_on_an_unconverged_reference():
    x = np.linspace(-1, 1, 50)
    band = {"mean": np.sin(x), "low": np.sin(x) - 0.2, "high": np.sin(x) + 0.2}
    panels = [
        {"name": "lbbnn (mean-field)", **band, "gap_ratio": 0.81, "colour": figures.family_colour("lbbnn")},
        {
            "name": "NUTS (unconverged)",
            **band,
            "gap_ratio": 2.17,
            "colour": charts.UNTRUSTED_REFERENCE_COLOUR,
            "warning": "not converged (R-hat 1.120 > 1.01): not the truth",
            "caption": "1-64-1, 400 draws",
        },
    ]
    spec = altair_spec.spec(charts.gap_panels(x, panels, x[::5], np.sin(x[::5])))
    text = titles(spec)
    assert any("lbbnn (mean-field): gap ratio 0.81" in t for t in text)
    assert any("NUTS (unconverged): gap ratio 2.17 | 1-64-1, 400 draws" in t for t in text)
    assert rows_of(spec, "text") == [{"x": -1.0, "text": "not converged (R-hat 1.120 > 1.01): not the truth"}]
    domains = [v["scale"]["domain"] for v in _encodings(spec, "y") if "scale" in v and "domain" in v["scale"]]
    assert domains and all(d == domains[0] for d in domains)  # one y scale for every panel


def _encodings(node, channel):
    if isinstance(node, dict):
        if "encoding" in node and channel in node["encoding"]:
            yield node["encoding"][channel]
        for value in node.values():
            yield from _encodings(value, channel)
    elif isinstance(node, list):
        for value in node:
            yield from _encodings(value, channel)


def hex_rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)


def test_the_reference_has_its_own_colour_far_from_every_family():
    assert figures.REFERENCE_COLOUR == charts.REFERENCE_COLOUR
    layers = figures.reference_layers(np.zeros((3, 1)), {"low": np.zeros(3), "high": np.ones(3), "mean": np.zeros(3)})
    assert {layer.mark.color for layer in layers} == {charts.REFERENCE_COLOUR}
    for family, colour in figures.FAMILY_COLOURS.items():
        assert np.linalg.norm(hex_rgb(colour) - hex_rgb(charts.REFERENCE_COLOUR)) > 60, family


# --- several runs -----------------------------------------------------------------------------------------


def test_compare_charts_give_each_run_its_family_colour_and_its_own_numbers():
    runs = []
    for seed, family in ((0, "lbbnn"), (1, "bnn")):
        probs, y = classifier(n=800, seed=seed)
        table, curve = C.reliability(probs, y), C.risk_coverage(probs, y)
        runs.append(
            {
                "label": f"run {seed}",
                "family": family,
                **table,
                "coverage": curve["coverage"],
                "risk": curve["risk"],
                "aurc": curve["aurc"],
            }
        )
    spec = altair_spec.spec(charts.compare_reliability(runs))
    rows = rows_of(spec, "run", "confidence", "ece")
    for run in runs:
        mine = [r for r in rows if r["run"] == run["label"]]
        assert len(mine) == int((run["count"] > 0).sum())
        assert [r["ece"] for r in mine] == pytest.approx([run["ece"]] * len(mine))
    scales = [e["scale"] for e in _encodings(spec, "color") if "scale" in e]
    assert scales[0]["range"] == [figures.family_colour("lbbnn"), figures.family_colour("bnn")]
    spec = altair_spec.spec(charts.compare_risk_coverage(runs))
    rows = rows_of(spec, "run", "coverage", "aurc")
    assert {r["run"]: r["aurc"] for r in rows} == pytest.approx({r["label"]: r["aurc"] for r in runs})
    curves = [{"label": "a", "family": "laplace", "nominal": [0.5, 0.9], "observed": [0.4, 0.8]}]
    rows = rows_of(altair_spec.spec(charts.compare_calibration_curves(curves)), "run", "nominal", "observed")
    assert rows == [{"run": "a", "nominal": 0.5, "observed": 0.4}, {"run": "a", "nominal": 0.9, "observed": 0.8}]


def test_partner_run_prefers_the_same_seed_and_the_right_kind():
    from types import SimpleNamespace

    run = SimpleNamespace(run_id="me", config=SimpleNamespace(dataset="toy-sine-gaps", seed=1, method="lbbnn"))
    rows = [
        {"run_id": "a", "dataset": "toy-sine-gaps", "method": "laplace", "config": {"seed": 0}},
        {"run_id": "b", "dataset": "toy-sine-gaps", "method": "laplace", "config": {"seed": 1}},
        {"run_id": "c", "dataset": "toy-cubic", "method": "laplace", "config": {"seed": 1}},
        {"run_id": "d", "dataset": "toy-sine-gaps", "method": "bnn", "config": {"seed": 0}},
        {"run_id": "e", "dataset": "toy-sine-gaps", "method": "laplace", "config": {"seed": 0}, "status": "corrupt"},
        {"run_id": "me", "dataset": "toy-sine-gaps", "method": "lbbnn", "config": {"seed": 1}},
    ]
    assert backend.partner_run_id(rows, run, non_factorised=True) == "b"
    assert backend.partner_run_id(rows[:1], run, non_factorised=True) == "a"
    assert backend.partner_run_id(rows, run, non_factorised=False) == "d"
    assert backend.partner_run_id(rows[2:3], run, non_factorised=True) is None


def test_a_failed_reference_is_said_on_the_bands_chart_itself():
    grid = np.linspace(0, 1, 5)
    reference = {"low": grid - 1, "high": grid + 1, "mean": grid}
    bands = figures.regression_bands(
        grid[:, None], grid, grid * 0 + 0.1, grid * 0 + 0.2, grid[:, None], grid, reference=reference
    )
    plain = altair_spec.spec(charts.with_warning(bands, None))
    assert plain["title"] == altair_spec.spec(bands)["title"]
    warning = backend.reference_warning({"function_rhat_max": 1.12, "function_ess_min": 10.0})
    title = altair_spec.spec(charts.with_warning(bands, f"NUTS reference {warning}"))["title"]
    assert title["text"] == plain["title"] and "purple: NUTS reference" in title["text"]
    assert title["subtitle"] == ["NUTS reference not converged (R-hat 1.120 > 1.01, ESS 10 < 400): not the truth"]
    assert title["subtitleColor"] == charts.WARNING_COLOUR
