"""`lbbnn-flow`: LBBNN with a normalizing-flow variational posterior (Skaaret-Lund, Storvik & Hubin 2024),
the multiplicative normalizing flows of Louizos & Welling (2017) put on the spike-and-slab layer.

Variational family, per layer with in_features = d (the bias column has no multiplier, z = 1 there):
    z0 ~ N(mu_z, diag(sigma_z^2)),  z = f_K o ... o f_1(z0)     (Real NVP couplings, core/models/flows.py)
    gamma_ij ~ Bernoulli(alpha_ij),  w_ij | gamma_ij = 1, z ~ N(z_j mu_ij, sigma_ij^2),  w_ij | gamma_ij = 0 = 0.
The prior is LBBNN's: gamma ~ Bernoulli(psi) (or beta-bernoulli), slab N(0, sigma_beta^2).

KL. q(W) is a mixture over z, so its KL has no closed form; the MNF bound with an auxiliary reverse
model r(z | W) is used instead (KL(q(W) || p) <= it, for any r):
    KL(q(z) q(W | z) || p(W) r(z | W)) = E_q(z)[ KL(q(W, gamma | z) || p(W, gamma)) ] + E_q[ log q(z) - log r(z | W) ].
Given z the first term is LBBNN's closed form with the slab means z_j mu_ij; log q(z) =
log N(z0; mu_z, sigma_z^2) - log |det dz/dz0|. r is MNF's: z_B = g(z) through a second coupling flow g and
    r(z | W) = N(z_B; b1 a, exp(b2 a)) |det dz_B/dz|,  a = mean_i tanh(sum_j W_ij c_j),
the sums sum_j W_ij c_j drawn from their Gaussian moment match given z (local reparameterisation, as MNF
does; for spike-and-slab weights the match is exact in mean and variance, Gaussian in shape by the CLT).
`kl()` is a one-draw estimate of this bound (one z, one draw of a); its mean is the bound.

Training forward: z drawn per example, then the pre-activation from its Gaussian moment match given z,
    mean = (x z) . (alpha mu),  var = x^2 . (alpha sigma^2) + (x z)^2 . (alpha (1 - alpha) mu^2).
The inclusion probabilities alpha are LBBNN's statistic (keep > 0.5): the median probability model,
thresholds and masks work unchanged. E_q[w] = alpha mu E[z] needs E[z] under the flow, which has no
closed form: it is a Monte Carlo mean over MEAN_DRAWS draws from a fixed seed with z0 as control
variate (exact while the flow is affine, e.g. freshly initialised).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.enums import Estimator, InclusionPrior, Slab
from core.models.base import init_generator, inverse_softplus, require
from core.models.distributions import bernoulli_kl_from_logits, gaussian_kl
from core.models.flows import CouplingFlow
from core.models.lbbnn import LBBNNLayer, LBBNNOptions
from core.models.options import ESTIMATOR, OptionSpec, option
from core.settings import Setting, register

LOG_2PI = math.log(2 * math.pi)
# z0 starts at N(1, 0.1^2): the multipliers start near 1, the layer near mean-field LBBNN.
INIT_Z_SIGMA = 0.1
# The couplings hold about 6 flow_length flow_hidden in_features numbers per layer (q's flow and r's), a
# size the admission's cost table does not see: the product is bounded here.
MAX_FLOW_UNITS = register(
    Setting(
        "BNN_LBBNN_FLOW_MAX_UNITS",
        "whole",
        512,
        "largest flow_length x flow_hidden of an `lbbnn-flow` network: each layer's flows hold about "
        "6 x flow_length x flow_hidden x inputs numbers",
        low=1,
        high=100_000,
    )
)


@dataclass(frozen=True)
class LBBNNFlowOptions(LBBNNOptions):
    estimator: Estimator = option(
        Estimator.LOCAL_REPARAMETERISATION,
        dataclasses.replace(ESTIMATOR, choices=(Estimator.LOCAL_REPARAMETERISATION.value,)),
    )
    # K = 2: one coupling moves the odd coordinates and one the even ones, so every z_j is transformed;
    # 0 leaves z Gaussian (multiplicative Gaussian noise).
    flow_length: int = option(
        2,
        OptionSpec(
            "Flow length K",
            "Real NVP coupling layers in q(z) and in the auxiliary reverse model r(z | W); 0: Gaussian z",
            low=0,
        ),
    )
    flow_hidden: int = option(
        16,
        OptionSpec("Flow hidden units", "width of each coupling layer's scale and shift network", advanced=True, low=1),
    )

    def validate(self) -> None:
        super().validate()
        require(
            self.slab is Slab.GAUSSIAN,
            "slab",
            f"lbbnn-flow's KL bound is written for the Gaussian slab; got {self.slab.value!r}",
        )
        require(
            self.inclusion_prior is not InclusionPrior.BETA_BINOMIAL,
            "inclusion_prior",
            "lbbnn-flow supports 'bernoulli' and 'beta-bernoulli', got 'beta-binomial'",
        )
        limit = MAX_FLOW_UNITS.read()
        require(
            max(self.flow_length, 1) * self.flow_hidden <= limit,
            "flow_hidden",
            f"flow_length x flow_hidden = {max(self.flow_length, 1) * self.flow_hidden} exceeds the limit of "
            f"{limit} (BNN_LBBNN_FLOW_MAX_UNITS)",
        )


class LBBNNFlowLayer(LBBNNLayer):
    family = "lbbnn-flow"
    Options = LBBNNFlowOptions
    MEAN_DRAWS = 4096  # Monte Carlo draws of z for E[z] (mean_weights)
    MEAN_SEED = 0

    def __init__(
        self,
        in_features: int,
        out_features: int,
        options: LBBNNFlowOptions | None = None,
        is_output: bool = False,
    ):
        super().__init__(in_features, out_features, options, is_output)
        opts: LBBNNFlowOptions = self.options
        d = self.in_features
        self.z_mean = nn.Parameter(torch.ones(d))
        self.z_rho = nn.Parameter(torch.full((d,), inverse_softplus(INIT_Z_SIGMA)))
        self.z_flow = CouplingFlow(d, opts.flow_length, opts.flow_hidden)
        # the auxiliary reverse model r(z | W)
        self.r_flow = CouplingFlow(d, opts.flow_length, opts.flow_hidden)
        bound = 1.0 / math.sqrt(d)
        self.r_c = nn.Parameter(torch.empty(d).uniform_(-bound, bound, generator=init_generator()))
        self.r_b1 = nn.Parameter(torch.empty(d).uniform_(-bound, bound, generator=init_generator()))
        self.r_b2 = nn.Parameter(torch.empty(d).uniform_(-bound, bound, generator=init_generator()))

    # --- the multipliers z ------------------------------------------------------------------
    @property
    def z_sigma(self) -> Tensor:
        return F.softplus(self.z_rho)

    def draw_multipliers(self, shape: tuple[int, ...], generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """z of shape (*shape, in_features) from q(z), and log q(z) of shape `shape`."""
        mean = self.z_mean
        eps = torch.randn((*shape, self.in_features), generator=generator, device=mean.device, dtype=mean.dtype)
        sigma = self.z_sigma
        z, log_det = self.z_flow(mean + sigma * eps)
        log_base = (-0.5 * (LOG_2PI + eps * eps) - torch.log(sigma)).sum(-1)
        return z, log_base - log_det

    def expected_multipliers(self) -> Tensor:
        """E_q[z] (in_features,): the mean of MEAN_DRAWS draws, with z0 (whose mean is known) as control
        variate, from a fixed seed so that the posterior-mean network is a function of the parameters."""
        mean = self.z_mean
        # drawn on the CPU and moved: the same noise on every device (and a meta model gets meta tensors)
        generator = torch.Generator().manual_seed(self.MEAN_SEED)
        eps = torch.randn((self.MEAN_DRAWS, self.in_features), generator=generator, dtype=mean.dtype).to(mean.device)
        base = mean + self.z_sigma * eps
        z, _ = self.z_flow(base)
        z_centred, base_centred = z - z.mean(0), base - base.mean(0)
        beta = (z_centred * base_centred).sum(0) / (base_centred * base_centred).sum(0).clamp_min(1e-30)
        return z.mean(0) - beta * (base.mean(0) - mean)

    @staticmethod
    def with_bias(z: Tensor) -> Tensor:
        """z with a 1 appended for the bias column: shape (..., in + 1)."""
        return torch.cat([z, torch.ones_like(z[..., :1])], dim=-1)

    # --- estimators -----------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        z, _ = self.draw_multipliers(tuple(x.shape[:-1]), self.noise_generator)
        alpha = self._effective_inclusion()
        mu, sigma = self.weight_mu, self.weight_sigma
        mean_weight = alpha * mu
        slab_var = alpha * sigma * sigma
        spike_var = alpha * (1 - alpha) * mu * mu  # the variance the indicator adds, times z^2
        xz = x * z
        mean = xz @ mean_weight[:, :-1].T + mean_weight[:, -1]
        var = (x * x) @ slab_var[:, :-1].T + (xz * xz) @ spike_var[:, :-1].T + (slab_var + spike_var)[:, -1]
        return mean + var.clamp_min(1e-16).sqrt() * self.normal_noise(mean.shape, mean)

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        if x.dim() != 2 or not self._fused_path_applies() or not self.all_have_indicators:
            return self(x), self.kl()
        # FlowLinear (below) does the weight-sized work; the flows stay under autograd. Draws in the
        # order of forward() then kl(): z per example, the pre-activation noise, the KL's z, r's noise;
        # the KL's z goes through q's flow as one more row of the examples' (one pass of the flow, not two).
        generator = self.noise_generator
        n, d = x.shape[0], self.in_features
        eps_x = torch.randn((n, d), generator=generator, device=x.device, dtype=x.dtype)
        noise = self.normal_noise((n, self.out_features), x)
        eps_z = torch.randn((d,), generator=generator, device=x.device, dtype=x.dtype)
        eps = torch.randn((self.out_features,), generator=generator, device=x.device, dtype=x.dtype)
        sigma = self.z_sigma
        z_all, log_det = self.z_flow(self.z_mean + sigma * torch.cat([eps_x, eps_z[None]]))
        z_x, z = z_all[:n], z_all[n]
        log_q = (-0.5 * (LOG_2PI + eps_z * eps_z) - torch.log(sigma)).sum() - log_det[n]
        h, weight_kl, mean, var = FlowLinear.apply(
            x,
            x * z_x,
            self.weight_mu,
            self.weight_rho,
            self.inclusion_logit,
            z,
            self.r_c,
            noise,
            self.prior_inclusion_logit.detach(),
            self.log_slab_variance.detach(),
            kl_value,
        )
        return h, weight_kl + log_q - self.reverse_log_density(z, mean, var, eps)

    def mean_weights(self) -> Tensor:
        return self._effective_inclusion() * self.weight_mu * self.with_bias(self.expected_multipliers())

    def conditional_mean_weights(self) -> Tensor:
        return self.weight_mu * self.with_bias(self.expected_multipliers()) * self.fixed_mask

    def conditional_normal(self) -> None:
        return None  # q(w | kept) is a mixture over z: Gaussian only given z (see collapsed_conditional)

    def sample_conditional_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        z, _ = self.draw_multipliers((n,), generator)  # drawn first: collapsed_conditional replays it
        mu = self.weight_mu
        eps = torch.randn((n, *self.shape), generator=generator, device=mu.device, dtype=mu.dtype)
        return (self.with_bias(z)[:, None, :] * mu + self.weight_sigma * eps) * self.fixed_mask

    def collapsed_conditional(self, last: Tensor, generators: list[torch.Generator]) -> tuple[Tensor, Tensor]:
        """Mean and variance of q(w | z, gamma) for the drawn weights `last` (R, out, in + 1), z replayed
        from each draw's generator (the one `sample_weights(1, generator)` drew it from)."""
        z = torch.cat([self.draw_multipliers((1,), generator)[0] for generator in generators])
        kept = (last != 0).to(last.dtype)
        mean = self.with_bias(z)[:, None, :] * self.weight_mu * self.fixed_mask
        return kept * mean, kept * (self.weight_sigma**2 * self.fixed_mask)

    # --- KL -------------------------------------------------------------------------------
    def weight_kl(self, z: Tensor) -> Tensor:
        """KL(q(W, gamma | z) || p(W, gamma)) in closed form, for z of shape (in_features,)."""
        opts: LBBNNFlowOptions = self.options
        alpha = self._effective_inclusion()
        sigma = self.weight_sigma
        slab = gaussian_kl(self.with_bias(z) * self.weight_mu, sigma * sigma, self.log_slab_variance.exp())
        if opts.inclusion_prior == "bernoulli":
            prior_logit = self.prior_inclusion_logit
        else:  # beta-bernoulli: BetaBinomial(1, a, b) is Bernoulli(a / (a + b))
            prior_logit = self.log_beta_a - self.log_beta_b
        inclusion = self.has_indicator * bernoulli_kl_from_logits(self._effective_logit(), prior_logit)
        return (alpha * slab).sum() + inclusion.sum()

    def log_reverse(self, z: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One draw of log r(z | W) for z (in_features,), W's sums sum_j W_ij c_j from their moment match."""
        alpha = self._effective_inclusion()[:, :-1]
        mu, sigma = self.weight_mu[:, :-1], self.weight_sigma[:, :-1]
        zmu = z * mu
        mean = (alpha * zmu) @ self.r_c
        var = (alpha * sigma * sigma + alpha * (1 - alpha) * zmu * zmu) @ (self.r_c * self.r_c)
        eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        return self.reverse_log_density(z, mean, var, eps)

    def reverse_log_density(self, z: Tensor, mean: Tensor, var: Tensor, eps: Tensor) -> Tensor:
        """log r(z | W) given the moments (mean, var) of W's sums sum_j W_ij c_j and their noise eps."""
        a = torch.tanh(mean + var.clamp_min(1e-16).sqrt() * eps).mean()
        z_b, log_det = self.r_flow(z)
        r_mean, r_log_var = self.r_b1 * a, self.r_b2 * a
        log_density = -0.5 * (LOG_2PI + r_log_var + (z_b - r_mean) ** 2 * torch.exp(-r_log_var))
        return log_density.sum() + log_det

    def kl(self) -> Tensor:
        z, log_q = self.draw_multipliers((), self.noise_generator)
        return self.weight_kl(z) + log_q - self.log_reverse(z, self.noise_generator)

    # --- training hooks ---------------------------------------------------------------------
    def load_point_estimate(self, weight: Tensor) -> None:
        super().load_point_estimate(weight)  # the inclusion logits as LBBNN's
        with torch.no_grad():
            self.weight_mu.data.copy_(weight / self.with_bias(self.expected_multipliers()))

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = super().parameter_groups()
        auxiliary = [self.r_c, self.r_b1, self.r_b2, *self.z_flow.parameters(), *self.r_flow.parameters()]
        groups["weights"] = [self.weight_mu, self.z_mean, *auxiliary]
        groups["scales"] = [self.weight_rho, self.z_rho]
        return groups


class FlowLinear(torch.autograd.Function):
    """The weight-sized work of an lbbnn-flow training step in one Function, gradients by hand.

    Under autograd a step took alpha, sigma and their backward three times (pre-activations, the
    weight KL, the reverse model's sums), sliced the bias column off (each slice's backward a
    zero-filled weight-sized copy) and left ~30 weight-sized tensors for the backward pass. The
    flows act on vectors and stay under autograd; this takes the multiplied input xz = x z (per
    example), the KL's one z and r's c, and returns (h, weight KL, mean_r, var_r), with the bias
    handled by augmented columns (z = 1, c = 0 there). Per weight, with a = sigmoid(l), s = softplus(rho),
    m = a mu, sv = a s^2, spv = a (1 - a) mu^2 and the KL's zb = (z, 1):
      h = XZ.m + sqrt(X^2.sv + XZ^2.spv) noise,  mean_r = m.(zb c),  var_r = sv.c^2 + spv.(zb c)^2
      KL = sum a slab + sum [log(1 - a) - log(1 - psi) + a (l - lp)],
      slab = 0.5 ((s^2 + zb^2 mu^2) / v - 1) - log s + 0.5 log v.
    With G_m, G_sv, G_spv the gradients reaching m, sv and spv and c the KL's:
      d/dmu  = a G_m + mu (2 a (1 - a) G_spv + c a zb^2 / v)
      d/drho = sigmoid(rho) a (s (2 G_sv + c / v) - c / s)
      d/dl   = a (1 - a) (mu G_m + s^2 G_sv + (1 - 2a) mu^2 G_spv + c (slab + l - lp))
      d/dzb_j += c zb_j sum_i a_ij mu_ij^2 / v.
    Applies to the Bernoulli prior with fixed hyperparameters, every bias with an indicator and a free
    structure; the autograd path (forward() and kl()) is the reference in the tests. kl_value=False
    gives the weight KL's gradient with value 0.
    """

    @staticmethod
    def forward(ctx, x, xz, mu, rho, logit, z, r_c, noise, prior_logit, log_slab_variance, kl_value=False):
        alpha = torch.sigmoid(logit)
        sigma = F.softplus(rho)
        sigmoid_rho = torch.sigmoid(rho)
        aa = torch.addcmul(alpha, alpha, alpha, value=-1.0)  # a (1 - a)
        mean_weight = alpha * mu
        mu2 = mu * mu
        s2 = sigma * sigma
        slab_var = alpha * s2
        spike_var = aa * mu2
        x_aug = F.pad(x, (0, 1), value=1.0)
        xz_aug = F.pad(xz, (0, 1), value=1.0)
        x2_aug, xz2_aug = x_aug * x_aug, xz_aug * xz_aug
        var = torch.mm(x2_aug, slab_var.t()).addmm_(xz2_aug, spike_var.t())
        sd = var.clamp_min_(1e-16).sqrt_()
        h = torch.mm(xz_aug, mean_weight.t()).addcmul_(sd, noise)
        zb = F.pad(z, (0, 1), value=1.0)
        c_aug = F.pad(r_c, (0, 1), value=0.0)
        zc = zb * c_aug
        c2, zc2 = c_aug * c_aug, zc * zc
        mean_r = torch.mv(mean_weight, zc)
        var_r = torch.mv(slab_var, c2).add_(torch.mv(spike_var, zc2))
        inverse_v = torch.exp(-log_slab_variance)
        zb2 = zb * zb
        slab = torch.addcmul(s2, mu2, zb2).mul_(0.5 * inverse_v).sub_(torch.log(sigma))
        slab.add_(0.5 * (log_slab_variance - 1.0))
        if kl_value:
            kl = (
                torch.dot(alpha.reshape(-1), slab.reshape(-1))
                + F.logsigmoid(-logit).sum()
                + F.softplus(prior_logit) * logit.numel()
                + torch.dot(alpha.reshape(-1), (logit - prior_logit).reshape(-1))
            )
        else:
            kl = h.new_zeros(())
        ctx.save_for_backward(
            noise, x_aug, xz_aug, x2_aug, xz2_aug, sd, mu, logit, alpha, aa, sigma, sigmoid_rho, mean_weight,
            mu2, s2, slab_var, spike_var, slab, zb, c_aug, zc, c2, zc2, zb2, inverse_v, prior_logit,
        )  # fmt: skip
        return h, kl, mean_r, var_r

    @staticmethod
    def backward(ctx, grad_h, grad_kl, grad_mean_r, grad_var_r):
        (
            noise, x_aug, xz_aug, x2_aug, xz2_aug, sd, mu, logit, alpha, aa, sigma, sigmoid_rho, mean_weight,
            mu2, s2, slab_var, spike_var, slab, zb, c_aug, zc, c2, zc2, zb2, inverse_v, prior_logit,
        ) = ctx.saved_tensors  # fmt: skip
        if grad_h is None:
            grad_h = torch.zeros_like(noise)
        c = grad_h.new_zeros(()) if grad_kl is None else grad_kl.reshape(())
        g_mr = torch.zeros_like(mean_weight[:, 0]) if grad_mean_r is None else grad_mean_r
        g_vr = torch.zeros_like(mean_weight[:, 0]) if grad_var_r is None else grad_var_r
        grad_var_pre = (grad_h * noise).div_(sd).mul_(0.5)
        grad_x = grad_xz = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(grad_var_pre, slab_var[:, :-1]).mul_(x_aug[:, :-1]).mul_(2.0)
        if ctx.needs_input_grad[1]:
            grad_xz = torch.mm(grad_var_pre, spike_var[:, :-1]).mul_(xz_aug[:, :-1]).mul_(2.0)
            grad_xz.addmm_(grad_h, mean_weight[:, :-1])
        g_m = torch.mm(grad_h.t(), xz_aug).addr_(g_mr, zc)
        g_sv = torch.mm(grad_var_pre.t(), x2_aug).addr_(g_vr, c2)
        g_spv = torch.mm(grad_var_pre.t(), xz2_aug).addr_(g_vr, zc2)
        # the KL's and the reverse sums' gradients in zb and c
        grad_zc = torch.mv(mean_weight.t(), g_mr).addcmul_(torch.mv(spike_var.t(), g_vr), zc, value=2.0)
        grad_zb = grad_zc * c_aug
        grad_zb.addcmul_(torch.mul(mean_weight, mu).sum(0).mul_(c * inverse_v), zb)  # c zb sum_i a mu^2 / v
        grad_c = torch.addcmul(grad_zc * zb, torch.mv(slab_var.t(), g_vr), c_aug, value=2.0)
        cv = c * inverse_v
        # d/dl's bracket, then d/dmu and d/drho, overwriting the G's
        bracket = torch.mul(mu, g_m).addcmul_(s2, g_sv).addcmul_(torch.sub(logit, prior_logit).add_(slab), c)
        bracket.addcmul_(torch.addcmul(mu2, mu2, alpha, value=-2.0), g_spv)  # (1 - 2a) mu^2 G_spv
        grad_logit = bracket.mul_(aa)
        # mu: a G_m + mu (2 a (1 - a) G_spv + c a zb^2 / v)
        inner = g_spv.mul_(aa).mul_(2.0).addcmul_(alpha * cv, zb2.expand_as(alpha))
        grad_mu = g_m.mul_(alpha).addcmul_(mu, inner)
        # rho: sigmoid(rho) a (s (2 G_sv + c / v) - c / s)
        grad_rho = g_sv.mul_(2.0).add_(cv).mul_(sigma).addcdiv_(c.expand_as(sigma), sigma, value=-1.0)
        grad_rho.mul_(alpha).mul_(sigmoid_rho)
        return (grad_x, grad_xz, grad_mu, grad_rho, grad_logit, grad_zb[:-1], grad_c[:-1], *([None] * 4))
