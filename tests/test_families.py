"""Contract tests run over every family (and option variants): serialisation,
buffers, Monte Carlo agreement of sampling with the mean, keep-mask direction,
KL sanity, and (slow) a loose accuracy floor on mnist-small for the families
added later."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from torch.distributions import Bernoulli, Gamma, MultivariateNormal, Normal, StudentT

from core.models.network import BayesianMLP, ModelConfig, build_model
from core.models.registry import FAMILY_PATHS
from tests.support import VARIANT_IDS, VARIANTS, perturb

# Families whose kl() is an exact KL (or a sum of exact KL terms), hence >= 0.
# bnn-mixture and the Student-t slab use a one-draw Monte Carlo KL; concrete
# dropout drops an infinite constant (see its module docstring).
EXACT_KL = {"lbbnn", "lbbnn-lfmvn", "bnn", "variational-dense", "horseshoe", "sparse-vd", "fnn", "laplace", "ensemble"}
# Prior constants that must be registered buffers (or frozen parameters) of a layer.
PRIOR_NAMES = {
    "lbbnn": ["log_slab_variance", "prior_inclusion_logit", "log_beta_a", "log_beta_b"],
    "lbbnn-lfmvn": ["log_slab_variance", "prior_inclusion_logit", "logit_prior_variance"],
    "lbbnn-flow": ["log_slab_variance", "prior_inclusion_logit", "log_beta_a", "log_beta_b"],
    "bnn": ["prior_variance"],
    "bnn-mixture": ["prior_variance", "prior_variance_2", "mixture_weight"],
    "variational-dense": ["prior_variance"],
    "concrete-dropout": ["prior_variance"],
    "horseshoe": [
        "layer_prior_scale",
        "node_prior_scale",
        "node_aux_rate",
        "layer_aux_rate",
        "slab_shape",
        "slab_scale",
        "prune_delta",
    ],
    "sparse-vd": [],  # the log-uniform prior has no parameters
    "fnn": [],
    "laplace": ["prior_precision"],
    "ensemble": ["prior_precision"],
}


def make_model(family: str, options: dict, seed: int = 0) -> BayesianMLP:
    torch.manual_seed(seed)
    return build_model(ModelConfig(in_features=5, out_classes=3, hidden=(4,), family=family, family_options=options))


def test_variants_cover_every_registered_family():
    assert {family for family, _ in VARIANTS} == set(FAMILY_PATHS)


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_state_dict_round_trip_reproduces_the_model(family, options):
    source = make_model(family, options, seed=0)
    perturb(source, seed=1)
    target = make_model(family, options, seed=2)
    target.load_state_dict(source.state_dict())
    with torch.no_grad():
        for a, b in zip(source.mean_weights(), target.mean_weights()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for a, b in zip(source.native_statistics(), target.native_statistics()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for a, b in zip(source.sample_weights(3, seed=7), target.sample_weights(3, seed=7)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.manual_seed(3)
        kl_source = source.kl()
        torch.manual_seed(3)
        torch.testing.assert_close(kl_source, target.kl(), rtol=0, atol=0)


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_priors_are_in_the_state_dict_and_buffers_follow_the_module(family, options):
    model = make_model(family, options)
    state = model.state_dict()
    for name in PRIOR_NAMES[family]:
        if family == "horseshoe" and options.get("prior") == "horseshoe" and name.startswith("slab"):
            continue
        assert f"layers.0.{name}" in state, f"{name} missing from the state_dict of {family}"
    model = model.to(torch.float64)
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point():
            assert tensor.dtype == torch.float64, name
    with torch.no_grad():
        assert all(w.dtype == torch.float64 for w in model.mean_weights())
        assert all(s.dtype == torch.float64 for s in model.native_statistics())
        assert model.kl().dtype == torch.float64
    meta = make_model(family, options).to("meta")
    assert all(tensor.is_meta for tensor in meta.state_dict().values())
    assert all(buffer.is_meta for buffer in meta.buffers())


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_mean_of_weight_draws_matches_mean_weights(family, options):
    model = make_model(family, options)
    perturb(model, seed=4)
    layer = model.layers[0]
    n = 40_000
    with torch.no_grad():
        draws = layer.sample_weights(n, torch.Generator().manual_seed(5)).double()
        mean = layer.mean_weights().double()
    standard_error = draws.std(0) / math.sqrt(n)
    assert torch.all((draws.mean(0) - mean).abs() <= 5 * standard_error + 1e-5), family


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_forward_pre_activation_mean_matches_the_mean_network(family, options):
    model = make_model(family, options)
    layer = model.layers[0]
    x = torch.randn(2, layer.in_features, generator=torch.Generator().manual_seed(0))
    calls, repeats = 100, 200
    if family == "ensemble":  # (K, B, out): the members' pre-activations, whose mean is the mean network's
        with torch.no_grad():
            weight = layer.mean_weights().double()
            torch.testing.assert_close(layer(x).double().mean(0), x.double() @ weight[:, :-1].T + weight[:, -1])
        return
    with torch.no_grad():
        torch.manual_seed(1)
        # Draws shared within a call (horseshoe scales, LFMVN logits, relaxed
        # weight draws) correlate its rows: the standard error uses call means.
        outputs = torch.stack(
            [layer(x.repeat(repeats, 1)).reshape(repeats, 2, -1).mean(0) for _ in range(calls)]
        ).double()
        weight = layer.mean_weights().double()
        expected = x.double() @ weight[:, :-1].T + weight[:, -1]
    standard_error = outputs.std(0) / math.sqrt(calls)
    if family == "concrete-dropout" or options.get("estimator") == "relaxed-bernoulli":
        # Relaxed Bernoulli masks are not exactly Bernoulli: their mean is only
        # close to the keep probability, so allow a small relative bias.
        tolerance = 5 * standard_error + 0.05 * expected.abs()
    else:
        tolerance = 5 * standard_error + 1e-5
    assert torch.all((outputs.mean(0) - expected).abs() <= tolerance), family


def _signal_and_noise(layer, family: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Set one weight to be clearly kept and another clearly pruned; return their indices."""
    keep, prune = (0, 0), (1, 0)
    with torch.no_grad():
        if family in ("lbbnn", "lbbnn-lfmvn", "lbbnn-flow"):
            layer.inclusion_logit[keep] = 6.0
            layer.inclusion_logit[prune] = -6.0
        elif family in ("bnn", "bnn-mixture", "variational-dense"):
            layer.weight_mu[keep], layer.weight_rho[keep] = 1.0, -5.0
            layer.weight_mu[prune], layer.weight_rho[prune] = 0.0, 1.0
        elif family in ("concrete-dropout", "fnn"):
            layer.weight[keep], layer.weight[prune] = 0.5, 0.0
        elif family == "laplace":  # |w| / posterior sd, as after a fit
            layer.weight[keep], layer.posterior_std[keep] = 0.5, 0.1
            layer.weight[prune], layer.posterior_std[prune] = 0.0, 1.0
        elif family == "ensemble":  # magnitude averaged over the members
            layer.weight[(slice(None), *keep)], layer.weight[(slice(None), *prune)] = 0.5, 0.0
        elif family == "sparse-vd":
            layer.theta[keep], layer.log_sigma2[keep] = 1.0, -10.0
            layer.theta[prune], layer.log_sigma2[prune] = 1e-3, 0.0
        elif family == "horseshoe":  # node granularity: rows 0 and 1
            layer.log_node_scale_mu[0] = 0.0
            layer.log_node_scale_mu[1] = -20.0
        else:  # pragma: no cover - a new family must add its case
            raise AssertionError(f"no signal/noise recipe for {family}")
    return keep, prune


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_keep_mask_at_the_default_threshold_has_the_right_direction(family, options):
    layer = make_model(family, options).layers[0]
    keep, prune = _signal_and_noise(layer, family)
    with torch.no_grad():
        mask = layer.keep_mask()
    assert mask.shape == layer.shape
    assert bool(mask[keep]) and not bool(mask[prune])


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_kl_is_finite_and_nonnegative_where_exact(family, options):
    model = make_model(family, options)
    for step in range(3):
        with torch.no_grad():
            for layer in model.layers:
                kl = layer.kl()
                assert torch.isfinite(kl), (family, step)
                if (
                    family in EXACT_KL
                    and options.get("slab") != "student-t"
                    and options.get("inclusion_prior") != "beta-binomial"
                ):
                    assert kl >= 0, (family, step, float(kl))
        perturb(model, seed=10 + step)


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_kl_has_gradients_for_every_trainable_parameter_group(family, options):
    model = make_model(family, options)
    x = torch.randn(8, 5)
    y = torch.randint(0, 3, (8,))
    loss = -model.likelihood.log_prob(model(x), y).mean() + model.kl() / 100
    loss.backward()
    for group, params in model.parameter_groups().items():
        for param in params:
            if param.requires_grad:
                assert param.grad is not None and torch.isfinite(param.grad).all(), (family, group)


