"""predict(): modes, reproducibility, no mutation, disconnection, collapsed predictive."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from core.data.dataset import make_dataset
from core.errors import BNNError, PredictionError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import PredictionMode, collapsed_predict, evaluate, parse_mode, predict
from core.predict.engine import forward_draws
from core.predict.structure import input_dependence, is_disconnected, useful_units


def make_model(family="lbbnn", hidden=(8,), in_features=5, classes=3, likelihood="categorical", seed=0):
    torch.manual_seed(seed)
    return BayesianMLP(ModelConfig(in_features, classes, hidden=hidden, family=family, likelihood=likelihood))


def inputs(n=20, d=5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


class Holder:  # what a LoadedRun looks like to predict()
    def __init__(self, model):
        self.model = model


@pytest.mark.parametrize("mode", ["bma", "mean", "mpm", "mpm-mean", "prune"])
def test_predict_does_not_mutate_model_or_rng(mode):
    model = make_model()
    model.train()
    before = copy.deepcopy(model.state_dict())
    rng_before = torch.get_rng_state()
    pred = predict(Holder(model), inputs(), mode=mode, samples=4, threshold=0.4 if mode == "prune" else None)
    assert model.training
    assert torch.equal(torch.get_rng_state(), rng_before)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert pred.probs.shape == (20, 3)
    assert np.allclose(pred.probs.sum(1), 1, atol=1e-5)
    assert pred.probs_per_draw.dtype == np.float32


def test_draws_are_reproducible_and_prefix_stable():
    model = make_model()
    x = inputs()
    ten = predict(model, x, "bma", samples=10, seed=7)
    twenty = predict(model, x, "bma", samples=20, seed=7)
    again = predict(model, x, "bma", samples=10, seed=7)
    other = predict(model, x, "bma", samples=10, seed=8)
    assert np.array_equal(ten.probs_per_draw, twenty.probs_per_draw[:10])
    assert np.array_equal(ten.probs_per_draw, again.probs_per_draw)
    assert not np.allclose(ten.probs_per_draw, other.probs_per_draw)
    mpm5 = predict(model, x, "mpm", samples=5, seed=3)
    mpm8 = predict(model, x, "mpm", samples=8, seed=3)
    assert np.array_equal(mpm5.probs_per_draw, mpm8.probs_per_draw[:5])


def test_chunked_forward_equals_one_batch():
    model = make_model(hidden=(16, 8))
    x = torch.as_tensor(inputs(50))
    weights = model.sample_weights(6, seed=1)
    full = forward_draws(model, x, weights)
    tiny = forward_draws(model, x, weights, memory_budget=4 * 2 * 16 * 7)  # a few draws x inputs at a time
    batched = forward_draws(model, x, weights, batch_size=7)
    assert torch.allclose(full, tiny, atol=1e-6) and torch.allclose(full, batched, atol=1e-6)
    assert torch.allclose(full, model.forward_with_weights(x, weights), atol=1e-6)


def test_mpm_equals_prune_at_one_half_for_lbbnn():
    model = make_model()
    x = inputs()
    assert np.array_equal(
        predict(model, x, "mpm-mean").probs, predict(model, x, "prune", threshold=0.5, weights="mean").probs
    )
    assert np.array_equal(
        predict(model, x, "mpm", samples=5, seed=2).probs_per_draw,
        predict(model, x, "prune", threshold=0.5, samples=5, seed=2).probs_per_draw,
    )
    masks = model.keep_masks(0.5)
    with torch.no_grad():
        means = [layer.weight_mu for layer in model.layers]
        manual = model.forward_with_weights(torch.as_tensor(x), [m * w for m, w in zip(masks, means)])
    assert np.allclose(predict(model, x, "mpm-mean").probs, torch.softmax(manual, -1).numpy(), atol=1e-6)
    assert predict(model, x, "mpm-mean").density == pytest.approx(model.density(masks))


@pytest.mark.parametrize("family", ["lbbnn", "bnn"])
def test_mean_is_the_average_of_many_bma_draws_for_a_linear_model(family):
    model = make_model(family, hidden=(), in_features=4, classes=None, likelihood="gaussian")
    with torch.no_grad():
        model.layers[0].weight_rho.fill_(-0.5)  # visible weight noise
    x = inputs(6, 4)
    draws = predict(model, x, "bma", samples=4000, seed=0)
    mean = predict(model, x, "mean")
    standard_error = draws.mean_per_draw.std(axis=0) / np.sqrt(4000)
    assert np.all(np.abs(draws.mean - mean.mean) < 5 * standard_error + 1e-6)
    assert mean.samples == 1 and np.all(mean.epistemic_variance == 0)


def test_paper_aliases_and_errors():
    assert parse_mode("SIM-SIM") is PredictionMode.BMA and parse_mode("med-mea") is PredictionMode.MPM_MEAN
    assert parse_mode("PRN") is PredictionMode.PRUNE and parse_mode("All-Mea") is PredictionMode.MEAN
    model = make_model()
    x = inputs()
    cases = [
        dict(mode="nope"),
        dict(samples=0),
        dict(samples=2.5),
        dict(mode="prune", threshold=1.5),
        dict(mode="bma", threshold=0.5),
        dict(mode="mpm", weights="mean"),
        dict(mode="prune", weights="median"),
    ]
    for kwargs in cases:
        with pytest.raises(PredictionError):
            predict(model, x, **kwargs)
    with pytest.raises(PredictionError, match="5 features"):
        predict(model, inputs(4, 6))


def test_disconnection_on_hand_made_masks():
    keep = torch.ones(3, 4, dtype=torch.bool)
    first = torch.zeros(2, 4, dtype=torch.bool)
    first[0, 3] = True  # unit 0 has only its bias: a constant
    first[1, 0] = True  # unit 1 depends on x ...
    second = torch.zeros(1, 3, dtype=torch.bool)
    second[0, 0] = True  # ... but only the constant unit feeds the output
    assert is_disconnected([first, second])
    assert [d.tolist() for d in input_dependence([first, second])] == [[False, True], [False]]
    assert [u.tolist() for u in useful_units([first, second])] == [[True, False], [True]]
    second[0, 1] = True
    assert not is_disconnected([first, second])
    assert not is_disconnected([keep[:2], torch.ones(1, 3, dtype=torch.bool)])


def test_disconnected_mpm_is_reported():
    model = make_model(hidden=(6,))
    with torch.no_grad():
        model.layers[1].inclusion_logit.fill_(-3.0)  # every output weight below 0.5
        model.layers[1].inclusion_logit[:, -1] = 3.0  # keep only the output biases
    pred = predict(model, inputs(), "mpm", samples=3)
    assert pred.disconnected and "no path" in pred.warnings[0]
    assert np.allclose(pred.probs, pred.probs[0])  # what the flag warns about: a constant
    assert not predict(model, inputs(), "bma", samples=3).disconnected


def test_density_conventions():
    model = make_model()
    x = inputs()
    assert predict(model, x, "bma", samples=5).density == 1.0
    one = predict(model, x, "bma", samples=1)
    alpha = torch.cat([layer.inclusion_probability.detach().reshape(-1) for layer in model.layers])
    assert one.density == pytest.approx(one.draw_density)
    assert one.density == pytest.approx(float(alpha.mean()), abs=0.05)
    assert predict(model, x, "mean").density == 1.0
    assert predict(make_model("bnn"), x, "bma", samples=3).draw_density == 1.0


def test_regression_prediction_units():
    model = make_model("bnn", hidden=(8,), classes=None, likelihood="gaussian")
    pred = predict(model, inputs(), "bma", samples=6)
    assert pred.total_variance == pytest.approx(pred.epistemic_variance + pred.aleatoric_variance)
    scaled = pred.unstandardised(10.0, 2.0)
    assert scaled.mean == pytest.approx(pred.mean * 2 + 10)
    assert scaled.total_variance == pytest.approx(pred.total_variance * 4, rel=1e-5)


def test_collapsed_predictive_matches_monte_carlo():
    model = make_model("lbbnn", hidden=(6,), in_features=2, classes=None, likelihood="gaussian", seed=3)
    with torch.no_grad():
        model.layers[1].weight_rho.fill_(-1.0)
    x = inputs(1, 2, seed=5)
    draws = 4
    collapsed = collapsed_predict(model, x, samples=draws, seed=11)
    # Monte Carlo: the same bodies, last-layer weights drawn by the family given the sampled mask.
    weights = model.sample_weights(draws, seed=11)
    with torch.no_grad():
        phi = model.activation(model.forward_with_weights(torch.as_tensor(x), weights[:-1]))
        phi = torch.cat([phi, torch.ones_like(phi[..., :1])], -1)[:, 0]  # (R, in+1)
        generator = torch.Generator().manual_seed(0)
        per_body = 250_000
        last = model.layers[-1].sample_conditional_weights(draws * per_body, generator)[:, 0]
        kept = (weights[-1][:, 0] != 0).repeat_interleave(per_body, 0)
        mean_y = ((last * kept) * phi.repeat_interleave(per_body, 0)).sum(-1)
        noise = model.likelihood.log_noise_std.exp() * torch.randn(mean_y.shape, generator=generator)
        y = (mean_y + noise).double().numpy()
    assert collapsed.mean[0] == pytest.approx(y.mean(), abs=4 * y.std() / np.sqrt(len(y)))
    assert collapsed.variance[0] == pytest.approx(y.var(), rel=0.01)
    grid = np.linspace(y.min() - 1, y.max() + 1, 4001)
    density = collapsed.mixture_density(grid)[0]
    assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=1e-3)
    hist, edges = np.histogram(y, bins=40, range=(np.quantile(y, 0.01), np.quantile(y, 0.99)))
    centres = 0.5 * (edges[1:] + edges[:-1])
    expected = collapsed.mixture_density(centres)[0] * (edges[1] - edges[0]) * len(y)
    assert np.all(np.abs(hist - expected) < 5 * np.sqrt(expected) + 5)
    # The plain ensemble uses the same bodies.
    bma = predict(model, x, "bma", samples=draws, seed=11)
    assert np.allclose(collapsed.ensemble_mean_per_draw[:, 0], bma.mean_per_draw[:, 0], atol=1e-5)


def test_evaluate_is_json_ready_and_checks_ood_shape():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    dataset = make_dataset(
        name="tiny", task="classification", x_train=x, y_train=y, x_test=x, y_test=y, source="generated", n_classes=3
    )
    model = make_model()
    result = evaluate(model, dataset, mode="bma", samples=4, ood=["uniform-noise"])
    json.dumps(result)
    assert set(result) >= {"accuracy", "nll", "brier", "ece", "doubt", "density", "mean_inclusion", "ood"}
    assert len(result["accuracy_vs_samples"]["accuracy"]) == 4
    # The OOD summary against a hand computation: entropies of the same bma prediction on the test
    # inputs and on the OOD inputs, AUROC as the fraction of (in, out) pairs the entropy orders right.
    from core.data import load_ood

    def entropy(probs):
        return np.array([-sum(p * np.log(p) for p in row if p > 0) for row in np.asarray(probs, dtype=np.float64)])

    scores_in = entropy(predict(model, x, "bma", samples=4, seed=0).probs)
    scores_out = entropy(predict(model, load_ood(dataset, "uniform-noise"), "bma", samples=4, seed=0).probs)
    pairs = [1.0 if o > i else 0.5 if o == i else 0.0 for i in scores_in for o in scores_out]
    summary = result["ood"]["uniform-noise"]
    assert summary["auroc"] == pytest.approx(sum(pairs) / len(pairs), abs=1e-12)
    assert 0.05 < summary["auroc"] < 0.95  # a case where the pairs are not all on one side
    assert summary["entropy_in_mean"] == pytest.approx(scores_in.mean())
    assert summary["entropy_out_mean"] == pytest.approx(scores_out.mean())
    assert summary["n_out"] == len(scores_out)
    alpha_means = [float(layer.inclusion_probability.detach().mean()) for layer in model.layers]
    assert result["mean_inclusion"] == pytest.approx(alpha_means)
    with pytest.raises(BNNError, match="shape|features"):
        evaluate(model, dataset, mode="bma", samples=2, ood=["mnist-small"])


# Every (mode, weights) predict accepts: prune takes either, the others their own or none.
ACCEPTED = [
    ("bma", None),
    ("bma", "sample"),
    ("mean", None),
    ("mean", "mean"),
    ("mpm", None),
    ("mpm", "sample"),
    ("mpm-mean", None),
    ("mpm-mean", "mean"),
    ("prune", None),
    ("prune", "sample"),
    ("prune", "mean"),
]


@pytest.mark.parametrize("mode, weights", ACCEPTED)
def test_draws_samples_says_whether_r_changes_the_prediction(mode, weights):
    """The mode's own rule (what the dashboard greys R out by) against what predict does: with R
    draws the predictions for R = 1 and R = 5 differ exactly when the mode draws samples."""
    from core.predict.engine import make_plan

    mode = PredictionMode(mode)
    model = make_model("lbbnn")
    x = torch.randn(16, 5, generator=torch.Generator().manual_seed(1))
    plan = make_plan(model, mode, 5, None, weights)
    one = predict(model, x, mode, samples=1, weights=weights)
    five = predict(model, x, mode, samples=5, weights=weights)
    differs = not np.allclose(one.probs, five.probs)
    assert mode.draws_samples(weights) == differs == (plan.samples == 5)
