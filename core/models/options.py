"""A family option's declaration, made once beside its field in the family's Options dataclass.

    slab_variance: float = option(1.0, OptionSpec("Slab variance sigma^2", "variance of ...", **POSITIVE))

The declaration holds what a reader of the option needs: its label and help, the range or the
choices it accepts, whether a form folds it away (advanced) and the option it depends on (`when`).
`LayerOptions.option_specs()` completes each with the field's name, kind and default, and
`LayerOptions.check_options()` refuses a value outside its declaration; the dashboard's Train form
reads the same declarations (dashboard/priors.py), so the form and the check cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from core.models.distributions import PRIOR_SCALINGS
from core.validate import shown

SPEC_KEY = "option_spec"  # the key of a field's metadata that holds its OptionSpec

POSITIVE = dict(low=0.0, low_open=True)
PROBABILITY = dict(low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class OptionSpec:
    """One option: label, help, accepted range (bounds open or closed) or choices, form hints.

    `name`, `kind` ('real', 'whole', 'flag', 'choice' or 'text') and `default` are filled from the
    dataclass field by `LayerOptions.option_specs()`; the declaration leaves them out."""

    label: str
    help: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: the bound itself is refused
    high_open: bool = False
    choices: tuple[str, ...] | None = None  # None: taken from an enum or Literal annotation, if any
    advanced: bool = False  # a form folds it away under "Advanced"
    log_scale: bool = False  # shown in e-notation (tiny scales such as 1e-5)
    when: tuple[str, tuple[str, ...]] | None = None  # matters only when option when[0] is one of when[1]
    name: str = ""
    kind: str = ""
    default: Any = None

    def range_text(self) -> str:
        if self.low is None and self.high is None:
            return ""
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        return f"{left}{low}, {high}{right}"

    def outside(self, value: float) -> bool:
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        return too_low or too_high

    def check(self, name: str, value: float) -> str | None:
        """The form's message when `value` lies outside the accepted range (never clamped), else None."""
        if not math.isfinite(float(value)):
            return f"{self.label} ({name}): must be a finite number, got {value}"
        if self.outside(float(value)):
            return f"{self.label} ({name}): must lie in {self.range_text()}, got {value:g}"
        return None

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` under this declaration ('<name>: ...'), or None."""
        name = self.name
        if self.choices is not None:
            text = str(getattr(value, "value", value))
            if text not in self.choices:
                return f"{name}: must be one of {', '.join(self.choices)}, got {text!r}"
            return None
        if self.kind == "flag":
            return None if isinstance(value, bool) else f"{name}: must be true or false, got {shown(value)}"
        if self.kind not in ("real", "whole"):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name}: must be a number, got {shown(value)}"
        if self.kind == "whole" and not isinstance(value, int):
            return f"{name}: must be a whole number, got {shown(value)}"
        if not math.isfinite(value):
            return f"{name}: must be finite, got {shown(value)}"
        if self.outside(float(value)):
            if self.high is None and self.low is not None:
                return f"{name}: must be {'>' if self.low_open else '>='} {self.low:g}, got {shown(value)}"
            return f"{name}: must lie in {self.range_text()}, got {shown(value)}"
        return None


def option(default: Any, spec: OptionSpec) -> Any:
    """A dataclass field with its default and its declaration (the field's metadata)."""
    return dataclasses.field(default=default, metadata={SPEC_KEY: spec})


def undeclared(name: str) -> OptionSpec:
    """What a form shows for an option its family declared nothing about: its name, folded away."""
    return OptionSpec(name, "", advanced=True, name=name)


# Declarations several families share (the same option, the same meaning and range).
ESTIMATOR = OptionSpec("Gradient estimator", "local-reparameterisation (fast) or the paper's sampling", advanced=True)
TEMPERATURE = OptionSpec(
    "Relaxation temperature", "of the relaxed Bernoulli / concrete masks", advanced=True, **POSITIVE
)
INIT_SIGMA = OptionSpec(
    "Initial sigma", "initial posterior standard deviation of the weights", advanced=True, log_scale=True, **POSITIVE
)
PRIOR_VARIANCE = OptionSpec(
    "Prior variance", "variance of the Gaussian prior of each weight (weight units squared)", **POSITIVE
)
PRIOR_SCALING = OptionSpec(
    "Prior scaling",
    "fan-in: the slab / prior variance is divided by the layer's number of inputs",
    advanced=True,
    choices=PRIOR_SCALINGS,
)
