"""The paired per-split comparison of the UCI table: a hand-computed example, a simulation with a
known mean difference, Holm's adjustment and the noise-grid bound check."""

import math

import numpy as np
import pytest

from benchmarks import uci_paired
from benchmarks.uci_paired import at_grid_edge, credited, gaussian_bound, holm, paired_comparison


def t3_cdf(t: float) -> float:
    """Student-t CDF with 3 degrees of freedom in closed form."""
    u = t / math.sqrt(3)
    return 0.5 + (u / (1 + u * u) + math.atan(u)) / math.pi


def test_hand_computed_example():
    # d = [1, 1, 2, 1]: mean 1.25, sd 0.5, se 0.25, t = 5 on 3 df; t_{0.975, 3} = 3.182446305
    result = paired_comparison([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 3.0])
    assert result["n"] == 4
    assert result["mean"] == pytest.approx(1.25)
    assert result["se"] == pytest.approx(0.25)
    assert result["t"] == pytest.approx(5.0)
    assert result["p"] == pytest.approx(2 * (1 - t3_cdf(5.0)), rel=1e-9)
    low, high = result["ci"]
    assert low == pytest.approx(1.25 - 3.182446305 * 0.25, abs=1e-8)
    assert high == pytest.approx(1.25 + 3.182446305 * 0.25, abs=1e-8)
    assert result["call"] == "win"
    # swapping the sides flips the sign and the call; a level stricter than p makes it a tie
    assert paired_comparison([0.0, 1.0, 1.0, 3.0], [1.0, 2.0, 3.0, 4.0])["call"] == "loss"
    assert result["p"] > 0.01  # p = 0.0154
    assert paired_comparison([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 3.0], level=0.99)["call"] == "tie"


def test_means_alone_would_call_a_win_that_pairing_calls_a_tie():
    # kin8nm-like: a small mean gain with a noisy per-split difference is a tie
    rng = np.random.default_rng(0)
    theirs = rng.normal(1.0, 0.05, size=20)
    ours = theirs + np.array([0.03, -0.02] * 10) + 0.002
    result = paired_comparison(ours, theirs)
    assert np.mean(ours) > np.mean(theirs) and result["call"] == "tie"


def test_degenerate_cases():
    assert paired_comparison([1.0], [0.0])["call"] == "n/a"
    constant = paired_comparison([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert constant["se"] == 0 and constant["call"] == "win" and constant["ci"] == (0.5, 0.5)
    assert paired_comparison([1.0, 2.0], [1.0, 2.0])["call"] == "tie"
    with pytest.raises(ValueError):
        paired_comparison([1.0, 2.0], [1.0])


@pytest.mark.parametrize("mean_difference", [0.0, 0.05])
def test_simulated_coverage_and_error_rates(mean_difference):
    """Per-split differences N(mu, 0.1^2) plus a split effect common to both sides: the 95 % interval
    covers mu in 95 % of repeats (binomial sd 0.49 % over 2000), and with mu = 0 the test calls a
    win or a loss in 5 %."""
    rng = np.random.default_rng(42)
    repeats, n = 2000, 20
    covered = calls = 0
    for _ in range(repeats):
        split_effect = rng.normal(0.0, 1.0, size=n)  # large, shared: pairing removes it
        theirs = split_effect + rng.normal(0.0, 0.05, size=n)
        ours = theirs + rng.normal(mean_difference, 0.1, size=n)
        result = paired_comparison(ours, theirs)
        covered += result["ci"][0] <= mean_difference <= result["ci"][1]
        calls += result["call"] != "tie"
    assert covered / repeats == pytest.approx(0.95, abs=0.017)
    if mean_difference == 0.0:
        assert calls / repeats == pytest.approx(0.05, abs=0.017)
    else:
        # power against mu = 0.05 with sd 0.1 and n = 20: noncentral t, delta = 0.05 / (0.1 / sqrt(20)) = 2.24
        from scipy import stats

        power = stats.nct.sf(stats.t.ppf(0.975, n - 1), n - 1, 0.05 / (0.1 / math.sqrt(n))) + stats.nct.cdf(
            -stats.t.ppf(0.975, n - 1), n - 1, 0.05 / (0.1 / math.sqrt(n))
        )
        assert calls / repeats == pytest.approx(power, abs=0.03)


def test_holm_against_hand_values():
    # p = (0.01, 0.04, 0.03, 0.005), sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04,
    # then made monotone: 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_grid_edges_and_credit():
    assert at_grid_edge([0.75, 0.5, 0.25, 0.75], [0.25, 0.5, 0.75]) == ["top", None, "bottom", "top"]
    assert at_grid_edge([50000.0], [30000, 40000, 50000]) == ["top"]
    bound = gaussian_bound(0.5)
    assert bound == pytest.approx(-0.5 * math.log(2 * math.pi * math.e * 0.25))
    # credited only where flagged, and only upwards
    assert credited([bound - 1, bound - 1, bound + 1], [0.5, 0.5, 0.5], [True, False, True]) == pytest.approx(
        [bound, bound - 1, bound + 1]
    )


def test_gaussian_bound_is_the_best_homoscedastic_gaussian():
    """Monte Carlo: residuals with RMSE r scored under N(0, s^2) for a range of s; the best mean log
    density is at s = r and equals the bound."""
    rng = np.random.default_rng(3)
    residuals = rng.standard_t(5, size=20000) * 0.7
    r = float(np.sqrt(np.mean(residuals**2)))
    scores = {
        s: float(np.mean(-0.5 * np.log(2 * np.pi * s * s) - residuals**2 / (2 * s * s)))
        for s in np.linspace(0.3 * r, 3 * r, 271)
    }
    best = max(scores, key=scores.get)
    assert best == pytest.approx(r, rel=0.02)
    assert scores[best] == pytest.approx(uci_paired.gaussian_bound(r), abs=1e-4)
