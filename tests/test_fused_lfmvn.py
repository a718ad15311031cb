"""lbbnn-lfmvn's fused training step equals its autograd path.

Same seed, same draws (logits, then pre-activation noise): pre-activations, KL and the gradients of
all five parameter tensors (mu, rho, xi, F, D's rho) agree in double precision, and in single
precision to 1e-6 of each gradient's scale. The Gaussian slab goes through the one-Function step
(LowRankStep); the Student-t slab through LBBNN's kernel with its KL under autograd."""

from __future__ import annotations

import pytest
import torch

from core.models.base import new_generator
from core.models.lfmvn import LowRankLBBNNLayer, LowRankLBBNNOptions


def _layer(**options) -> LowRankLBBNNLayer:
    torch.manual_seed(2)
    layer = LowRankLBBNNLayer(5, 3, LowRankLBBNNOptions(**options)).double()
    with torch.no_grad():  # away from the initial values, so that every gradient term is sizeable
        layer.weight_mu.copy_(torch.randn_like(layer.weight_mu) * 0.5)
        layer.weight_rho.copy_(torch.randn_like(layer.weight_rho) - 1.0)
        layer.inclusion_logit.copy_(torch.randn_like(layer.inclusion_logit))
        layer.logit_factor.copy_(torch.randn_like(layer.logit_factor) * 0.3)
    return layer


def _run(layer, x, fused: bool, kl_value: bool = True):
    layer.zero_grad()
    layer.noise_generator = new_generator(torch.device("cpu"), 11)
    out, kl = layer.forward_with_kl(x, kl_value) if fused else (layer(x), layer.kl())
    path = type(out.grad_fn).__name__, type(kl.grad_fn).__name__
    (out.pow(2).sum() * 0.3 + out.sum() + 0.7 * kl).backward()
    grads = [p.grad.clone() for p in (layer.weight_mu, layer.weight_rho, layer.inclusion_logit)]
    grads += [layer.logit_factor.grad.clone(), layer.logit_diag_rho.grad.clone()]
    return path, out.detach(), kl.detach(), grads


@pytest.mark.parametrize("options", [{}, {"rank": 3, "prior_inclusion": 0.2}, {"slab": "student-t"}])
def test_lfmvn_fused_step_equals_autograd(options):
    layer = _layer(**options)
    x = torch.randn(7, 5, dtype=torch.double)
    path_f, out_f, kl_f, grads_f = _run(layer, x, fused=True)
    path_a, out_a, kl_a, grads_a = _run(layer, x, fused=False)
    gaussian = options.get("slab", "gaussian") == "gaussian"
    assert path_f[0] == ("LowRankStepBackward" if gaussian else "LBBNNLinearBackward") and path_a[0] != path_f[0]
    # the KL by hand for the Gaussian slab; the Student-t slab's one-draw estimate stays under autograd
    assert (path_f[1] in ("LowRankStepBackward", "LowRankKLBackward")) == gaussian
    torch.testing.assert_close(out_f, out_a, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(kl_f, kl_a, rtol=1e-10, atol=1e-12)
    for g_f, g_a in zip(grads_f, grads_a):
        assert g_f.abs().max() > 0
        torch.testing.assert_close(g_f, g_a, rtol=1e-9, atol=1e-11)


def test_lfmvn_kl_by_hand_passes_finite_differences():
    from core.models.lfmvn_fused import LowRankKL

    torch.manual_seed(0)
    shape = (3, 4)
    mu, rho, xi = (torch.randn(shape, dtype=torch.double).requires_grad_() for _ in range(3))
    factor = (torch.randn(*shape, 2, dtype=torch.double) * 0.5).requires_grad_()
    delta = (torch.randn(shape, dtype=torch.double) - 1.0).requires_grad_()
    constants = tuple(torch.tensor(v, dtype=torch.double) for v in (-0.3, -1.4, 4.0))
    assert torch.autograd.gradcheck(lambda *a: LowRankKL.apply(*a, *constants), (mu, rho, xi, factor, delta))


@pytest.mark.parametrize("dtype", [torch.double, torch.float32])
def test_lfmvn_step_without_kl_value_keeps_the_gradient(dtype):
    """Training's kl_value=False: the KL's value is 0 but every gradient is the full one's."""
    layer = _layer(rank=2).to(dtype)
    x = torch.randn(7, 5, dtype=torch.double).to(dtype)
    path_s, out_s, kl_s, grads_s = _run(layer, x, fused=True, kl_value=False)
    _, out_a, _, grads_a = _run(layer, x, fused=False)
    assert path_s == ("LowRankStepBackward", "LowRankStepBackward") and kl_s == 0
    tight = dtype == torch.double
    torch.testing.assert_close(out_s, out_a, rtol=1e-10 if tight else 1e-6, atol=1e-12 if tight else 1e-6)
    for g_s, g_a in zip(grads_s, grads_a):
        scale = g_a.abs().max()
        assert scale > 0
        assert (g_s - g_a).abs().max() <= (1e-10 if tight else 1e-6) * scale


def test_lfmvn_step_passes_finite_differences():
    from core.models.lfmvn_fused import LowRankStep

    torch.manual_seed(0)
    shape = (3, 5)
    x = torch.randn(6, 4, dtype=torch.double).requires_grad_()
    mu, rho, xi = (torch.randn(shape, dtype=torch.double).requires_grad_() for _ in range(3))
    factor = (torch.randn(*shape, 3, dtype=torch.double) * 0.5).requires_grad_()
    delta = (torch.randn(shape, dtype=torch.double) - 1.0).requires_grad_()
    z, eps, noise = torch.randn(3, dtype=torch.double), torch.randn(shape, dtype=torch.double), torch.randn(6, 3)
    constants = tuple(torch.tensor(v, dtype=torch.double) for v in (-0.3, -1.4, 4.0))

    def step(*a):
        h, kl = LowRankStep.apply(*a, z, eps, noise.double(), *constants, True)
        return h, kl

    assert torch.autograd.gradcheck(step, (x, mu, rho, xi, factor, delta))
