"""`sparse-vd`: sparse variational dropout (Molchanov et al. 2017; Bleahu 2025).

q(w) = N(theta, sigma^2) per weight with sigma^2 = alpha theta^2, parameterised
additively by (theta, log sigma^2) so that the gradient noise does not grow
with alpha. The bias column is variational with the same treatment.

Prior: the improper log-uniform p(|w|) ~ 1/|w|. KL(q || p) is then a function
of log alpha alone, up to an additive constant; the published approximation is

    -KL ~= k1 sigmoid(k2 + k3 log alpha) - 0.5 log1p(1/alpha) - k1,

with k1 = 0.63576, k2 = 1.87320, k3 = 1.48695 and the constant chosen so the
KL tends to 0 as alpha -> infinity (it is then >= 0 everywhere).
log alpha = log sigma^2 - log theta^2 is clipped to [-8, 8]. Large log alpha
means the weight is noise: keep weights with log alpha below 3.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.enums import Estimator
from core.models.base import (
    Keep,
    LayerOptions,
    SparseLayer,
    StatisticSpec,
    augmented_linear,
    local_reparameterisation,
)
from core.models.options import ESTIMATOR, OptionSpec, option

ESTIMATORS = (Estimator.LOCAL_REPARAMETERISATION, Estimator.WEIGHT_SAMPLING)
LOG_ALPHA_MIN, LOG_ALPHA_MAX = -8.0, 8.0
K1, K2, K3 = 0.63576, 1.87320, 1.48695


@dataclass(frozen=True)
class SparseVDOptions(LayerOptions):
    estimator: Estimator = option(
        Estimator.LOCAL_REPARAMETERISATION, dataclasses.replace(ESTIMATOR, choices=tuple(e.value for e in ESTIMATORS))
    )
    # Molchanov et al.'s initialisation: start nearly deterministic
    init_log_sigma2: float = option(
        -10.0, OptionSpec("Initial log sigma^2", "sparse VD starts nearly deterministic", advanced=True)
    )


def sparse_vd_kl(log_alpha: Tensor) -> Tensor:
    """Elementwise approximate KL(N(theta, alpha theta^2) || log-uniform), zero as alpha -> infinity."""
    neg_kl = K1 * torch.sigmoid(K2 + K3 * log_alpha) - 0.5 * torch.log1p(torch.exp(-log_alpha)) - K1
    return -neg_kl


class SparseVDKL(torch.autograd.Function):
    """sum sparse_vd_kl(log alpha(theta, log sigma^2)) with its gradient by hand.

    Under autograd the KL took a log, a sigmoid, an exp and a log1p per weight and the backward of
    each; its gradient needs only the log, the sigmoid and one more sigmoid:
      d KL / d log alpha = -k1 k3 s (1 - s) - 0.5 sigmoid(-log alpha),  s = sigmoid(k2 + k3 log alpha),
    times the clip's indicator, and d log alpha / d log sigma^2 = 1,
    d log alpha / d theta = -2 theta / (theta^2 + 1e-16).
    The value (the exp and log1p) is computed only when asked for (training reads it once an epoch).
    """

    @staticmethod
    def forward(ctx, theta: Tensor, log_sigma2: Tensor, kl_value: bool = True):
        theta2 = torch.mul(theta, theta).add_(1e-16)
        raw = log_sigma2 - torch.log(theta2)
        inside = (raw >= LOG_ALPHA_MIN).logical_and_(raw <= LOG_ALPHA_MAX)  # the clip's gradient mask
        log_alpha = raw.clamp_(LOG_ALPHA_MIN, LOG_ALPHA_MAX)
        s = torch.mul(log_alpha, K3).add_(K2).sigmoid_()
        if kl_value:
            kl = (0.5 * torch.log1p(torch.exp(-log_alpha)) - K1 * s + K1).sum()
        else:
            kl = theta.new_zeros(())
        ctx.save_for_backward(theta, theta2, log_alpha, s, inside)
        return kl

    @staticmethod
    def backward(ctx, grad_kl: Tensor):
        theta, theta2, log_alpha, s, inside = ctx.saved_tensors
        # -0.5 sigmoid(-log alpha) = 0.5 (sigmoid(log alpha) - 1), then - k1 k3 s (1 - s)
        grad = torch.sigmoid(log_alpha).sub_(1.0).mul_(0.5).addcmul_(s, torch.rsub(s, 1.0), value=-K1 * K3)
        grad.mul_(inside).mul_(grad_kl)
        grad_theta = torch.mul(grad, theta).div_(theta2).mul_(-2.0)
        return grad_theta, grad, None


class SparseVDLayer(SparseLayer):
    family = "sparse-vd"
    spec = StatisticSpec("log_alpha", Keep.BELOW, 3.0, LOG_ALPHA_MIN, LOG_ALPHA_MAX)
    Options = SparseVDOptions

    def __init__(
        self, in_features: int, out_features: int, options: SparseVDOptions | None = None, is_output: bool = False
    ):
        super().__init__(in_features, out_features, options, is_output)
        self.theta = self.initial_weights()
        self.log_sigma2 = nn.Parameter(torch.full(self.shape, float(self.options.init_log_sigma2)))

    def log_alpha(self) -> Tensor:
        # The small constant keeps log theta^2 finite at theta = 0 (where log alpha clips to 8 anyway).
        log_alpha = self.log_sigma2 - torch.log(self.theta * self.theta + 1e-16)
        return log_alpha.clamp(LOG_ALPHA_MIN, LOG_ALPHA_MAX)

    def forward(self, x: Tensor) -> Tensor:
        mean = self.masked(self.theta)
        var = self.masked(torch.exp(self.log_sigma2))
        if self.options.estimator is Estimator.LOCAL_REPARAMETERISATION:
            return local_reparameterisation(x, mean, var, self.noise_generator)
        return augmented_linear(x, mean + var.sqrt() * self.normal_noise(mean.shape, mean))

    def mean_weights(self) -> Tensor:
        return self.theta * self.fixed_mask

    def conditional_normal(self) -> tuple[Tensor, Tensor]:
        return self.theta * self.fixed_mask, torch.exp(0.5 * self.log_sigma2) * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        theta = self.theta
        eps = torch.randn((n, *self.shape), generator=generator, device=theta.device, dtype=theta.dtype)
        return (theta + torch.exp(0.5 * self.log_sigma2) * eps) * self.fixed_mask

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if self.is_structure_fixed:
            return self(x), self.kl()
        return self(x), SparseVDKL.apply(self.theta, self.log_sigma2, kl_value)

    def kl(self) -> Tensor:
        return self.masked(sparse_vd_kl(self.log_alpha())).sum()

    def native_statistic(self) -> Tensor:
        return self.log_alpha()

    def load_point_estimate(self, weight: Tensor) -> None:
        self.theta.data.copy_(weight)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"weights": [self.theta], "scales": [self.log_sigma2]}
