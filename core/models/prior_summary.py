"""What a family's prior says about its native statistic, to draw beside the posterior histogram."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
from scipy import stats

from core.models.registry import family_class

# Families whose statistic (an inclusion probability) a prior speaks of.
PRIOR_ON_INCLUSION = ("lbbnn", "lbbnn-lfmvn")


def prior_of_statistic(family: str, options: Mapping[str, Any] | None, n_points: int = 200) -> dict[str, Any] | None:
    """lbbnn / lbbnn-lfmvn: the prior inclusion probability psi; a point for the Bernoulli prior,
    the Beta(a_psi, b_psi) density of psi for the beta priors. None for statistics no prior
    speaks of (signal-to-noise ratios, magnitudes, log alpha under the log-uniform prior)."""
    if family not in PRIOR_ON_INCLUSION:
        return None
    defaults = family_class(family).Options()
    values = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
    values.update({k: v for k, v in (options or {}).items() if k in values})
    kind = values["inclusion_prior"]
    if kind == "bernoulli":
        return {
            "kind": "point",
            "value": float(values["prior_inclusion"]),
            "label": f"prior inclusion probability psi = {float(values['prior_inclusion']):.3g}",
        }
    a, b = float(values["beta_a"]), float(values["beta_b"])
    grid = np.linspace(0.0, 1.0, n_points + 2)[1:-1]  # open interval: the density may be infinite at 0 or 1
    prior = stats.beta(a, b)
    return {
        "kind": "density",
        "x": grid,
        "density": prior.pdf(grid),
        "mean": float(prior.mean()),
        "label": f"Beta({a:.3g}, {b:.3g}) prior on psi ({kind}), mean {a / (a + b):.3g}",
    }
