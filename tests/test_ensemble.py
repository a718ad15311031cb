"""The `ensemble` (deep-ensemble) family against truths outside its code: its draws are its members
(every layer of a draw the same member, R = K draws each member once), bma is the equal mixture of the
members' own networks, and its objective is the mean of the members' independent MAP objectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.network import ModelConfig, build_model
from core.predict import predict

K = 3


def ensemble(seed: int = 0, members: int = K, hidden=(4, 3), likelihood: str = "gaussian"):
    torch.manual_seed(seed)
    return build_model(
        ModelConfig(
            in_features=2,
            out_classes=None if likelihood == "gaussian" else 3,
            hidden=hidden,
            family="ensemble",
            activation="tanh",
            family_options={"members": members, "prior_precision": 2.0},
            likelihood=likelihood,
            likelihood_options={"noise": "fixed", "noise_std": 0.5} if likelihood == "gaussian" else {},
        )
    )


def member_network(model, k: int, x: torch.Tensor) -> torch.Tensor:
    """Member k's network by hand: its own (out, in + 1) matrices, tanh between layers."""
    a = x
    for index, layer in enumerate(model.layers):
        w = layer.weight[k]
        a = a @ w[:, :-1].T + w[:, -1]
        if index < len(model.layers) - 1:
            a = torch.tanh(a)
    return a


def test_every_layer_of_a_draw_is_the_same_member_and_k_draws_are_every_member_once():
    model = ensemble()
    for seed in (0, 7, 12345):
        with torch.no_grad():
            draws = model.sample_weights(2 * K, seed=seed)
        chosen = []
        for r in range(2 * K):
            per_layer = [
                next(k for k in range(K) if torch.equal(draws[i][r], layer.weight[k]))
                for i, layer in enumerate(model.layers)
            ]
            assert len(set(per_layer)) == 1, (seed, r, per_layer)
            chosen.append(per_layer[0])
        assert sorted(chosen[:K]) == list(range(K)) and chosen[K:] == chosen[:K]
        # drawn in chunks (start = 2), the same draws
        with torch.no_grad():
            tail = model.sample_weights(2 * K - 2, seed=seed, start=2)
        for whole, part in zip(draws, tail):
            torch.testing.assert_close(whole[2:], part, rtol=0, atol=0)


def test_bma_is_the_equal_mixture_of_the_members_networks():
    model = ensemble(seed=1)
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        members = torch.stack([member_network(model, k, x)[:, 0] for k in range(K)]).double()
    prediction = predict(model, x.numpy(), "bma", 2 * K)
    np.testing.assert_allclose(prediction.mean, members.mean(0).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        prediction.epistemic_variance, members.var(0, unbiased=False).numpy(), rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(prediction.aleatoric_variance, 0.25, rtol=1e-5)


@pytest.mark.parametrize("likelihood", ["gaussian", "categorical"])
def test_the_objective_is_the_mean_of_the_members_own_map_objectives(likelihood):
    """Gradients of NLL.mean() + KL / N through the (K, B, out) training forward equal 1/K times each
    member's own MAP gradient, computed member by member: the members do not interact."""
    model = ensemble(seed=3, likelihood=likelihood).double()
    x = torch.randn(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y = (
        torch.randn(8, dtype=torch.float64)
        if likelihood == "gaussian"
        else torch.randint(0, 3, (8,), generator=torch.Generator().manual_seed(5)).double()
    )
    n = 50.0
    output, kl = model.forward_with_kl(x)
    assert output.shape == (K, 8, 1 if likelihood == "gaussian" else 3)
    loss = -model.likelihood.log_prob(output, y).mean() + kl / n
    grads = torch.autograd.grad(loss, [layer.weight for layer in model.layers])
    for k in range(K):
        own = [layer.weight[k].detach().clone().requires_grad_(True) for layer in model.layers]
        a = x
        for index, w in enumerate(own):
            a = a @ w[:, :-1].T + w[:, -1]
            if index < len(own) - 1:
                a = torch.tanh(a)
        map_loss = -model.likelihood.log_prob(a, y).mean() + sum(0.5 * 2.0 * (w**2).sum() for w in own) / n
        for g, mine in zip(grads, torch.autograd.grad(map_loss, own)):
            torch.testing.assert_close(g[k] * K, mine, rtol=1e-10, atol=1e-12)


def test_members_start_apart_and_options_are_checked():
    model = ensemble(seed=5)
    w = model.layers[0].weight
    assert not torch.allclose(w[0], w[1])  # independently initialised
    for bad in ({"members": 1}, {"members": 2.5}, {"members": True}, {"prior_precision": 0.0}):
        with pytest.raises(ConfigError):
            ModelConfig(
                in_features=2,
                out_classes=None,
                hidden=(3,),
                family="deep-ensemble",
                family_options=bad,
                likelihood="gaussian",
            )


@pytest.mark.slow
def test_a_trained_ensemble_widens_in_the_gaps_of_toy_sine_gaps_and_round_trips(tmp_path):
    from core.predict import evaluate
    from core.predict.metrics.regression import band_width_ratios
    from core.runs import RunConfig
    from core.runs.training import train_run

    config = RunConfig(dataset="toy-sine-gaps", method="deep-ensemble", hidden=(16, 16), train={"epochs": 300})
    assert config.method == "ensemble" and config.activation == "tanh"
    run = train_run(config, cache_dir=tmp_path)
    dataset = run.dataset()
    band = np.sqrt(predict(run.model, dataset.x_grid, "bma", 2 * K).epistemic_variance)
    ratios = band_width_ratios(dataset.x_grid, dataset.x_train, band)
    assert ratios["gap_ratio"] > 1.5
    again = train_run(config, cache_dir=tmp_path)  # from the store
    for a, b in zip(run.model.layers, again.model.layers):
        torch.testing.assert_close(a.weight, b.weight, rtol=0, atol=0)
    assert math.isfinite(evaluate(again.model, dataset, "bma", 10)["rmse"])
