"""A fused training step for bnn-mixture (Gaussian q, two-component scale-mixture prior).

The mixture prior has no closed-form KL against a Gaussian, so each step uses
a one-draw reparameterised estimate (Blundell et al. 2015):
  kl = sum_w [-log sigma - 0.5 log(2 pi e) - log p(mu + sigma eps)],  eps ~ N(0, 1) per weight,
  p(w) = pi N(w; 0, v1) + (1 - pi) N(w; 0, v2).
Under autograd that estimate costs a dozen passes over the weights each way
(log-densities of both components, their logaddexp, the entropy's log, and
their backward), more than the layer's products. By hand, with
w = mu + sigma eps and the narrow/wide responsibility r = P(component 1 | w),
  g = -d log p / dw = w (r / v1 + (1 - r) / v2),  r = sigmoid(c0 - 0.5 w^2 (1/v1 - 1/v2)),
  c0 = log pi - log(1 - pi) - 0.5 log(v1 / v2),
  d kl / d mu = g,  d kl / d rho = sigmoid(rho) (g eps - 1 / sigma),
and the forward pass keeps only two weight-sized tensors for the KL's part of
the backward. The moments are mean = mu and var = sigma^2 (sigma = softplus(rho)),
so d var / d rho = 2 sigma sigmoid(rho).

Only the training path is fused (2-D input, local reparameterisation, no fixed
structure); the layer's autograd path is the reference in the tests. The noise
is drawn in the same order as the autograd path (pre-activation noise first,
then the weights'), so a seeded run draws the same numbers.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch.nn import functional as F

from core.models.fused import products_backward, products_forward


def kl_gradient_terms(mu: Tensor, sigma: Tensor, eps: Tensor, mixture_weight: Tensor, v1: Tensor, v2: Tensor):
    """(g, g eps - 1 / sigma): the KL estimate's gradients in mu and (before the chain rule's sigmoid) in sigma."""
    inv_v1, inv_v2 = v1.reciprocal(), v2.reciprocal()
    c0 = torch.log(mixture_weight) - torch.log1p(-mixture_weight) - 0.5 * torch.log(v1 * inv_v2)
    w = torch.addcmul(mu, sigma, eps)
    responsibility = torch.mul(w, w).mul_(-0.5 * (inv_v1 - inv_v2)).add_(c0).sigmoid_()
    g = responsibility.mul_(inv_v1 - inv_v2).add_(inv_v2).mul_(w)
    sigma_term = torch.mul(g, eps).sub_(sigma.reciprocal())
    return g, sigma_term, w


class MixtureLinear(torch.autograd.Function):
    """(h, kl) for a bnn-mixture layer: local-reparameterisation pre-activations and the one-draw KL estimate.

    With kl_value=False the KL returned is 0 but carries the estimate's gradient
    (a training step reads the value once per epoch). prior_log_density is the
    layer's own (used only for the value).
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        mu: Tensor,
        rho: Tensor,
        noise: Tensor,
        eps: Tensor,
        mixture_weight: Tensor,
        v1: Tensor,
        v2: Tensor,
        kl_value: bool,
        prior_log_density: Callable[[Tensor], Tensor],
    ):
        sigma = F.softplus(rho)
        sigmoid_rho = torch.sigmoid(rho)
        var_weight = sigma * sigma
        h, x_aug, x2_aug, sd = products_forward(x, mu, var_weight, noise)
        g, sigma_term, w = kl_gradient_terms(mu, sigma, eps, mixture_weight, v1, v2)
        if kl_value:
            neg_entropy = -0.5 * torch.log(2 * torch.pi * torch.e * sigma * sigma)
            kl = (neg_entropy - prior_log_density(w)).sum()
        else:
            kl = h.new_zeros(())
        del w
        # what the backward needs: d var / d rho = 2 sigma sigmoid(rho), and the KL's rho term after the chain rule
        var_rho = sigma.mul_(sigmoid_rho).mul_(2.0)
        kl_rho = sigma_term.mul_(sigmoid_rho)
        ctx.save_for_backward(noise, x_aug, x2_aug, sd, mu, var_weight, g, var_rho, kl_rho)
        return h, kl

    @staticmethod
    def backward(ctx, grad_h: Tensor | None, grad_kl: Tensor | None):
        noise, x_aug, x2_aug, sd, mu, var_weight, g, var_rho, kl_rho = ctx.saved_tensors
        if grad_h is None:
            grad_h = torch.zeros_like(noise)
        if grad_kl is None:
            grad_kl = grad_h.new_zeros(())
        grad_kl = grad_kl.reshape(())
        grad_x, grad_mu, grad_var = products_backward(
            grad_h, noise, x_aug, x2_aug, sd, mu, var_weight, ctx.needs_input_grad[0]
        )
        grad_mu.addcmul_(g, grad_kl)
        grad_rho = grad_var.mul_(var_rho).addcmul_(kl_rho, grad_kl)
        return grad_x, grad_mu, grad_rho, None, None, None, None, None, None, None
