"""How the Train form shows each family's options.

What an option is (label, help, accepted range or choices, whether it is advanced, which option
it depends on) is declared once, beside its field in the family's Options (an OptionSpec, read
here through the backend); the family's `validate()` checks the same declarations, so the form and
core cannot disagree. This module only orders the options and says which matter given the
choices so far. Options a family declares nothing about get a widget labelled by their field
name, folded away under "Advanced".
"""

from __future__ import annotations

from typing import Any

from dashboard import backend

# The inclusion priors with a Beta(a, b) on psi (core.enums.InclusionPrior): the form offers
# empirical Bayes for them.
BETA_PRIORS = backend.BETA_PRIORS


def specs(method: str) -> dict[str, Any]:
    """Each option's declaration (OptionSpec) of family `method`, by option name."""
    return backend.option_specs(method)


def widget_for(name: str, method: str) -> Any:
    """The declaration the form shows option `name` of family `method` with."""
    return specs(method).get(name) or backend.undeclared_option(name)


def choices(name: str, method: str) -> list[str] | None:
    """The allowed strings of a choice option (an enum, a Literal or declared choices), else None."""
    declared = widget_for(name, method).choices
    return None if declared is None else list(declared)


def ordered(names: list[str], method: str) -> list[str]:
    """Controlling options (those another option depends on) first, then the rest in their dataclass order."""
    controlling = {spec.when[0] for spec in specs(method).values() if spec.when}
    return [n for n in names if n in controlling] + [n for n in names if n not in controlling]


def relevant(name: str, chosen: dict[str, Any], defaults: dict[str, Any], method: str) -> bool:
    """Whether option `name` matters given the options chosen so far."""
    when = widget_for(name, method).when
    if when is None:
        return True
    controller, values = when
    if controller not in defaults:  # a family without that switch
        return True
    return str(chosen.get(controller, defaults[controller])) in values
