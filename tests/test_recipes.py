"""The pieces of the training recipes: the tempered objective, Hubin & Storvik's (2024) prior (3), honest
labels after post-training, and the benchmark tables' arithmetic."""

from __future__ import annotations

import math

import pytest
import torch

from core.errors import ConfigError
from core.models.lbbnn import LBBNNLayer, LBBNNOptions
from core.models.network import BayesianMLP, ModelConfig
from core.predict import predict
from core.runs.config import RunConfig
from core.train import TrainConfig, train


def test_kl_weight_must_lie_in_zero_one():
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="kl_weight"):
            TrainConfig(kl_weight=bad)
    with pytest.raises(ConfigError, match="kl_weight"):
        RunConfig(dataset="two-moons", train={"kl_weight": 2})


def test_kl_weight_scales_the_kl_gradient_exactly():
    """One full-batch step's KL gradient at weight w equals w times the ELBO's KL gradient."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 3), torch.randint(0, 2, (32,))

    def kl_gradient(weight: float) -> torch.Tensor:
        torch.manual_seed(1)
        model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="lbbnn"))
        loss = weight * model.kl() / len(x)
        loss.backward()
        return model.layers[0].inclusion_logit.grad.clone()

    assert torch.allclose(kl_gradient(0.1), 0.1 * kl_gradient(1.0), rtol=1e-5, atol=1e-9)
    # and the training loop applies it: the recorded loss is data + w KL / N
    model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(4,), family="lbbnn"))
    records = []
    train(model, x, y, TrainConfig(epochs=1, batch_size=32, kl_weight=0.3), progress=records.append)
    r = records[0]
    assert r["kl_weight"] == 0.3
    assert r["loss"] == pytest.approx(r["data_term"] + 0.3 * r["kl"] / len(x), rel=1e-6)


def test_cli_kl_weight_flag_reaches_the_config():
    import argparse

    from core.cli import runs as runs_cli

    parser = argparse.ArgumentParser()
    runs_cli.register(parser.add_subparsers())
    args = parser.parse_args(["train", "--dataset", "two-moons", "--kl-weight", "0.25"])
    assert runs_cli.config_from_args(args).train.kl_weight == 0.25


def test_beta_bernoulli_prior_is_bernoulli_with_psi_a_over_a_plus_b():
    """Hubin & Storvik (2024) equation (3): BetaBinomial(gamma; 1, a, b) is Bernoulli(a / (a + b))."""
    torch.manual_seed(0)
    a, b = 2.0, 5.0
    layer = LBBNNLayer(6, 4, LBBNNOptions(inclusion_prior="beta-bernoulli", beta_a=a, beta_b=b))
    alpha = layer.inclusion_probability.detach()
    psi = a / (a + b)
    # closed form of E_q log q(gamma) - log p(gamma), weight by weight
    expected = (alpha * torch.log(alpha / psi) + (1 - alpha) * torch.log((1 - alpha) / (1 - psi))).sum()
    expected = expected + (alpha * layer.slab_kl().detach()).sum()
    assert float(layer.kl().detach()) == pytest.approx(float(expected), rel=1e-5)
    assert layer.prior_hyperparameters()["prior_inclusion"] == pytest.approx(psi)
    # the fixed Bernoulli prior at the same psi gives the same KL
    same = LBBNNLayer(6, 4, LBBNNOptions(prior_inclusion=psi))
    same.load_state_dict({k: v for k, v in layer.state_dict().items() if "beta" not in k}, strict=False)
    same.prior_inclusion_logit.data.fill_(math.log(psi / (1 - psi)))
    assert float(same.kl().detach()) == pytest.approx(float(layer.kl().detach()), rel=1e-5)


def test_empirical_bayes_moves_psi_and_leaves_slab_at_its_own_step_size():
    """Separate step sizes (Hubin & Storvik 2024 Table 1): with the slab's at 1e-12 only the inclusion prior moves."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 3), torch.randint(0, 2, (64,))
    # psi starts at 0.1, far below the inclusion probabilities' mean (about 0.5): empirical Bayes raises it.
    options = {"inclusion_prior": "beta-bernoulli", "slab": "student-t", "beta_a": 1.0, "beta_b": 9.0}
    model = BayesianMLP(ModelConfig(in_features=3, out_classes=2, hidden=(8,), family="lbbnn", family_options=options))
    before = [layer.prior_hyperparameters() for layer in model.layers]
    rates = {"prior": 5e-2, "slab_prior": 1e-12}
    train(
        model,
        x,
        y,
        TrainConfig(pretrain_epochs=20, epochs=1, batch_size=64, empirical_bayes=True, pretrain_learning_rates=rates),
    )
    after = [layer.prior_hyperparameters() for layer in model.layers]
    for old, new in zip(before, after):
        assert new["prior_inclusion"] > old["prior_inclusion"] + 0.05
        assert new["slab_a"] == pytest.approx(old["slab_a"], rel=1e-6)
        assert new["slab_b"] == pytest.approx(old["slab_b"], rel=1e-6)
    # frozen after pre-training
    assert not any(
        p.requires_grad
        for layer in model.layers
        for p in layer.parameter_groups()["prior"] + layer.parameter_groups()["slab_prior"]
    )


