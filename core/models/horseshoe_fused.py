"""The training draw of a factorised horseshoe layer's unit scales and its KL's gradient, as one
autograd Function (core/models/horseshoe.py has the model; this is its step's hot path).

A step draws, per layer, t = log(tau_k v) = m_v + s_v e_v + m_k + s_k e_k (s = softplus(rho); the
output layer has no m_k, s_k), and when regularised log c^2 = m_c + s_c e_c and
log s_k = -1/2 logaddexp(-2 t, -log c^2); the unit scales are exp(log s_k). Under autograd that
is some thirty small operations each way, plus the scales' KL terms: for the step the per-operation
overhead costs more than the arithmetic. Here the forward runs the same operations in the same
order (the same scales bit for bit), and the backward is written out:

    d log s / d t = sigmoid(log c^2 - 2 t),  d log s / d log c^2 = (1 - sigmoid(log c^2 - 2 t)) / 2
    (unregularised: d log s / d t = 1);

the KL surrogate (value 0, as the fused Gaussian layer's) carries the gradient of
horseshoe.half_cauchy_scale_kl_gradient_part(2m, 2s, r) = m - log(2s) + exp(2s^2 - 2m) / r per
half-Cauchy scale (d/dm = 1 - 2E, d/ds = 4 s E - 1/s, E = exp(2s^2 - 2m) / r) and of
inverse_gamma_log_scale_kl_gradient_part(m_c, s_c, a, b) = a m_c - log s_c + b exp(s_c^2/2 - m_c)
for the slab (d/dm_c = a - b F, d/ds_c = b s_c F - 1/s_c, F = exp(s_c^2/2 - m_c)).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F


def unit_log_scales(
    layer_mu: Tensor,
    layer_std: Tensor,
    eps_layer: Tensor,
    node_mu: Tensor | None,
    node_std: Tensor | None,
    eps_node: Tensor | None,
    slab_mu: Tensor | None,
    slab_std: Tensor | None,
    eps_slab: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(log s_k, t = log(tau_k v), log c^2 or None) from standard normal draws; no node terms for the
    output layer (node_mu None), no slab unless regularised (slab_mu None). The one formula of the
    scale draw: HorseshoeLayer._log_scale and HorseshoeScales both use it."""
    log_tv = layer_mu + layer_std * eps_layer
    if node_mu is not None:
        log_tv = log_tv + node_mu + node_std * eps_node
    if slab_mu is None:
        return log_tv, log_tv, None
    log_c2 = slab_mu + slab_std * eps_slab
    # s = 1 / sqrt(1/(tau v)^2 + 1/c^2), in logs for stability.
    return -0.5 * torch.logaddexp(-2 * log_tv, -log_c2), log_tv, log_c2


class HorseshoeScales(torch.autograd.Function):
    """(scale (out,), KL surrogate 0-d) from the layer's scale parameters and standard normal draws.

    Inputs (None where the layer has no such latent): layer_mu, layer_rho (0-d), node_mu, node_rho
    (out,), slab_mu, slab_rho (0-d), eps_layer (1,), eps_node (out,), eps_slab (1,), layer_aux_rate,
    node_aux_rate (the q(lam) rates, buffers), slab_shape, slab_scale (buffers), out_features.
    """

    @staticmethod
    def forward(
        ctx,
        layer_mu: Tensor,
        layer_rho: Tensor,
        node_mu: Tensor | None,
        node_rho: Tensor | None,
        slab_mu: Tensor | None,
        slab_rho: Tensor | None,
        eps_layer: Tensor,
        eps_node: Tensor | None,
        eps_slab: Tensor | None,
        layer_aux_rate: Tensor,
        node_aux_rate: Tensor | None,
        slab_shape: Tensor | None,
        slab_scale: Tensor | None,
        out_features: int,
    ):
        has_nodes, regularised = node_mu is not None, slab_mu is not None
        layer_std = F.softplus(layer_rho)
        node_std = F.softplus(node_rho) if has_nodes else None
        slab_std = F.softplus(slab_rho) if regularised else None
        log_scale, log_tv, log_c2 = unit_log_scales(
            layer_mu, layer_std, eps_layer, node_mu, node_std, eps_node, slab_mu, slab_std, eps_slab
        )
        scale = torch.exp(log_scale).expand(out_features)
        ctx.has_nodes, ctx.regularised = has_nodes, regularised
        ctx.save_for_backward(
            scale,
            log_tv,
            log_c2,
            layer_mu,
            layer_rho,
            layer_std,
            node_mu,
            node_rho,
            node_std,
            slab_mu,
            slab_rho,
            slab_std,
            eps_layer,
            eps_node,
            eps_slab,
            layer_aux_rate,
            node_aux_rate,
            slab_shape,
            slab_scale,
        )
        return scale, scale.new_zeros(())

    @staticmethod
    def backward(ctx, grad_scale: Tensor | None, grad_kl: Tensor | None):
        (
            scale,
            log_tv,
            log_c2,
            layer_mu,
            layer_rho,
            layer_std,
            node_mu,
            node_rho,
            node_std,
            slab_mu,
            slab_rho,
            slab_std,
            eps_layer,
            eps_node,
            eps_slab,
            layer_aux_rate,
            node_aux_rate,
            slab_shape,
            slab_scale,
        ) = ctx.saved_tensors
        if grad_scale is None:
            grad_scale = torch.zeros_like(scale)
        grad_kl = layer_mu.new_zeros(()) if grad_kl is None else grad_kl.reshape(())
        grad_log_scale = grad_scale * scale
        grad_slab_mu = grad_slab_rho = None
        if ctx.regularised:
            share = torch.sigmoid(log_c2 - 2 * log_tv)
            grad_tv = grad_log_scale * share
            grad_c2 = 0.5 * (grad_log_scale - grad_tv).sum()
            slab_term = torch.exp(0.5 * slab_std * slab_std - slab_mu)
            grad_slab_mu = (grad_c2 + grad_kl * (slab_shape - slab_scale * slab_term)).reshape(slab_mu.shape)
            grad_slab_rho = (
                (grad_c2 * eps_slab + grad_kl * (slab_scale * slab_std * slab_term - 1 / slab_std))
                * torch.sigmoid(slab_rho)
            ).reshape(slab_rho.shape)
        else:
            grad_tv = grad_log_scale

        def half_cauchy(
            grad_mean: Tensor, grad_std_part: Tensor, mean: Tensor, std: Tensor, rho: Tensor, aux_rate: Tensor
        ) -> tuple[Tensor, Tensor]:
            expected = torch.exp(2 * std * std - 2 * mean) / aux_rate
            return (
                grad_mean + grad_kl * (1 - 2 * expected),
                (grad_std_part + grad_kl * (4 * std * expected - 1 / std)) * torch.sigmoid(rho),
            )

        grad_node_mu = grad_node_rho = None
        if ctx.has_nodes:
            grad_node_mu, grad_node_rho = half_cauchy(
                grad_tv, grad_tv * eps_node, node_mu, node_std, node_rho, node_aux_rate
            )
        grad_layer_mu, grad_layer_rho = half_cauchy(
            grad_tv.sum(), (grad_tv * eps_layer).sum(), layer_mu, layer_std, layer_rho, layer_aux_rate
        )
        return (
            grad_layer_mu.reshape(layer_mu.shape),
            grad_layer_rho.reshape(layer_rho.shape),
            grad_node_mu,
            grad_node_rho,
            grad_slab_mu,
            grad_slab_rho,
            *([None] * 8),
        )
