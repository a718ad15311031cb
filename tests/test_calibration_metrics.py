"""Calibration and decision metrics against truth: data drawn from the stated probabilities or
predictive (calibrated by construction), cases with a closed form, brute force on small inputs, and
what `evaluate` reports."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from core.predict.metrics import classification as C
from core.predict.metrics import ood as O
from core.predict.metrics import regression as R

# --- reliability and ECE (Guo et al. 2017) -------------------------------------------------------


def calibrated_classifier(n, classes=3, seed=0):
    """Dirichlet class probabilities and labels drawn from them: P(correct | confidence c) = c."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(classes, 0.7), size=n)
    labels = (rng.random(n)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    return probs, np.minimum(labels, classes - 1)


def test_calibrated_data_has_ece_near_zero_and_a_diagonal_diagram():
    n = 200_000
    probs, y = calibrated_classifier(n)
    table = C.reliability(probs, y)
    # ECE's bias for calibrated data is about sum_b (n_b/n) sqrt(2 c(1-c) / (pi n_b)) <= 0.004 here.
    assert table["ece"] < 0.006
    assert table["ece"] == C.ece(probs, y)  # one rule: ece reads the diagram
    assert table["count"].sum() == n and len(table["edges"]) == 16
    filled = table["count"] >= 200
    conf, acc, count = table["confidence"][filled], table["accuracy"][filled], table["count"][filled]
    # Each filled bin on the diagonal within 4 binomial sds.
    assert np.all(np.abs(acc - conf) <= 4 * np.sqrt(conf * (1 - conf) / count) + 1e-3)
    # Bin means fall inside their bins.
    lower, upper = table["edges"][:-1][filled], table["edges"][1:][filled]
    assert np.all((conf >= lower) & (conf <= upper))


def test_overconfident_classifier_has_the_closed_form_ece():
    # True P(class 0) = q ~ U(0.5, 1); the model says c = (1 + q) / 2 > q. Every bin's gap has the
    # same sign, so ECE = E[c - q] = E[(1 - q) / 2] = 1/8 whatever the binning.
    n = 200_000
    rng = np.random.default_rng(1)
    q = rng.uniform(0.5, 1.0, n)
    c = (1 + q) / 2
    y = (rng.random(n) > q).astype(int)  # class 0 with probability q
    probs = np.stack([c, 1 - c], axis=1)
    for bins in (1, 15, 40):
        assert C.ece(probs, y, bins) == pytest.approx(0.125, abs=0.004)  # MC sd of the accuracy ~0.001
    # The exact finite-sample form: sum of gaps = mean confidence - accuracy when all gaps are positive.
    table = C.reliability(probs, y)
    assert np.nanmin(table["confidence"] - table["accuracy"]) > 0
    assert table["ece"] == pytest.approx(c.mean() - np.mean(y == 0), abs=1e-12)


# --- risk-coverage (Geifman & El-Yaniv 2017) -----------------------------------------------------


def brute_force_risk_coverage(probs, y):
    """Every distinct threshold t, highest first: decide the inputs with confidence >= t."""
    confidence, correct = probs.max(axis=1), probs.argmax(axis=1) == y
    points = []
    for t in sorted(set(confidence.tolist()), reverse=True):
        decided = confidence >= t
        points.append((t, decided.mean(), 1 - correct[decided].mean()))
    area, previous = 0.0, 0.0
    for _, coverage, risk in points:
        area += (coverage - previous) * risk
        previous = coverage
    return points, area


@pytest.mark.parametrize("seed", range(20))
def test_risk_coverage_matches_brute_force_with_ties(seed):
    rng = np.random.default_rng(seed)
    n, classes = int(rng.integers(1, 15)), int(rng.integers(2, 4))
    probs = np.round(rng.dirichlet(np.ones(classes), size=n), 1)  # rounding makes ties
    probs[:, 0] += 1 - probs.sum(axis=1)
    y = rng.integers(0, classes, n)
    curve = C.risk_coverage(probs, y)
    points, area = brute_force_risk_coverage(probs, y)
    np.testing.assert_allclose(curve["threshold"], [p[0] for p in points])
    np.testing.assert_allclose(curve["coverage"], [p[1] for p in points])
    np.testing.assert_allclose(curve["risk"], [p[2] for p in points])
    np.testing.assert_allclose(curve["accuracy"], 1 - curve["risk"])
    assert curve["aurc"] == pytest.approx(area)
    assert curve["coverage"][-1] == 1 and curve["accuracy"][-1] == pytest.approx(C.accuracy(probs, y))
    assert 0 <= curve["optimal_aurc"] <= curve["aurc"] + 1e-12


def test_aurc_without_ties_is_the_mean_risk_of_the_top_k():
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), size=60)
    y = rng.integers(0, 4, 60)
    order = np.argsort(-probs.max(axis=1))
    wrong = (probs.argmax(axis=1) != y)[order]
    top_k_risk = [wrong[:k].mean() for k in range(1, 61)]
    assert C.risk_coverage(probs, y)["aurc"] == pytest.approx(np.mean(top_k_risk))


