"""Family names (the CLI's contract), their paper aliases, and where each lives.

Entries are import paths so that a family module is only imported when used
and adding a family is one line here plus one module.
"""

from __future__ import annotations

import difflib
import importlib

from core.errors import ConfigError
from core.models.base import SparseLayer
from core.validate import shown

FAMILY_PATHS: dict[str, str] = {
    "lbbnn": "core.models.lbbnn:LBBNNLayer",
    "lbbnn-lfmvn": "core.models.lfmvn:LowRankLBBNNLayer",
    "lbbnn-flow": "core.models.lbbnn_flow:LBBNNFlowLayer",
    "bnn": "core.models.gaussian:GaussianLayer",
    "bnn-mixture": "core.models.gaussian:MixtureGaussianLayer",
    # `bnn` under Bleahu's (2025) name: the same q, prior, training and pruning rule. A name of its own
    # (not an alias) because stored configs and run ids name it; new work should say `bnn`.
    "variational-dense": "core.models.gaussian:VariationalDenseLayer",
    "concrete-dropout": "core.models.concrete_dropout:ConcreteDropoutLayer",
    "horseshoe": "core.models.horseshoe:HorseshoeLayer",
    "sparse-vd": "core.models.sparse_vd:SparseVDLayer",
    "fnn": "core.models.fnn:DeterministicLayer",
    "laplace": "core.models.laplace:LaplaceLayer",
    "ensemble": "core.models.ensemble:EnsembleLayer",
}

# Paper names (Hubin & Storvik 2024 tables, Bleahu 2025) accepted on input, case-insensitive.
ALIASES: dict[str, str] = {
    "lbbnn-ssp-mf": "lbbnn",
    "lbbnn-ssp-lfmvn": "lbbnn-lfmvn",
    "bnn-gp-mf": "bnn",
    "bnn-mgp-mf": "bnn-mixture",
    "bnn-gp-cmf": "concrete-dropout",
    "bnn-hp-mf": "horseshoe",
    "svd": "sparse-vd",
    "sparse-variational-dropout": "sparse-vd",
    "vd": "variational-dense",
    "deterministic": "fnn",
    "linearised-laplace": "laplace",
    "deep-ensemble": "ensemble",
}


# The family list (the built-in families, as registered above): every other list of families
# (presets, the dashboard's colours) derives from it.
FAMILIES: tuple[str, ...] = tuple(FAMILY_PATHS)


def canonical_family(name: str) -> str:
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in FAMILY_PATHS:
        # a name is a few characters: a pasted page gets no spelling hint, and is quoted cut short
        close = difflib.get_close_matches(key, list(FAMILY_PATHS) + list(ALIASES), n=3) if len(key) <= 64 else []
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"method: unknown family {shown(name)}.{hint} Known: {', '.join(FAMILY_PATHS)}")
    return key


# A family whose option picks another class for its hidden layers: family -> (option, {value: path}).
# The output layer keeps the family's class (Bleahu 2025: the output layer's scale is not structured).
HIDDEN_LAYER_VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "horseshoe": ("variational_family", {"structured": "core.models.horseshoe:StructuredHorseshoeLayer"}),
}


def _import(path: str) -> type[SparseLayer]:
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def family_class(name: str) -> type[SparseLayer]:
    """The family's class: its Options, its statistic spec, and its layers unless a variant applies."""
    return _import(FAMILY_PATHS[canonical_family(name)])


def layer_class(name: str, options: object, is_output: bool) -> type[SparseLayer]:
    """The class of one layer of family `name` with these options (see HIDDEN_LAYER_VARIANTS)."""
    family = canonical_family(name)
    option, variants = HIDDEN_LAYER_VARIANTS.get(family, ("", {}))
    value = getattr(getattr(options, option, None), "value", getattr(options, option, None)) if option else None
    if not is_output and value in variants:
        return _import(variants[value])
    return family_class(family)


def statistic_samples_structure(statistic_name: str) -> bool:
    """Whether a structure can be drawn from `statistic_name`: it is the native statistic of a family
    whose q has inclusion indicators (`SparseLayer.has_structure`)."""
    # FAMILY_PATHS itself, not the FAMILIES snapshot: a family registered later counts too.
    return any(cls.has_structure for cls in map(family_class, FAMILY_PATHS) if cls.spec.name == str(statistic_name))
