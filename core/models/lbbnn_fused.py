"""A fused forward/backward for the LBBNN layer's hot path.

The training step of LBBNN-SSP-MF spends most of its CPU time not in matrix
products but in elementwise work over every weight: alpha, sigma, the
pre-activation moments and the closed-form KL, and autograd's backward of
each. This Function computes the weight moments and the KL together and
writes the gradients by hand (derived below), which roughly halves the number
of passes over the (out, in+1) tensors. It covers the main training path
(Gaussian slab, Bernoulli inclusion prior with fixed hyperparameters, free
structure); every other configuration uses plain autograd, which also serves
as the reference in the tests.

With a = sigmoid(l), s = softplus(rho), t = s^2 + mu^2, prior variance v and
prior inclusion logit lp:
  mean = a mu,  var = a t - (a mu)^2
  kl   = sum a (slab + l - lp) + log(1 - a) - log(1 - psi),
  slab = 0.5 (t / v - 1 - log s^2 + log v)
Gradients (g_m, g_v elementwise, g_k scalar):
  d/dmu  = a [g_m + mu (2 (1 - a) g_v + g_k / v)]
  d/drho = sigmoid(rho) a [s (2 g_v + g_k / v) - g_k / s]
  d/dl   = a (1 - a) [g_m mu + g_v (t - 2 a mu^2) + g_k (slab + l - lp)]
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F


class LBBNNMomentsAndKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mu: Tensor, rho: Tensor, logit: Tensor, prior_logit: float, prior_variance: float):
        alpha = torch.sigmoid(logit)
        sigma = F.softplus(rho)
        mu2 = mu * mu
        t = torch.addcmul(mu2, sigma, sigma)
        mean = alpha * mu
        var = torch.addcmul(alpha * t, mean, mean, value=-1.0)
        # slab + l - lp, kept for the backward pass
        slab_plus = torch.log(sigma).mul_(-1.0)
        slab_plus.add_(t, alpha=0.5 / prior_variance).add_(logit)
        slab_plus.add_(0.5 * (math.log(prior_variance) - 1.0) - prior_logit)
        constant = F.logsigmoid(torch.tensor(-prior_logit, dtype=torch.float64)).item()
        kl = (torch.dot(alpha.flatten(), slab_plus.flatten())
              + F.logsigmoid(-logit).sum() - constant * logit.numel())
        ctx.save_for_backward(mu, rho, alpha, sigma, mu2, t, slab_plus)
        ctx.prior_variance = prior_variance
        return mean, var, kl

    @staticmethod
    def backward(ctx, grad_mean: Tensor, grad_var: Tensor, grad_kl: Tensor):
        mu, rho, alpha, sigma, mu2, t, slab_plus = ctx.saved_tensors
        v = ctx.prior_variance
        g_k = float(grad_kl)
        if grad_mean is None:
            grad_mean = torch.zeros_like(mu)
        if grad_var is None:
            grad_var = torch.zeros_like(mu)
        one_minus_alpha = 1.0 - alpha
        # d/dmu
        grad_mu = (one_minus_alpha * grad_var).mul_(2.0).add_(g_k / v).mul_(mu).add_(grad_mean).mul_(alpha)
        # d/drho
        grad_rho = (grad_var * 2.0).add_(g_k / v).mul_(sigma).sub_(g_k / sigma)
        grad_rho.mul_(alpha).mul_(torch.sigmoid(rho))
        # d/dl
        inner = torch.addcmul(t, alpha, mu2, value=-2.0).mul_(grad_var)
        inner.addcmul_(grad_mean, mu).add_(slab_plus, alpha=g_k)
        grad_logit = inner.mul_(alpha).mul_(one_minus_alpha)
        return grad_mu, grad_rho, grad_logit, None, None