def test_aurc_by_hand_and_the_best_ranking():
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.8, 0.2], [0.6, 0.4]])
    y = np.array([0, 1, 0, 0])
    curve = C.risk_coverage(probs, y, doubt_level=0.85)
    # points (1/4, 0), (3/4, 1/3) (the tie enters together), (1, 1/4)
    assert curve["aurc"] == pytest.approx(0.25 * 0 + 0.5 * (1 / 3) + 0.25 * 0.25)
    assert curve["optimal_aurc"] == pytest.approx((0 + 0 + 0 + 1 / 4) / 4)
    assert curve["excess_aurc"] == pytest.approx(curve["aurc"] - curve["optimal_aurc"])
    # The point at the doubt level is doubt_decision's, with its risk.
    assert curve["at_doubt_level"] == {**C.doubt_decision(probs, y, 0.85), "risk": 0.0}
    assert C.risk_coverage(probs, y)["at_doubt_level"]["threshold"] == C.DOUBT_LEVEL
    assert C.risk_coverage(probs, y, 0.99)["at_doubt_level"]["risk"] is None
    # Errors ranked last: the curve is the best one, excess 0.
    best = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])
    assert C.risk_coverage(best, np.array([0, 0, 1, 1]))["excess_aurc"] == pytest.approx(0.0)


def test_aurc_of_a_calibrated_binary_classifier_is_one_eighth():
    # Confidence c ~ U(1/2, 1), correct with probability c: the top u of inputs have c in
    # [1 - u/2, 1], so risk(u) = u/4 and AURC = 1/8. The best ranking of the same error rate 1/4:
    # integral over [3/4, 1] of (1 - (3/4)/u) du = 1/4 - (3/4) log(4/3).
    n = 100_000
    rng = np.random.default_rng(4)
    c = rng.uniform(0.5, 1.0, n)
    y = (rng.random(n) > c).astype(int)
    curve = C.risk_coverage(np.stack([c, 1 - c], axis=1), y)
    assert curve["aurc"] == pytest.approx(1 / 8, abs=0.004)
    assert curve["optimal_aurc"] == pytest.approx(0.25 - 0.75 * math.log(4 / 3), abs=0.004)


# --- entropy split (Depeweg et al. 2018) ---------------------------------------------------------


def entropy(p):
    return -sum(x * math.log(x) for x in p if x > 0)


def test_entropy_split_is_zero_epistemic_when_draws_agree():
    probs = np.random.default_rng(5).dirichlet(np.ones(4), size=7)
    split = C.entropy_split(np.repeat(probs[None], 5, axis=0))
    np.testing.assert_allclose(split["epistemic"], 0.0, atol=1e-12)
    np.testing.assert_allclose(split["total"], O.predictive_entropy(probs), rtol=1e-12)
    np.testing.assert_allclose(split["aleatoric"], split["total"], rtol=1e-12)
    # (n, K): one draw, no disagreement.
    np.testing.assert_allclose(C.entropy_split(probs)["epistemic"], 0.0, atol=1e-12)