# --- mnist-small accuracy floor (slow) -------------------------------------------------------
NEW_FAMILIES = ["sparse-vd", "concrete-dropout", "horseshoe", "lbbnn-lfmvn"]


@pytest.fixture(scope="module")
def mnist():
    from core.data import load_dataset

    data = load_dataset("mnist-small")
    return (
        torch.from_numpy(data.x_train),
        torch.from_numpy(data.y_train),
        torch.from_numpy(data.x_test),
        torch.from_numpy(data.y_test),
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_two_epochs_on_mnist_small_beat_a_loose_accuracy_floor(family, mnist):
    from core.train import TrainConfig, train

    x_train, y_train, x_test, y_test = mnist
    torch.manual_seed(0)
    model = build_model(ModelConfig(in_features=784, out_classes=10, hidden=(64,), family=family))
    # Default learning rates; all 10k training images (sparse VD prunes hard
    # from a random start, with 5k images it sits near 0.76 after 2 epochs).
    train(model, x_train, y_train, TrainConfig(epochs=2, batch_size=100), seed=0)
    with torch.no_grad():
        logits = model.forward_with_weights(x_test, model.mean_weights())
    accuracy = (logits.argmax(-1) == y_test).double().mean().item()
    assert accuracy > 0.8, f"{family}: posterior-mean accuracy {accuracy:.3f}"


# The variants whose forward_with_kl runs a fused kernel (a custom autograd Function) instead of
# forward() + kl(); the others are compared with an independent computation below.
FUSED_PATH_VARIANTS = [
    ("lbbnn", {}),
    ("bnn", {}),
    ("variational-dense", {}),
    ("lbbnn-lfmvn", {}),
    ("lbbnn-flow", {}),
]


@pytest.mark.parametrize(
    "family,options", FUSED_PATH_VARIANTS, ids=[f"{family}-default" for family, _ in FUSED_PATH_VARIANTS]
)
def test_forward_with_kl_equals_forward_then_kl_in_values_and_gradients(family, options):
    """The fused training path against forward + kl() under autograd.

    With kl_value=False the KL may be a surrogate, but the gradients must not change.
    """
    model = make_model(family, options)
    perturb(model, seed=6)
    x = torch.randn(8, 5)
    for layer in model.layers:
        with mock.patch.object(layer, "forward", wraps=layer.forward) as forward_spy:
            layer.forward_with_kl(x)
        assert forward_spy.call_count == 0  # the fused path is another code path than forward() + kl()
        results = []
        for path in ("fused", "surrogate", "reference"):
            x_in = x.clone().requires_grad_(True)
            layer.zero_grad()
            torch.manual_seed(0)
            if path == "reference":
                output, kl = layer(x_in), layer.kl()
            else:
                output, kl = layer.forward_with_kl(x_in, kl_value=path == "fused")
            (output.pow(2).sum() * 0.3 + output.sum() + 0.7 * kl).backward()
            grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
            results.append((output.detach(), kl.detach(), x_in.grad.clone(), grads))
        (out_f, kl_f, gx_f, grads_f), (out_s, _, gx_s, grads_s), (out_r, kl_r, gx_r, grads_r) = results
        torch.testing.assert_close(out_f, out_r, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out_s, out_r, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(kl_f, kl_r, rtol=1e-5, atol=1e-4)
        for g_x in (gx_f, gx_s):
            torch.testing.assert_close(g_x, gx_r, rtol=1e-4, atol=1e-5)
        assert grads_r and grads_f.keys() == grads_r.keys() == grads_s.keys()
        for name in grads_r:
            torch.testing.assert_close(grads_f[name], grads_r[name], rtol=1e-4, atol=1e-5, msg=name)
            torch.testing.assert_close(grads_s[name], grads_r[name], rtol=1e-4, atol=1e-5, msg=name)
        x = torch.relu(out_r)


# --- the training path against an independent computation ------------------------------------------
# Most variants train through SparseLayer's forward() + kl() (or fall back to it), so comparing their
# forward_with_kl with forward() + kl() would compare the code with itself. Here the reference is worked
# out from the layer's parameters and the papers' formulas (torch.distributions where it has the KL),
# drawing the same noise in the same order from a fixed seed.


def _softplus(value: torch.Tensor) -> torch.Tensor:
    return torch.log1p(torch.exp(value))


def _affine(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (B, in) times an augmented (out, in + 1) weight, bias in the last column."""
    return x @ weight[:, :-1].T + weight[:, -1]


def _gaussian_kl_to(mu: torch.Tensor, sigma: torch.Tensor, prior_std: float | torch.Tensor) -> torch.Tensor:
    prior_std = torch.as_tensor(prior_std, dtype=mu.dtype)
    return torch.distributions.kl_divergence(Normal(mu, sigma), Normal(torch.zeros_like(mu), prior_std)).sum()


def _half_cauchy_kl(mean: torch.Tensor, std: torch.Tensor, rate: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, std^2) on u = log a^2, IG(1, rate) on lam || a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/scale^2)).

    log p(u | lam) = -1/2 log lam - lgamma(1/2) - u/2 - exp(-u) / lam (the IG density times the Jacobian e^u);
    under q, E[1/lam] = 1/rate and E[log lam] = log rate + Euler's gamma (1/lam ~ Gamma(1, rate)).
    """
    expected_neg_log_prior = (
        0.5 * (torch.log(rate) + 0.5772156649015329)
        + math.lgamma(0.5)
        + 0.5 * mean
        + torch.exp(-mean + 0.5 * std**2) / rate
    )
    auxiliary = torch.distributions.kl_divergence(
        Gamma(torch.ones_like(rate), rate), Gamma(torch.full_like(rate, 0.5), 1 / scale**2)
    )
    return -Normal(mean, std).entropy() + expected_neg_log_prior + auxiliary


def _horseshoe_reference(layer, x: torch.Tensor, structured: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Ghosh, Yao & Doshi-Velez (2018): w_k = s_k beta_k with s_k = tau_k v
    (regularised: 1 / sqrt(1 / (tau_k v)^2 + 1 / c^2))."""
    out_features = layer.out_features
    log_v_mean, log_v_std = layer.log_layer_scale_mu, _softplus(layer.log_layer_scale_rho)
    hidden, regularised = not layer.is_output, layer.regularised
    if structured:  # draws: log tau noise, layer scale, slab (then the pre-activation noise)
        noise_tau, noise_v = torch.randn(out_features, dtype=x.dtype), torch.randn(1, dtype=x.dtype)
        noise_c = torch.randn(1, dtype=x.dtype)
    else:  # draws: node scales, slab, layer scale (then the pre-activation noise)
        noise_tau = torch.randn(out_features, dtype=x.dtype) if hidden else None
        noise_c = torch.randn(1, dtype=x.dtype) if regularised else None
        noise_v = torch.randn(1, dtype=x.dtype)
    x_aug = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    if structured:
        # z_k = [beta_k; log tau_k] ~ N(m_k, v_k U), U = diag(psi) + h h^T: condition beta_k on log tau_k.
        psi, h = _softplus(layer.row_std_rho) ** 2, layer.row_factor
        column_var = _softplus(layer.column_std_rho) ** 2
        row_cov = torch.diag(psi) + torch.outer(h, h)
        covs = column_var[:, None, None] * row_cov  # (out, in + 2, in + 2)
        means = torch.cat([layer.weight_mu, layer.log_node_scale_mu[:, None]], dim=1)
        log_tau = means[:, -1] + covs[:, -1, -1].sqrt() * noise_tau
        beta_mean = means[:, :-1] + covs[:, :-1, -1] / covs[:, -1:, -1] * (log_tau - means[:, -1])[:, None]
        beta_cov = covs[:, :-1, :-1] - covs[:, :-1, -1:] @ covs[:, -1:, :-1] / covs[:, -1:, -1:]
        pre_mean = x_aug @ beta_mean.T
        pre_var = torch.einsum("bi,kij,bj->bk", x_aug, beta_cov, x_aug)
        log_tau_v = log_tau + log_v_mean + log_v_std * noise_v
    else:
        sigma = _softplus(layer.weight_rho)
        pre_mean, pre_var = x_aug @ layer.weight_mu.T, (x_aug**2) @ (sigma**2).T
        log_tau_v = log_v_mean + log_v_std * noise_v
        if hidden:
            log_tau_v = log_tau_v + layer.log_node_scale_mu + _softplus(layer.log_node_scale_rho) * noise_tau
    scale = torch.exp(log_tau_v)
    if regularised:
        c2 = torch.exp(layer.log_slab_mu + _softplus(layer.log_slab_rho) * noise_c)
        scale = 1 / torch.sqrt(1 / scale**2 + 1 / c2)
    output = scale * (pre_mean + pre_var.sqrt() * torch.randn(pre_mean.shape, dtype=x.dtype))
    # KL: beta against N(0, I), each half-Cauchy scale with its auxiliary, the slab c^2 ~ IG(c_a, c_b).
    kl = _half_cauchy_kl(2 * log_v_mean, 2 * log_v_std, layer.layer_aux_rate, layer.layer_prior_scale)
    if structured:
        joint_entropy = sum(MultivariateNormal(torch.zeros(len(c), dtype=x.dtype), c).entropy() for c in covs)
        beta_second_moment = means[:, :-1] ** 2 + torch.diagonal(covs, dim1=1, dim2=2)[:, :-1]
        beta_cross_entropy = 0.5 * (math.log(2 * math.pi) + beta_second_moment).sum()
        tau_std = covs[:, -1, -1].sqrt()
        # E_q[log q(beta, log tau)] - E_q[log p(beta)] - E_q[log p(log tau | lam)] + KL(lam), the entropy of
        # the joint (beta, log tau) of each unit from its dense covariance.
        # In log tau (not log tau^2) the half-Cauchy term's -log p gains -log 2 and its entropy term
        # -H[q(log tau^2)] = -H[q(log tau)] - log 2: adding H[q(log tau)] back leaves -E log p + KL(lam).
        kl = (
            kl
            + beta_cross_entropy
            - joint_entropy
            + sum(
                _half_cauchy_kl(2 * means[k, -1], 2 * tau_std[k], layer.node_aux_rate[k], layer.node_prior_scale)
                + Normal(means[k, -1], tau_std[k]).entropy()
                for k in range(out_features)
            )
        )
    else:
        kl = kl + _gaussian_kl_to(layer.weight_mu, _softplus(layer.weight_rho), 1.0)
        if hidden:
            kl = (
                kl
                + _half_cauchy_kl(
                    2 * layer.log_node_scale_mu,
                    2 * _softplus(layer.log_node_scale_rho),
                    layer.node_aux_rate,
                    layer.node_prior_scale,
                ).sum()
            )
    if regularised:
        mean, std = layer.log_slab_mu, _softplus(layer.log_slab_rho)
        a, b = layer.slab_shape, layer.slab_scale
        # log density of u = log c^2 for c^2 ~ IG(a, b): a log b - lgamma(a) - a u - b exp(-u)
        expected_log_prior = a * torch.log(b) - torch.lgamma(a) - a * mean - b * torch.exp(-mean + 0.5 * std**2)
        kl = kl - Normal(mean, std).entropy() - expected_log_prior
    return output, kl


def _lbbnn_reference(layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hubin & Storvik (2024): q(w, gamma) = alpha N(mu, sigma^2) [gamma = 1] + (1 - alpha) delta_0 [gamma = 0];
    for LFMVN
    alpha = sigmoid(l) with the logits l ~ N(xi, F F^T + D) drawn once per forward (section 2.3)."""
    options = layer.options
    mu, sigma, xi = layer.weight_mu, _softplus(layer.weight_rho), layer.inclusion_logit
    low_rank = layer.family == "lbbnn-lfmvn"
    if low_rank:  # draws: z (rank), then eps (the weight shape)
        factor, diag = layer.logit_factor, _softplus(layer.logit_diag_rho) ** 2
        z, eps = torch.randn(options.rank, dtype=x.dtype), torch.randn(layer.shape, dtype=x.dtype)
        alpha = torch.sigmoid(xi + factor @ z + diag.sqrt() * eps)
    else:
        alpha = torch.sigmoid(xi)
    if options.estimator == "local-reparameterisation":
        # the spike-and-slab weight has mean alpha mu and variance alpha (sigma^2 + mu^2) - (alpha mu)^2
        mean, var = alpha * mu, alpha * (sigma**2 + mu**2) - (alpha * mu) ** 2
        output = _affine(x, mean) + torch.sqrt(_affine(x**2, var)) * torch.randn(
            len(x), layer.out_features, dtype=x.dtype
        )
    else:  # a relaxed Bernoulli indicator per weight (uniform draws), then the slab draw
        u = torch.rand(layer.shape, dtype=x.dtype).clamp(1e-6, 1 - 1e-6)
        a = alpha.clamp(1e-6, 1 - 1e-6)
        gamma = torch.sigmoid((torch.log(a / (1 - a)) - torch.log(u / (1 - u))) / options.temperature)
        output = _affine(x, gamma * (mu + sigma * torch.randn(layer.shape, dtype=x.dtype)))
    # KL: the slab term weighted by the inclusion probability, plus the inclusion term.
    if low_rank:  # E_q[sigmoid(l)] by the probit approximation (MacKay 1992)
        inclusion = torch.sigmoid(xi / torch.sqrt(1 + math.pi * (diag + (factor**2).sum(-1)) / 8))
    else:
        inclusion = alpha
    if options.slab == "gaussian":
        slab = torch.distributions.kl_divergence(Normal(mu, sigma), Normal(0.0, layer.log_slab_variance.exp().sqrt()))
    else:  # one reparameterised draw against t_{2 a}(0, b / a), the Gaussian entropy exact
        a, b = layer.log_slab_a.exp(), layer.log_slab_b.exp()
        w = mu + sigma * torch.randn(layer.shape, dtype=x.dtype)
        slab = -Normal(mu, sigma).entropy() - StudentT(2 * a, 0.0, torch.sqrt(b / a)).log_prob(w)
    kl = (inclusion * slab).sum()
    if low_rank:  # KL(N(xi, F F^T + D) || N(logit(psi), v I)) over the flattened logits
        d = xi.numel()
        flat_factor = factor.reshape(d, -1)
        q = MultivariateNormal(xi.reshape(-1), flat_factor @ flat_factor.T + torch.diag(diag.reshape(-1)))
        p = MultivariateNormal(
            layer.prior_inclusion_logit.expand(d), layer.logit_prior_variance * torch.eye(d, dtype=x.dtype)
        )
        return output, kl + torch.distributions.kl_divergence(q, p)
    if options.inclusion_prior == "bernoulli":
        psi = torch.sigmoid(layer.prior_inclusion_logit)
        return output, kl + torch.distributions.kl_divergence(Bernoulli(alpha), Bernoulli(psi.expand_as(alpha))).sum()
    if options.inclusion_prior == "beta-bernoulli":  # BetaBinomial(1, a, b) = Bernoulli(a / (a + b))
        a, b = layer.log_beta_a.exp(), layer.log_beta_b.exp()
        return output, kl + torch.distributions.kl_divergence(
            Bernoulli(alpha), Bernoulli((a / (a + b)).expand_as(alpha))
        ).sum()
    # beta-binomial: -H[q(gamma)] - log p(k) at k = E_q[sum gamma], p(k) = B(a + k, b + n - k) / B(a, b)
    a, b = layer.log_beta_a.exp(), layer.log_beta_b.exp()
    n, k = alpha.numel(), alpha.sum()

    def log_beta(p, q):
        return torch.lgamma(p) + torch.lgamma(q) - torch.lgamma(p + q)

    return output, kl - Bernoulli(alpha).entropy().sum() - (log_beta(a + k, b + n - k) - log_beta(a, b))


def independent_forward_and_kl(layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The training pre-activation and KL(q || p) of `layer` from its parameters, drawing the noise in
    the order the family's estimator does (global RNG, seeded by the caller)."""
    family, options = layer.family, layer.options
    if family == "fnn":  # maximum likelihood: no prior, no KL
        return _affine(x, layer.weight), torch.zeros((), dtype=x.dtype)
    if family == "laplace":  # MAP: the "KL" is -log N(w; 0, 1/delta_0) without its constant
        return _affine(x, layer.weight), 0.5 * options.prior_precision * (layer.weight**2).sum()
    if family == "concrete-dropout":
        # Gal et al. 2017: relaxed Bernoulli drop of each input, inverted scaling; KL up to a constant.
        p = torch.sigmoid(layer.dropout_logit)
        u = torch.rand(x.shape, dtype=x.dtype).clamp(1e-7, 1 - 1e-7)
        drop = torch.sigmoid((torch.log(p) - torch.log1p(-p) + torch.log(u) - torch.log1p(-u)) / options.temperature)
        output = _affine(x * (1 - drop) / (1 - p), layer.weight)
        w, b = layer.weight[:, :-1], layer.weight[:, -1]
        kl = ((w**2).sum() / (1 - p) + (b**2).sum()) / (2 * layer.prior_variance) + layer.in_features * (
            p * torch.log(p) + (1 - p) * torch.log(1 - p)
        )
        return output, kl
    if family == "sparse-vd":
        # Molchanov et al. 2017: q = N(theta, sigma^2), KL against the log-uniform prior by their fit.
        theta, var = layer.theta, torch.exp(layer.log_sigma2)
        if options.estimator == "local-reparameterisation":
            noise = torch.randn(len(x), layer.out_features, dtype=x.dtype)
            output = _affine(x, theta) + torch.sqrt(_affine(x**2, var)) * noise
        else:
            output = _affine(x, theta + var.sqrt() * torch.randn(layer.shape, dtype=x.dtype))
        log_alpha = (layer.log_sigma2 - torch.log(theta**2)).clamp(-8, 8)
        k1, k2, k3 = 0.63576, 1.87320, 1.48695
        kl = -(k1 * torch.sigmoid(k2 + k3 * log_alpha) - 0.5 * torch.log1p(torch.exp(-log_alpha)) - k1).sum()
        return output, kl
    if family in ("bnn", "variational-dense", "bnn-mixture"):
        mu, sigma = layer.weight_mu, _softplus(layer.weight_rho)
        if options.estimator == "local-reparameterisation":  # Kingma et al. 2015
            noise = torch.randn(len(x), layer.out_features, dtype=x.dtype)
            output = _affine(x, mu) + torch.sqrt(_affine(x**2, sigma**2)) * noise
        else:
            output = _affine(x, mu + sigma * torch.randn(layer.shape, dtype=x.dtype))
        if family != "bnn-mixture":
            return output, _gaussian_kl_to(mu, sigma, layer.prior_variance.sqrt())
        # Blundell et al. 2015: one reparameterised draw of log q(w) - log p(w), with q's entropy exact.
        w = mu + sigma * torch.randn(layer.shape, dtype=x.dtype)
        pi = layer.mixture_weight
        log_prior = torch.logaddexp(
            torch.log(pi) + Normal(0.0, layer.prior_variance.sqrt()).log_prob(w),
            torch.log(1 - pi) + Normal(0.0, layer.prior_variance_2.sqrt()).log_prob(w),
        )
        return output, (-Normal(mu, sigma).entropy() - log_prior).sum()
    if family == "horseshoe":
        return _horseshoe_reference(layer, x, structured=hasattr(layer, "row_factor"))
    if family in ("lbbnn", "lbbnn-lfmvn"):
        return _lbbnn_reference(layer, x)
    if family == "lbbnn-flow":
        from tests.test_lbbnn_flow import independent_flow_forward_and_kl

        return independent_flow_forward_and_kl(layer, x)
    if family == "ensemble":  # member by member, then the mean of their Gaussian log priors
        w = layer.weight * layer.fixed_mask
        x_k = x if x.dim() == 3 else x.expand(w.shape[0], *x.shape)
        out = torch.stack([x_k[k] @ w[k, :, :-1].T + w[k, :, -1] for k in range(w.shape[0])])
        return out, torch.stack([0.5 * layer.prior_precision * (w[k] ** 2).sum() for k in range(w.shape[0])]).mean()
    raise AssertionError(f"no independent reference for {family}")  # pragma: no cover - a new family adds one


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_training_forward_and_kl_match_an_independent_computation(family, options):
    """forward_with_kl (both kl_value settings) against independent_forward_and_kl, in values and gradients."""
    model = make_model(family, options).double()
    perturb(model, seed=6)
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for layer in model.layers:
        results = {}
        for path in ("kl-value", "surrogate", "independent"):
            x_in = x.clone().requires_grad_(True)
            layer.zero_grad()
            torch.manual_seed(0)
            if path == "independent":
                output, kl = independent_forward_and_kl(layer, x_in)
            else:
                output, kl = layer.forward_with_kl(x_in, kl_value=path == "kl-value")
            (output.pow(2).sum() * 0.3 + output.sum() + 0.7 * kl).backward()
            grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.grad is not None}
            results[path] = (output.detach(), kl.detach(), x_in.grad.clone(), grads)
        out_r, kl_r, gx_r, grads_r = results["independent"]
        assert grads_r
        for path in ("kl-value", "surrogate"):
            out, kl, g_x, grads = results[path]
            torch.testing.assert_close(out, out_r, rtol=1e-9, atol=1e-9)
            if path == "kl-value":
                torch.testing.assert_close(kl, kl_r, rtol=1e-9, atol=1e-9)
            torch.testing.assert_close(g_x, gx_r, rtol=1e-8, atol=1e-9)
            assert grads.keys() == grads_r.keys()
            for name in grads_r:
                torch.testing.assert_close(grads[name], grads_r[name], rtol=1e-8, atol=1e-9, msg=name)
        x = torch.relu(out_r)


# --- concrete dropout specifics ------------------------------------------------------------
def test_concrete_dropout_kl_matches_a_hand_computation():
    from core.models.concrete_dropout import ConcreteDropoutLayer, ConcreteDropoutOptions

    layer = ConcreteDropoutLayer(2, 1, ConcreteDropoutOptions(prior_variance=0.5, init_dropout=0.2))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -2.0, 3.0]]))  # last entry: the bias
        kl = float(layer.kl())
    p = 0.2
    # 1/(2 * 0.5) * (1 + 4) / (1 - p) + 1/(2 * 0.5) * 9 + 2 * (p log p + (1-p) log(1-p))
    hand = 5 / 0.8 + 9 + 2 * (p * math.log(p) + (1 - p) * math.log(1 - p))
    assert kl == pytest.approx(hand, rel=1e-5)


