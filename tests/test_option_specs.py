"""Option metadata is declared once, beside each family's option (core.models.options.OptionSpec):
the family's check and the dashboard's Train form read the same declaration, so a value the form
accepts is one core accepts, and the other way round."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from core.models.base import LayerOptions
from core.models.options import POSITIVE, OptionSpec, option
from core.models.registry import FAMILIES, family_class

SPECS = [
    (family, name, spec) for family in FAMILIES for name, spec in family_class(family).Options.option_specs().items()
]
RANGED = [(f, n, s) for f, n, s in SPECS if s.kind in ("real", "whole") and (s.low is not None or s.high is not None)]
CHOICES = [(f, n, s) for f, n, s in SPECS if s.choices is not None]


def _options(family: str, **values):
    return family_class(family).Options.from_dict(values)


def test_the_declarations_are_complete_where_the_old_form_table_had_them():
    declared = {name for _, name, spec in SPECS if spec.label != name}
    # every option the Train form labelled before the declarations moved into core still has its label
    assert {
        "prior_inclusion",
        "slab_variance",
        "beta_a",
        "beta_b",
        "inclusion_prior",
        "slab",
        "prior_variance",
        "mixture_weight",
        "prior_variance_2",
        "prior",
        "node_scale",
        "global_scale",
        "slab_shape",
        "slab_scale",
        "prune_delta",
        "init_dropout",
        "estimator",
        "temperature",
        "init_sigma",
        "rank",
        "logit_prior_variance",
        "variational_family",
        "bias_prior",
        "prior_scaling",
    } <= declared
    for family, name, spec in SPECS:
        field = {f.name: f for f in dataclasses.fields(family_class(family).Options)}[name]
        assert spec.name == name and spec.default == field.default, (family, name)


@pytest.mark.parametrize("family, name, spec", RANGED, ids=[f"{f}.{n}" for f, n, _ in RANGED])
def test_each_range_is_enforced_by_the_family_at_its_bounds(family, name, spec):
    _options(family, **{name: spec.default})  # the default lies inside its own range
    for bound, is_open, step in ((spec.low, spec.low_open, -1), (spec.high, spec.high_open, 1)):
        if bound is None:
            continue
        outside = bound if is_open else (bound + step if spec.kind == "whole" else bound + step * 1e-9)
        with pytest.raises(ConfigError, match=name):
            _options(family, **{name: outside})
        assert spec.check(name, outside) is not None  # and the form refuses it too, naming the label
    if spec.kind == "real":
        with pytest.raises(ConfigError, match=name):
            _options(family, **{name: math.inf})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(RANGED) - 1), value=st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=False))
def test_the_form_and_the_family_agree_on_every_value(index, value):
    family, name, spec = RANGED[index]
    if spec.kind == "whole":
        value = int(value)
    form_refuses = spec.check(name, value) is not None
    core_refuses = spec.problem(value) is not None
    assert form_refuses == core_refuses, (family, name, value)


@pytest.mark.parametrize("family, name, spec", CHOICES, ids=[f"{f}.{n}" for f, n, _ in CHOICES])
def test_each_choice_is_accepted_and_nothing_else(family, name, spec):
    cls = family_class(family).Options
    for choice in spec.choices:
        cls(**{name: choice}).check_options()
    with pytest.raises(ConfigError, match=name):
        cls.from_dict({name: "no-such-choice"})


def test_a_family_offers_only_its_own_estimators():
    assert family_class("lbbnn").Options.option_specs()["estimator"].choices == (
        "local-reparameterisation",
        "relaxed-bernoulli",
    )
    assert family_class("bnn").Options.option_specs()["estimator"].choices == (
        "local-reparameterisation",
        "weight-sampling",
    )
    with pytest.raises(ConfigError, match="estimator: must be one of"):
        _options("bnn", estimator="relaxed-bernoulli")


def test_the_train_form_reads_the_families_declarations():
    from dashboard import priors

    for family in FAMILIES:
        specs = family_class(family).Options.option_specs()
        for name, spec in specs.items():
            assert priors.widget_for(name, family) == spec
            assert priors.choices(name, family) == (None if spec.choices is None else list(spec.choices))
    defaults = {"slab": "gaussian", "inclusion_prior": "bernoulli", "beta_a": 1.0, "prior_inclusion": 0.1}
    assert priors.relevant("beta_a", {"inclusion_prior": "beta-binomial"}, defaults, "lbbnn")
    assert not priors.relevant("beta_a", {}, defaults, "lbbnn")
    assert priors.relevant("prior_inclusion", {}, defaults, "lbbnn")
    assert priors.ordered(["beta_a", "slab_variance", "inclusion_prior", "slab"], "lbbnn") == [
        "inclusion_prior",
        "slab",
        "beta_a",
        "slab_variance",
    ]
    assert set(priors.BETA_PRIORS) == {"beta-bernoulli", "beta-binomial"}


def test_a_family_declared_outside_core_is_checked_by_its_declarations():
    @dataclasses.dataclass(frozen=True)
    class Outside(LayerOptions):
        scale: float = option(1.0, OptionSpec("Scale", "a positive scale", **POSITIVE))
        count: int = option(3, OptionSpec("Count", "", low=1, high=5))
        plain: float = 2.0  # undeclared: shown by its name, folded away, not range-checked

    specs = Outside.option_specs()
    assert (specs["scale"].kind, specs["count"].kind) == ("real", "whole")
    assert specs["plain"].label == "plain" and specs["plain"].advanced
    Outside.from_dict({"scale": 0.5, "count": 5, "plain": -1.0})
    for bad, name in (
        ({"scale": 0.0}, "scale"),
        ({"count": 6}, "count"),
        ({"count": 2.0}, "count"),
        ({"scale": "x"}, "scale"),
    ):
        with pytest.raises(ConfigError, match=name):
            Outside.from_dict(bad)
