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

from core.models.fused import products_backward, products_forward
from core.models.lbbnn_fused import weight_moments


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
        cholesky = torch.linalg.cholesky_ex(capacitance).L
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


class LowRankStep(torch.autograd.Function):
    """An lbbnn-lfmvn layer's whole training step: the logit draw, LBBNN's local-reparameterisation
    pre-activations given it, and the KL, in one Function (Gaussian slab, free structure, eager).

    Through LBBNN's kernel plus LowRankKL the step computed LBBNN's mean-field KL terms it does
    not use (a log per weight), softplus and sigmoid of rho twice, softplus of the diagonal's rho
    three times (the draw's sqrt(D) as the root of a square), products of the (d, r) factor with
    r x r matrices (several ms each on a CPU, for r = 2) and autograd's backward of the draw. Here
    the factor is read once as r contiguous columns, every transcendental is taken once, and the
    KL's log-determinant is evaluated only when its value is asked for (its gradient needs C^-1).
    The draw is l = xi + sum_j z_j F_j + softplus(delta) eps, in the layer's order of draws; with
    d/dl the likelihood's gradient in l (LBBNN's docstring with c = 0) the draw adds
      d/dxi += d/dl,  d/dF_j += z_j d/dl,  d/ddelta += eps sigmoid(delta) d/dl
    to the KL's gradients of LowRankKL's docstring. Returns (h, kl); kl is 0 with the KL's
    gradient when kl_value is False.
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        mu: Tensor,
        rho: Tensor,
        xi: Tensor,
        factor: Tensor,
        delta: Tensor,
        z: Tensor,
        eps: Tensor,
        noise: Tensor,
        prior_logit: Tensor,
        log_slab_variance: Tensor,
        logit_prior_variance: Tensor,
        kl_value: bool = False,
    ):
        rank = factor.shape[-1]
        columns = factor.permute(2, 0, 1).contiguous()  # (r, out, in+1): strided passes cost ~4x
        sd = F.softplus(delta)
        logit = torch.addcmul(xi, sd, eps)
        for j in range(rank):
            logit.addcmul_(columns[j], z[j])
        mean_weight, var_weight, alpha_l, sigma, sigmoid_rho, second_moment = weight_moments(mu, rho, logit)
        h, x_aug, x2_aug, sd_h = products_forward(x, mean_weight, var_weight, noise)
        # the KL's parts
        inverse_v = torch.exp(-log_slab_variance)
        diag = sd * sd
        varl = diag.clone()
        for j in range(rank):
            varl.addcmul_(columns[j], columns[j])
        k = varl.mul_(math.pi / 8).add_(1.0).rsqrt_()
        alpha = torch.mul(xi, k).sigmoid_()
        slab = torch.mul(second_moment, 0.5 * inverse_v).sub_(torch.log(sigma)).add_(0.5 * (log_slab_variance - 1.0))
        centred = xi - prior_logit
        inverse_diag = diag.reciprocal_()
        flat = columns.reshape(rank, -1)
        scaled = flat * inverse_diag.reshape(1, -1)  # (D^-1 F)^T
        capacitance = torch.eye(rank, dtype=xi.dtype, device=xi.device) + flat @ scaled.T
        cholesky = torch.linalg.cholesky_ex(capacitance).L
        inverse_c = torch.cholesky_inverse(cholesky)
        p = torch.zeros_like(columns)  # (D^-1 F C^-1)^T as r columns
        for j in range(rank):
            for i in range(rank):
                p[j].addcmul_(columns[i], inverse_c[i, j])
            p[j].mul_(inverse_diag)
        if kl_value:
            d = xi.numel()
            log_det = 2 * torch.log(sd).sum() + 2 * torch.log(torch.diagonal(cholesky)).sum()
            trace = torch.dot(sd.reshape(-1), sd.reshape(-1)) + torch.dot(flat.reshape(-1), flat.reshape(-1))
            u = logit_prior_variance
            logit_kl = 0.5 * ((trace + torch.dot(centred.reshape(-1), centred.reshape(-1))) / u - d)
            logit_kl = logit_kl + 0.5 * (d * torch.log(u) - log_det)
            kl = torch.dot(alpha.reshape(-1), slab.reshape(-1)) + logit_kl
        else:
            kl = h.new_zeros(())
        ctx.save_for_backward(
            noise, x_aug, x2_aug, sd_h, mean_weight, var_weight, alpha_l, sigma, sigmoid_rho, second_moment, mu,
            columns, sd, eps, z, delta, xi, k, alpha, slab, centred, inverse_diag, p, inverse_v, logit_prior_variance,
        )  # fmt: skip
        return h, kl

    @staticmethod
    def backward(ctx, grad_h: Tensor | None, grad_kl: Tensor | None):
        (
            noise, x_aug, x2_aug, sd_h, mean_weight, var_weight, alpha_l, sigma, sigmoid_rho, t, mu,
            columns, sd, eps, z, delta, xi, k, alpha, slab, centred, inverse_diag, p, inverse_v, u,
        ) = ctx.saved_tensors  # fmt: skip
        if grad_h is None:
            grad_h = torch.zeros_like(noise)
        c = grad_h.new_zeros(()) if grad_kl is None else grad_kl.reshape(())
        grad_x, g_m, g_v = products_backward(
            grad_h, noise, x_aug, x2_aug, sd_h, mean_weight, var_weight, ctx.needs_input_grad[0]
        )
        # the likelihood's gradient in the drawn logit: a (1 - a) [G_m mu + G_v t - 2 (a mu) G_v mu]
        weighted_v = g_v * mean_weight
        grad_logit = torch.mul(g_m, mu).addcmul_(g_v, t).addcmul_(weighted_v, mu, value=-2.0)
        grad_logit.mul_(torch.addcmul(alpha_l, alpha_l, alpha_l, value=-1.0))
        # mu: a_l (G_m - 2 (a_l mu) G_v) + 2 (a_l mu) G_v + c a mu / v
        ca = alpha * c
        cav = ca * inverse_v
        grad_mu = g_m.sub_(weighted_v, alpha=2.0).mul_(alpha_l).add_(weighted_v, alpha=2.0).addcmul_(cav, mu)
        # rho: sigmoid(rho) [s (2 a_l G_v + c a / v) - c a / s]
        grad_rho = g_v.mul_(alpha_l).mul_(2.0).add_(cav).mul_(sigma).addcdiv_(ca, sigma, value=-1.0).mul_(sigmoid_rho)
        b = torch.rsub(alpha, 1.0).mul_(ca).mul_(slab)  # c slab a (1 - a)
        c_over_u = c / u
        grad_xi = torch.addcmul(grad_logit, b, k).addcmul_(centred, c_over_u.expand_as(centred))
        grad_varl = b.mul_(xi).mul_(k).mul_(k).mul_(k).mul_(-math.pi / 16).add_(0.5 * c_over_u)
        rank = columns.shape[0]
        grad_columns = torch.empty_like(columns)
        p_dot_f = torch.zeros_like(sd)
        twice_grad_varl = grad_varl * 2.0
        minus_c = -c
        for j in range(rank):
            p_dot_f.addcmul_(p[j], columns[j])
            torch.mul(grad_logit, z[j], out=grad_columns[j])
            grad_columns[j].addcmul_(twice_grad_varl, columns[j]).addcmul_(p[j], minus_c)
        grad_factor = grad_columns.permute(1, 2, 0).contiguous()
        # D: grad_varl + 0.5 c (P_i . F_i - 1) / D;  delta: sigmoid(delta) (eps d/dl + 2 sd d/dD)
        grad_diag = p_dot_f.sub_(1.0).mul_(inverse_diag).mul_(0.5 * c).add_(grad_varl)
        grad_delta = grad_diag.mul_(sd).mul_(2.0).addcmul_(grad_logit, eps).mul_(torch.sigmoid(delta))
        return grad_x, grad_mu, grad_rho, grad_xi, grad_factor, grad_delta, *([None] * 7)
