"""sweep(): equal to single evaluations, monotone densities, FNN at matched densities, summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.data.dataset import make_dataset
from core.errors import PredictionError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import default_summaries, evaluate, parse_threshold_grid, predict, sweep, sweep_at_densities


def make_model(family="lbbnn", hidden=(12, 8), likelihood="categorical", classes=3, seed=0):
    torch.manual_seed(seed)
    return BayesianMLP(ModelConfig(6, classes, hidden=hidden, family=family, likelihood=likelihood))


def make_data(task="classification", n=150):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    if task == "classification":
        y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
        return make_dataset(
            name="tiny", task=task, x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=3
        )
    y = (np.sin(x[:, 0]) + 0.1 * rng.normal(size=n)).astype(np.float32)
    return make_dataset(
        name="tiny-reg",
        task=task,
        x_train=x,
        y_train=y,
        x_test=x,
        y_test=y,
        source="generated",
        target_mean=5.0,
        target_std=2.0,
    )


@pytest.mark.parametrize("family", ["lbbnn", "bnn", "fnn"])
def test_sweep_equals_single_evaluations(family):
    model, data = make_model(family), make_data()
    result = sweep(model, data, mode="mpm-mean")
    picks = [0, 7, 19, 25, 33, 50]
    for i in picks:
        single = evaluate(model, data, mode="mpm-mean", threshold=float(result.thresholds[i]))
        assert result.values[i] == single["accuracy"]
        assert result.density[i] == pytest.approx(single["density"])
        assert result.layer_density[i] == pytest.approx(single["layer_density"])
        assert bool(result.disconnected[i]) == single["disconnected"]


def test_sampled_and_regression_sweeps_equal_single_evaluations():
    model, data = make_model(), make_data()
    result = sweep(model, data, thresholds=[0.2, 0.5, 0.8], mode="prune", samples=4, seed=3)
    for t, value in zip(result.thresholds, result.values):
        assert value == evaluate(model, data, mode="prune", threshold=t, samples=4, seed=3)["accuracy"]
    reg_model, reg_data = make_model(likelihood="gaussian", classes=None), make_data("regression")
    result = sweep(reg_model, reg_data, thresholds="0.1:0.9:0.2")
    assert result.metric == "rmse" and len(result.thresholds) == 5
    for t, value in zip(result.thresholds, result.values):
        single = evaluate(reg_model, reg_data, mode="mpm-mean", threshold=t)["rmse"]
        assert value == pytest.approx(single, rel=1e-5)


def test_density_is_monotone_in_the_threshold():
    data = make_data()
    above = sweep(make_model("lbbnn"), data)
    assert np.all(np.diff(above.density) <= 0) and above.density[0] == 1.0 and above.density[-1] == 0.0
    assert np.all(np.diff(above.layer_density, axis=0) <= 0)
    magnitude = sweep(make_model("fnn"), data)  # unbounded statistic: quantile grid spreads densities
    assert magnitude.density[0] == 1.0 and np.all(np.diff(magnitude.density) <= 0)
    assert np.all(np.abs(np.diff(magnitude.density)) < 0.1)
    below_model = make_model("sparse-vd")
    with torch.no_grad():
        for layer in below_model.layers:
            layer.log_sigma2.uniform_(-8, 2)
    below = sweep(below_model, data)
    assert below.keep == "below" and np.all(np.diff(below.density) >= 0)
    single = predict(below_model, data.x_test, "prune", threshold=float(below.thresholds[20]), weights="mean")
    assert below.density[20] == pytest.approx(single.density)


def test_fnn_swept_at_another_runs_densities():
    data = make_data()
    reference = sweep(make_model("lbbnn"), data, thresholds=np.linspace(0.05, 0.95, 7))
    fnn = make_model("fnn")
    matched = sweep_at_densities(fnn, data, reference.density)
    assert np.all(np.abs(matched.density - reference.density) <= 1.0 / fnn.n_weights() + 1e-12)


def test_grid_parsing_and_bad_thresholds():
    assert np.allclose(parse_threshold_grid("0:1:0.02"), np.linspace(0, 1, 51))
    assert parse_threshold_grid("0.1, 0.5").tolist() == [0.1, 0.5]
    for bad in ["0:1", "a:b:c", "1:0:0.1", "0:1:0", ""]:
        with pytest.raises(PredictionError):
            parse_threshold_grid(bad)
    with pytest.raises(Exception, match="outside the range"):
        sweep(make_model(), make_data(), thresholds=[0.5, 1.5])
    with pytest.raises(PredictionError):
        sweep(make_model(), make_data(), mode="bma")


def test_result_serialisation_and_default_summaries():
    model, data = make_model(), make_data()
    result = sweep(model, data)
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["values"] == pytest.approx(result.values.tolist())
    rows = result.to_rows()
    assert len(rows) == 51 and set(rows[0]) >= {"threshold", "density", "accuracy", "density_layer_2"}
    summary = default_summaries(model, data, samples=3)
    assert np.array_equal(summary["sweep_accuracy"], result.values)
    assert np.array_equal(summary["sweep_disconnected"], result.disconnected)
    assert not any(key.startswith(("statistic_sorted_", "test_probs", "grid_")) for key in summary)  # unread
    assert summary["bma_accuracy"] == evaluate(model, data, mode="bma", samples=3)["accuracy"]
