"""Local explanations with intervals (run.explain and `python -m core explain`).

Checked against finite differences of each sampled network, against the closed form of a
Gaussian linear model (contributions x_j w_j with w_j ~ N(mu, sigma^2): normal quantiles), and
the local linear identity f_r(x) = intercept_r + sum_j contribution_rj of ReLU nets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import norm

from core.errors import BNNError, PredictionError
from core.models.network import BayesianMLP, ModelConfig
from core.predict.explain import explain
from core.predict.structure import active_masks
from core.runs.run import Run


def model_of(family="lbbnn", hidden=(7, 5), skip=False, classes=3, seed=0, likelihood="categorical", activation="relu"):
    torch.manual_seed(seed)
    options = {"input_skip": True} if skip else {}
    return BayesianMLP(
        ModelConfig(
            4,
            classes,
            hidden=hidden,
            family=family,
            family_options=options,
            likelihood=likelihood,
            activation=activation,
        )
    )


X = np.array([0.7, -1.2, 0.4, 2.0])


@pytest.mark.parametrize(
    "family,skip,activation",
    [("lbbnn", False, "relu"), ("lbbnn", True, "relu"), ("bnn", True, "relu"), ("sparse-vd", False, "tanh")],
)
def test_coefficients_are_the_jacobian_of_each_sampled_network(family, skip, activation):
    model = model_of(family, skip=skip, activation=activation, seed=2)
    threshold = model.spec.default_threshold if family != "lbbnn" else 0.3
    result = explain(model, X, threshold=threshold, samples=6, seed=4)
    masks = model.keep_masks(threshold)
    draws = model.sample_weights(6, 4, masks=masks)  # the same draws (same seed) as the explanation
    eps = 1e-6
    for r in range(6):
        weights = [w[r].detach().double() for w in draws]

        def f(point, weights=weights):
            with torch.no_grad():
                return model.forward_with_weights(torch.tensor(point)[None], weights)[0, result.output].item()

        numeric = np.array([(f(X + eps * e) - f(X - eps * e)) / (2 * eps) for e in np.eye(4)])
        np.testing.assert_allclose(result.coefficients[r], numeric, rtol=1e-5, atol=1e-7)
        assert result.values[r] == pytest.approx(f(X), rel=1e-10, abs=1e-12)
        if activation == "relu":  # piecewise linear: the local linear model is exact at x
            assert result.intercepts[r] + result.contributions[r].sum() == pytest.approx(f(X), abs=1e-10)


@pytest.mark.slow  # 4 s: many draws
def test_a_gaussian_linear_model_has_normal_contribution_quantiles():
    """No hidden layer, bnn: coefficient_j = w_cj ~ N(mu, sigma^2), so the contribution x_j w_cj has
    median x_j mu and 95 % interval x_j mu +- 1.96 |x_j| sigma (Monte Carlo over 4000 draws)."""
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(4, 3, hidden=(), family="bnn"))
    with torch.no_grad():
        model.layers[0].weight_rho.fill_(-1.0)  # sigma = softplus(-1) = 0.313
    result = explain(model, X, threshold=0.0, samples=4000, seed=1, output=2)
    layer = model.layers[0]
    mu = layer.weight_mu[2, :-1].detach().double().numpy()
    sigma = layer.weight_sigma[2, :-1].detach().double().numpy()
    rows = result.table()
    se = 3 * sigma * np.abs(X) / np.sqrt(4000) * 2.5  # generous bound on a quantile's Monte Carlo error
    for j, row in enumerate(rows):
        assert row["contribution"] == pytest.approx(X[j] * mu[j], abs=se[j])
        half = norm.ppf(0.975) * abs(X[j]) * sigma[j]
        assert row["contribution_lower"] == pytest.approx(X[j] * mu[j] - half, abs=2 * se[j])
        assert row["contribution_upper"] == pytest.approx(X[j] * mu[j] + half, abs=2 * se[j])
        assert row["coefficient"] == pytest.approx(mu[j], abs=se[j] / abs(X[j]))


def test_a_deterministic_linear_model_is_its_weights():
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(4, 2, hidden=(), family="fnn"))
    result = explain(model, X, samples=3, output=1)
    weight = model.layers[0].weight.detach().double().numpy()
    for row in result.table():
        j = row["feature"]
        assert row["coefficient"] == pytest.approx(weight[1, j]) == row["coefficient_lower"]
        assert row["contribution"] == pytest.approx(weight[1, j] * X[j])
    assert result.to_dict()["intercept"]["median"] == pytest.approx(weight[1, -1])


def test_features_without_an_active_path_contribute_nothing_and_the_default_is_the_predicted_class():
    model = model_of("lbbnn", skip=True, seed=5)
    with torch.no_grad():
        for layer in model.layers:  # cut feature 0 out of every layer (skips included)
            layer.inclusion_logit[:, 0 if layer is model.layers[0] else layer.in_features - 4] = -50.0
    result = explain(model, X, samples=20, seed=0)
    assert not result.active_features[0]
    assert np.all(result.coefficients[:, 0] == 0.0)
    active = active_masks(model.keep_masks())
    assert result.active_features[1:].tolist() == [
        bool(active[0][:, j].any() or any(a[:, a.shape[1] - 5 + j].any() for a in active[1:])) for j in range(1, 4)
    ]
    prediction = Run.of(model).predict(X[None], mode="mpm", samples=20, seed=0)
    assert result.output == int(prediction.probs.argmax())


def test_regression_explains_the_mean_and_bad_inputs_are_refused():
    model = model_of("bnn", likelihood="gaussian", classes=None, seed=1)
    result = explain(model, X, samples=5)
    assert result.output == 0 and result.output_name == "predicted mean"
    with pytest.raises(PredictionError, match="output"):
        explain(model, X, output=1)
    classifier = model_of("lbbnn")
    for bad in ([1.0, 2.0], [[1.0] * 4] * 2, [np.nan, 0, 0, 0]):
        with pytest.raises(PredictionError):
            explain(classifier, bad)
    with pytest.raises(PredictionError, match="output"):
        explain(classifier, X, output=3)
    with pytest.raises(PredictionError, match="samples"):
        explain(classifier, X, samples=0)
    with pytest.raises(BNNError, match="threshold"):
        explain(classifier, X, threshold=1.5)


def _dataset(n_test=6):
    from core.data.dataset import make_dataset

    rng = np.random.default_rng(3)
    x = rng.normal(size=(10 + n_test, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=10 + n_test)
    return make_dataset(
        name="explain",
        task="classification",
        x_train=x[:10],
        y_train=y[:10],
        x_test=x[10:],
        y_test=y[10:],
        source="generated",
        n_classes=3,
    )


def _args(**given):
    import argparse

    from core.cli import build_parser

    argv = ["explain", "0"] + [item for key, value in given.items() for item in (f"--{key}", str(value))]
    args = build_parser().parse_args(argv)
    assert isinstance(args, argparse.Namespace)
    return args


def test_cli_prints_the_table_of_one_test_example():
    import io
    import json

    from core.cli.predict import explain_command

    model, data = model_of("lbbnn", seed=3), _dataset()
    out = io.StringIO()
    result = explain_command(model, data, _args(index=2, samples=30, top=2), out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("test example 2: logit of class") and len(lines) == 1 + 1 + 2
    expected = explain(model, data.x_test[2], samples=30)
    np.testing.assert_array_equal(result.coefficients, expected.coefficients)
    biggest = max(expected.table(), key=lambda row: abs(row["contribution"]))
    assert lines[2].split()[0] == str(biggest["feature"])
    out = io.StringIO()
    args = _args(index=0, samples=5, output=1)
    args.json = True
    explain_command(model, data, args, out)
    assert json.loads(out.getvalue())["output"] == 1


@pytest.mark.parametrize(
    "given,message",
    [
        ({"index": 6}, "index"),
        ({"index": -1}, "index"),
        ({"index": "a"}, "index"),
        ({"index": 0, "top": 0}, "top"),
        ({"index": 0, "top": 5}, "top"),
        ({"index": 0, "samples": 0}, "samples"),
        ({"index": 0, "output": 7}, "output"),
        ({"index": 0, "threshold": "x"}, "threshold"),
    ],
)
def test_cli_refuses_bad_values_in_one_line(given, message):
    import io

    from core.cli.predict import explain_command

    with pytest.raises(BNNError, match=message):
        explain_command(model_of("lbbnn"), _dataset(), _args(**given), io.StringIO())


def test_the_dashboard_backend_is_the_run_verb():
    from dashboard import backend

    model = model_of("lbbnn", skip=True, seed=7)
    run = Run.of(model)
    shown = backend.explanation(run, X, threshold=0.4, samples=12, seed=2)
    assert shown == explain(model, X, threshold=0.4, samples=12, seed=2).to_dict()
    densities = backend.active_path_densities(run, 0.4)
    assert densities["active_density"] == pytest.approx(BayesianMLP.density(active_masks(model.keep_masks(0.4))))
    assert densities["density"] == pytest.approx(BayesianMLP.density(model.keep_masks(0.4)))
