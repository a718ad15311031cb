"""`lbbnn-lfmvn` (LBBNN-SSP-LFMVN, Hubin & Storvik 2024 section 2.3): LBBNN whose inclusion
logits of a layer are jointly Gaussian with a low-rank-plus-diagonal covariance.

Variational family, per layer with d = out (in + 1) weights:
    l ~ N(xi, Sigma), Sigma = F F^T + D  (F: d x rank, D diagonal),
    gamma_i | l ~ Bernoulli(sigmoid(l_i)),  w_i | gamma_i = 1 ~ N(mu_i, sigma_i^2),  w_i | gamma_i = 0 = 0.
Prior, written the same way so that the gamma | l factors cancel in the KL:
    l ~ N(logit(psi) 1, logit_prior_variance I), gamma_i | l ~ Bernoulli(sigmoid(l_i)),
    slab N(0, slab_variance) or Student-t as in LBBNN.
(The implied marginal prior inclusion probability is E[sigmoid(l)], near but
not exactly psi.) Hence

    KL = KL(N(xi, Sigma) || N(logit(psi) 1, v I)) + sum_i E_q[sigmoid(l_i)] KL_slab,i,

the first term in closed form with the matrix determinant lemma
log det Sigma = log det D + log det(I + F^T D^-1 F) (a rank x rank determinant).

Inclusion probability (the native statistic and the alpha of `mean_weights`):
E_q[sigmoid(l_i)] ~= sigmoid(xi_i / sqrt(1 + pi Sigma_ii / 8)), the probit
approximation (MacKay 1992); its error is below ~0.02 for Sigma_ii <= 4.

Training: one reparameterised draw l = xi + F z + sqrt(D) eps per forward,
then LBBNN's estimator with alpha = sigmoid(l) (local reparameterisation by
default, or relaxed Bernoulli masks). `sample_weights` draws l, then gamma,
then w, so sampled masks carry the dependence between indicators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import Estimator
from core.models.base import init_generator, inverse_softplus, require
from core.models.fused import apply_fused
from core.models.lbbnn import LBBNNLayer, LBBNNOptions
from core.models.lbbnn_fused import LBBNNLinear
from core.models.lfmvn_fused import LowRankKL, LowRankStep
from core.models.options import POSITIVE, OptionSpec, option


@dataclass(frozen=True)
class LowRankLBBNNOptions(LBBNNOptions):
    rank: int = option(2, OptionSpec("Rank", "of the low-rank logit covariance", advanced=True, low=1))
    # v of the prior N(logit(psi), v I) on the logits. At v = 1 moving one logit from logit(psi) = -2
    # to +2 costs 8 nats, four times mean-field LBBNN's log(1/psi): most logits stayed near the
    # prior (mean inclusion 0.2) and the median probability model lost 5 points to the posterior
    # mean on mnist-small (0.917 vs 0.965); at v = 10 it is 0.958 vs 0.963 (docs/why-lbbnn-over-prunes.md).
    logit_prior_variance: float = option(
        10.0, OptionSpec("Logit prior variance", "prior N(logit psi, v) on the logits", **POSITIVE)
    )
    init_logit_std: float = option(
        0.1,
        OptionSpec(  # initial sqrt(D)
            "Initial logit sd", "", advanced=True, **POSITIVE
        ),
    )
    init_factor_std: float = option(
        0.01,
        OptionSpec(  # initial entries of F; 0 starts mean-field
            "Initial factor sd", "", advanced=True, low=0.0
        ),
    )

    def validate(self) -> None:
        super().validate()
        require(
            self.inclusion_prior == "bernoulli",
            "inclusion_prior",
            "lbbnn-lfmvn puts a Gaussian prior on the inclusion logits (mean logit(prior_inclusion)); "
            f"only 'bernoulli' is supported, got {self.inclusion_prior!r}",
        )
        require(
            self.bias_prior == "spike-and-slab",
            "bias_prior",
            f"lbbnn-lfmvn gives every weight and bias an indicator; got {self.bias_prior!r}",
        )


def low_rank_gaussian_kl(
    mean: Tensor, factor: Tensor, diag: Tensor, prior_mean: Tensor, prior_variance: Tensor
) -> Tensor:
    """KL(N(mean, factor factor^T + diag(diag)) || N(prior_mean, prior_variance I)) for flat vectors.

    mean, diag: (d,); factor: (d, r). Costs O(d r^2).
    """
    d = mean.numel()
    trace = diag.sum() + factor.square().sum()
    quadratic = (mean - prior_mean).square().sum()
    capacitance = torch.eye(factor.shape[1], dtype=factor.dtype, device=factor.device) + factor.T @ (
        factor / diag[:, None]
    )
    log_det = torch.log(diag).sum() + 2 * torch.log(torch.diagonal(torch.linalg.cholesky_ex(capacitance).L)).sum()
    return 0.5 * ((trace + quadratic) / prior_variance - d + d * torch.log(prior_variance) - log_det)


class LowRankLBBNNLayer(LBBNNLayer):
    family = "lbbnn-lfmvn"
    Options = LowRankLBBNNOptions

    def __init__(
        self, in_features: int, out_features: int, options: LowRankLBBNNOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        opts: LowRankLBBNNOptions = self.options
        # self.inclusion_logit (LBBNN's omega) is the mean xi of the logits.
        self.logit_factor = nn.Parameter(
            torch.randn(*self.shape, opts.rank, generator=init_generator()) * opts.init_factor_std
        )
        self.logit_diag_rho = nn.Parameter(torch.full(self.shape, inverse_softplus(opts.init_logit_std)))
        self.register_buffer("logit_prior_variance", torch.tensor(float(opts.logit_prior_variance)))

    # --- the logit distribution ----------------------------------------------------------
    @property
    def logit_diag(self) -> Tensor:
        """D: the diagonal part of Sigma, shape (out, in+1)."""
        return F.softplus(self.logit_diag_rho).square()

    def logit_variance(self) -> Tensor:
        """diag(Sigma) = sum_r F^2 + D, shape (out, in+1)."""
        return self.logit_factor.square().sum(-1) + self.logit_diag

    def marginal_logit(self) -> Tensor:
        """logit of the probit approximation of E[sigmoid(l)]."""
        return self.inclusion_logit / torch.sqrt(1 + math.pi * self.logit_variance() / 8)

    @property
    def inclusion_probability(self) -> Tensor:
        return torch.sigmoid(self.marginal_logit())

    def _effective_logit(self) -> Tensor:
        if self.is_structure_fixed:
            return super()._effective_logit()
        return self.marginal_logit()

    def sample_logits(self, n: int | None = None, generator: torch.Generator | None = None) -> Tensor:
        """Reparameterised draws xi + F z + sqrt(D) eps, shape (out, in+1) or (n, out, in+1)."""
        xi = self.inclusion_logit
        size = () if n is None else (n,)
        z = torch.randn((*size, self.options.rank), generator=generator, device=xi.device, dtype=xi.dtype)
        eps = torch.randn((*size, *self.shape), generator=generator, device=xi.device, dtype=xi.dtype)
        if n is None:  # the training draw: one matrix-vector product (einsum's batched path is slower here)
            low_rank = torch.mv(self.logit_factor.reshape(-1, self.options.rank), z).reshape(self.shape)
        else:
            low_rank = torch.einsum("oir,...r->...oi", self.logit_factor, z)
        return xi + low_rank + torch.sqrt(self.logit_diag) * eps

    # --- estimators -----------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        logit = self._effective_logit() if self.is_structure_fixed else self.sample_logits(None, self.noise_generator)
        return self._estimate(x, torch.sigmoid(logit))

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or self.is_structure_fixed or self.options.estimator is not Estimator.LOCAL_REPARAMETERISATION:
            return self(x), self.kl()
        if not self.compiled_kernels and self._kl_by_hand():
            # the whole step in one Function (core/models/lfmvn_fused.py), draws in forward()'s order
            xi = self.inclusion_logit
            z = torch.randn((self.options.rank,), generator=self.noise_generator, device=xi.device, dtype=xi.dtype)
            eps = torch.randn(self.shape, generator=self.noise_generator, device=xi.device, dtype=xi.dtype)
            noise = self.normal_noise((x.shape[0], self.out_features), x)
            return LowRankStep.apply(
                x,
                self.weight_mu,
                self.weight_rho,
                xi,
                self.logit_factor,
                self.logit_diag_rho,
                z,
                eps,
                noise,
                self.prior_inclusion_logit.detach(),
                self.log_slab_variance.detach(),
                self.logit_prior_variance,
                kl_value,
            )
        # The pre-activations given the drawn logits are LBBNN's: its fused kernel gives them and the
        # gradient in those logits, which autograd carries on to xi, F and D. Its mean-field KL is not
        # this family's and goes unused (its gradient enters multiplied by 0); the KL is kl() below.
        # Draws in forward()'s order: the logits, then the pre-activation noise.
        logit = self.sample_logits(None, self.noise_generator)
        noise = self.normal_noise((x.shape[0], self.out_features), x)
        constants = (self.prior_inclusion_logit.detach(), self.log_slab_variance.detach())
        h, _ = apply_fused(self, LBBNNLinear, x, self.weight_mu, self.weight_rho, logit, noise, *constants, False, True)
        return h, self._training_kl()

    def _kl_by_hand(self) -> bool:
        """Whether the KL's gradient by hand applies: Gaussian slab, fixed prior hyperparameters."""
        return not (
            self.options.slab != "gaussian"
            or self.log_slab_variance.requires_grad
            or self.prior_inclusion_logit.requires_grad
        )

    def _training_kl(self) -> Tensor:
        """kl() with its gradient by hand (core/models/lfmvn_fused.py) where that applies."""
        if not self._kl_by_hand():
            return self.kl()
        return LowRankKL.apply(
            self.weight_mu,
            self.weight_rho,
            self.inclusion_logit,
            self.logit_factor,
            self.logit_diag_rho,
            self.log_slab_variance.detach(),
            self.prior_inclusion_logit.detach(),
            self.logit_prior_variance,
        )

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        if self.is_structure_fixed:
            return super().sample_weights(n, generator)
        alpha = torch.sigmoid(self.sample_logits(n, generator))
        u = torch.rand((n, *self.shape), generator=generator, device=alpha.device, dtype=alpha.dtype)
        gamma = (u < alpha).to(alpha.dtype)
        return gamma * self.sample_conditional_weights(n, generator)

    # --- KL -------------------------------------------------------------------------------
    def logit_kl(self) -> Tensor:
        return low_rank_gaussian_kl(
            self.inclusion_logit.reshape(-1),
            self.logit_factor.reshape(-1, self.options.rank),
            self.logit_diag.reshape(-1),
            self.prior_inclusion_logit,
            self.logit_prior_variance,
        )

    def kl(self) -> Tensor:
        return (self._effective_inclusion() * self.slab_kl()).sum() + self.logit_kl()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = super().parameter_groups()
        groups["inclusion"] = [self.inclusion_logit, self.logit_factor, self.logit_diag_rho]
        return groups