def test_entropy_split_by_hand_on_two_draws():
    draws = np.array([[[0.9, 0.1], [0.5, 0.5]], [[0.3, 0.7], [0.5, 0.5]]])  # (R=2, n=2, K=2)
    split = C.entropy_split(draws)
    total = entropy([0.6, 0.4])
    expected = (entropy([0.9, 0.1]) + entropy([0.3, 0.7])) / 2
    assert split["total"][0] == pytest.approx(total)
    assert split["aleatoric"][0] == pytest.approx(expected)
    assert split["epistemic"][0] == pytest.approx(total - expected)
    # H(0.6, 0.4) = 0.67301, H(0.9, 0.1) = 0.32508, H(0.3, 0.7) = 0.61086: MI = 0.67301 - 0.46797.
    assert split["epistemic"][0] == pytest.approx(0.20504, abs=1e-5)
    # Two draws that agree on a coin flip: all aleatoric.
    assert split["aleatoric"][1] == pytest.approx(math.log(2)) and split["epistemic"][1] == pytest.approx(0.0)
    # Two confident draws that disagree: all epistemic, log 2.
    opposite = C.entropy_split(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]))
    assert opposite["aleatoric"][0] == 0.0 and opposite["epistemic"][0] == pytest.approx(math.log(2))


@st.composite
def per_draw_probabilities(draw):
    shape = (draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(2, 5)))
    weights = draw(arrays(np.float64, shape, elements=st.floats(0.0, 1.0, allow_subnormal=False)))
    weights[..., 0] += 1e-9  # no all-zero row
    return weights / weights.sum(axis=-1, keepdims=True)


@settings(max_examples=200, deadline=None)
@given(per_draw_probabilities())
def test_mutual_information_is_nonnegative_and_bounded(draws):
    split = C.entropy_split(draws)
    r, _, k = draws.shape
    assert np.all(split["epistemic"] >= -1e-12)
    # I(label; draw) <= H(draw) = log R and <= H(label) = total <= log K.
    assert np.all(split["epistemic"] <= math.log(r) + 1e-12)
    assert np.all(split["total"] <= math.log(k) + 1e-12)
    np.testing.assert_allclose(split["aleatoric"] + split["epistemic"], split["total"], atol=1e-12)


# --- regression: PIT (Gneiting et al. 2007) and calibration curves (Kuleshov et al. 2018) ---------


def random_mixture(n, draws, seed):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 2, size=(draws, n))
    stds = rng.uniform(0.3, 1.5, size=(draws, n))
    return means, stds, rng


def sample_mixture(means, stds, rng):
    """One target per input from its equal-weight mixture over draws."""
    which = rng.integers(0, means.shape[0], means.shape[1])
    columns = np.arange(means.shape[1])
    return means[which, columns] + stds[which, columns] * rng.normal(size=means.shape[1])


@pytest.mark.parametrize("draws", [1, 5])
def test_pit_of_data_from_the_predictive_is_uniform(draws):
    means, stds, rng = random_mixture(5000, draws, seed=6)
    y = sample_mixture(means, stds, rng)
    if draws == 1:  # a Gaussian predictive passes (n,) arrays
        means, stds = means[0], stds[0]
    pit = R.pit_values(means, stds, y)
    assert stats.kstest(pit, "uniform").pvalue > 0.01
    histogram = R.pit_histogram(pit)
    assert histogram["count"].sum() == 5000 and len(histogram["edges"]) == R.PIT_BINS + 1
    expected = 5000 / R.PIT_BINS
    assert np.all(np.abs(histogram["count"] - expected) < 4 * math.sqrt(expected))
    assert histogram["ks_statistic"] == pytest.approx(stats.kstest(pit, "uniform").statistic)
    assert histogram["ks_statistic"] < 1.63 / math.sqrt(5000)  # the 1% critical value


