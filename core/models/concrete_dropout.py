"""`concrete-dropout` (BNN-GP-CMF of Hubin & Storvik 2024): Gal, Hron & Kendall (2017).

Each layer drops its *inputs* with a learned rate p = sigmoid(p_logit)
("inverted" dropout: kept inputs are scaled by 1/(1-p)). As a variational
family, the layer's effective weights are W_eff = W diag(z) / (1-p) on the
input columns, z_k ~ Bernoulli(1-p), with the bias column deterministic, so
E_q[W_eff] = W: `mean_weights` is W.

KL convention. The prior is N(0, prior_variance) on every weight and bias.
Gal's derivation (q a mixture of two narrow Gaussians per input row, width
-> 0) gives, up to a constant independent of W and p,

    KL(q || p) ~= (1-p) / (2 prior_variance) ||M||^2 - K H(p)

for dropout written as W = M diag(z) (M the non-inverted kernel) and K the
number of dropped units (in_features). With inverted dropout W = M (1-p), so

    kl() = weight_regulariser ||W_in||^2 / (1-p)
           + weight_regulariser ||b||^2
           + in_features (p log p + (1-p) log(1-p)),
    weight_regulariser = 1 / (2 prior_variance).

These are KL units (the training loop divides kl() by N), so the
"dropout_regulariser" of Gal's code is 1 here, and its weight_regulariser is
l^2 / N = 1 / (prior_variance N): ours is the same up to the 1/2 that the
Gaussian log-density carries and their code drops. The bias is not dropped, so
its term has no 1/(1-p). Because a constant was dropped, kl() can be negative.

Sparsity: dropout has no per-weight posterior sparsity, so the statistic is
the magnitude |W| of the mean weights (keep above), as for the FNN baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.models.base import Keep, LayerOptions, SparseLayer, StatisticSpec, augmented_linear
from core.models.options import PRIOR_VARIANCE, PROBABILITY, TEMPERATURE, OptionSpec, option


def concrete_dropout_kl(weight: Tensor, dropout_logit: Tensor, prior_variance: Tensor) -> Tensor:
    """The layer's KL (module docstring) for an augmented (out, in+1) weight, bias last."""
    p = torch.sigmoid(dropout_logit)
    weight_regulariser = 0.5 / prior_variance
    # p log p + (1-p) log(1-p) in logits, stable at p near 0 or 1.
    neg_entropy = F.logsigmoid(-dropout_logit) + p * dropout_logit
    return (
        weight_regulariser * (weight[:, :-1].square().sum() / (1 - p) + weight[:, -1].square().sum())
        + (weight.shape[1] - 1) * neg_entropy
    )


