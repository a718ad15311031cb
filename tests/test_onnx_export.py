"""The ONNX export (core.predict.onnx_export): onnxruntime reproduces the project's own `prune` /
mean-weights prediction to 1e-5 on tiny trained runs (classification and regression), the graph holds
only the active units, the README's PyTorch snippet computes the same outputs, and the page's and the
export's kept-weight counts are the same numbers."""

from __future__ import annotations

import argparse
import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch

from core.cli.predict import export_command
from core.errors import BNNError, InputError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import export_pruned, predict
from core.predict.export import ONNX_SNIPPET, PYTORCH_SNIPPET, kept_counts
from core.predict.onnx_export import ONNX_FILE, export_zip, max_difference, plain_module, run_onnx, write_onnx
from core.predict.structure import active_masks
from core.runs import RunConfig, train_run
from tests.support import require_module

ATOL = 1e-5


@pytest.fixture(scope="module")
def onnxruntime():
    return require_module("onnxruntime", "pip install -e '.[export]'")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("runs")
    classification = train_run(
        RunConfig(dataset="two-moons", hidden=(8, 8), train={"epochs": 2}, device="cpu"), cache_dir=cache
    )
    regression = train_run(
        RunConfig(dataset="toy-cubic", hidden=(6,), train={"epochs": 3}, device="cpu"), cache_dir=cache
    )
    return {"classification": classification, "regression": regression}


def _export(run, tmp_path, threshold=None, fmt="onnx"):
    args = argparse.Namespace(out=str(tmp_path / "e"), threshold=threshold, format=fmt)
    out = io.StringIO()
    path = export_command(run, None, args, out=out)
    return path, out.getvalue()


@pytest.mark.slow  # trains two tiny runs (module fixture, about 20 s on the loaded CI machine)
@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("threshold", [None, "0.3"])
def test_onnxruntime_reproduces_the_prune_mean_prediction_on_the_test_set(onnxruntime, runs, tmp_path, task, threshold):
    run = runs[task]
    path, printed = _export(run, tmp_path, threshold)
    assert "+ ONNX; onnxruntime agrees" in printed
    assert (path / ONNX_FILE).is_file() and (path / "model.safetensors").is_file()
    t = run.model.spec.default_threshold if threshold is None else float(threshold)
    data = run.dataset()
    x = data.x_test
    expected = predict(run.model, x, "prune", threshold=t, weights="mean")
    assert max_difference(path / ONNX_FILE, expected, x) < ATOL
    outputs = run_onnx(path / ONNX_FILE, x)
    meta = json.loads((path / "model.json").read_text())
    # The metrics stored beside the export are the ONNX model's too.
    if task == "classification":
        accuracy = float(np.mean(outputs["probabilities"].argmax(1) == data.y_test))
        assert accuracy == pytest.approx(meta["metrics"]["accuracy"], abs=1e-12)
    else:
        rmse = float(np.sqrt(np.mean((data.unstandardise(outputs["mean"]) - data.unstandardise(data.y_test)) ** 2)))
        assert rmse == pytest.approx(meta["metrics"]["rmse"], rel=1e-4)
    # Only the active units: the graph's first weight has as many rows as the compact first layer.
    assert plain_module(run.model, t)[1].weight.shape == tuple(meta["layer_shapes"][0])


def test_the_graph_drops_dead_units_and_is_smaller_than_the_dense_one(onnxruntime, tmp_path):
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(10, 4, hidden=(16, 12), family="lbbnn"))
    x = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    export_pruned(model, 0.75, tmp_path)
    write_onnx(model, 0.75, tmp_path)
    meta = json.loads((tmp_path / "model.json").read_text())
    assert 0 < meta["layer_shapes"][0][0] < 16  # hidden units were removed
    assert max_difference(tmp_path / ONNX_FILE, predict(model, x, "prune", threshold=0.75, weights="mean"), x) < ATOL
    dense = write_dense(model, tmp_path / "dense.onnx")
    assert (tmp_path / ONNX_FILE).stat().st_size < dense.stat().st_size


def write_dense(model, path):
    from core.predict.onnx_export import onnx_bytes

    path.write_bytes(onnx_bytes(model, None))
    return path


def test_the_dense_module_is_the_compact_one_when_everything_is_kept(onnxruntime):
    """Threshold 0 keeps every weight of a fresh LBBNN (inclusion probabilities > 0): the compaction
    then keeps every unit, and the dense module (no compaction) must compute the same outputs."""
    torch.manual_seed(1)
    model = BayesianMLP(ModelConfig(6, 3, hidden=(5,), family="lbbnn"))
    assert all(bool(m.all()) for m in model.keep_masks(0.0))
    x = torch.randn(20, 6)
    with torch.no_grad():
        assert torch.allclose(plain_module(model, None)(x), plain_module(model, 0.0)(x), atol=1e-6)


@pytest.mark.parametrize("likelihood,classes", [("bernoulli", 2), ("heteroscedastic", None), ("gaussian", None)])
def test_every_likelihood_head_and_input_skips_match(onnxruntime, tmp_path, likelihood, classes):
    torch.manual_seed(2)
    model = BayesianMLP(
        ModelConfig(
            7, classes, hidden=(9, 6), family="lbbnn", likelihood=likelihood, family_options={"input_skip": True}
        )
    )
    x = np.random.default_rng(1).normal(size=(50, 7)).astype(np.float32)
    export_pruned(model, 0.6, tmp_path)
    write_onnx(model, 0.6, tmp_path)
    assert max_difference(tmp_path / ONNX_FILE, predict(model, x, "prune", threshold=0.6, weights="mean"), x) < ATOL