def test_calibration_curve_is_diagonal_for_data_from_the_mixture():
    means, stds, rng = random_mixture(20_000, 4, seed=7)
    y = sample_mixture(means, stds, rng)
    curve = R.calibration_curve(means, stds, y)
    nominal = np.asarray(R.CURVE_LEVELS)
    np.testing.assert_allclose(curve["nominal"], nominal)
    assert np.all(np.abs(curve["observed"] - nominal) <= 4 * np.sqrt(nominal * (1 - nominal) / 20_000))
    assert curve["mean_abs_gap"] < 0.01
    # The curve's points are `coverage`'s numbers.
    assert R.coverage(means, stds, y, (0.5, 0.95)) == {"0.5": curve["observed"][9], "0.95": curve["observed"][18]}


def test_under_dispersed_predictive_has_the_closed_form_coverage():
    # Data sd 2s, predictive sd s: y falls in m +- z_p s iff |Z| <= z_p / 2, so coverage 2 Phi(z_p/2) - 1.
    n = 20_000
    rng = np.random.default_rng(8)
    mean, std = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    y = mean + 2 * std * rng.normal(size=n)
    curve = R.calibration_curve(mean, std, y)
    z = stats.norm.ppf((1 + curve["nominal"]) / 2)
    truth = 2 * stats.norm.cdf(z / 2) - 1
    assert np.all(np.abs(curve["observed"] - truth) <= 4 * np.sqrt(truth * (1 - truth) / n))
    assert np.all(curve["observed"] < curve["nominal"])  # below the diagonal: intervals too narrow
    # Too narrow piles the PIT up at both ends: a U-shaped histogram.
    density = R.pit_histogram(R.pit_values(mean, std, y))["density"]
    assert density[0] > 1.5 and density[-1] > 1.5 and density[4] < 0.7
    # interval_metrics: the same coverage, and a Gaussian's width 2 z_p s, scaled to original units.
    levels = (0.5, 0.9, 0.95)
    intervals = R.interval_metrics(mean, std, y, levels, target_std=3.0)
    for level in levels:
        z_p = stats.norm.ppf((1 + level) / 2)
        assert intervals[f"{level:g}"]["coverage"] == pytest.approx(2 * stats.norm.cdf(z_p / 2) - 1, abs=0.015)
        assert intervals[f"{level:g}"]["width"] == pytest.approx(3.0 * 2 * z_p * std.mean(), rel=1e-10)


def test_mixture_quantiles_invert_the_cdf_and_match_monte_carlo():
    means, stds, rng = random_mixture(4, 3, seed=9)
    levels = (0.025, 0.25, 0.5, 0.975)
    quantiles = R.mixture_quantiles(means, stds, levels)
    samples = 400_000
    for i in range(means.shape[1]):
        which = rng.integers(0, 3, samples)
        draws = means[which, i] + stds[which, i] * rng.normal(size=samples)
        for level, q in zip(levels, quantiles):
            assert R.mixture_cdf(means[:, i : i + 1], stds[:, i : i + 1], q[i : i + 1])[0] == pytest.approx(
                level, abs=1e-10
            )
            # The sample's CDF at the quantile, within 4 binomial sds of the level.
            assert np.mean(draws <= q[i]) == pytest.approx(level, abs=4 * math.sqrt(level * (1 - level) / samples))


def test_interval_coverage_is_the_fraction_inside_the_quantile_interval():
    means, stds, rng = random_mixture(3000, 6, seed=10)
    y = sample_mixture(means, stds, rng) * 1.3  # somewhat over-dispersed data
    intervals = R.interval_metrics(means, stds, y, (0.8,))
    low, high = R.mixture_quantiles(means, stds, (0.1, 0.9))
    inside = np.mean((y >= low) & (y <= high))
    assert intervals["0.8"]["coverage"] == pytest.approx(inside, abs=1 / 3000)  # a boundary point may differ
    assert intervals["0.8"]["width"] == pytest.approx(np.mean(high - low))
    with pytest.raises(ValueError, match="level"):
        R.interval_metrics(means, stds, y, (1.0,))


# --- what `evaluate` reports --------------------------------------------------------------------


