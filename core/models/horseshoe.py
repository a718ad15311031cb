"""`horseshoe` (BNN-HP-MF): the regularised horseshoe BNN of seed 001 (Ghosh, Yao & Doshi-Velez 2018),
factorised variational family. METHODS.md section 3.

Model of a hidden layer (non-centred), for unit k with augmented incoming
weights w_k (its bias included):
    w_k = s_k beta_k,  beta_k ~ N(0, I),  s_k = tau~_k v,
    tau_k ~ C+(0, b_0) per unit, v ~ C+(0, b_g) per layer,
    regularised: tau~_k^2 = c^2 tau_k^2 / (c^2 + tau_k^2 v^2), i.e.
                 s_k = 1 / sqrt(1 / (tau_k v)^2 + 1 / c^2), c^2 ~ IG(c_a, c_b) (one c per layer);
    plain horseshoe: s_k = tau_k v.
Half-Cauchy by inverse-gamma auxiliaries (Wand et al. 2011):
    a ~ C+(0, b)  <=>  a^2 | lam ~ IG(1/2, 1/lam), lam ~ IG(1/2, 1/b^2).
Output layer: no shrinkage, w = kappa beta with one half-Cauchy scale
kappa ~ C+(0, output_scale) per layer (the same auxiliary construction).

Variational family (factorised): q(beta) = N(mu, sigma^2) per weight,
log tau_k, log v, log c^2 Gaussian (so tau, v, c log-normal), and
q(lam) = IG(1, E_q[1/a^2] + 1/b^2), the optimum given the rest, set in
closed form by `update_auxiliaries()` after each gradient step (coordinate
ascent, as in the paper). Its rates are buffers and carry no gradient.

KL(q || p) is closed form: Gaussian KL for beta; for a scale a with
u = log a^2 ~ N(m, s^2) and q(lam) = IG(1, r),
    E_q[log q(u) - log p(u | lam)] = -1/2 log(2 pi e s^2) + 1/2 E[log lam] + lgamma(1/2)
                                     + m / 2 + exp(-m + s^2 / 2) E[1/lam],
with E[1/lam] = 1/r and E[log lam] = log r + euler_gamma, plus
KL(IG(1, r) || IG(1/2, 1/b^2)); for c^2 with log c^2 ~ N(m, s^2),
    E_q[log p(log c^2)] = c_a log c_b - lgamma(c_a) - c_a m - c_b exp(-m + s^2 / 2).

Pruning (node granularity): drop unit k when P_q(tau_k v < delta) > p0.
log(tau_k v) is normal under q, so this is a normal CDF. The statistic is
broadcast over the unit's incoming weights and bias; output units are never
pruned (statistic 0). Only the factorised family is implemented; the
structured (matrix-normal) family of seed 001 is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.models.base import (
    Granularity,
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    inverse_softplus,
    local_reparameterisation,
    require,
)
from core.models.lbbnn import gaussian_kl

PRIORS = ("regularised-horseshoe", "horseshoe")
EULER_GAMMA = 0.5772156649015329
LGAMMA_HALF = math.lgamma(0.5)
QUADRATURE_NODES = 24  # Gauss-Hermite nodes per dimension for E_q[s_k] of the regularised scale


@dataclass(frozen=True)
class HorseshoeOptions(LayerOptions):
    prior: str = "regularised-horseshoe"
    node_scale: float = 1.0  # b_0 of tau_k ~ C+(0, b_0)
    global_scale: float = 1e-5  # b_g of v ~ C+(0, b_g)
    slab_shape: float = 2.0  # c_a of c^2 ~ IG(c_a, c_b)
    slab_scale: float = 6.0  # c_b
    output_scale: float = 1.0  # scale of the output layer's half-Cauchy kappa
    prune_delta: float = 1e-3  # delta of the rule P(tau_k v < delta) > p0
    init_sigma: float = 0.01  # initial std of q(beta)
    init_log_scale_std: float = 0.05  # initial std of q(log tau), q(log v), q(log c^2)

    def validate(self) -> None:
        require(self.prior in PRIORS, "prior", f"must be one of {', '.join(PRIORS)}, got {self.prior!r}")
        for name in ("node_scale", "global_scale", "slab_shape", "slab_scale", "output_scale", "prune_delta",
                     "init_sigma", "init_log_scale_std"):
            value = getattr(self, name)
            require(value > 0 and math.isfinite(value), name, f"must be a positive number, got {value!r}")


def normal_entropy(std: Tensor) -> Tensor:
    return 0.5 * torch.log(2 * math.pi * math.e * std * std)


def inverse_gamma_kl(shape_q: Tensor | float, rate_q: Tensor, shape_p: Tensor | float, rate_p: Tensor) -> Tensor:
    """KL(IG(shape_q, rate_q) || IG(shape_p, rate_p)) (= the KL of the Gamma laws of 1/x)."""
    shape_q = torch.as_tensor(shape_q, dtype=rate_q.dtype, device=rate_q.device)
    shape_p = torch.as_tensor(shape_p, dtype=rate_q.dtype, device=rate_q.device)
    return ((shape_q - shape_p) * torch.digamma(shape_q) - torch.lgamma(shape_q) + torch.lgamma(shape_p)
            + shape_p * (torch.log(rate_q) - torch.log(rate_p)) + shape_q * (rate_p - rate_q) / rate_q)


def half_cauchy_scale_kl(log_sq_mean: Tensor, log_sq_std: Tensor, aux_rate: Tensor, prior_scale: Tensor) -> Tensor:
    """KL(q(u) q(lam) || p(u | lam) p(lam)) for u = log a^2, a ~ C+(0, b) by its IG auxiliary.

    q(u) = N(log_sq_mean, log_sq_std^2), q(lam) = IG(1, aux_rate), b = prior_scale. Elementwise.
    """
    expected_inv_lam = 1.0 / aux_rate
    expected_log_lam = torch.log(aux_rate) + EULER_GAMMA
    scale_term = (-normal_entropy(log_sq_std) + 0.5 * expected_log_lam + LGAMMA_HALF + 0.5 * log_sq_mean
                  + torch.exp(-log_sq_mean + 0.5 * log_sq_std * log_sq_std) * expected_inv_lam)
    aux_term = inverse_gamma_kl(1.0, aux_rate, 0.5, 1.0 / (prior_scale * prior_scale))
    return scale_term + aux_term


def inverse_gamma_log_scale_kl(log_mean: Tensor, log_std: Tensor, shape: Tensor, rate: Tensor) -> Tensor:
    """KL(N(log_mean, log_std^2) on y = log x || law of log x for x ~ IG(shape, rate))."""
    expected_log_prior = (shape * torch.log(rate) - torch.lgamma(shape) - shape * log_mean
                          - rate * torch.exp(-log_mean + 0.5 * log_std * log_std))
    return -normal_entropy(log_std) - expected_log_prior


class HorseshoeLayer(SparseLayer):
    family = "horseshoe"
    spec = StatisticSpec("node_shrinkage_probability", Keep.BELOW, 0.9, 0.0, 1.0, Granularity.NODE)
    Options = HorseshoeOptions

    def __init__(self, in_features: int, out_features: int, options: HorseshoeOptions | None = None,
                 is_output: bool = False):
        super().__init__(in_features, out_features, options, is_output)
        opts: HorseshoeOptions = self.options
        self.regularised = opts.prior == "regularised-horseshoe" and not is_output
        scale_rho = inverse_softplus(opts.init_log_scale_std)
        self.weight_mu = nn.Parameter(torch.empty(self.shape).uniform_(-1.0, 1.0))
        self.weight_rho = nn.Parameter(torch.full(self.shape, inverse_softplus(opts.init_sigma)))
        # Start at s_k ~ 1/sqrt(fan-in): w = s beta then matches the usual uniform initialisation.
        self.log_layer_scale_mu = nn.Parameter(torch.tensor(-0.5 * math.log(in_features)))
        self.log_layer_scale_rho = nn.Parameter(torch.tensor(scale_rho))
        layer_prior_scale = opts.output_scale if is_output else opts.global_scale
        self.register_buffer("layer_prior_scale", torch.tensor(float(layer_prior_scale)))
        self.register_buffer("layer_aux_rate", torch.tensor(1.0))
        if not is_output:
            self.log_node_scale_mu = nn.Parameter(torch.zeros(out_features))
            self.log_node_scale_rho = nn.Parameter(torch.full((out_features,), scale_rho))
            self.register_buffer("node_prior_scale", torch.tensor(float(opts.node_scale)))
            self.register_buffer("node_aux_rate", torch.ones(out_features))
            self.register_buffer("prune_delta", torch.tensor(float(opts.prune_delta)))
        if self.regularised:
            self.log_slab_mu = nn.Parameter(torch.tensor(math.log(opts.slab_scale / (opts.slab_shape + 1))))
            self.log_slab_rho = nn.Parameter(torch.tensor(scale_rho))
            self.register_buffer("slab_shape", torch.tensor(float(opts.slab_shape)))
            self.register_buffer("slab_scale", torch.tensor(float(opts.slab_scale)))
            nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_NODES)
            self.register_buffer("quadrature_nodes", torch.tensor(nodes, dtype=torch.float32), persistent=False)
            self.register_buffer("quadrature_weights", torch.tensor(weights / math.sqrt(2 * math.pi),
                                                                    dtype=torch.float32), persistent=False)
        self.update_auxiliaries()

    # --- q in natural form ----------------------------------------------------------------
    @property
    def weight_sigma(self) -> Tensor:
        return F.softplus(self.weight_rho)

    def log_node_scale_moments(self) -> tuple[Tensor, Tensor]:
        """Mean and std of log(tau_k v) per unit under q (log v alone for the output layer)."""
        mean = self.log_layer_scale_mu.expand(self.out_features)
        var = F.softplus(self.log_layer_scale_rho).square().expand(self.out_features)
        if not self.is_output:
            mean = mean + self.log_node_scale_mu
            var = var + F.softplus(self.log_node_scale_rho).square()
        return mean, var.sqrt()

    def _log_slab_moments(self) -> tuple[Tensor, Tensor]:
        return self.log_slab_mu, F.softplus(self.log_slab_rho)

    def _log_scale(self, eps_node: Tensor | None, eps_layer: Tensor, eps_slab: Tensor | None) -> Tensor:
        """log s_k from standard normal draws: eps_node (..., out), eps_layer and eps_slab (..., 1)."""
        log_scale = self.log_layer_scale_mu + F.softplus(self.log_layer_scale_rho) * eps_layer
        if not self.is_output:
            log_scale = log_scale + self.log_node_scale_mu + F.softplus(self.log_node_scale_rho) * eps_node
        if self.regularised:
            mean, std = self._log_slab_moments()
            log_c2 = mean + std * eps_slab
            # s = 1 / sqrt(1/(tau v)^2 + 1/c^2), in logs for stability.
            log_scale = -0.5 * torch.logaddexp(-2 * log_scale, -log_c2)
        return log_scale

    def expected_node_scale(self) -> Tensor:
        """E_q[s_k] per unit: closed form for a product of log-normals, 2-D Gauss-Hermite when regularised."""
        mean, std = self.log_node_scale_moments()
        if not self.regularised:
            return torch.exp(mean + 0.5 * std * std)
        slab_mean, slab_std = self._log_slab_moments()
        nodes, weights = self.quadrature_nodes, self.quadrature_weights
        log_tv = mean[:, None, None] + std[:, None, None] * nodes[None, :, None]  # (out, Q, 1)
        log_c2 = (slab_mean + slab_std * nodes)[None, None, :]  # (1, 1, Q)
        scale = torch.exp(-0.5 * torch.logaddexp(-2 * log_tv, -log_c2))
        return torch.einsum("kij,i,j->k", scale, weights, weights)

    # --- estimators -----------------------------------------------------------------------
    def _draw_log_scale(self, n: int | None, generator: torch.Generator | None = None) -> Tensor:
        ref = self.weight_mu
        size = () if n is None else (n,)

        def normal(*shape: int) -> Tensor:
            return torch.randn((*size, *shape), generator=generator, device=ref.device, dtype=ref.dtype)

        eps_node = None if self.is_output else normal(self.out_features)
        eps_slab = normal(1) if self.regularised else None
        return self._log_scale(eps_node, normal(1), eps_slab).expand(*size, self.out_features)

    def forward(self, x: Tensor) -> Tensor:
        # One draw of the scales per minibatch; given them, the pre-activation of
        # unit k is s_k x.beta_k, Gaussian: local reparameterisation over beta (seed 001 eq. 9).
        scale = torch.exp(self._draw_log_scale(None))
        mu, sigma = self.weight_mu * self.fixed_mask, self.weight_sigma * self.fixed_mask
        return scale * local_reparameterisation(x, mu, sigma * sigma)

    def mean_weights(self) -> Tensor:
        return self.expected_node_scale()[:, None] * self.weight_mu * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        scale = torch.exp(self._draw_log_scale(n, generator))  # (n, out)
        mu = self.weight_mu
        eps = torch.randn((n, *self.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return scale[:, :, None] * (mu + self.weight_sigma * eps) * self.fixed_mask

    # --- KL and the auxiliaries -----------------------------------------------------------
    def kl_terms(self) -> dict[str, Tensor]:
        """The KL by latent variable (each term a true KL, so each >= 0)."""
        sigma = self.weight_sigma
        one = torch.ones((), device=sigma.device, dtype=sigma.dtype)
        terms = {"weights": (gaussian_kl(self.weight_mu, sigma * sigma, one) * self.fixed_mask).sum()}
        # q(log a) = N(m, s^2)  <=>  q(log a^2) = N(2m, 4 s^2).
        terms["layer_scale"] = half_cauchy_scale_kl(2 * self.log_layer_scale_mu,
                                                    2 * F.softplus(self.log_layer_scale_rho),
                                                    self.layer_aux_rate, self.layer_prior_scale)
        if not self.is_output:
            terms["node_scales"] = half_cauchy_scale_kl(2 * self.log_node_scale_mu,
                                                        2 * F.softplus(self.log_node_scale_rho),
                                                        self.node_aux_rate, self.node_prior_scale).sum()
        if self.regularised:
            mean, std = self._log_slab_moments()
            terms["slab"] = inverse_gamma_log_scale_kl(mean, std, self.slab_shape, self.slab_scale)
        return terms

    def kl(self) -> Tensor:
        return sum(self.kl_terms().values())

    @torch.no_grad()
    def update_auxiliaries(self) -> None:
        """q(lam) = IG(1, E_q[1/a^2] + 1/b^2), with E_q[1/a^2] = exp(-2m + 2s^2) for log a ~ N(m, s^2)."""
        def optimal_rate(mean: Tensor, rho: Tensor, prior_scale: Tensor) -> Tensor:
            std = F.softplus(rho)
            return torch.exp(-2 * mean + 2 * std * std) + 1.0 / (prior_scale * prior_scale)

        self.layer_aux_rate.copy_(optimal_rate(self.log_layer_scale_mu, self.log_layer_scale_rho,
                                               self.layer_prior_scale))
        if not self.is_output:
            self.node_aux_rate.copy_(optimal_rate(self.log_node_scale_mu, self.log_node_scale_rho,
                                                  self.node_prior_scale))

    # --- sparsity -------------------------------------------------------------------------
    def node_scale_statistic(self) -> Tensor:
        """P_q(tau_k v < delta) per unit (zeros for the output layer, whose units are never pruned)."""
        if self.is_output:
            return self.weight_mu.new_zeros(self.out_features)
        mean, std = self.log_node_scale_moments()
        return torch.special.ndtr((torch.log(self.prune_delta) - mean) / std)

    def node_weight_norms(self) -> Tensor:
        """|E_q w_k|_2 per unit, over its incoming weights and bias."""
        return self.mean_weights().norm(dim=1)

    def native_statistic(self) -> Tensor:
        return self.node_scale_statistic()[:, None].expand(self.shape)

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight_mu.data.copy_(weight / self.expected_node_scale()[:, None])

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        scales = [self.weight_rho, self.log_layer_scale_mu, self.log_layer_scale_rho]
        if not self.is_output:
            scales += [self.log_node_scale_mu, self.log_node_scale_rho]
        if self.regularised:
            scales += [self.log_slab_mu, self.log_slab_rho]
        return {"weights": [self.weight_mu], "scales": scales}