@pytest.mark.slow  # trains two tiny runs (module fixture, about 20 s on the loaded CI machine)
def test_the_readme_pytorch_snippet_computes_the_export(onnxruntime, runs, tmp_path, monkeypatch):
    run = runs["classification"]
    path, _ = _export(run, tmp_path)
    readme = (path / "README.md").read_text()
    assert PYTORCH_SNIPPET.strip() in readme and "onnxruntime" in readme
    monkeypatch.chdir(path)
    scope: dict = {}
    exec(PYTORCH_SNIPPET, scope)  # the snippet as the README prints it
    x = run.dataset().x_test
    probs = torch.softmax(scope["forward"](torch.as_tensor(x)), dim=1).numpy()
    expected = predict(run.model, x, "prune", threshold=run.model.spec.default_threshold, weights="mean").probs
    assert np.max(np.abs(probs - expected)) < ATOL
    onnx_scope: dict = {}
    exec(ONNX_SNIPPET, onnx_scope)  # the onnxruntime snippet, on its five zero inputs
    zeros = np.zeros((5, x.shape[1]), dtype=np.float32)
    expected_zeros = predict(
        run.model, zeros, "prune", threshold=run.model.spec.default_threshold, weights="mean"
    ).probs
    assert np.max(np.abs(onnx_scope["outputs"]["probabilities"] - expected_zeros)) < ATOL


@pytest.mark.slow  # trains two tiny runs (module fixture, about 20 s on the loaded CI machine)
def test_kept_counts_agree_with_the_density_and_the_stored_entries(runs, tmp_path):
    run = runs["classification"]
    t = 0.3
    path, _ = _export(run, tmp_path, str(t), fmt="safetensors")
    assert not (path / ONNX_FILE).exists()
    meta = json.loads((path / "model.json").read_text())
    masks = run.masks(t)
    counts = kept_counts(masks)
    # raw: what the page's density counts (density = raw / total, exactly)
    assert counts["raw"] == round(meta["density"] * counts["total"]) == sum(int(m.sum()) for m in masks)
    assert counts["total"] == run.model.n_weights()
    assert counts["active"] == sum(int(m.sum()) for m in active_masks(masks)) <= counts["raw"]
    assert meta["kept_raw"] == counts["raw"] and meta["kept_active"] == counts["active"]
    # active = the stored weight values plus the compact layers' nonzero biases
    from safetensors.torch import load_file

    tensors = load_file(str(path / "model.safetensors"))
    stored = sum(
        int(torch.count_nonzero(tensors[f"layer_{i}.values"])) + int(torch.count_nonzero(tensors[f"layer_{i}.bias"]))
        for i in range(len(meta["layer_shapes"]))
    )
    assert stored == counts["active"]


@pytest.mark.slow  # trains two tiny runs (module fixture, about 20 s on the loaded CI machine)
def test_the_zip_holds_the_onnx_graph_and_the_readme(onnxruntime, runs):
    run = runs["regression"]
    t = run.model.spec.default_threshold
    names = zipfile.ZipFile(io.BytesIO(export_zip(run, t, "onnx"))).namelist()
    assert sorted(names) == ["README.md", "model.json", "model.onnx", "model.safetensors"]
    assert "model.onnx" not in zipfile.ZipFile(io.BytesIO(export_zip(run, t))).namelist()
    with pytest.raises(BNNError, match="format"):
        export_zip(run, t, "tflite")


@pytest.mark.slow  # trains two tiny runs (module fixture, about 20 s on the loaded CI machine)
def test_a_bad_format_is_refused_before_anything_is_written(runs, tmp_path):
    with pytest.raises(InputError, match="format"):
        _export(runs["classification"], tmp_path, fmt="pickle")
    assert not os.path.exists(tmp_path / "e")


def test_the_docs_print_the_snippets_the_export_writes():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "export.md").read_text()
    assert PYTORCH_SNIPPET.strip() in text and ONNX_SNIPPET.strip() in text


def test_verify_refuses_a_graph_that_is_not_the_prediction(onnxruntime):
    """verify is the export's own check: the graph at another threshold is caught, the right one passes."""
    from core.predict.onnx_export import onnx_bytes, verify

    torch.manual_seed(3)
    model = BayesianMLP(ModelConfig(10, 4, hidden=(16, 12), family="lbbnn"))
    x = np.random.default_rng(2).normal(size=(40, 10)).astype(np.float32)
    assert verify(model, onnx_bytes(model, 0.6), x, 0.6) < ATOL
    with pytest.raises(BNNError, match="differs"):
        verify(model, onnx_bytes(model, 0.2), x, 0.6)


def test_a_disconnected_network_exports_its_constant_prediction(onnxruntime, tmp_path):
    """At a threshold above every inclusion probability nothing reaches the output: the graph is the
    constant prediction (the folded output bias), not empty matrices onnxruntime would refuse."""
    torch.manual_seed(4)
    model = BayesianMLP(ModelConfig(10, 4, hidden=(8,), family="lbbnn"))
    with torch.no_grad():
        model.layers[0].inclusion_logit.fill_(-6.0)  # every hidden weight and bias off
        model.layers[1].inclusion_logit.fill_(6.0)
    x = np.random.default_rng(3).normal(size=(30, 10)).astype(np.float32)
    expected = predict(model, x, "prune", threshold=0.5, weights="mean")
    assert expected.disconnected
    export_pruned(model, 0.5, tmp_path)
    write_onnx(model, 0.5, tmp_path)
    assert max_difference(tmp_path / ONNX_FILE, expected, x) < ATOL
    probs = run_onnx(tmp_path / ONNX_FILE, x)["probabilities"]
    assert np.allclose(probs, probs[0])  # the same for every input
