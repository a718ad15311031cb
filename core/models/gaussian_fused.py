"""A fused forward/backward for the mean-field Gaussian layers (`bnn`, `variational-dense`).

The layer of core/models/fused.py with q(w) = N(mu, s^2), s = softplus(rho),
and a N(0, v) prior: mean weights mu, variance weights s^2, and per weight
  kl = 0.5 ((s^2 + mu^2) / v - 1 - log s^2 + log v).
With G_m, G_v the gradients of the mean and variance weights and c the
gradient reaching the KL:
  d/dmu  = G_m + c mu / v
  d/drho = sigmoid(rho) [2 s G_v + c (s / v - 1 / s)]
As for LBBNN, kl_value=False returns a surrogate KL (value 0, the KL's gradient).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from core.models.fused import backward_through, kernel_pair, products_backward, products_forward


def layer_forward(x: Tensor, mu: Tensor, rho: Tensor, noise: Tensor):
    sigma = F.softplus(rho)
    var_weight = sigma * sigma
    h, x_aug, x2_aug, sd = products_forward(x, mu, var_weight, noise)
    return h, (x_aug, x2_aug, sd, var_weight, sigma)


def layer_backward(
    grad_h: Tensor,
    grad_kl: Tensor,
    noise: Tensor,
    mu: Tensor,
    rho: Tensor,
    x_aug: Tensor,
    x2_aug: Tensor,
    sd: Tensor,
    var_weight: Tensor,
    sigma: Tensor,
    log_prior_variance: Tensor,
    input_grad: bool,
):
    """(grad x or None, grad mu, grad rho)."""
    kl_over_v = grad_kl * torch.exp(-log_prior_variance)
    grad_x, grad_mu, grad_var_weight = products_backward(grad_h, noise, x_aug, x2_aug, sd, mu, var_weight, input_grad)
    grad_mu.addcmul_(mu, kl_over_v)
    grad_rho = torch.add(kl_over_v, grad_var_weight, alpha=2.0, out=grad_var_weight).mul_(sigma)
    grad_rho.addcdiv_(grad_kl, sigma, value=-1.0).mul_(torch.sigmoid(rho))
    return grad_x, grad_mu, grad_rho


def kernels(compiled: bool) -> tuple:
    return kernel_pair("gaussian", layer_forward, layer_backward, compiled)


class GaussianLinear(torch.autograd.Function):
    """Local-reparameterisation pre-activations of a mean-field Gaussian layer, plus its KL."""

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        mu: Tensor,
        rho: Tensor,
        noise: Tensor,
        log_prior_variance: Tensor,
        kl_value: bool = True,
        compiled: bool = False,
    ):
        forward_kernel, _ = kernels(compiled)
        h, saved = forward_kernel(x, mu, rho, noise)
        if kl_value:
            var_weight, sigma = saved[3], saved[4]
            inverse_v = torch.exp(-log_prior_variance)
            kl = 0.5 * (
                (torch.sum(var_weight) + torch.dot(mu.reshape(-1), mu.reshape(-1))) * inverse_v
                - mu.numel() * (1.0 - log_prior_variance)
                - 2.0 * torch.log(sigma).sum()
            )
        else:
            kl = h.new_zeros(())
        ctx.save_for_backward(noise, mu, rho, *saved, log_prior_variance)
        ctx.compiled = compiled
        return h, kl

    @staticmethod
    def backward(ctx, grad_h: Tensor, grad_kl: Tensor):
        return backward_through(ctx, grad_h, grad_kl, kernels(ctx.compiled)[1], unused_inputs=4)