def test_concrete_dropout_draws_drop_whole_input_columns_at_the_learned_rate():
    from core.models.concrete_dropout import ConcreteDropoutLayer, ConcreteDropoutOptions

    torch.manual_seed(0)
    layer = ConcreteDropoutLayer(6, 3, ConcreteDropoutOptions(init_dropout=0.3))
    n = 20_000
    with torch.no_grad():
        draws = layer.sample_weights(n, torch.Generator().manual_seed(1))
        weight = layer.weight
    assert torch.all(draws[:, :, -1] == weight[:, -1])  # the bias is never dropped
    ratio = draws[:, :, :-1] / weight[:, :-1]
    kept = ratio[:, 0, :] != 0
    assert torch.all((ratio == 0) == ~kept[:, None, :])  # a column is dropped for every output unit at once
    torch.testing.assert_close(ratio[:, 0, :][kept], torch.full((int(kept.sum()),), 1 / 0.7), rtol=1e-5, atol=0)
    dropped = 1 - kept.double().mean()
    assert float(dropped) == pytest.approx(0.3, abs=4 * math.sqrt(0.3 * 0.7 / (n * 6)))
    torch.testing.assert_close(draws.mean(0), weight, atol=0.02, rtol=0)


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_warm_start_sets_the_conditional_mean_to_the_point_estimate(family, options):
    layer = make_model(family, options).layers[0]
    weight = torch.randn(layer.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.load_point_estimate(weight)
        torch.testing.assert_close(layer.conditional_mean_weights(), weight, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_a_fixed_structure_zeroes_the_dropped_weights_everywhere(family, options):
    model = make_model(family, options)
    perturb(model, seed=8)
    layer = model.layers[0]
    mask = torch.ones(layer.shape)
    mask[0, :2] = 0
    layer.fix_structure(mask)
    with torch.no_grad():
        assert torch.all(layer.mean_weights()[0, :2] == 0)
        assert torch.all(layer.conditional_mean_weights()[0, :2] == 0)
        assert torch.all(layer.sample_weights(20, torch.Generator().manual_seed(0))[:, 0, :2] == 0)
        # the dropped inputs of unit 0 no longer reach its pre-activation
        x = torch.randn(6, layer.in_features)
        x_changed = x.clone()
        x_changed[:, 0] += 5.0
        torch.manual_seed(1)
        out = layer(x)
        torch.manual_seed(1)
        out_changed = layer(x_changed)
        torch.testing.assert_close(out[..., 0], out_changed[..., 0])  # unit 0 (a member axis may lead)
        assert torch.isfinite(layer.kl())


# --- the fused Gaussian layer -----------------------------------------------------------------
def test_fused_gaussian_layer_passes_gradcheck_in_double_precision():
    from core.models.gaussian_fused import GaussianLinear

    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.double, requires_grad=True)
    mu = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    rho = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    noise = torch.randn(5, 4, dtype=torch.double)
    log_v = torch.tensor(0.3, dtype=torch.double)
    assert torch.autograd.gradcheck(lambda *a: GaussianLinear.apply(*a, noise, log_v), (x, mu, rho))


def test_local_reparameterisation_products_pass_gradcheck_and_equal_the_autograd_formula():
    from core.models.base import augmented_linear, local_reparameterisation
    from core.models.fused import LocalReparameterisation

    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.double, requires_grad=True)
    mean_weight = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    var_weight = torch.rand(4, 4, dtype=torch.double).add(0.1).requires_grad_()
    noise = torch.randn(5, 4, dtype=torch.double)
    assert torch.autograd.gradcheck(lambda *a: LocalReparameterisation.apply(*a, noise), (x, mean_weight, var_weight))
    # the 2-D path draws the same noise as the formula it replaces, and has the same gradients
    inputs = (x, mean_weight, var_weight)
    h = local_reparameterisation(x, mean_weight, var_weight, torch.Generator().manual_seed(3))
    drawn = torch.randn((5, 4), generator=torch.Generator().manual_seed(3), dtype=torch.double)
    reference = augmented_linear(x, mean_weight) + augmented_linear(x * x, var_weight).sqrt() * drawn
    assert torch.allclose(h, reference)
    upstream = torch.randn(5, 4, dtype=torch.double)
    for fast, slow in zip(torch.autograd.grad(h, inputs, upstream), torch.autograd.grad(reference, inputs, upstream)):
        assert torch.allclose(fast, slow)


