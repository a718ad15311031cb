"""The run verbs (core.runs.Run): predict, summary, coef, masks, sweep, evaluate, against truth."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.stats import norm

from core.predict import predict as core_predict
from core.runs import Run, RunConfig, load_run, train_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("runs")
    classification = train_run(
        RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}, device="cpu"), cache_dir=cache
    )
    regression = train_run(
        RunConfig(dataset="toy-cubic", hidden=(6,), train={"epochs": 3}, device="cpu"), cache_dir=cache
    )
    return cache, classification, regression


def _state(run: Run) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in run.model.state_dict().items()}


def test_no_verb_changes_the_model_or_the_global_rng(runs):
    _, run, _ = runs
    before, training = _state(run), run.model.training
    rng = torch.get_rng_state()
    x = run.dataset().x_test[:20]
    run.predict(x, mode="bma", samples=3)
    run.predict(x, mode="prune", threshold=0.3, samples=2)
    run.summary()
    run.coef(threshold=0.3)
    run.coef(threshold=0.3, method="draws", samples=20)
    run.masks(0.7)
    run.sweep(thresholds=[0.2, 0.5])
    run.evaluate(mode="mpm", samples=2)
    after = _state(run)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert run.model.training == training and torch.equal(torch.get_rng_state(), rng)


def test_masks_are_the_keep_rule_of_the_statistic(runs):
    _, run, _ = runs
    for threshold in (None, 0.1, 0.5, 0.93):
        cut = 0.5 if threshold is None else threshold
        expected = [torch.sigmoid(layer.inclusion_logit.detach()) > cut for layer in run.model.layers]
        got = run.masks(threshold)
        assert all(torch.equal(g, e) for g, e in zip(got, expected))


def test_summary_densities_are_the_mask_counts_and_priors_are_the_learned_values(runs):
    _, run, _ = runs
    summary = run.summary(threshold=0.4)
    masks = run.masks(0.4)
    for layer, mask, model_layer in zip(summary["layers"], masks, run.model.layers):
        assert layer["kept"] == int(mask.sum()) and layer["density"] == pytest.approx(mask.float().mean().item())
        alpha = torch.sigmoid(model_layer.inclusion_logit.detach()).double().mean().item()
        assert layer["mean_statistic"] == pytest.approx(alpha)
        psi = torch.sigmoid(model_layer.prior_inclusion_logit.detach()).item()
        assert layer["prior"]["prior_inclusion"] == pytest.approx(psi)
    total = sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    assert summary["density"] == pytest.approx(total)
    assert summary["metrics"]["MED-MEA R=1 accuracy"] == run.metrics["MED-MEA R=1 accuracy"]
    assert summary["metrics"]["density"] == run.metrics["density"]


def test_summary_of_a_regression_run_gives_the_noise_sd_in_original_units(runs):
    _, _, run = runs
    summary = run.summary()
    expected = float(run.model.likelihood.log_noise_std.detach().exp()) * run.dataset().target_std
    assert summary["task"] == "regression" and summary["noise_std"] == pytest.approx(expected)
    assert summary["metrics"]["MED-MEA R=1 rmse"] == run.metrics["MED-MEA R=1 rmse"]


def test_coef_intervals_are_the_closed_form_quantiles_of_q(runs):
    _, run, _ = runs
    coefficients = run.coef(threshold=0.3, level=0.9)
    masks = run.masks(0.3)
    for layer, coef, mask in zip(run.model.layers, coefficients, masks):
        assert len(coef) == int(mask.sum()) and coef.method == "closed-form"
        mu = layer.weight_mu.detach().double().numpy()[coef.row, coef.column]
        sigma = torch.nn.functional.softplus(layer.weight_rho.detach()).double().numpy()[coef.row, coef.column]
        np.testing.assert_allclose(coef.lower, norm(mu, sigma).ppf(0.05), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(coef.upper, norm(mu, sigma).ppf(0.95), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(coef.mean, mu, rtol=1e-6)
        assert mask[torch.as_tensor(coef.row), torch.as_tensor(coef.column)].all()


def test_coef_from_draws_agrees_with_the_closed_form(runs):
    _, run, _ = runs
    exact = run.coef(threshold=0.3, level=0.8)
    drawn = run.coef(threshold=0.3, level=0.8, samples=4000, method="draws")
    for a, b in zip(exact, drawn):
        assert b.method == "draws" and np.array_equal(a.row, b.row)
        width = a.upper - a.lower
        # The 0.1-quantile of 4000 normal draws has sd 0.027 sigma; the width is 2.56 sigma: 5 sd = 0.053 width.
        assert np.all(np.abs(b.lower - a.lower) <= 0.055 * width + 1e-9)
        assert np.all(np.abs(b.upper - a.upper) <= 0.055 * width + 1e-9)


def test_summary_of_a_gaussian_family_gives_its_prior(tmp_path):
    run = train_run(
        RunConfig(
            dataset="two-moons",
            method="bnn",
            hidden=(4,),
            family_options={"prior_variance": 0.5},
            train={"epochs": 1},
            device="cpu",
        ),
        cache_dir=tmp_path,
    )
    summary = run.summary()
    assert [layer["prior"] for layer in summary["layers"]] == [{"prior_variance": 0.5}] * 2
    assert summary["statistic"] == "signal_to_noise"
    means = [
        float((m.weight_mu.abs() / torch.nn.functional.softplus(m.weight_rho)).detach().double().mean())
        for m in run.model.layers
    ]
    assert [layer["mean_statistic"] for layer in summary["layers"]] == pytest.approx(means)


def test_coef_of_a_non_gaussian_family_uses_draws(tmp_path):
    run = train_run(
        RunConfig(dataset="two-moons", method="horseshoe", hidden=(4,), train={"epochs": 1}, device="cpu"),
        cache_dir=tmp_path,
    )
    coefficients = run.coef(samples=200)
    assert all(c.method == "draws" and np.all(c.lower <= c.upper) for c in coefficients)
    with pytest.raises(Exception, match="draws"):
        run.coef(method="closed-form")


def test_predict_is_core_predict_in_original_units(runs):
    _, classification, regression = runs
    x = classification.dataset().x_test[:30]
    ours = classification.predict(x, mode="mpm", samples=4, threshold=0.4)
    theirs = core_predict(classification.model, x, mode="mpm", samples=4, threshold=0.4)
    np.testing.assert_array_equal(ours.probs, theirs.probs)
    data = regression.dataset()
    ours = regression.predict(data.x_test, mode="bma", samples=3)
    standard = regression.predict(data.x_test, mode="bma", samples=3, original_units=False)
    np.testing.assert_allclose(ours.mean, standard.mean * data.target_std + data.target_mean, rtol=1e-5)


def test_evaluate_and_sweep_match_the_stored_numbers(runs):
    cache, run, _ = runs
    again = load_run(run.run_id, cache_dir=cache)
    assert again.evaluate(mode="mpm-mean", samples=1)["accuracy"] == pytest.approx(run.metrics["MED-MEA R=1 accuracy"])
    stored = again.default_sweep()
    computed = again.sweep()
    np.testing.assert_allclose(stored.values, computed.values)
    np.testing.assert_array_equal(stored.disconnected, computed.disconnected)
    np.testing.assert_allclose(stored.density, computed.density)
    assert computed.disconnected.any() and not computed.disconnected.all()
    # A run stored before summaries held the flag: it comes from the masks.
    older = dataclasses.replace(
        again, summaries={k: v for k, v in again.summaries.items() if k != "sweep_disconnected"}
    )
    np.testing.assert_array_equal(older.default_sweep().disconnected, computed.disconnected)


def test_run_of_a_bare_model(runs):
    _, run, _ = runs
    bare = Run.of(run.model, run.dataset())
    assert bare.run_id is None
    assert bare.evaluate(mode="mean", samples=1)["accuracy"] == run.evaluate(mode="mean", samples=1)["accuracy"]
