"""Per-dataset defaults of a run: the hidden widths, the activation and the family options that
the small regression toys change. Read by RunConfig when a field is left out (core.runs.config)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from core.errors import BNNError, ConfigError
from core.models.registry import canonical_family, family_class

# Default widths: two layers of 100 for images and tables; 16 for the 1-D and 2-D toy sets, where a
# network of a few hundred weights fits the data and its sparsity stays readable (with 100-100 on
# two-moons the median probability model keeps under 1% of the weights).
DEFAULT_HIDDEN = (100, 100)
DEFAULT_HIDDEN_LOW_DIMENSIONAL = (16, 16)

# Small regression sets (the 1-D toys: 40-200 points), measured in docs/why-lbbnn-over-prunes.md
# ("Small regression sets"): with the general defaults every family fits a straight line there.
# A 16-16 net cannot fit the sine even
# deterministically; without annealing the KL the learned noise absorbs the signal; an LBBNN whose
# biases carry inclusion indicators switches them off (every ReLU kink then sits at x = 0), and one
# started at alpha in [0.1, 0.9] drowns the fit in gating noise before it can settle.
SMALL_REGRESSION_HIDDEN = (64, 64)
SMALL_REGRESSION_KL_ANNEAL_FRACTION = 0.5
SMALL_REGRESSION_FAMILY_DEFAULTS = {"bias_prior": "gaussian", "init_inclusion_low": 0.95, "init_inclusion_high": 0.99}


def is_small_regression(dataset: str) -> bool:
    """A regression set with at most 2 inputs (the toys), which gets SMALL_REGRESSION_* defaults."""
    from core.data.registry import dataset_info

    try:
        info = dataset_info(dataset)
    except BNNError:
        return False
    shape = info.input_shape
    return info.task == "regression" and shape is not None and math.prod(shape) <= 2


def family_option_defaults(method: str, dataset: str) -> dict[str, Any]:
    """A family's option defaults on a dataset: its Options dataclass, with the small-regression
    defaults where the family has those options."""
    options_class = family_class(canonical_family(method)).Options
    return {**dataclasses.asdict(options_class()), **dataset_option_defaults(options_class, dataset)}


def dataset_option_defaults(options_class: type, dataset: str) -> dict[str, Any]:
    """The options whose default the dataset changes (the small-regression ones the family has)."""
    if not is_small_regression(dataset):
        return {}
    fields = {f.name for f in dataclasses.fields(options_class)}
    candidates = {k: v for k, v in SMALL_REGRESSION_FAMILY_DEFAULTS.items() if k in fields}
    # Only values the family takes: lbbnn-lfmvn has lbbnn's bias_prior field but gives every bias an
    # indicator, so 'gaussian' there made its defaults fail on every small regression set. The
    # largest subset the family accepts is kept (the two init_inclusion bounds only work together).
    for size in range(len(candidates), 0, -1):
        for names in itertools.combinations(candidates, size):
            chosen = {name: candidates[name] for name in names}
            try:
                options_class.from_dict(chosen)
            except ConfigError:
                continue
            return chosen
    return {}


def default_activation(method: str, dataset: str) -> str:
    """relu, or on the small regression sets the family's `small_regression_activation` where it
    declares one (laplace: tanh). Stored configs name their activation, so their ids stay."""
    if is_small_regression(dataset):
        declared = getattr(family_class(canonical_family(method)), "small_regression_activation", None)
        if declared:
            return declared
    return "relu"


def default_hidden(dataset: str) -> tuple[int, ...]:
    from core.data.registry import dataset_info

    try:
        shape = dataset_info(dataset).input_shape
    except BNNError:
        return DEFAULT_HIDDEN
    if is_small_regression(dataset):
        return SMALL_REGRESSION_HIDDEN
    if shape is not None and math.prod(shape) <= 2:
        return DEFAULT_HIDDEN_LOW_DIMENSIONAL
    return DEFAULT_HIDDEN