def test_bnn_trains_through_the_fused_layer_and_the_mixture_does_not():
    from core.models.gaussian_fused import GaussianLinear

    calls = {}
    for family in ("bnn", "variational-dense", "bnn-mixture"):
        model = make_model(family, {})
        with mock.patch.object(GaussianLinear, "apply", wraps=GaussianLinear.apply) as spy:
            model.forward_with_kl(torch.randn(8, 5))
        calls[family] = spy.call_count
    # the mixture prior has no closed-form KL, so it keeps the autograd path
    assert calls == {"bnn": len(model.layers), "variational-dense": len(model.layers), "bnn-mixture": 0}


# --- the concrete-dropout training Function ---------------------------------------------------
def test_concrete_dropout_function_passes_gradcheck_with_its_kl():
    from core.models.concrete_dropout import ConcreteDropoutLinear

    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=torch.double, requires_grad=True)
    weight = torch.randn(4, 4, dtype=torch.double, requires_grad=True)
    logit = torch.tensor(-1.1, dtype=torch.double, requires_grad=True)
    uniform = torch.rand(6, 3, dtype=torch.double).clamp(0.05, 0.95)
    prior_variance = torch.tensor(0.7, dtype=torch.double)
    # temperature 0.5: the relaxed mask is smooth enough for finite differences
    assert torch.autograd.gradcheck(
        lambda *a: ConcreteDropoutLinear.apply(*a, uniform, 0.5, prior_variance, True), (x, weight, logit)
    )


