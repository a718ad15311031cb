"""The structured family of `horseshoe` (option variational_family="structured", Ghosh, Yao &
Doshi-Velez 2018 section 4.1), hidden layers only (the output layer has no tau and stays factorised):
for unit k stack z_k = [beta_k; log tau_k] (length n = in + 2, bias last among
the beta rows). The layer's Z = [z_1 .. z_out] is matrix normal,
vec(Z) ~ N(vec(M), V kron U), U = diag(psi) + h h^T shared by the units,
V = diag(v): z_k ~ N(m_k, v_k U), units independent. Everything else (layer
scale, slab, auxiliaries, pruning rule) is as in the factorised family, with
q(log tau_k) now the marginal N(m_u,k, v_k U_uu), U_uu = psi_u + h_u^2.
- Training (Ghosh, Yao & Doshi-Velez 2018 eq. 8): one draw of log tau_k per minibatch from its
  marginal; given it, x.beta_k is Gaussian with mean
  x.m_k + (x.h_beta) h_u / U_uu (u_k - m_u,k) and variance
  v_k [(x*x).psi_beta + (x.h_beta)^2 psi_u / U_uu].
- KL by the chain rule H[q(beta, u)] = H[q(u)] + E_u H[q(beta | u)]:
  "node_scales" is the factorised formula with the marginal of u, "weights" is
  E_q(u) KL(q(beta | u) || N(0, I)); their sum has the matrix-normal entropy
  (n out / 2) log(2 pi e) + (n / 2) sum_k log v_k + (out / 2) log|U|,
  |U| = prod(psi) (1 + sum h^2 / psi). A fixed structure drops the masked betas
  of a unit from q and p (the entropy of the kept coordinates, same lemma).
- E_q[w_k] = E_q[s_k beta_k] != E[s_k] E[beta_k]: beta and u are correlated;
  see StructuredHorseshoeLayer.mean_weights.

The factorised family, the model and its KL: core/models/horseshoe.py.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from core.models.base import augmented_linear, init_generator, inverse_softplus
from core.models.distributions import normal_entropy
from core.models.horseshoe import HorseshoeLayer, HorseshoeOptions, inverse_softplus_tensor

# Initial rank-one row factor h, relative to the initial marginal std of each row:
# small, so training starts close to the factorised family (correlations ~ 1e-2).
ROW_FACTOR_INIT = 0.1


class StructuredHorseshoeLayer(HorseshoeLayer):
    """A hidden layer with the structured family (module docstring): z_k = [beta_k; log tau_k] ~ N(m_k, v_k U).

    M is (weight_mu, log_node_scale_mu); U = diag(psi) + h h^T with sqrt(psi) = softplus(row_std_rho) and
    h = row_factor (length in + 2, the log tau row last); sqrt(v_k) = softplus(column_std_rho).
    core.models.registry.layer_class picks it for hidden layers when variational_family="structured".
    """

    structured = True

    def _init_spread(self, opts: HorseshoeOptions) -> None:
        # Marginal stds at the start: init_sigma for each beta, init_log_scale_std for log tau.
        target = torch.full((self.in_features + 2,), float(opts.init_sigma))
        target[-1] = opts.init_log_scale_std
        factor = ROW_FACTOR_INIT * target * torch.randn(target.shape, generator=init_generator())
        diagonal = (target.square() - factor.square()).clamp_min(0.01 * target.square())
        self.row_factor = nn.Parameter(factor)
        self.row_std_rho = nn.Parameter(inverse_softplus_tensor(diagonal.sqrt()))
        self.column_std_rho = nn.Parameter(torch.full((self.out_features,), inverse_softplus(1.0)))

    # --- q in natural form ----------------------------------------------------------------
    def row_covariance(self) -> tuple[Tensor, Tensor]:
        """(psi, h) of U = diag(psi) + h h^T, each of length in + 2 (beta rows, then log tau)."""
        return F.softplus(self.row_std_rho).square(), self.row_factor

    def column_variances(self) -> Tensor:
        """v_k of V = diag(v), one per unit."""
        return F.softplus(self.column_std_rho).square()

    @property
    def weight_sigma(self) -> Tensor:
        """Marginal std of q(beta_jk), sqrt(v_k U_jj) (beta is correlated with log tau_k)."""
        psi, h = self.row_covariance()
        return torch.sqrt(self.column_variances()[:, None] * (psi[:-1] + h[:-1].square()))

    def _log_tau_row_variance(self) -> Tensor:
        psi, h = self.row_covariance()
        return psi[-1] + h[-1] * h[-1]

    def log_node_scale_std(self) -> Tensor:
        return torch.sqrt(self.column_variances() * self._log_tau_row_variance())

    def weight_log_tau_covariance(self) -> Tensor:
        """Cov_q(beta_jk, log tau_k) = v_k h_j h_u, shape (out, in + 1)."""
        _, h = self.row_covariance()
        return self.column_variances()[:, None] * h[None, :-1] * h[-1]

    def conditional_pre_activation_moments(self, x: Tensor, log_tau_noise: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and variance of x.beta_k given log tau_k = m_u,k + sd_k * log_tau_noise_k
        (Ghosh, Yao & Doshi-Velez 2018 eq. 8).

        Two inner products per unit (x.h_beta and (x*x).psi_beta) besides the mean; the
        fixed structure zeroes the masked betas (and their h entries) of each unit.
        """
        psi, h = self.row_covariance()
        row_var_u = psi[-1] + h[-1] * h[-1]
        column_var = self.column_variances()
        mask = self.fixed_mask
        mean_and_projection = augmented_linear(x, torch.cat([self.weight_mu * mask, h[:-1] * mask]))
        mean, projection = mean_and_projection.split(self.out_features, dim=-1)  # x.m_k, x.h_beta
        diagonal = augmented_linear(x * x, psi[:-1] * mask)
        # h_u / U_uu (u_k - m_u,k) with u_k - m_u,k = sqrt(v_k U_uu) noise_k.
        mean = mean + projection * (h[-1] * column_var.sqrt() * log_tau_noise / row_var_u.sqrt())
        var = column_var * (diagonal + projection.square() * (psi[-1] / row_var_u))
        return mean, var

    def forward_with_kl(self, x: Tensor, kl_value: bool = True) -> tuple[Tensor, Tensor]:
        # beta and log tau are correlated here: no fused Gaussian layer over beta alone.
        return self(x), (self.kl() if kl_value else self.kl_gradient_surrogate())

    # --- estimators -----------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        # One draw of the scales per minibatch (log tau_k from its marginal), then
        # x.beta_k | log tau_k by local reparameterisation.
        ref = self.weight_mu
        log_tau_noise = self.normal_noise((self.out_features,), ref)
        eps_layer = self.normal_noise((1,), ref)
        eps_slab = self.normal_noise((1,), ref) if self.regularised else None
        scale = torch.exp(self._log_scale(log_tau_noise, eps_layer, eps_slab))
        mean, var = self.conditional_pre_activation_moments(x, log_tau_noise)
        return scale * (mean + var.clamp_min(1e-16).sqrt() * self.normal_noise(mean.shape, mean))

    def sample_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        ref = self.weight_mu

        def normal(*shape: int) -> Tensor:
            return torch.randn((n, *shape), generator=generator, device=ref.device, dtype=ref.dtype)

        psi, h = self.row_covariance()
        # z_k - m_k = sqrt(v_k) (sqrt(psi) * eps1 + h * eps2) has covariance v_k (diag(psi) + h h^T).
        rank_one = normal(self.out_features, 1)
        noise = self.column_variances().sqrt()[:, None] * (
            psi.sqrt() * normal(self.out_features, self.in_features + 2) + h * rank_one
        )
        eps_layer = normal(1)
        eps_slab = normal(1) if self.regularised else None
        log_tau_noise = noise[..., -1] / self.log_node_scale_std()
        scale = torch.exp(self._log_scale(log_tau_noise, eps_layer, eps_slab))  # (n, out)
        return scale[:, :, None] * (self.weight_mu + noise[..., :-1]) * self.fixed_mask

    def _weight_mean_correction(self) -> tuple[Tensor, Tensor]:
        """E_q[s_k] and the (out, in+1) term C with E_q[s_k beta_k] = E_q[s_k] m_k + C_k.

        E[beta_k | u_k] is linear in u_k = log tau_k, so E[s_k beta_jk] = E[s_k] m_jk
        + Cov(beta_jk, u_k) E[s_k (u_k - m_u,k)] / Var(u_k). With t_k = log(tau_k v)
        (std sd_t, standardised e_k), u_k - m_u,k = Var(u_k) / sd_t e_k + a part
        independent of (t_k, c), so E[s_k (u_k - m_u,k)] = Var(u_k) E[s_k e_k] / sd_t:
        C_jk = Cov(beta_jk, u_k) E[s_k e_k] / sd_t, with E[s_k e_k] by the same
        Gauss-Hermite rule as E[s_k] (closed form for the plain horseshoe).
        """
        expected_scale, expected_scale_noise = self.node_scale_expectations()
        _, log_tv_std = self.log_node_scale_moments()
        correction = self.weight_log_tau_covariance() * (expected_scale_noise / log_tv_std)[:, None]
        return expected_scale, correction

    def mean_weights(self) -> Tensor:
        expected_scale, correction = self._weight_mean_correction()
        return (expected_scale[:, None] * self.weight_mu + correction) * self.fixed_mask

    def load_point_estimate(self, weight: Tensor) -> None:
        expected_scale, correction = self._weight_mean_correction()
        self.weight_mu.data.copy_((weight - correction) / expected_scale[:, None])

    # --- KL -------------------------------------------------------------------------------
    def conditional_weight_entropy(self) -> Tensor:
        """E_q(u) H[q(beta | u)] summed over units, over each unit's kept betas S_k.

        Cov(beta_S | u) = v_k (diag(psi_S) + h_S h_S^T psi_u / U_uu); its log-determinant by
        the matrix determinant lemma: sum_S log(v_k psi_j) + log(1 + psi_u / U_uu sum_S h_j^2 / psi_j).
        """
        psi, h = self.row_covariance()
        mask = self.fixed_mask
        kept = mask.sum(1)
        log_det = (
            kept * torch.log(self.column_variances())
            + (mask * torch.log(psi[:-1])).sum(1)
            + torch.log1p(psi[-1] / self._log_tau_row_variance() * (mask * (h[:-1].square() / psi[:-1])).sum(1))
        )
        return 0.5 * (kept * math.log(2 * math.pi * math.e) + log_det).sum()

    def joint_entropy(self) -> Tensor:
        """H[q(beta, log tau)] of the layer (the matrix-normal entropy when no structure is fixed)."""
        return self.conditional_weight_entropy() + normal_entropy(self.log_node_scale_std()).sum()

    def _weights_kl(self) -> Tensor:
        # E_q(u) KL(q(beta | u) || N(0, I)) = E_q[-log N(beta; 0, I)] - E_q(u) H[q(beta | u)],
        # with E_q[beta_jk^2] = M_jk^2 + v_k U_jj.
        psi, h = self.row_covariance()
        second_moment = self.weight_mu.square() + self.column_variances()[:, None] * (psi[:-1] + h[:-1].square())
        cross_entropy = 0.5 * (self.fixed_mask * (math.log(2 * math.pi) + second_moment)).sum()
        return cross_entropy - self.conditional_weight_entropy()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        scales = [
            self.row_std_rho,
            self.row_factor,
            self.column_std_rho,
            self.log_layer_scale_mu,
            self.log_layer_scale_rho,
            self.log_node_scale_mu,
        ]
        if self.regularised:
            scales += [self.log_slab_mu, self.log_slab_rho]
        return {"weights": [self.weight_mu], "scales": scales}
