"""sparse-vd's KL with its gradient by hand (SparseVDKL) equals the autograd KL of the layer: value and
gradients in double precision, including weights whose log alpha is clipped at either end, and the
surrogate of a training step (kl_value=False) keeps the gradient; the Function passes finite differences."""

from __future__ import annotations

import torch

from core.models.sparse_vd import SparseVDKL, SparseVDLayer


def _grads(layer, fused: bool, kl_value: bool = True):
    layer.zero_grad()
    x = torch.randn(6, 5, dtype=torch.double, generator=torch.Generator().manual_seed(1))
    if fused:
        _, kl = layer.forward_with_kl(x, kl_value)
    else:
        kl = layer.kl()
    (0.7 * kl).backward()
    return kl.detach(), layer.theta.grad.clone(), layer.log_sigma2.grad.clone(), type(kl.grad_fn).__name__


def _layer() -> SparseVDLayer:
    torch.manual_seed(4)
    layer = SparseVDLayer(5, 4).double()
    with torch.no_grad():
        layer.log_sigma2.copy_(torch.randn_like(layer.log_sigma2) * 3 - 4)
        layer.theta[0, :3] = torch.tensor([1e-9, -1e-7, 0.0], dtype=torch.double)  # log alpha clipped at 8
        layer.theta[1, :2] = 400.0  # clipped at -8
    return layer


def test_sparse_vd_kl_by_hand_equals_autograd():
    layer = _layer()
    kl_f, theta_f, ls_f, path = _grads(layer, fused=True)
    kl_a, theta_a, ls_a, _ = _grads(layer, fused=False)
    assert path == "SparseVDKLBackward"
    log_alpha = layer.log_alpha().detach()
    assert (log_alpha == 8).any() and (log_alpha == -8).any() and ((log_alpha > -8) & (log_alpha < 8)).any()
    torch.testing.assert_close(kl_f, kl_a, rtol=1e-12, atol=1e-12)
    for got, expected in ((theta_f, theta_a), (ls_f, ls_a)):
        assert expected.abs().max() > 0
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    _, theta_s, ls_s, _ = _grads(layer, fused=True, kl_value=False)
    torch.testing.assert_close(theta_s, theta_a, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ls_s, ls_a, rtol=1e-10, atol=1e-12)


def test_sparse_vd_kl_passes_finite_differences():
    torch.manual_seed(0)
    theta = (torch.randn(4, 3, dtype=torch.double) * 0.5).requires_grad_()
    log_sigma2 = (torch.randn(4, 3, dtype=torch.double) - 2.0).requires_grad_()
    assert torch.autograd.gradcheck(lambda t, s: SparseVDKL.apply(t, s, True), (theta, log_sigma2))