def test_concrete_dropout_training_forward_equals_autograd_and_its_surrogate_kl_has_the_gradient():
    from core.models.concrete_dropout import ConcreteDropoutLayer, ConcreteDropoutOptions

    torch.manual_seed(2)
    layer = ConcreteDropoutLayer(5, 3, ConcreteDropoutOptions(prior_variance=0.5, init_dropout=0.3)).double()
    x = torch.randn(7, 5, dtype=torch.double)
    parameters = [layer.weight, layer.dropout_logit]
    results = []
    for path in ("fused", "autograd", "surrogate"):
        layer.noise_generator = torch.Generator().manual_seed(4)
        if path == "autograd":
            out, kl = layer(x), layer.kl()
        else:
            out, kl = layer.forward_with_kl(x, kl_value=path == "fused")
        loss = out.pow(2).sum() * 0.3 + out.sum()
        results.append((out.detach(), kl.detach(), torch.autograd.grad(loss + 0.7 * kl, parameters)))
    (out_f, kl_f, grads_f), (out_a, kl_a, grads_a), (out_s, kl_s, grads_s) = results
    assert torch.allclose(out_f, out_a) and torch.allclose(kl_f, kl_a) and torch.equal(out_s, out_f)
    assert kl_s.item() == 0.0 and kl_a.item() != 0.0
    for fused, autograd, surrogate in zip(grads_f, grads_a, grads_s):
        assert torch.allclose(fused, autograd) and torch.allclose(surrogate, autograd)
