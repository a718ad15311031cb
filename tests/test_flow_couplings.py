"""The coupling flows' hand-written backward (CouplingFlowFunction, core/models/flows.py) against autograd
through the Real NVP formula written out (Dinh, Sohl-Dickstein & Bengio 2017): the same z' and
log-determinant, the same gradients for z and every parameter (float64 to 1e-10, float32 to 1e-6 of each
gradient's scale), finite differences, for one vector, a batch of rows and a batch of batches."""

from __future__ import annotations

import pytest
import torch

from core.models.flows import CouplingFlow, CouplingFlowFunction


def _flow(dim: int, length: int, dtype) -> CouplingFlow:
    torch.manual_seed(dim + length)
    flow = CouplingFlow(dim, length, hidden=3).to(dtype)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # the output maps off zero: a nonlinear flow
        for param in flow.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=generator, dtype=torch.float64).to(dtype))
    return flow


def _reference(flow: CouplingFlow, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula, coupling by coupling, under autograd."""
    log_det = torch.zeros(z.shape[:-1], dtype=z.dtype)
    for c in flow.couplings:
        m = c.mask.to(z.dtype)
        h = torch.tanh((z * m) @ c.hidden_weight.T + c.hidden_bias)
        s = (h @ c.scale_weight.T + c.scale_bias) * (1 - m)
        t = (h @ c.shift_weight.T + c.shift_bias) * (1 - m)
        z = z * m + (1 - m) * (z * torch.exp(s) + t)
        log_det = log_det + s.sum(-1)
    return z, log_det


def _gradients(flow, z, fn, weights):
    z = z.detach().clone().requires_grad_()
    out, log_det = fn(z)
    params = list(flow.parameters())
    loss = (out * weights[0]).sum() + (log_det * weights[1]).sum() + 0.3 * (out * out).sum()
    grads = torch.autograd.grad(loss, [z, *params])
    return out.detach(), log_det.detach(), grads, type(out.grad_fn).__name__


def _case(dim, length, shape, dtype):
    flow = _flow(dim, length, dtype)
    generator = torch.Generator().manual_seed(11)
    z = torch.randn(*shape, dim, generator=generator, dtype=torch.float64).to(dtype)
    weights = (
        torch.randn(*shape, dim, generator=generator, dtype=torch.float64).to(dtype),
        torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype),
    )
    return flow, _gradients(flow, z, flow, weights), _gradients(flow, z, lambda v: _reference(flow, v), weights)


CASES = [(5, 2, (7,)), (1, 2, (3,)), (4, 3, ()), (6, 2, (2, 3))]


@pytest.mark.parametrize("dim,length,shape", CASES)
def test_the_flow_function_equals_autograd_through_the_formula_in_float64(dim, length, shape):
    flow, (out, log_det, grads, path), (out_r, log_det_r, grads_r, path_r) = _case(dim, length, shape, torch.float64)
    assert path == "CouplingFlowFunctionBackward" and path_r != path
    torch.testing.assert_close(out, out_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(log_det, log_det_r, rtol=1e-12, atol=1e-12)
    assert any(g.abs().max() > 0 for g in grads_r[1:])
    for name, g, g_r in zip(["z", *(n for n, _ in flow.named_parameters())], grads, grads_r):
        assert (g - g_r).abs().max() <= 1e-10 * max(g_r.abs().max().item(), 1e-3), name


@pytest.mark.parametrize("dim,length,shape", CASES)
def test_in_float32_the_flow_function_is_as_accurate_as_autograd(dim, length, shape):
    """Against the float64 gradients: the Function's error at most autograd's own float32 error plus 1e-6
    of the gradient's scale (three couplings in a row amplify float32 rounding beyond 1e-6 in both)."""
    _, (_, _, truth, _) = _case(dim, length, shape, torch.float64)[:2]
    flow, (out, _, grads, path), (out_r, _, grads_r, _) = _case(dim, length, shape, torch.float32)
    assert path == "CouplingFlowFunctionBackward"
    torch.testing.assert_close(out, out_r, rtol=1e-6, atol=1e-6)
    for name, g, g_r, t in zip(["z", *(n for n, _ in flow.named_parameters())], grads, grads_r, truth):
        scale = max(t.abs().max().item(), 1e-3)
        autograd_error = (g_r.double() - t).abs().max().item()
        assert (g.double() - t).abs().max() <= autograd_error + 1e-6 * scale, name


def test_the_flow_function_passes_finite_differences():
    flow = _flow(5, 3, torch.float64)
    z = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    params = [p for c in flow.couplings for p in c.parameter_list()]
    masks = [c.mask for c in flow.couplings]
    assert torch.autograd.gradcheck(lambda v, *ps: CouplingFlowFunction.apply(v, masks, *ps), (z, *params))


def test_without_gradients_and_under_torch_func_the_flow_takes_autograds_path_with_the_same_values():
    flow = _flow(4, 2, torch.float64)
    z = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        plain = flow(z)
    with_grad = flow(z.clone().requires_grad_())
    assert type(with_grad[0].grad_fn).__name__ == "CouplingFlowFunctionBackward"
    for a, b in zip(plain, with_grad):
        torch.testing.assert_close(a, b.detach(), rtol=1e-12, atol=1e-12)
    jacobian = torch.func.jacrev(lambda v: flow(v)[0])(z[0])
    expected = torch.autograd.functional.jacobian(lambda v: _reference(flow, v)[0], z[0])
    torch.testing.assert_close(jacobian, expected, rtol=1e-10, atol=1e-12)
