"""benchmarks/onnx_speed.py: the pruned ONNX graph's agreement with the app's MED-MEA prediction is
counted (disagreeing classes, largest probability difference), and a --test-set that the run's network
cannot read is refused with one line."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.onnx_speed import _test_set, agreement, main, measure, render
from core.data import load_dataset
from core.errors import InputError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import predict
from tests.support import perturb, require_module


@pytest.fixture(scope="module")
def run():
    require_module("onnxruntime", "pip install -e '.[export]'")
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(2, 2, hidden=(16, 12), family="lbbnn"))
    perturb(model, seed=1, scale=0.5)
    data = load_dataset("two-moons")
    config = SimpleNamespace(label=lambda: "lbbnn [16-12] on two-moons")
    return SimpleNamespace(model=model, dataset=lambda: data, run_id="test", config=config)


def test_agreement_counts_the_inputs_whose_class_differs():
    x = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
    torch.manual_seed(0)
    expected = predict(BayesianMLP(ModelConfig(2, 3, hidden=(8,), family="lbbnn")), x, "mpm-mean")
    probabilities = expected.probs.copy()
    swapped = [3, 17, 41]
    for i in swapped:  # the top class and another exchange places: the prediction changes on these rows only
        top, other = probabilities[i].argmax(), (probabilities[i].argmax() + 1) % 3
        probabilities[i, [top, other]] = probabilities[i, [other, top]] + np.array([0.01, -0.01])
    result = agreement(probabilities, expected)
    assert result["disagreements"] == len(swapped)
    assert result["max_probability_difference"] == pytest.approx(np.max(np.abs(probabilities - expected.probs)))
    assert agreement(expected.probs, expected) == {"disagreements": 0, "max_probability_difference": 0.0}


@pytest.mark.slow  # exports and times two ONNX graphs (about 10 s on the loaded machine)
def test_the_pruned_graph_agrees_with_the_apps_med_mea_prediction(run):
    result = measure(run, [None, 0.75], repeats=1, threads=1)
    default, other = result["rows"]
    assert "med_mea" in default and "med_mea" not in other  # MED-MEA is the family's own cut only
    assert default["med_mea"]["disagreements"] == 0 and default["med_mea"]["max_probability_difference"] < 1e-5
    assert other["agreement"]["disagreements"] == 0 and other["max_difference"] < 1e-5
    text = render(run, result, "python -m benchmarks.onnx_speed", 1, 1)
    assert f"on all {len(run.dataset().x_test):,} test inputs: 0 disagreeing class predictions" in text


def test_a_test_set_the_network_cannot_read_is_refused_with_one_line(run, capsys):
    with pytest.raises(InputError, match="does not fit run test"):
        _test_set(run, "mnist-small")  # 784 inputs and 10 classes against the network's 2 and 2
    assert _test_set(run, "two-spirals").x_test.shape[1] == 2
    assert main(["--run", "nope", "--test-set", "not-a-set"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
