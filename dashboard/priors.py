"""How the Train form shows each family's options: labels, ranges, units and help.

Pure data and parsing (no Streamlit, no core), so the rules are testable on their own.
Options not listed here still get a widget, folded away under "Advanced", labelled by
their field name. Ranges are what the form accepts; core validates again.
"""

from __future__ import annotations

import math
import enum
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OptionWidget:
    label: str
    help: str
    low: float | None = None  # bounds the form accepts
    high: float | None = None
    low_open: bool = False  # True: the bound itself is refused
    high_open: bool = False
    advanced: bool = False  # folded away under "Advanced"
    log_scale: bool = False  # shown in e-notation (tiny scales such as 1e-5)

    def range_text(self) -> str:
        if self.low is None and self.high is None:
            return ""
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        opening = "(" if self.low_open or self.low is None else "["
        closing = ")" if self.high_open or self.high is None else "]"
        return f"{opening}{low}, {high}{closing}"

    def check(self, name: str, value: float) -> str | None:
        """A message when `value` lies outside the accepted range (never clamped), else None."""
        if not math.isfinite(float(value)):
            return f"{self.label} ({name}): must be a finite number, got {value}"
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            return f"{self.label} ({name}): must lie in {self.range_text()}, got {value:g}"
        return None


POSITIVE = dict(low=0.0, low_open=True)
PROBABILITY = dict(low=0.0, high=1.0, low_open=True, high_open=True)

OPTION_WIDGETS: dict[str, OptionWidget] = {
    # spike-and-slab (lbbnn, lbbnn-lfmvn)
    "inclusion_prior": OptionWidget(
        "Inclusion prior", "bernoulli: every weight is kept a priori with probability psi; beta-bernoulli: "
        "psi ~ Beta(a, b) per weight (learnable by empirical Bayes); beta-binomial: one psi per layer, "
        "integrated out."),
    "prior_inclusion": OptionWidget(
        "Prior inclusion probability psi", "prior probability that a weight is in the network (unitless, "
        "between 0 and 1). Hubin & Storvik (2019) uses exp(-2) = 0.135; smaller values prune more.", **PROBABILITY),
    "beta_a": OptionWidget("Beta a (a_psi)", "first shape of the Beta prior on psi: prior mean a / (a + b)",
                           **POSITIVE),
    "beta_b": OptionWidget("Beta b (b_psi)", "second shape of the Beta prior on psi: larger b, sparser prior",
                           **POSITIVE),
    "slab": OptionWidget("Slab", "the prior of an included weight: Gaussian, or Student-t (heavier tails)"),
    "slab_variance": OptionWidget("Slab variance sigma^2", "variance of the Gaussian slab, in units of the "
                                  "weight squared (inputs are standardised)", **POSITIVE),
    "slab_a": OptionWidget("Student-t a", "Student-t slab with 2a degrees of freedom", **POSITIVE),
    "slab_b": OptionWidget("Student-t b", "Student-t slab with scale^2 = b / a (weight units squared)", **POSITIVE),
    "prior_scaling": OptionWidget("Prior scaling", "fan-in: the slab / prior variance is divided by the "
                                  "layer's number of inputs", advanced=True),
    "bias_prior": OptionWidget("Bias prior", "spike-and-slab: biases have inclusion indicators too; "
                               "gaussian: always-included biases", advanced=True),
    # Gaussian families
    "prior_variance": OptionWidget("Prior variance", "variance of the Gaussian prior of each weight "
                                   "(weight units squared)", **POSITIVE),
    "mixture_weight": OptionWidget("Mixture weight", "weight of the wide component of the scale-mixture prior",
                                   **PROBABILITY),
    "prior_variance_2": OptionWidget("Second prior variance", "variance of the narrow mixture component",
                                     **POSITIVE),
    # horseshoe
    "prior": OptionWidget("Horseshoe prior", "regularised-horseshoe adds a slab that bounds the largest weights"),
    "node_scale": OptionWidget("Node scale b_0", "scale of each unit's half-Cauchy tau_k", **POSITIVE),
    "global_scale": OptionWidget("Global scale b_g", "scale of the layer's half-Cauchy v; small values shrink "
                                 "every unit", log_scale=True, **POSITIVE),
    "slab_shape": OptionWidget("Slab shape c_a", "c^2 ~ InvGamma(c_a, c_b)", **POSITIVE),
    "slab_scale": OptionWidget("Slab scale c_b", "c^2 ~ InvGamma(c_a, c_b)", **POSITIVE),
    "output_scale": OptionWidget("Output scale", "half-Cauchy scale of the output layer", advanced=True,
                                 **POSITIVE),
    "prune_delta": OptionWidget("Prune delta", "a unit is pruned when P(tau v < delta) is high", log_scale=True,
                                **POSITIVE),
    # concrete dropout
    "init_dropout": OptionWidget("Initial dropout rate", "learned per layer", **PROBABILITY),
    # training of the variational parameters: advanced
    "estimator": OptionWidget("Gradient estimator", "local-reparameterisation (fast) or the paper's sampling",
                              advanced=True),
    "temperature": OptionWidget("Relaxation temperature", "of the relaxed Bernoulli / concrete masks",
                                advanced=True, **POSITIVE),
    "init_inclusion_low": OptionWidget("Initial inclusion low", "initial alpha spread in logit space",
                                       advanced=True, **PROBABILITY),
    "init_inclusion_high": OptionWidget("Initial inclusion high", "initial alpha spread in logit space",
                                        advanced=True, **PROBABILITY),
    "init_sigma": OptionWidget("Initial sigma", "initial posterior standard deviation of the weights",
                               advanced=True, log_scale=True, **POSITIVE),
    "init_log_scale_std": OptionWidget("Initial log-scale sd", "", advanced=True, **POSITIVE),
    "init_log_sigma2": OptionWidget("Initial log sigma^2", "sparse VD starts nearly deterministic",
                                    advanced=True),
    "variational_family": OptionWidget("Variational family", "factorised, or structured over [beta; log tau]",
                                       advanced=True),
    "rank": OptionWidget("Rank", "of the low-rank logit covariance", advanced=True, low=1),
    "logit_prior_variance": OptionWidget("Logit prior variance", "prior N(logit psi, v) on the logits",
                                         **POSITIVE),
    "init_logit_std": OptionWidget("Initial logit sd", "", advanced=True, **POSITIVE),
    "init_factor_std": OptionWidget("Initial factor sd", "", advanced=True, **POSITIVE),
}


