"""lbbnn-flow's fused training step (FlowLinear for the weight-sized work, the flows under autograd)
equals its autograd path: same draws in the same order, the same pre-activations and one-draw KL bound,
and the same gradients for every parameter and the input, in double precision and, in single
precision, to 1e-6 of each gradient's scale; FlowLinear's gradients pass finite differences."""

from __future__ import annotations

import pytest
import torch

from core.models.base import new_generator
from core.models.lbbnn_flow import FlowLinear, LBBNNFlowLayer, LBBNNFlowOptions


def _layer(dtype, **options) -> LBBNNFlowLayer:
    torch.manual_seed(3)
    layer = LBBNNFlowLayer(6, 4, LBBNNFlowOptions(**options)).to(dtype)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # every parameter off its initial value (the flows' output maps off zero)
        for param in layer.parameters():
            if param.requires_grad:
                param.add_(0.3 * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return layer


def _run(layer, x, fused: bool, kl_value: bool = True):
    layer.zero_grad()
    x = x.detach().clone().requires_grad_()
    layer.noise_generator = new_generator(torch.device("cpu"), 17)
    out, kl = layer.forward_with_kl(x, kl_value) if fused else (layer(x), layer.kl())
    (out.pow(2).sum() * 0.3 + out.sum() + 0.7 * kl).backward()
    names = [name for name, p in layer.named_parameters() if p.requires_grad]
    grads = {name: p.grad.clone() for name, p in layer.named_parameters() if p.requires_grad}
    grads["x"] = x.grad.clone()
    return type(out.grad_fn).__name__, out.detach(), kl.detach(), grads, names


@pytest.mark.parametrize("dtype", [torch.double, torch.float32])
@pytest.mark.parametrize("options", [{}, {"flow_length": 0, "prior_inclusion": 0.3}])
def test_fused_flow_step_equals_autograd(dtype, options):
    layer = _layer(dtype, **options)
    x = torch.randn(5, 6, dtype=torch.double).to(dtype)
    path_f, out_f, kl_f, grads_f, names = _run(layer, x, fused=True)
    path_a, out_a, kl_a, grads_a, _ = _run(layer, x, fused=False)
    assert path_f == "FlowLinearBackward" and path_a != path_f
    tight = dtype == torch.double
    rtol, atol = (1e-10, 1e-12) if tight else (1e-5, 1e-6)
    torch.testing.assert_close(out_f, out_a, rtol=rtol, atol=atol)
    torch.testing.assert_close(kl_f, kl_a, rtol=rtol, atol=atol)
    assert {"weight_mu", "weight_rho", "inclusion_logit", "z_mean", "z_rho", "r_c", "r_b1"} <= set(names)
    for name in [*names, "x"]:
        scale = grads_a[name].abs().max()
        if name not in ("r_b2",) and not name.startswith("z_flow") and not name.startswith("r_flow"):
            assert scale > 0, name
        assert (grads_f[name] - grads_a[name]).abs().max() <= (1e-10 if tight else 1e-6) * max(scale, 1e-3), name


def test_fused_flow_step_without_kl_value_keeps_the_gradient():
    layer = _layer(torch.double)
    x = torch.randn(5, 6, dtype=torch.double)
    _, out_s, _, grads_s, names = _run(layer, x, fused=True, kl_value=False)
    _, out_a, _, grads_a, _ = _run(layer, x, fused=True)
    torch.testing.assert_close(out_s, out_a, rtol=0, atol=0)
    for name in [*names, "x"]:
        torch.testing.assert_close(grads_s[name], grads_a[name], rtol=1e-12, atol=1e-14)


def test_flow_linear_passes_finite_differences():
    torch.manual_seed(0)
    n, d, out = 4, 5, 3
    x, xz = (torch.randn(n, d, dtype=torch.double).requires_grad_() for _ in range(2))
    mu, rho, logit = (torch.randn(out, d + 1, dtype=torch.double).requires_grad_() for _ in range(3))
    z, r_c = (torch.randn(d, dtype=torch.double).requires_grad_() for _ in range(2))
    noise = torch.randn(n, out, dtype=torch.double)
    constants = (torch.tensor(-0.4, dtype=torch.double), torch.tensor(-1.2, dtype=torch.double))
    assert torch.autograd.gradcheck(
        lambda *a: FlowLinear.apply(*a[:7], noise, *constants, True), (x, xz, mu, rho, logit, z, r_c)
    )