def _posttrained_model():
    torch.manual_seed(0)
    x, y = torch.randn(64, 2), torch.randint(0, 2, (64,))
    model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,), family="lbbnn"))
    train(model, x, y, TrainConfig(epochs=2, posttrain_epochs=1, batch_size=32, posttrain_structure="mpm"))
    return model.eval(), x


def test_after_mpm_posttraining_bma_and_mean_say_they_are_the_mpm():
    model, x = _posttrained_model()
    bma = predict(model, x, "bma", samples=4)
    mpm = predict(model, x, "mpm", samples=4)
    assert any("median probability model" in w and "MED-SIM" in w for w in bma.warnings)
    assert not any("median probability model" in w for w in mpm.warnings)
    # the warning is true: the numbers are the MPM's
    assert bma.probs == pytest.approx(mpm.probs, abs=1e-6)
    mean = predict(model, x, "mean")
    assert any("MED-MEA" in w for w in mean.warnings)


def test_stored_metrics_after_mpm_posttraining_keep_only_the_med_modes():
    from core.data import load_dataset
    from core.runs.training import final_metrics

    dataset = load_dataset("two-moons", n=80, n_test=40)
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,), family="lbbnn"))
    train(
        model,
        torch.from_numpy(dataset.x_train),
        torch.from_numpy(dataset.y_train),
        TrainConfig(epochs=2, posttrain_epochs=1, batch_size=40, posttrain_structure="mpm"),
    )
    metrics = final_metrics(model.eval(), dataset)
    assert metrics["structure_fixed"] == 1.0
    assert "MED-MEA R=1 accuracy" in metrics and "MED-SIM R=10 accuracy" in metrics
    assert not any(k.startswith(("SIM-SIM", "ALL-MEA")) for k in metrics)


def test_time_to_quality_table_reports_the_first_epoch_at_target_and_the_median():
    from benchmarks.time_to_quality import render_markdown

    def entry(seed, reached_seconds, reached=True):
        rows = [
            {"epoch": 1, "phase": "train", "train_seconds": 10.0, "mpm_mean_accuracy": 0.97, "density": 0.3},
            {
                "epoch": 2,
                "phase": "train",
                "train_seconds": reached_seconds,
                "mpm_mean_accuracy": 0.98,
                "density": 0.09,
            },
        ]
        reached = rows[1] if reached else None
        return {
            "preset": "fast-mnist",
            "seed": seed,
            "target_accuracy": 0.975,
            "target_density": 0.1,
            "reached": reached,
            "rows": rows,
            "machine": {"cpu_count": 2},
            "date": "today",
        }

    text = render_markdown([entry(0, 60.0), entry(1, 120.0), entry(2, 300.0)])
    assert "| fast-mnist | 0 | >= 0.975 at <= 0.10 | 2 | 60 | 0.9800 | 0.0900 |" in text
    assert "MED-MEA >= 0.975 at density <= 0.10: reached by 3 of 3 seeds; median 2.0 min" in text
    text = render_markdown([entry(0, 50.0, reached=False)])
    assert "not reached" in text and "not reached by any of 1 seeds" in text
