"""LBBNN's fused backward (core/models/lbbnn_fused.py) after its rewrite with fewer passes equals the
previous formulation term by term, in float32 to float rounding (the sums are reassociated)."""

from __future__ import annotations

import pytest
import torch

from core.models.lbbnn_fused import parameter_gradients, prior_constants, weight_moments


def previous_parameter_gradients(g_m, g_v, c, mu, logit, mean, alpha, sigma, sigmoid_rho, t, offset, inverse_v):
    """The formulation before the rewrite, verbatim in arithmetic."""
    kl_over_v = c * inverse_v
    one_minus_alpha = torch.rsub(alpha, 1.0)
    slab_plus = torch.addcmul(logit, t, 0.5 * inverse_v).sub_(torch.log(sigma)).add_(offset)
    grad_logit = torch.addcmul(t, mean, mu, value=-2.0).mul_(g_v)
    grad_logit.addcmul_(g_m, mu).addcmul_(slab_plus, c).mul_(alpha).mul_(one_minus_alpha)
    grad_rho = torch.add(kl_over_v, g_v, alpha=2.0)
    grad_rho.mul_(sigma).addcdiv_(c, sigma, value=-1.0).mul_(alpha).mul_(sigmoid_rho)
    grad_mu = torch.addcmul(kl_over_v, one_minus_alpha, g_v, value=2.0)
    grad_mu.mul_(mu).add_(g_m).mul_(alpha)
    return grad_mu, grad_rho, grad_logit


@pytest.mark.parametrize("c", [0.0, 1.0 / 60000, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rewritten_gradients_equal_the_previous_formulation(c, dtype):
    torch.manual_seed(1)
    shape = (40, 31)
    mu, rho, logit = torch.randn(shape, dtype=dtype) * 0.3, torch.randn(shape, dtype=dtype) - 3, torch.randn(shape)
    logit = logit.to(dtype) * 2
    g_m, g_v = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype) * 10
    mean, _var, alpha, sigma, sigmoid_rho, t = weight_moments(mu, rho, logit)
    inverse_v, offset = prior_constants(torch.tensor(-1.5, dtype=dtype), torch.tensor(0.3, dtype=dtype))
    grad_kl = torch.tensor(c, dtype=dtype)
    saved = (mu, logit, mean, alpha, sigma, sigmoid_rho, t)
    before = [s.clone() for s in saved]
    args = (grad_kl, mu, logit, mean, alpha, sigma, sigmoid_rho, t, offset, inverse_v)
    new = parameter_gradients(g_m.clone(), g_v.clone(), *args)
    old = previous_parameter_gradients(g_m, g_v, *args)
    # reassociated sums: equal to rounding relative to the gradient's scale (1e-6 in float32)
    relative = 1e-6 if dtype == torch.float32 else 1e-14
    for a, b in zip(new, old):
        assert (a - b).abs().max() <= relative * b.abs().max()
    for s, b in zip(saved, before):  # saved tensors are only read (a retained graph differentiates again)
        assert torch.equal(s, b)