def test_evaluate_reports_the_calibration_numbers_of_its_prediction():
    import json

    import torch

    from core.data import load_ood
    from core.data.dataset import make_dataset
    from core.models.network import BayesianMLP, ModelConfig
    from core.predict import evaluate, predict

    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    dataset = make_dataset(
        name="tiny", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=3
    )
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(5, 3, hidden=(8,), family="lbbnn"))
    result = evaluate(model, dataset, mode="bma", samples=4, ood=["uniform-noise"])
    json.dumps(result)
    prediction = predict(model, x, "bma", samples=4, seed=0)
    curve = C.risk_coverage(prediction.probs, y)
    assert result["aurc"] == pytest.approx(curve["aurc"])
    assert result["excess_aurc"] == pytest.approx(curve["excess_aurc"])
    assert result["doubt"]["accuracy"] == curve["at_doubt_level"]["accuracy"]
    assert result["ece"] == pytest.approx(C.reliability(prediction.probs, y)["ece"])
    split = C.entropy_split(prediction.probs_per_draw)
    assert result["entropy_split"] == pytest.approx({part: values.mean() for part, values in split.items()})
    out = predict(model, load_ood(dataset, "uniform-noise"), "bma", samples=4, seed=0)
    split_out = C.entropy_split(out.probs_per_draw)
    summary = result["ood"]["uniform-noise"]
    assert summary["entropy_split_out"] == pytest.approx({part: v.mean() for part, v in split_out.items()})
    assert summary["auroc_epistemic"] == pytest.approx(O.auroc(split["epistemic"], split_out["epistemic"]))
    assert summary["entropy_out_mean"] == pytest.approx(split_out["total"].mean(), rel=1e-5)  # the same entropy

    # Regression, in original units.
    target = x[:, 0] * 2 + 0.1 * rng.normal(size=80).astype(np.float32)
    regression = make_dataset(
        name="tiny-reg",
        task="regression",
        x_train=x,
        y_train=target,
        x_test=x,
        y_test=target,
        source="generated",
        target_mean=1.0,
        target_std=3.0,
    )
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(5, None, hidden=(8,), family="bnn", likelihood="gaussian"))
    result = evaluate(model, regression, mode="bma", samples=4)
    json.dumps(result)
    prediction = predict(model, x, "bma", samples=4, seed=0)
    intervals = R.interval_metrics(prediction.mean_per_draw, prediction.std_per_draw, target, target_std=3.0)
    for level, values in intervals.items():
        assert result["intervals"][level] == pytest.approx(values)
    assert set(result["intervals"]) == {"0.5", "0.9", "0.95"}
    assert {level: v["coverage"] for level, v in result["intervals"].items()} == result["coverage"]
    pit = R.pit_values(prediction.mean_per_draw, prediction.std_per_draw, target)
    assert result["pit_ks"] == pytest.approx(stats.kstest(pit, "uniform").statistic)
    curve = R.calibration_curve(prediction.mean_per_draw, prediction.std_per_draw, target)
    assert result["calibration_gap"] == pytest.approx(np.mean(np.abs(curve["observed"] - np.asarray(R.CURVE_LEVELS))))

    # The collapsed predictive reports the same numbers from its own CDF and quantiles.
    from core.predict.collapsed import collapsed_predict, evaluate_collapsed

    for variant in ("gaussian", "box"):
        collapsed = evaluate_collapsed(model, regression, variant, samples=4)
        predictive = collapsed_predict(model, x, samples=4, variant=variant).unstandardised(1.0, 3.0)
        pit = predictive.cdf(target * 3.0 + 1.0)
        assert {level: v["coverage"] for level, v in collapsed["intervals"].items()} == collapsed["coverage"]
        low, high = predictive.quantiles((0.05, 0.95))
        assert collapsed["intervals"]["0.9"]["width"] == pytest.approx(np.mean(high - low))
        assert collapsed["pit_ks"] == pytest.approx(stats.kstest(pit, "uniform").statistic)
        assert collapsed["calibration_gap"] == pytest.approx(R.calibration_curve_of_pit(pit)["mean_abs_gap"])