def widget_for(name: str) -> OptionWidget:
    return OPTION_WIDGETS.get(name, OptionWidget(name, "", advanced=True))


_LITERAL = re.compile(r"Literal\[(.*)\]")


def choices(annotation: Any, default: Any) -> list[str] | None:
    """The allowed strings of an option whose default is a str-Enum member (core.enums), or of a
    Literal[...] annotation (string or typing object); else None."""
    if isinstance(default, enum.Enum):
        return [str(member.value) for member in type(default)]
    text = annotation if isinstance(annotation, str) else repr(annotation)
    match = _LITERAL.search(text)
    if not match:
        return None
    values = re.findall(r"['\"]([^'\"]+)['\"]", match.group(1))
    if default is not None and str(default) not in values:
        values.insert(0, str(default))
    return values or None


# Choices of string options that core lists as module constants, not as Literal annotations.
KNOWN_CHOICES = {
    "prior_scaling": ["none", "fan-in"],
    "variational_family": ["factorised", "structured"],
    "prior": ["regularised-horseshoe", "horseshoe"],
}


# Options that matter only for some values of another option: shown only then (the controlling
# option's widget comes first).
BETA_PRIORS = ("beta-bernoulli", "beta-binomial")
RELEVANT_WHEN: dict[str, tuple[str, tuple[str, ...]]] = {
    "slab_variance": ("slab", ("gaussian",)),
    "slab_a": ("slab", ("student-t",)),
    "slab_b": ("slab", ("student-t",)),
    "prior_inclusion": ("inclusion_prior", ("bernoulli",)),
    "beta_a": ("inclusion_prior", BETA_PRIORS),
    "beta_b": ("inclusion_prior", BETA_PRIORS),
    "slab_shape": ("prior", ("regularised-horseshoe",)),
    "slab_scale": ("prior", ("regularised-horseshoe",)),
}
CONTROLLING = {controller for controller, _ in RELEVANT_WHEN.values()}


def ordered(names: list[str]) -> list[str]:
    """Controlling options first, then the rest in their dataclass order."""
    return [n for n in names if n in CONTROLLING] + [n for n in names if n not in CONTROLLING]


def relevant(name: str, chosen: dict[str, Any], defaults: dict[str, Any]) -> bool:
    """Whether option `name` matters given the options chosen so far."""
    if name not in RELEVANT_WHEN:
        return True
    controller, values = RELEVANT_WHEN[name]
    if controller not in defaults:  # a family without that switch (lfmvn's psi is always used)
        return True
    return str(chosen.get(controller, defaults[controller])) in values
