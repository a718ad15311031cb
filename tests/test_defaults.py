"""The shipped defaults teach the right picture.

Every family trained with nothing but a dataset and a method name (the CLI's and the dashboard's
defaults are RunConfig's): the median probability model scores within a few points of the
posterior-mean network, and the density moves away from where it started without collapsing.
These train real models for a few thousand steps each, so they are marked slow.
"""

from __future__ import annotations

import pytest
import torch

from core.runs import RunConfig
from core.runs.training import train_run

# Families whose default cut prunes nothing by design (magnitude at threshold 0) or, for the
# horseshoe, prunes whole units only once their scale posterior is far below 1e-3: their density
# stays 1 and is not asserted on.
DENSITY_FIXED_BY_DESIGN = {"fnn", "concrete-dropout", "horseshoe"}
FAMILIES = (
    "lbbnn",
    "lbbnn-lfmvn",
    "bnn",
    "bnn-mixture",
    "concrete-dropout",
    "horseshoe",
    "sparse-vd",
    "variational-dense",
    "fnn",
)
# "Within a few points": every family but the low-rank LBBNN is within 1 point on mnist-small.
FEW_POINTS = 0.04


def _starting_density(config: RunConfig) -> float:
    from core.models.network import build_model

    dataset = config.load_dataset()
    torch.manual_seed(config.seed)
    model = build_model(config.model_config(dataset))
    with torch.no_grad():
        return model.density(model.keep_masks())


def _check(config: RunConfig, tmp_path, floor: float) -> None:
    run = train_run(config, cache_dir=tmp_path)
    mpm, mean = run.metrics["MED-MEA R=1 accuracy"], run.metrics["ALL-MEA R=1 accuracy"]
    density = run.metrics["density"]
    assert mpm >= floor, f"{config.method}: MED-MEA {mpm:.3f} below {floor}"
    assert mpm >= mean - FEW_POINTS, f"{config.method}: MED-MEA {mpm:.3f} vs ALL-MEA {mean:.3f}"
    if config.method not in DENSITY_FIXED_BY_DESIGN:
        start = _starting_density(config)
        assert density >= 0.01, f"{config.method}: density {density:.4f} collapsed"
        assert abs(density - start) > 0.05, f"{config.method}: density {density:.3f} stayed at {start:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("method", FAMILIES)
def test_defaults_on_mnist_small(method, tmp_path):
    _check(RunConfig(dataset="mnist-small", method=method), tmp_path, floor=0.90)


@pytest.mark.slow
@pytest.mark.parametrize("method", ("lbbnn", "lbbnn-lfmvn", "bnn", "bnn-mixture", "sparse-vd"))
def test_defaults_on_two_moons(method, tmp_path):
    _check(RunConfig(dataset="two-moons", method=method), tmp_path, floor=0.95)


@pytest.fixture(scope="module")
def toy_cache(tmp_path_factory):
    """One run store for the toy tests, so a run two tests look at is trained once."""
    return tmp_path_factory.mktemp("toy-runs")


def _bands(run) -> dict[str, float]:
    """bma test RMSE and the epistemic band's widening in the gaps and outside the data."""
    import numpy as np

    from core.predict import evaluate, predict
    from core.predict.metrics.regression import band_width_ratios

    dataset = run.dataset()
    rmse = evaluate(run.model, dataset, "bma", 100)["rmse"]
    band = np.sqrt(predict(run.model, dataset.x_grid, "bma", 100).epistemic_variance)
    ratios = band_width_ratios(dataset.x_grid, dataset.x_train, band)
    return {"rmse": float(rmse), "gap": ratios["gap_ratio"], "outside": ratios["outside_ratio"]}


@pytest.mark.slow
@pytest.mark.parametrize("method", ("lbbnn", "bnn"))
def test_defaults_fit_toy_sine_gaps(method, toy_cache):
    # Before the small-regression defaults both fitted a straight line (bma RMSE 0.188); a
    # deterministic 64-64 net reaches 0.12 (the test points include the gaps).
    bands = _bands(train_run(RunConfig(dataset="toy-sine-gaps", method=method), cache_dir=toy_cache))
    assert bands["rmse"] <= 0.16, bands
    assert bands["outside"] >= 2.0, bands


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason=(
        "measured, not fixed: the mean-field posteriors' band inside the gaps is 0.75 (bnn) and 0.84 (lbbnn) "
        "times its width over the data with the defaults (seed 0; 2.7 for bnn with seed 1), while the NUTS "
        "posterior of a 1-64-1 net gives 2.2: the known lack of in-between uncertainty of factorised "
        "Gaussian VI (Foong et al. 2019); five other settings (KL weight 1, prior variance 10, 64-64-64, 256-256, "
        "initial sigma 0.1) give 0.30-1.03 (benchmarks/results/toy_regression.md); see "
        "docs/why-lbbnn-over-prunes.md, 'Small regression sets'"
    ),
)
@pytest.mark.parametrize("method", ("lbbnn", "bnn"))
def test_defaults_widen_the_band_in_the_gaps_of_toy_sine_gaps(method, toy_cache):
    bands = _bands(train_run(RunConfig(dataset="toy-sine-gaps", method=method), cache_dir=toy_cache))
    assert bands["gap"] >= 2.0, bands


@pytest.mark.slow
@pytest.mark.parametrize("method", ("lbbnn", "bnn"))
def test_defaults_fit_toy_cubic_and_widen_outside_the_data(method, toy_cache):
    # The data's noise sd is 3; before these defaults lbbnn's bma RMSE was 10.3 and bnn's 5.0.
    bands = _bands(train_run(RunConfig(dataset="toy-cubic", method=method), cache_dir=toy_cache))
    assert bands["rmse"] <= 4.5, bands
    assert bands["outside"] >= 2.0, bands
