"""lbbnn-lfmvn's KL with its gradient by hand (Gaussian slab, free structure).

Under autograd this KL cost more than the layer's products each step: the
probit-approximated inclusion E[sigmoid(l)], the slab KL, and the low-rank
logit KL each leave several weight-sized tensors for a backward pass of
their own. Per weight, with s = softplus(rho), D = softplus(delta)^2, F the
(d, r) factor and varl = sum_r F^2 + D:
  k = (1 + pi varl / 8)^(-1/2),  a = sigmoid(xi k),  slab = 0.5 ((s^2 + mu^2) / v - 1 - log(s^2 / v))
  KL = sum a slab + 0.5 ((sum varl + sum (xi - m)^2) / u - d + d log u - log det Sigma),
  log det Sigma = sum log D + log det C,  C = I + F^T D^-1 F  (r x r),
and, with b = slab a (1 - a) (the gradient reaching the marginal logit) and
P = D^-1 F C^-1 (d x r):
  d/dmu = a mu / v,  d/drho = a (s / v - 1 / s) sigmoid(rho)
  d/dxi = b k + (xi - m) / u
  d/dvarl = -b xi (pi / 16) k^3 + 0.5 / u   (shared by F and D)
  d/dF = 2 F d/dvarl - P,  d/dD = d/dvarl - 0.5 / D + 0.5 (P_i . F_i) / D
  d/ddelta = d/dD 2 softplus(delta) sigmoid(delta)
(using d log det C / dF = 2 D^-1 F C^-1 and d log det C / dD_i = -F_i C^-1 F_i^T / D_i^2).
The layer's autograd KL (core/models/lfmvn.py) is the reference in the tests.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.nn import functional as F


class LowRankKL(torch.autograd.Function):
    """KL(q || p) of an lbbnn-lfmvn layer from (mu, rho, xi, factor (out, in+1, r), delta) and 0-dim constants."""

    @staticmethod
    def forward(
        ctx,
        mu: Tensor,
        rho: Tensor,
        xi: Tensor,
        factor: Tensor,
        delta: Tensor,
        log_slab_variance: Tensor,
        prior_logit: Tensor,
        logit_prior_variance: Tensor,
    ):
        d, rank = xi.numel(), factor.shape[-1]
        inverse_v = torch.exp(-log_slab_variance)
        sigma = F.softplus(rho)
        sd = F.softplus(delta)
        diag = sd * sd
        varl = diag.clone()
        for j in range(factor.shape[-1]):  # a reduction over the short last axis is several times slower
            varl.addcmul_(factor[..., j], factor[..., j])
        k = varl.mul(math.pi / 8).add_(1.0).rsqrt_()
        alpha = torch.mul(xi, k).sigmoid_()
        log_sigma = torch.log(sigma)
        # 0.5 ((s^2 + mu^2) / v - 1) - log s + 0.5 log v
        slab = torch.mul(mu, mu).addcmul_(sigma, sigma).mul_(0.5 * inverse_v).sub_(log_sigma)
        slab.add_(0.5 * (log_slab_variance - 1.0))
        centred = xi - prior_logit
        flat_factor = factor.reshape(d, rank)
        scaled = flat_factor / diag.reshape(d, 1)  # D^-1 F
        capacitance = torch.eye(rank, dtype=xi.dtype, device=xi.device) + flat_factor.T @ scaled
        cholesky = torch.linalg.cholesky(capacitance)
        log_det = torch.log(diag).sum() + 2 * torch.log(torch.diagonal(cholesky)).sum()
        logit_kl = 0.5 * (
            (varl.sum() + torch.dot(centred.reshape(-1), centred.reshape(-1))) / logit_prior_variance
            - d
            + d * torch.log(logit_prior_variance)
            - log_det
        )
        kl = torch.dot(alpha.reshape(-1), slab.reshape(-1)) + logit_kl
        p = scaled @ torch.cholesky_inverse(cholesky)  # D^-1 F C^-1, (d, r); solving for d right-hand sides is slow
        ctx.save_for_backward(
            mu, sigma, rho, xi, factor, delta, sd, diag, k, alpha, slab, centred, p, inverse_v, logit_prior_variance
        )
        return kl

    @staticmethod
    def backward(ctx, grad_kl: Tensor):
        mu, sigma, rho, xi, factor, delta, sd, diag, k, alpha, slab, centred, p, inverse_v, u = ctx.saved_tensors
        c = grad_kl.reshape(())
        rank = factor.shape[-1]
        p_rows = p.reshape(factor.shape)
        ca = alpha * c
        grad_mu = torch.mul(ca, mu).mul_(inverse_v)
        grad_rho = torch.mul(sigma, inverse_v).sub_(sigma.reciprocal()).mul_(ca).mul_(torch.sigmoid(rho))
        b = torch.rsub(alpha, 1.0).mul_(ca).mul_(slab)  # c slab a (1 - a)
        inverse_u = u.reciprocal()
        grad_xi = torch.mul(b, k).addcmul_(centred, c * inverse_u)
        grad_varl = b.mul_(xi).mul_(k).mul_(k).mul_(k).mul_(-math.pi / 16).add_(0.5 * c * inverse_u)
        grad_factor = (2.0 * grad_varl).unsqueeze(-1) * factor - c * p_rows
        p_dot_f = torch.zeros_like(diag)
        for j in range(rank):
            p_dot_f.addcmul_(p_rows[..., j], factor[..., j])
        grad_diag = p_dot_f.sub_(1.0).div_(diag).mul_(0.5 * c).add_(grad_varl)
        grad_delta = grad_diag.mul_(sd).mul_(torch.sigmoid(delta)).mul_(2.0)
        return grad_mu, grad_rho, grad_xi, grad_factor, grad_delta, None, None, None
