"""The shipped defaults teach the right picture (issue: recipes, item 3).

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
FAMILIES = ("lbbnn", "lbbnn-lfmvn", "bnn", "bnn-mixture", "concrete-dropout", "horseshoe", "sparse-vd",
            "variational-dense", "fnn")
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


LFMVN_GAP = pytest.mark.xfail(strict=True, reason=(
    "measured, not yet fixed: the low-rank LBBNN's median probability model scores 0.916 against its "
    "posterior mean's 0.965 on mnist-small with the defaults (density 0.05): its inclusion logits are "
    "correlated, so many sit just below 0.5 and the MPM drops them together"))


@pytest.mark.slow
@pytest.mark.parametrize("method", [pytest.param(f, marks=LFMVN_GAP) if f == "lbbnn-lfmvn" else f
                                    for f in FAMILIES])
def test_defaults_on_mnist_small(method, tmp_path):
    _check(RunConfig(dataset="mnist-small", method=method), tmp_path, floor=0.90)


@pytest.mark.slow
@pytest.mark.parametrize("method", ("lbbnn", "lbbnn-lfmvn", "bnn", "bnn-mixture", "sparse-vd"))
def test_defaults_on_two_moons(method, tmp_path):
    _check(RunConfig(dataset="two-moons", method=method), tmp_path, floor=0.95)


def _band_ratio_and_rmse(run) -> tuple[float, float]:
    import numpy as np

    from core.predict import evaluate, predict

    dataset = run.dataset()
    rmse = evaluate(run.model, dataset, "bma", 100)["rmse"]
    band = np.sqrt(predict(run.model, dataset.x_grid, "bma", 100).epistemic_variance)
    x, x_train = dataset.x_grid[:, 0], dataset.x_train[:, 0]
    span = x_train.max() - x_train.min()
    distance = np.abs(x[:, None] - x_train[None, :]).min(axis=1)
    near_data = distance < 0.05 * span
    in_gap = (x > x_train.min()) & (x < x_train.max()) & (distance > 0.1 * span)
    return float(band[in_gap].mean() / band[near_data].mean()), float(rmse)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "measured, not yet fixed: with 40 points the mean-field ELBO (and the 0.1-tempered default) prefers a "
    "flat mean whose learned noise absorbs the signal (bma RMSE 0.19 for bnn and lbbnn); with the noise "
    "fixed at 0.05 bnn fits (RMSE 0.11) but its band in the gaps is narrower than over the data "
    "(ratio 0.4), the known lack of in-between uncertainty of mean-field Gaussian VI; see "
    "docs/why-lbbnn-over-prunes.md"))
@pytest.mark.parametrize("method", ("lbbnn", "bnn"))
def test_defaults_fit_toy_sine_gaps_with_wider_bands_in_the_gaps(method, tmp_path):
    run = train_run(RunConfig(dataset="toy-sine-gaps", method=method), cache_dir=tmp_path)
    ratio, rmse = _band_ratio_and_rmse(run)
    assert rmse <= 0.16 and ratio >= 2.0