class ConcreteDropoutLinear(torch.autograd.Function):
    """The training forward of a concrete-dropout layer and its KL, with the backward by hand.

    With p = sigmoid(l), drop = sigmoid((l + logit u) / t) and scale = (1 - drop) / (1 - p), the
    inputs become xs = x scale and h = xs W_in^T + b. d xs / d l = xs (p - drop / t). The KL of
    ConcreteDropoutLayer.kl, with r = 1 / (2 v):
      d/dW_in = 2 r W_in / (1 - p),  d/db = 2 r b,  d/dl = r |W_in|^2 p / (1 - p) + in l p (1 - p).
    A small network's step is bound by per-operation overhead; this is one node each way instead
    of about twenty. kl_value=False returns a surrogate KL (value 0, the KL's gradient).
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        weight: Tensor,
        dropout_logit: Tensor,
        uniform: Tensor,
        temperature: float,
        prior_variance: Tensor,
        kl_value: bool = True,
    ):
        p = torch.sigmoid(dropout_logit)
        drop = torch.sigmoid((dropout_logit + torch.logit(uniform)) / temperature)
        scale = (1 - drop) / (1 - p)
        xs_aug = F.pad(x * scale, (0, 1), value=1.0)
        h = torch.mm(xs_aug, weight.t())
        regulariser = 0.5 / prior_variance
        kl = concrete_dropout_kl(weight, dropout_logit, prior_variance) if kl_value else h.new_zeros(())
        ctx.save_for_backward(weight, dropout_logit, xs_aug, scale, drop, p, regulariser)
        ctx.temperature = temperature
        return h, kl

    @staticmethod
    def backward(ctx, grad_h: Tensor, grad_kl: Tensor):
        weight, dropout_logit, xs_aug, scale, drop, p, regulariser = ctx.saved_tensors
        weight_in = weight[:, :-1]
        in_features = weight_in.shape[1]
        grad_xs = torch.mm(grad_h, weight_in)
        grad_x = grad_xs * scale if ctx.needs_input_grad[0] else None
        grad_weight = torch.mm(grad_h.t(), xs_aug)
        xs = xs_aug[:, :-1]
        grad_logit = (grad_xs * xs * (p - drop / ctx.temperature)).sum()
        # the KL's part
        kl_scale = 2 * regulariser * grad_kl
        grad_weight[:, :-1].add_(weight_in * (kl_scale / (1 - p)))
        grad_weight[:, -1].add_(weight[:, -1] * kl_scale)
        grad_logit = grad_logit + grad_kl * (
            regulariser * weight_in.square().sum() * p / (1 - p) + in_features * dropout_logit * p * (1 - p)
        )
        return grad_x, grad_weight, grad_logit, None, None, None, None


@dataclass(frozen=True)
class ConcreteDropoutOptions(LayerOptions):
    prior_variance: float = option(1.0, PRIOR_VARIANCE)
    init_dropout: float = option(
        0.1,
        OptionSpec(  # Gal et al.'s initial rate, also for the input layer
            "Initial dropout rate", "learned per layer", **PROBABILITY
        ),
    )
    temperature: float = option(0.1, TEMPERATURE)  # of the relaxed Bernoulli masks in training


class ConcreteDropoutLayer(SparseLayer):
    family = "concrete-dropout"
    spec = StatisticSpec("magnitude", Keep.ABOVE, 0.0, 0.0, math.inf)
    Options = ConcreteDropoutOptions

    def __init__(
        self,
        in_features: int,
        out_features: int,
        options: ConcreteDropoutOptions | None = None,
        is_output: bool = False,
    ):
        super().__init__(in_features, out_features, options, is_output)
        opts: ConcreteDropoutOptions = self.options
        self.weight = self.initial_weights()
        self.dropout_logit = nn.Parameter(torch.tensor(math.log(opts.init_dropout / (1 - opts.init_dropout))))
        self.register_buffer("prior_variance", torch.tensor(float(opts.prior_variance)))

    @property
    def dropout_rate(self) -> Tensor:
        return torch.sigmoid(self.dropout_logit)

    def _mask_uniforms(self, x: Tensor) -> Tensor:
        return self.uniform_noise(x.shape, x).clamp(1e-7, 1 - 1e-7)

    def forward(self, x: Tensor) -> Tensor:
        # Relaxed Bernoulli "drop" indicator per example and input (Gal's concrete mask).
        u = self._mask_uniforms(x)
        drop = torch.sigmoid((self.dropout_logit + torch.logit(u)) / self.options.temperature)
        x = x * (1 - drop) / (1 - self.dropout_rate)
        return augmented_linear(x, self.masked(self.weight))

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or self.is_structure_fixed:
            return self(x), self.kl()
        return ConcreteDropoutLinear.apply(
            x,
            self.weight,
            self.dropout_logit,
            self._mask_uniforms(x),
            self.options.temperature,
            self.prior_variance,
            kl_value,
        )

    def mean_weights(self) -> Tensor:
        return self.weight * self.fixed_mask

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        weight = self.weight
        keep_rate = 1 - self.dropout_rate
        u = torch.rand((n, 1, self.in_features), generator=generator, device=weight.device, dtype=weight.dtype)
        column_scale = (u < keep_rate).to(weight.dtype) / keep_rate
        bias_scale = torch.ones((n, 1, 1), device=weight.device, dtype=weight.dtype)
        return weight * torch.cat([column_scale, bias_scale], dim=2) * self.fixed_mask

    def kl(self) -> Tensor:
        return concrete_dropout_kl(self.masked(self.weight), self.dropout_logit, self.prior_variance)

    def native_statistic(self) -> Tensor:
        return self.weight.abs()

    def load_point_estimate(self, weight: Tensor) -> None:
        self.weight.data.copy_(weight)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        # The dropout rate sets the spread of q, as sigma does for the Gaussian families.
        return {"weights": [self.weight], "scales": [self.dropout_logit]}
