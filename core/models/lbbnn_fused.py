"""A fused forward/backward for the LBBNN layer's training step.

On a CPU the training step of LBBNN-SSP-MF (local reparameterisation) spends
as much time on elementwise work over every weight as on matrix products:
alpha, sigma, the weight moments, the closed-form KL and, under autograd, the
backward of each of those plus the copies that slicing the augmented
(out, in+1) matrices costs. This Function does the whole layer in one go:

- the bias column is handled by appending a column of ones to the input
  (core/models/fused.py, shared with the Gaussian families);
- the gradients of the weight moments and of the KL are derived by hand
  (below) and written with in-place arithmetic, about 25 passes over the
  weights per step instead of ~60 under autograd;
- the KL's value (a log-sigmoid over every weight, the most expensive single
  operation here) is computed only when asked for. Training takes the
  gradient of the KL every step but reads its value once per epoch.

It covers the main training path (Gaussian slab, Bernoulli inclusion prior
with fixed hyperparameters, free structure, biases with or without an
inclusion indicator); every other configuration uses plain autograd, which
also serves as the reference in the tests.

A bias without an indicator (bias_prior="gaussian") has a = 1 and only the
slab's KL; with a = 1 the formulas below already give its gradients (the
factor 1 - a zeroes its logit's), so only a and the KL's value change.

With a = sigmoid(l), s = softplus(rho), t = s^2 + mu^2, prior variance v and
prior inclusion logit lp, per weight:
  mean = a mu,  var = a t - (a mu)^2
  kl   = a (slab + l - lp) + log(1 - a) - log(1 - psi),  slab = 0.5 (t / v - 1 - log s^2 + log v)
and for a pre-activation h = x.mean + sqrt(x^2.var) eps with upstream gradient
g_h, the moment gradients are G_m = g_h^T x and G_v = (g_h eps / (2 sd))^T x^2.
With c the gradient reaching the KL:
  d/dmu  = a [G_m + mu (2 (1 - a) G_v + c / v)]
  d/drho = sigmoid(rho) a [s (2 G_v + c / v) - c / s]
  d/dl   = a (1 - a) [G_m mu + G_v (t - 2 a mu^2) + c (slab + l - lp)]
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from core.models.fused import backward_through, kernel_pair, products_backward, products_forward


def weight_moments(mu: Tensor, rho: Tensor, logit: Tensor, bias_has_indicator: bool = True):
    """The weight moments, and what the backward pass needs (all elementwise).

    The second moment t = sigma^2 + mu^2 is kept for the backward pass: on a
    CPU these passes are bound by memory traffic, and recomputing t there cost
    more passes over the weights than storing it.

    Compiled, sigma = softplus(rho) and its derivative sigmoid(rho) share one
    exp: with e = exp(rho), sigma = log1p(e) and sigmoid(rho) = e / (1 + e);
    above 20, softplus(rho) = rho to float precision (torch's own cut-off).
    """
    alpha = torch.sigmoid(logit)
    if not bias_has_indicator:
        alpha[:, -1] = 1.0
    if torch.compiler.is_compiling():  # one fused loop: sharing the exp saves a transcendental per weight
        exp_rho = torch.exp(torch.clamp(rho, max=SOFTPLUS_LINEAR_ABOVE))
        sigma = torch.where(rho > SOFTPLUS_LINEAR_ABOVE, rho, torch.log1p(exp_rho))
        sigmoid_rho = exp_rho / (exp_rho + 1.0)
    else:  # eager: fewer passes over memory matter more than one exp
        sigma = F.softplus(rho)
        sigmoid_rho = torch.sigmoid(rho)
    mean_weight = alpha * mu
    second_moment = torch.mul(mu, mu).addcmul_(sigma, sigma)  # E[w^2 | gamma = 1] = sigma^2 + mu^2
    var_weight = torch.mul(alpha, second_moment).addcmul_(mean_weight, mean_weight, value=-1.0)
    return mean_weight, var_weight, alpha, sigma, sigmoid_rho, second_moment


def parameter_gradients(
    grad_mean_weight: Tensor,
    grad_var_weight: Tensor,
    grad_kl: Tensor,
    mu: Tensor,
    logit: Tensor,
    mean_weight: Tensor,
    alpha: Tensor,
    sigma: Tensor,
    sigmoid_rho: Tensor,
    second_moment: Tensor,
    slab_offset: Tensor,
    inverse_prior_variance: Tensor,
):
    """The hand-derived gradients of the module docstring (grad_kl and the constants 0-dim tensors).

    grad_mean_weight and grad_var_weight are this step's own product outputs and are overwritten; the
    gradients are built in place to keep passes over memory and fresh
    allocations few. Saved tensors are only read, so a graph kept with
    retain_graph=True can be differentiated again.
    """
    # With W = 2 G_v + c / v and B the bracket of d/dl (module docstring):
    #   B = 0.5 t W + c (l - log s + offset) + G_m mu - 2 mu (a mu) G_v
    #   d/dmu = a (G_m - 2 (a mu) G_v) + (a mu) W,  d/drho = sigmoid(rho) a (s W - c / s),  d/dl = a (1 - a) B
    # 16 passes over the weights and one log, three fewer than spelling out the docstring's terms.
    w = torch.add(grad_kl * inverse_prior_variance, grad_var_weight, alpha=2.0)
    bracket = torch.addcmul(grad_kl * slab_offset, second_moment, w, value=0.5)
    bracket.addcmul_(logit, grad_kl).addcmul_(torch.log(sigma), grad_kl, value=-1.0).addcmul_(grad_mean_weight, mu)
    weighted_var_grad = grad_var_weight.mul_(mean_weight)  # (a mu) G_v
    bracket.addcmul_(mu, weighted_var_grad, value=-2.0)
    grad_mu = grad_mean_weight.add_(weighted_var_grad, alpha=-2.0).mul_(alpha).addcmul_(mean_weight, w)
    grad_rho = w.mul_(sigma).addcdiv_(grad_kl.expand_as(sigma), sigma, value=-1.0).mul_(alpha).mul_(sigmoid_rho)
    grad_logit = bracket.mul_(torch.addcmul(alpha, alpha, alpha, value=-1.0))
    return grad_mu, grad_rho, grad_logit


def slab_plus_term(logit: Tensor, t: Tensor, sigma: Tensor, slab_offset: Tensor, inverse_prior_variance: Tensor):
    """slab + l - lp: the KL's derivative in alpha."""
    return torch.addcmul(logit, t, 0.5 * inverse_prior_variance).sub_(torch.log(sigma)).add_(slab_offset)


def prior_constants(prior_logit: Tensor, log_prior_variance: Tensor) -> tuple[Tensor, Tensor]:
    """1 / v and the constant of slab + l - lp, 0.5 (log v - 1) - lp."""
    return torch.exp(-log_prior_variance), 0.5 * (log_prior_variance - 1.0) - prior_logit


SOFTPLUS_LINEAR_ABOVE = 20.0


def layer_forward(x: Tensor, mu: Tensor, rho: Tensor, logit: Tensor, noise: Tensor, bias_has_indicator: bool = True):
    """Pre-activations h, and what the backward pass needs."""
    mean_weight, var_weight, alpha, sigma, sigmoid_rho, second_moment = weight_moments(
        mu, rho, logit, bias_has_indicator
    )
    h, x_aug, x2_aug, sd = products_forward(x, mean_weight, var_weight, noise)
    return h, (x_aug, x2_aug, sd, mean_weight, var_weight, alpha, sigma, sigmoid_rho, second_moment)


def layer_backward(
    grad_h: Tensor,
    grad_kl: Tensor,
    noise: Tensor,
    mu: Tensor,
    logit: Tensor,
    x_aug: Tensor,
    x2_aug: Tensor,
    sd: Tensor,
    mean_weight: Tensor,
    var_weight: Tensor,
    alpha: Tensor,
    sigma: Tensor,
    sigmoid_rho: Tensor,
    second_moment: Tensor,
    prior_logit: Tensor,
    log_prior_variance: Tensor,
    input_grad: bool,
):
    """(grad x or None, grad mu, grad rho, grad logit)."""
    inverse_prior_variance, slab_offset = prior_constants(prior_logit, log_prior_variance)
    grad_x, grad_mean_weight, grad_var_weight = products_backward(
        grad_h, noise, x_aug, x2_aug, sd, mean_weight, var_weight, input_grad
    )
    grads = parameter_gradients(
        grad_mean_weight,
        grad_var_weight,
        grad_kl,
        mu,
        logit,
        mean_weight,
        alpha,
        sigma,
        sigmoid_rho,
        second_moment,
        slab_offset,
        inverse_prior_variance,
    )
    return (grad_x, *grads)


def kernels(compiled: bool) -> tuple:
    """(layer_forward, layer_backward), eager or compiled (see core.models.fused.kernel_pair)."""
    return kernel_pair("lbbnn", layer_forward, layer_backward, compiled)


class LBBNNLinear(torch.autograd.Function):
    """Local-reparameterisation pre-activations of an LBBNN layer, plus its KL.

    Returns (h, kl): h = x.(a mu) + bias + sqrt(x^2.var + bias var) * noise and
    the layer's KL to the prior. With bias_has_indicator=False the last column
    (the bias) is always included and carries only the slab's KL. With kl_value=False, kl is a surrogate: its
    value is 0 but its gradient is the KL's, which is all a training step needs.
    The prior's inclusion logit and log slab variance come as 0-dim tensors on
    the layer's device, so a step never waits for the device to read them.
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        mu: Tensor,
        rho: Tensor,
        logit: Tensor,
        noise: Tensor,
        prior_logit: Tensor,
        log_prior_variance: Tensor,
        kl_value: bool = True,
        bias_has_indicator: bool = True,
        compiled: bool = False,
    ):
        forward_kernel, _ = kernels(compiled)
        h, saved = forward_kernel(x, mu, rho, logit, noise, bias_has_indicator)
        if kl_value:
            inverse_prior_variance, slab_offset = prior_constants(prior_logit, log_prior_variance)
            alpha, sigma, second_moment = saved[5], saved[6], saved[8]
            slab_plus = slab_plus_term(logit, second_moment, sigma, slab_offset, inverse_prior_variance)
            # -log(1 - psi) = softplus(prior logit), once per weight
            kl = (
                torch.dot(alpha.reshape(-1), slab_plus.reshape(-1))
                + F.logsigmoid(-logit).sum()
                + F.softplus(prior_logit) * logit.numel()
            )
            if not bias_has_indicator:  # with a = 1 the bias column's terms above are slab + l - lp + the
                bias_logit = logit[:, -1]  # inclusion KL's; keep the slab only
                kl = kl - (bias_logit - prior_logit + F.logsigmoid(-bias_logit) + F.softplus(prior_logit)).sum()
        else:
            kl = h.new_zeros(())
        ctx.save_for_backward(noise, mu, logit, *saved, prior_logit, log_prior_variance)
        ctx.compiled = compiled
        return h, kl

    @staticmethod
    def backward(ctx, grad_h: Tensor, grad_kl: Tensor):
        return backward_through(ctx, grad_h, grad_kl, kernels(ctx.compiled)[1], unused_inputs=6)
