"""Metrics against hand-computed values, scipy and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from core.predict.metrics import classification as C
from core.predict.metrics import ood as O
from core.predict.metrics import regression as R


def test_accuracy_brier_and_nll_by_hand():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    y = np.array([0, 1])
    assert C.accuracy(probs, y) == 0.5
    expected_brier = ((0.3**2 + 0.2**2 + 0.1**2) + (0.1**2 + 0.7**2 + 0.6**2)) / 2
    assert C.brier(probs, y) == pytest.approx(expected_brier)
    draws = np.array([[[0.9, 0.1], [0.2, 0.8]], [[0.5, 0.5], [0.6, 0.4]]])  # (R=2, n=2, K=2)
    y2 = np.array([0, 1])
    expected = -(math.log((0.9 + 0.5) / 2) + math.log((0.8 + 0.4) / 2)) / 2
    assert C.nll(draws, y2) == pytest.approx(expected)
    # A zero probability is floored, not -inf, and log-mean-exp equals the direct form.
    assert np.isfinite(C.nll(np.array([[[1.0, 0.0]]]), np.array([1])))


def test_ece_by_hand():
    # confidences 0.9, 0.8 (bin (2/3,1]) and 0.6, 0.4->0.6 (bin (1/3, 2/3]) with n_bins=3
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.4, 0.6]])
    y = np.array([0, 0, 0, 0])  # correct, wrong, correct, wrong
    # high bin: acc 0.5, conf 0.85; mid bin: acc 0.5, conf 0.6
    expected = 0.5 * abs(0.5 - 0.85) + 0.5 * abs(0.5 - 0.6)
    assert C.ece(probs, y, n_bins=3) == pytest.approx(expected)
    table = C.reliability(probs, y, n_bins=3)
    assert table["count"].tolist() == [0, 2, 2]
    # one bin: |accuracy - mean confidence|
    assert C.ece(probs, y, n_bins=1) == pytest.approx(abs(0.5 - (0.9 + 0.8 + 0.6 + 0.6) / 4))


def test_doubt_decision_and_accuracy_vs_samples():
    probs = np.array([[0.97, 0.03], [0.5, 0.5], [0.01, 0.99], [0.96, 0.04]])
    y = np.array([0, 1, 0, 0])
    doubt = C.doubt_decision(probs, y, 0.95)
    assert doubt["count"] == 3 and doubt["accuracy"] == pytest.approx(2 / 3)
    assert C.doubt_decision(probs, y, 0.999)["accuracy"] is None
    draws = np.array([[[0.9, 0.1], [0.9, 0.1]], [[0.0, 1.0], [0.2, 0.8]]])
    curve = C.accuracy_vs_samples(draws, np.array([1, 1]))
    # r=1: both predicted 0 -> 0; r=2: averages [0.45,0.55] -> 1 and [0.55,0.45] -> 0
    assert curve == {"samples": [1, 2], "accuracy": [0.0, 0.5]}


@given(
    st.integers(1, 6),
    st.integers(1, 30),
    st.integers(2, 5),
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(1, 6), max_size=4),
)
@settings(max_examples=60)
def test_accuracy_vs_samples_is_the_argmax_of_the_cumulative_sum_exactly(draws, n, classes, seed, counts):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(classes), size=(draws, n)).astype(np.float32)
    probs[:, : n // 2] = np.round(probs[:, : n // 2], 1)  # ties between classes: the argmax's first wins
    y = rng.integers(0, classes, n)
    counts = [c for c in counts if c <= draws] or None
    cumulative = np.cumsum(probs.astype(np.float64), axis=0)
    expected = [float(np.mean(cumulative[c - 1].argmax(axis=1) == y)) for c in (counts or range(1, draws + 1))]
    assert C.accuracy_vs_samples(probs, y, counts)["accuracy"] == expected


def test_auroc_constructed_and_mann_whitney():
    assert O.auroc([0.1, 0.2], [0.3, 0.4]) == 1.0
    assert O.auroc([0.3, 0.4], [0.1, 0.2]) == 0.0
    # pairs (in, out): out 0.25 beats 0.1, 0.2; out 0.3 beats 0.1, 0.2 and ties 0.3 -> (2 + 2.5) / 6
    assert O.auroc([0.1, 0.2, 0.3], [0.25, 0.3]) == pytest.approx(4.5 / 6)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 40), rng.integers(1, 6, 30)  # many ties
    u = stats.mannwhitneyu(b, a).statistic
    assert O.auroc(a, b) == pytest.approx(u / (len(a) * len(b)))


def test_entropy_and_ecdf():
    probs = np.array([[0.25] * 4, [1.0, 0, 0, 0]])
    assert O.predictive_entropy(probs) == pytest.approx([math.log(4), 0.0])
    values, cdf = O.ecdf([3.0, 1.0, 2.0, 2.0])
    assert values.tolist() == [1, 2, 2, 3] and cdf.tolist() == [0.25, 0.5, 0.75, 1.0]
    assert O.ecdf_on_grid([3.0, 1.0, 2.0, 2.0], [0, 2, 5]).tolist() == [0.0, 0.75, 1.0]


@pytest.fixture
def mixture():
    rng = np.random.default_rng(1)
    means = rng.normal(size=(3, 5))
    stds = rng.uniform(0.3, 1.5, size=(3, 5))
    y = rng.normal(size=5)
    return means, stds, y


def test_log_likelihood_in_original_units_matches_scipy(mixture):
    means, stds, y = mixture
    target_mean, target_std = 12.0, 3.5
    y_orig = y * target_std + target_mean
    direct = np.log(np.mean(stats.norm.pdf(y_orig, means * target_std + target_mean, stds * target_std), axis=0))
    assert R.log_likelihood(means, stds, y, target_std) == pytest.approx(direct.mean(), rel=1e-10)
    assert R.rmse(means.mean(0), y, target_std) == pytest.approx(
        np.sqrt(np.mean((means.mean(0) * target_std + target_mean - y_orig) ** 2))
    )


def test_crps_closed_form_against_monte_carlo(mixture):
    means, stds, y = mixture
    rng = np.random.default_rng(2)
    n_mc = 400_000
    closed = R.crps_per_point(means, stds, y, target_std=2.0)
    for i in range(len(y)):
        comp = rng.integers(0, 3, size=(2, n_mc))
        x1 = rng.normal(means[comp[0], i], stds[comp[0], i])
        x2 = rng.normal(means[comp[1], i], stds[comp[1], i])
        mc = np.mean(np.abs(x1 - y[i])) - 0.5 * np.mean(np.abs(x1 - x2))
        assert closed[i] == pytest.approx(2.0 * mc, abs=0.01)
    # Single standard normal at y = 0: 2 phi(0) - 1 / sqrt(pi).
    assert R.crps(np.zeros(1), np.ones(1), np.zeros(1)) == pytest.approx(2 * stats.norm.pdf(0) - 1 / math.sqrt(math.pi))


def test_coverage_is_exact_through_the_cdf():
    cov = R.coverage(np.zeros(1), np.ones(1), np.array([1.0]), levels=(0.5, 0.9))
    assert cov == {"0.5": 0.0, "0.9": 1.0}  # 1.0 lies outside +-0.674 and inside +-1.645
    rng = np.random.default_rng(3)
    means, stds = rng.normal(size=(4, 1)), rng.uniform(0.5, 1, size=(4, 1))
    comp = rng.integers(0, 4, 200_000)
    samples = rng.normal(means[comp, 0], stds[comp, 0])
    low, high = np.quantile(samples, [0.05, 0.95])
    # Points just inside / outside the Monte Carlo 90% interval.
    assert R.coverage(means, stds, np.array([low + 0.02]), (0.9,))["0.9"] == 1.0
    assert R.coverage(means, stds, np.array([high + 0.02]), (0.9,))["0.9"] == 0.0


def test_variance_split_is_the_mixture_variance(mixture):
    means, stds, _ = mixture
    split = R.variance_split(means, stds, target_std=2.0)
    mixture_var = (np.mean(stds**2 + means**2, axis=0) - means.mean(0) ** 2) * 4.0
    assert split["total"] == pytest.approx(mixture_var)
    assert split["epistemic"] == pytest.approx(means.var(0) * 4.0)


def test_band_width_ratios_by_construction():
    from core.predict.metrics.regression import band_width_ratios

    x_train = np.array([[0.0], [1.0], [4.0], [5.0]])  # span 5, a gap between 1 and 4
    x_grid = np.linspace(-2, 7, 901)[:, None]
    x = x_grid[:, 0]
    distance = np.abs(x[:, None] - x_train[None, :, 0]).min(axis=1)
    inside = (x > 0) & (x < 5)
    band = np.where(distance < 0.25, 1.0, np.where(inside, 3.0, 5.0))  # 1 near data, 3 in the gap, 5 outside
    ratios = band_width_ratios(x_grid, x_train, band)
    assert ratios["gap_ratio"] == pytest.approx(3.0) and ratios["outside_ratio"] == pytest.approx(5.0)
    no_gap = band_width_ratios(x_grid, np.linspace(0, 5, 60)[:, None], band)
    assert np.isnan(no_gap["gap_ratio"])
