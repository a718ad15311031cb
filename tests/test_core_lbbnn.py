"""LBBNN and the Gaussian mean-field families checked against truth:
closed forms vs Monte Carlo, estimator moments, the alpha -> 1 limit, and exact
posterior inclusion probabilities of a linear model by enumeration."""

import itertools
import math

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from core.models.base import augmented_linear, new_generator
from core.models.gaussian import GaussianLayer, GaussianOptions, MixtureGaussianLayer
from core.models.lbbnn import LBBNNLayer, LBBNNOptions
from core.models.network import BayesianMLP, ModelConfig
from core.train import TrainConfig, train


def randomised_lbbnn(in_features=3, out_features=2, seed=0, **options) -> LBBNNLayer:
    torch.manual_seed(seed)
    layer = LBBNNLayer(in_features, out_features, LBBNNOptions.from_dict(options))
    with torch.no_grad():
        layer.weight_mu.normal_(0, 1)
        layer.weight_rho.uniform_(-1.5, 0.5)
        layer.inclusion_logit.normal_(0, 1.5)
    return layer


def log_normal(w, mean, var):
    return -0.5 * (torch.log(2 * math.pi * var) + (w - mean) ** 2 / var)


def test_lbbnn_closed_form_kl_matches_monte_carlo():
    layer = randomised_lbbnn(slab_variance=0.7, prior_inclusion=0.2)
    n = 400_000
    gen = new_generator("cpu", 1)
    with torch.no_grad():
        alpha, mu, sigma = layer.inclusion_probability, layer.weight_mu, layer.weight_sigma
        gamma = (torch.rand((n, *layer.shape), generator=gen) < alpha).double()
        w = mu + sigma * torch.randn((n, *layer.shape), generator=gen)
        alpha, mu, var, w = alpha.double(), mu.double(), (sigma**2).double(), w.double()
        log_q = gamma * (torch.log(alpha) + log_normal(w, mu, var)) + (1 - gamma) * torch.log(1 - alpha)
        prior_var = torch.tensor(0.7, dtype=torch.double)
        log_p = gamma * (math.log(0.2) + log_normal(w, 0.0, prior_var)) + (1 - gamma) * math.log(0.8)
        per_draw = (log_q - log_p).sum(dim=(1, 2))
        estimate, stderr = per_draw.mean().item(), per_draw.std().item() / math.sqrt(n)
        closed = layer.kl().item()
    assert abs(closed - estimate) < 4 * stderr + 1e-4


def test_gaussian_closed_form_kl_matches_monte_carlo():
    torch.manual_seed(0)
    layer = GaussianLayer(3, 2, GaussianOptions(prior_variance=2.0))
    with torch.no_grad():
        layer.weight_mu.normal_(0, 1)
        layer.weight_rho.uniform_(-1, 1)
        mu, var = layer.weight_mu.double(), (layer.weight_sigma**2).double()
        w = mu + var.sqrt() * torch.randn((300_000, *layer.shape), dtype=torch.double)
        per_draw = (log_normal(w, mu, var) - log_normal(w, 0.0, torch.tensor(2.0, dtype=torch.double))).sum(dim=(1, 2))
        assert abs(layer.kl().item() - per_draw.mean().item()) < 4 * per_draw.std().item() / math.sqrt(len(per_draw))


@pytest.mark.slow  # Monte Carlo KL: 4 s CPU
def test_mixture_prior_kl_is_unbiased_for_the_numerical_kl():
    torch.manual_seed(0)
    layer = MixtureGaussianLayer(2, 1)
    with torch.no_grad():
        layer.weight_mu.copy_(torch.tensor([[0.3, -0.05, 0.8]]))
        layer.weight_rho.fill_(-3.0)
        # Exact KL per weight by quadrature on a fine grid.
        exact = 0.0
        for mu, sigma in zip(layer.weight_mu.flatten().double(), layer.weight_sigma.flatten().double()):
            grid = torch.linspace(float(mu - 10 * sigma), float(mu + 10 * sigma), 200_001, dtype=torch.double)
            q = torch.exp(log_normal(grid, mu, sigma**2))
            log_p = layer.prior_log_density(grid.float()).double()
            exact += torch.trapezoid(q * (log_normal(grid, mu, sigma**2) - log_p), grid).item()
        draws = torch.stack([layer.kl() for _ in range(20_000)]).double()
    assert abs(draws.mean().item() - exact) < 4 * draws.std().item() / math.sqrt(len(draws)) + 1e-3


