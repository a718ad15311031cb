"""Distribution math shared by the families: KL terms, log densities, entropies, prior scalings.

Kept apart from any one family so that siblings (bnn, horseshoe, lbbnn-lfmvn) import
math, not another family's module.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F

PRIOR_SCALINGS = ("none", "fan-in")


def scaled_prior_variance(variance: float, scaling: str, in_features: int) -> float:
    """The prior (slab) variance of a layer: as given, or divided by the layer's fan-in."""
    return float(variance) / (int(in_features) if scaling == "fan-in" else 1)


def gaussian_kl(mu: Tensor, var: Tensor, prior_var: Tensor) -> Tensor:
    """Elementwise KL(N(mu, var) || N(0, prior_var))."""
    return 0.5 * ((var + mu * mu) / prior_var - 1.0 - torch.log(var / prior_var))


def bernoulli_kl_from_logits(logit: Tensor, prior_logit: Tensor) -> Tensor:
    """Elementwise KL(Bernoulli(sigmoid(logit)) || Bernoulli(sigmoid(prior_logit))).

    Written in logits, log(1 - alpha) - log(1 - psi) + alpha (logit - logit psi),
    which is stable at alpha near 0 or 1 and several times cheaper than xlogy.
    """
    return F.logsigmoid(-logit) - F.logsigmoid(-prior_logit) + torch.sigmoid(logit) * (logit - prior_logit)


def bernoulli_neg_entropy_from_logits(logit: Tensor) -> Tensor:
    """alpha log alpha + (1 - alpha) log(1 - alpha) for alpha = sigmoid(logit)."""
    return F.logsigmoid(-logit) + torch.sigmoid(logit) * logit


def student_t_log_density(w: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """log t_{2a}(w; 0, scale^2 = b / a)."""
    nu = 2 * a
    scale2 = b / a
    return (
        torch.lgamma((nu + 1) / 2)
        - torch.lgamma(nu / 2)
        - 0.5 * torch.log(nu * math.pi * scale2)
        - (nu + 1) / 2 * torch.log1p(w * w / (nu * scale2))
    )


def normal_entropy(std: Tensor) -> Tensor:
    """Entropy of N(m, std^2), elementwise."""
    return 0.5 * torch.log(2 * math.pi * math.e * std * std)
