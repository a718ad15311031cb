"""Export round trip and the CLI shells over evaluate / sweep / export."""

from __future__ import annotations

import argparse
import io
import json

import numpy as np
import pytest
import torch

from core.cli.predict import evaluate_command, export_command, sweep_command
from core.data.dataset import make_dataset
from core.errors import BNNError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import export_pruned, load_exported, predict


def make_model(family="lbbnn", hidden=(16, 12), likelihood="categorical", classes=4, seed=0):
    torch.manual_seed(seed)
    return BayesianMLP(ModelConfig(10, classes, hidden=hidden, family=family, likelihood=likelihood))


def x_data(n=64):
    return np.random.default_rng(0).normal(size=(n, 10)).astype(np.float32)


def compact_shapes_by_enumeration(masks: list[np.ndarray]) -> tuple[list[list[int]], int]:
    """Per layer (kept units, used inputs) of the pruned net, and its kept weights, worked out from the masks.

    A hidden unit stays when a kept weight path connects it to an input (else it is a constant,
    folded into the next biases) and one connects it to an output; an input stays when a kept
    weight leads from it into a kept unit of the first layer.
    """
    weights = [m[:, :-1].astype(bool) for m in masks]  # the bias column carries no input
    depends = [np.ones(weights[0].shape[1], dtype=bool)]
    for w in weights[:-1]:
        depends.append(
            np.array([any(w[k, j] and depends[-1][j] for j in range(w.shape[1])) for k in range(w.shape[0])])
        )
    useful = [np.ones(weights[-1].shape[0], dtype=bool)]
    for w in reversed(weights[1:]):
        useful.insert(
            0, np.array([any(w[k, j] and useful[0][k] for k in range(w.shape[0])) for j in range(w.shape[1])])
        )
    kept_units = [d & u for d, u in zip(depends[1:], useful[:-1])] + [np.ones(weights[-1].shape[0], dtype=bool)]
    used_inputs = np.array(
        [
            any(weights[0][k, j] and kept_units[0][k] for k in range(weights[0].shape[0]))
            for j in range(weights[0].shape[1])
        ]
    )
    columns = [used_inputs] + kept_units[:-1]
    shapes = [[int(rows.sum()), int(cols.sum())] for rows, cols in zip(kept_units, columns)]
    n_kept = sum(int(w[np.ix_(rows, cols)].sum()) for w, rows, cols in zip(weights, kept_units, columns))
    return shapes, n_kept


@pytest.mark.parametrize("threshold", [0.5, 0.75, 0.9])
def test_export_reproduces_mpm_mean_and_is_smaller(tmp_path, threshold):
    model = make_model()
    path = export_pruned(model, threshold, tmp_path / "out", metrics={"accuracy": 0.5})
    exported = load_exported(path)
    x = x_data()
    expected = predict(model, x, "prune", threshold=threshold, weights="mean").probs
    assert np.allclose(exported.predict(x).numpy(), expected, atol=1e-6)
    meta = json.loads((path / "model.json").read_text())
    assert meta["threshold"] == threshold and meta["metrics"] == {"accuracy": 0.5}
    assert meta["density"] == pytest.approx(model.density(model.keep_masks(threshold)))
    kept = sum(int(m.sum()) for m in model.keep_masks(threshold))
    assert meta["n_weights_kept"] <= kept < model.n_weights()
    shapes, n_kept = compact_shapes_by_enumeration([m.numpy() for m in model.keep_masks(threshold)])
    assert meta["layer_shapes"] == shapes and meta["n_weights_kept"] == n_kept
    if threshold == 0.75:  # the case where hidden units are removed but not all of them
        assert 0 < shapes[0][0] < 16 and 0 < shapes[1][0] < 12


def test_export_folds_constant_units(tmp_path):
    model = make_model(hidden=(3,), classes=2)
    with torch.no_grad():
        layer = model.layers[0]
        layer.inclusion_logit.fill_(5.0)
        layer.inclusion_logit[0, :-1] = -5.0  # unit 0 keeps only its bias: a constant
        layer.weight_mu[0, -1] = 0.7
        model.layers[1].inclusion_logit.fill_(5.0)
    exported = load_exported(export_pruned(model, 0.5, tmp_path))
    assert exported.weight_0.shape == (2, 10)  # the constant unit is gone ...
    x = x_data()
    # ... and its contribution lives on in the output bias.
    assert np.allclose(exported.predict(x).numpy(), predict(model, x, "mpm-mean").probs, atol=1e-6)


def test_export_regression_keeps_noise(tmp_path):
    model = make_model("bnn", likelihood="gaussian", classes=None)
    threshold = 1.0
    exported = load_exported(export_pruned(model, threshold, tmp_path))
    mean, std = exported.predict(x_data())
    pred = predict(model, x_data(), "prune", threshold=threshold, weights="mean")
    assert np.allclose(mean.numpy(), pred.mean, atol=1e-6)
    assert np.allclose(std.numpy(), pred.std_per_draw[0])


def test_load_exported_rejects_missing_files(tmp_path):
    with pytest.raises(BNNError, match="model.json"):
        load_exported(tmp_path)


def _dataset():
    x = x_data(80)
    y = (x[:, 0] > 0).astype(np.int64) + 2 * (x[:, 1] > 0)
    return make_dataset(
        name="tiny", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=4
    )


def test_cli_commands_print_json_and_tables(tmp_path):
    model, data = make_model(), _dataset()
    out = io.StringIO()
    args = argparse.Namespace(mode="MED-MEA", samples="1", threshold="0.6", seed=0, ood=[], json=True)
    result = evaluate_command(model, data, args, out=out)
    assert json.loads(out.getvalue())["accuracy"] == result["accuracy"]
    out = io.StringIO()
    sweep_command(
        model,
        data,
        argparse.Namespace(thresholds="0:1:0.25", mode="mpm-mean", samples="1", seed=0, json=False),
        out=out,
    )
    lines = out.getvalue().strip().splitlines()
    assert lines[0].split()[:3] == ["threshold", "density", "accuracy"] and len(lines) == 6
    export_command(model, data, argparse.Namespace(threshold="0.6", out=str(tmp_path / "e")), out=io.StringIO())
    assert "accuracy" in json.loads((tmp_path / "e" / "model.json").read_text())["metrics"]


@pytest.mark.parametrize("bad", [dict(mode="what"), dict(samples="0"), dict(threshold="2"), dict(threshold="x")])
def test_cli_errors_are_bnn_errors(bad):
    args = dict(mode="bma", samples="2", threshold=None, seed=0, ood=[], json=True)
    args.update(bad)
    if "threshold" in bad:
        args["mode"] = "prune"
    with pytest.raises(BNNError):
        evaluate_command(make_model(), _dataset(), argparse.Namespace(**args), out=io.StringIO())