def test_beta_binomial_plug_in_matches_monte_carlo_for_a_wide_layer():
    """The count k = sum(gamma) is replaced by its mean; for many weights the error is small."""
    torch.manual_seed(0)
    layer = LBBNNLayer(200, 50, LBBNNOptions(inclusion_prior="beta-binomial", beta_a=2.0, beta_b=5.0))
    with torch.no_grad():
        alpha = layer.inclusion_probability.double()
        a, b, total = 2.0, 5.0, alpha.numel()
        k = (torch.rand((4000, *alpha.shape), dtype=torch.double) < alpha).sum(dim=(1, 2)).double()
        log_prior = (
            torch.lgamma(a + k)
            + torch.lgamma(b + total - k)
            - math.lgamma(a + total + b)
            - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
        )
        neg_entropy = (alpha * alpha.log() + (1 - alpha) * (1 - alpha).log()).sum()
        sigma2 = layer.weight_sigma.double() ** 2
        slab = (alpha * 0.5 * ((sigma2 + layer.weight_mu.double() ** 2) - 1 - torch.log(sigma2))).sum()
        monte_carlo = (slab + neg_entropy - log_prior.mean()).item()
        assert layer.kl().item() == pytest.approx(monte_carlo, rel=1e-3)


def test_local_reparameterisation_and_weight_sampling_give_the_same_preactivation_moments():
    layer = randomised_lbbnn(in_features=4, out_features=3, seed=3)
    x = torch.tensor([[0.5, -1.0, 2.0, 0.3]])
    n = 200_000
    with torch.no_grad():
        torch.manual_seed(0)
        lrt = layer(x.expand(n, -1)).double()
        sampled = augmented_linear(x, layer.sample_weights(n, new_generator("cpu", 0))).squeeze(1).double()
        alpha, mu, s2 = layer.inclusion_probability.double(), layer.weight_mu.double(), layer.weight_sigma.double() ** 2
        x_aug = torch.cat([x, torch.ones(1, 1)], dim=1).double()
        exact_mean = (x_aug @ (alpha * mu).T).squeeze(0)
        exact_var = (x_aug**2 @ (alpha * (s2 + mu**2) - (alpha * mu) ** 2).T).squeeze(0)
    for draws in (lrt, sampled):
        stderr = (exact_var / n).sqrt()
        assert torch.all((draws.mean(0) - exact_mean).abs() < 5 * stderr)
        assert torch.allclose(draws.var(0), exact_var, rtol=0.02)


@pytest.mark.slow  # trains at several temperatures: 4 s CPU
def test_relaxed_bernoulli_estimator_approaches_hard_sampling_at_low_temperature():
    layer = randomised_lbbnn(in_features=4, out_features=3, seed=4, estimator="relaxed-bernoulli", temperature=0.05)
    x = torch.tensor([[0.5, -1.0, 2.0, 0.3]])
    with torch.no_grad():
        torch.manual_seed(0)
        relaxed = torch.stack([layer(x)[0] for _ in range(20_000)]).double()
        alpha, mu = layer.inclusion_probability.double(), layer.weight_mu.double()
        exact_mean = (torch.cat([x, torch.ones(1, 1)], 1).double() @ (alpha * mu).T).squeeze(0)
    assert torch.allclose(relaxed.mean(0), exact_mean, atol=0.1)


def pinned_pair(seed=0):
    """An LBBNN with every inclusion probability pinned at 1 and a `bnn` with the same weights."""
    torch.manual_seed(seed)
    config = dict(in_features=5, out_classes=3, hidden=(7,))
    lbbnn = BayesianMLP(ModelConfig(family="lbbnn", **config))
    bnn = BayesianMLP(ModelConfig(family="bnn", **config))
    with torch.no_grad():
        for a, b in zip(lbbnn.layers, bnn.layers):
            a.weight_mu.normal_(0, 0.5)
            a.weight_rho.uniform_(-3, -1)
            b.weight_mu.copy_(a.weight_mu)
            b.weight_rho.copy_(a.weight_rho)
            a.fix_structure(torch.ones(a.shape))
    return lbbnn, bnn


def test_lbbnn_with_inclusion_pinned_at_one_is_the_bnn():
    lbbnn, bnn = pinned_pair()
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    psi = lbbnn.layers[0].options.prior_inclusion
    with torch.no_grad():
        for mode in ("mean_weights", "conditional_mean_weights"):
            for wa, wb in zip(getattr(lbbnn, mode)(), getattr(bnn, mode)()):
                assert torch.equal(wa, wb)
        for wa, wb in zip(lbbnn.sample_weights(4, seed=9), bnn.sample_weights(4, seed=9)):
            assert torch.equal(wa, wb)
        torch.manual_seed(1)
        out_lbbnn = lbbnn(x)
        torch.manual_seed(1)
        out_bnn = bnn(x)
        assert torch.allclose(out_lbbnn, out_bnn, atol=1e-5)
        # Same ELBO up to the constant KL of indicators pinned at 1: -log psi per weight.
        data_lbbnn = lbbnn.likelihood.log_prob(out_lbbnn, y).sum()
        data_bnn = bnn.likelihood.log_prob(out_bnn, y).sum()
        assert torch.allclose(data_lbbnn, data_bnn, atol=1e-4)
        constant = lbbnn.n_weights() * -math.log(psi)
        assert lbbnn.kl().item() == pytest.approx(bnn.kl().item() + constant, rel=1e-5)


def test_pinned_lbbnn_gradients_for_weights_equal_the_bnn():
    lbbnn, bnn = pinned_pair(1)
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    for model in (lbbnn, bnn):
        torch.manual_seed(2)
        loss = -model.likelihood.log_prob(model(x), y).mean() + model.kl() / 100
        loss.backward()
    for a, b in zip(lbbnn.layers, bnn.layers):
        assert torch.allclose(a.weight_mu.grad, b.weight_mu.grad, atol=1e-4)
        assert torch.allclose(a.weight_rho.grad, b.weight_rho.grad, atol=1e-4)


def exact_inclusion_probabilities(X, y, noise_var, slab_var, psi):
    """Posterior inclusion probabilities of each column by enumerating all 2^p models."""
    n, p = X.shape
    log_post, models = [], []
    for gamma in itertools.product([0, 1], repeat=p):
        cols = np.flatnonzero(gamma)
        cov = noise_var * np.eye(n) + slab_var * X[:, cols] @ X[:, cols].T
        _, logdet = np.linalg.slogdet(cov)
        log_marginal = -0.5 * (logdet + y @ np.linalg.solve(cov, y) + n * math.log(2 * math.pi))
        k = len(cols)
        log_post.append(log_marginal + k * math.log(psi) + (p - k) * math.log(1 - psi))
        models.append(gamma)
    log_post = np.array(log_post)
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    return (weights[:, None] * np.array(models)).sum(0)


@pytest.mark.slow
def test_lbbnn_inclusion_probabilities_match_exact_enumeration_on_a_linear_model():
    rng = np.random.default_rng(0)
    n, noise_std = 60, 1.0
    X = rng.normal(size=(n, 4)).astype(np.float32)
    true_beta = np.array([1.2, 0.0, -0.9, 0.0], dtype=np.float32)
    y = (X @ true_beta + noise_std * rng.normal(size=n)).astype(np.float32)
    psi, slab_var = 0.3, 1.0
    # The augmented bias column is one more candidate covariate: a column of ones.
    exact = exact_inclusion_probabilities(
        np.c_[X, np.ones(n)].astype(np.float64), y.astype(np.float64), noise_std**2, slab_var, psi
    )
    config = ModelConfig(
        in_features=4,
        out_classes=None,
        hidden=(),
        family="lbbnn",
        likelihood="gaussian",
        family_options={"prior_inclusion": psi, "slab_variance": slab_var, "init_sigma": 0.3},
    )
    torch.manual_seed(0)
    model = BayesianMLP(config)
    model.likelihood.log_noise_std.data.fill_(math.log(noise_std))
    model.likelihood.log_noise_std.requires_grad_(False)
    rates = {"weights": 0.02, "scales": 0.02, "inclusion": 0.02}
    train(
        model,
        torch.tensor(X),
        torch.tensor(y),
        TrainConfig(epochs=3000, batch_size=n, mc_samples=4, learning_rates=rates, kl_weight=1.0),
        seed=0,
    )
    with torch.no_grad():
        approx = model.layers[0].inclusion_probability.flatten().numpy()
    assert np.all(np.abs(approx - exact) < 0.15), (approx, exact)
    assert np.array_equal(approx > 0.5, exact > 0.5)


def test_invalid_hyperparameters_are_refused_with_the_field_named():
    cases = [
        ({"prior_inclusion": 1.5}, "prior_inclusion"),
        ({"prior_inclusion": 0.0}, "prior_inclusion"),
        ({"slab_variance": -1.0}, "slab_variance"),
        ({"temperature": 0.0}, "temperature"),
        ({"estimator": "magic"}, "estimator"),
        ({"no_such_option": 1}, "no_such_option"),
    ]
    for options, field in cases:
        with pytest.raises(ConfigError, match=field):
            ModelConfig(in_features=4, out_classes=2, hidden=(3,), family="lbbnn", family_options=options)
    with pytest.raises(ConfigError, match="hidden"):
        ModelConfig(in_features=4, out_classes=2, hidden=(3, 0), family="lbbnn")
    with pytest.raises(ConfigError, match="prior_variance"):
        ModelConfig(in_features=4, out_classes=2, hidden=(3,), family="bnn", family_options={"prior_variance": -2})
    with pytest.raises(ConfigError, match="method"):
        ModelConfig(in_features=4, out_classes=2, family="lbbn")
    for bad in (
        {"batch_size": 0},
        {"mc_samples": 0},
        {"epochs": -1},
        {"learning_rates": {"weights": -0.1}},
        {"learning_rates": {"wieghts": 0.1}},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            TrainConfig(**bad)


def test_paper_aliases_resolve_to_the_families():
    assert ModelConfig(in_features=2, out_classes=2, family="LBBNN-SSP-MF").family == "lbbnn"
    assert ModelConfig(in_features=2, out_classes=2, family="BNN-GP-MF").family == "bnn"


@pytest.mark.parametrize("bias_prior", ["spike-and-slab", "gaussian"])
def test_fused_training_path_equals_autograd_in_values_and_gradients(bias_prior):
    layer = randomised_lbbnn(
        in_features=6, out_features=4, seed=5, prior_inclusion=0.3, slab_variance=0.5, bias_prior=bias_prior
    )
    x = torch.randn(8, 6)
    assert layer._fused_path_applies()
    results = []
    for fused in (True, False):
        layer.zero_grad()
        torch.manual_seed(0)
        out, kl = layer.forward_with_kl(x) if fused else (layer(x), layer.kl())
        (out.pow(2).sum() * 0.3 + out.sum() + 0.7 * kl).backward()
        results.append(
            (
                out.detach(),
                kl.detach(),
                [p.grad.clone() for p in (layer.weight_mu, layer.weight_rho, layer.inclusion_logit)],
            )
        )
    (out_f, kl_f, grads_f), (out_a, kl_a, grads_a) = results
    assert torch.allclose(out_f, out_a, atol=1e-5)
    assert torch.allclose(kl_f, kl_a, rtol=1e-5)
    for g_f, g_a in zip(grads_f, grads_a):
        assert torch.allclose(g_f, g_a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias_has_indicator", [True, False])
def test_fused_layer_passes_gradcheck_in_double_precision(bias_has_indicator):
    """Every hand-derived gradient (input, mu, rho, logit) against finite differences, KL value included."""
    from core.models.lbbnn_fused import LBBNNLinear

    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.double, requires_grad=True)
    mu = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    rho = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    logit = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    noise = torch.randn(5, 4, dtype=torch.double)
    constants = torch.tensor(-1.2, dtype=torch.double), torch.tensor(0.8, dtype=torch.double).log()
    assert torch.autograd.gradcheck(
        lambda *a: LBBNNLinear.apply(*a, noise, *constants, True, bias_has_indicator), (x, mu, rho, logit)
    )


def test_fused_surrogate_kl_has_the_gradient_but_not_the_value_of_the_kl():
    from core.models.lbbnn_fused import LBBNNLinear

    torch.manual_seed(0)
    params = [torch.randn(4, 4, dtype=torch.double, requires_grad=True) for _ in range(3)]
    x, noise = torch.randn(5, 3, dtype=torch.double), torch.randn(5, 4, dtype=torch.double)
    constants = torch.tensor(-1.2, dtype=torch.double), torch.tensor(0.8, dtype=torch.double).log()
    grads = []
    for kl_value in (True, False):
        _, kl = LBBNNLinear.apply(x, *params, noise, *constants, kl_value)
        grads.append(torch.autograd.grad(kl, params))
        if not kl_value:
            assert kl.item() == 0.0
        else:
            assert kl.item() > 0.0
    for exact, surrogate in zip(*grads):
        assert torch.allclose(exact, surrogate)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["lbbnn", "bnn"])
def test_compiled_kernels_train_to_the_same_model_as_the_eager_ones(family):
    """TrainConfig(compile=True) swaps in torch.compile'd kernels; the arithmetic is the same."""
    from core.data import load_dataset

    ds = load_dataset("two-moons", n=200)
    x, y = torch.tensor(ds.x_train), torch.tensor(ds.y_train)
    states = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,), family=family))
        with _no_compile_fallback_warning():
            train(model, x, y, TrainConfig(epochs=2, batch_size=50, compile=compiled, kl_weight=1.0), seed=0)
        assert all(layer.compiled_kernels == compiled for layer in model.layers)
        states.append(model.state_dict())
    for key in states[0]:
        assert torch.allclose(states[0][key], states[1][key], rtol=1e-4, atol=1e-5), key


class _no_compile_fallback_warning:
    """Fail if training fell back to the eager kernels (the compiled path must really run)."""

    def __enter__(self):
        import warnings

        self._catcher = warnings.catch_warnings(record=True)
        self._records = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catcher.__exit__(*exc)
        assert not [r for r in self._records if "kernels failed" in str(r.message)]
        return False
