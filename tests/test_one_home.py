"""One home per rule: the groups, lists and constants the dashboard shows are core's own, derived
from one declaration each (prediction modes, the family list, structure sampling, the headline
metric, the doubt level)."""

from __future__ import annotations

import numpy as np
import pytest

from core.models.registry import FAMILIES, FAMILY_PATHS, family_class, statistic_samples_structure
from core.predict.modes import COLLAPSED_MODES, REGRESSION_PREDICTIVES, PredictionMode, WeightChoice, parse_mode


def test_the_default_cut_modes_are_the_threshold_modes_that_do_not_take_one():
    # mpm / mpm-mean ask for a threshold but cut at the default; prune takes the one given.
    groups = PredictionMode.default_cut_modes()
    assert set(groups) == {m for m in PredictionMode if m.uses_threshold and m is not PredictionMode.PRUNE}
    assert all(m.same_numbers_as() is m for m in groups)
    # prune with either weights predicts what a default-cut mode would at the same threshold
    assert {PredictionMode.PRUNE.same_numbers_as(w) for w in WeightChoice} == set(groups)


def test_the_paper_table_columns_are_the_modes_paper_names_and_their_draws():
    table = PredictionMode.paper_table()
    # The dashboard's Compare table, as it was written out by hand before it was derived.
    assert [(c, m.value, r) for c, m, r in table] == [
        ("SIM-SIM R=1", "bma", 1),
        ("SIM-SIM R=10", "bma", 10),
        ("MED-SIM R=1", "mpm", 1),
        ("MED-SIM R=10", "mpm", 10),
        ("MED-MEA", "mpm-mean", 1),
        ("ALL-MEA", "mean", 1),
    ]
    for column, mode, _ in table:
        assert parse_mode(column.split(" ")[0]) is mode  # the column names the mode by its paper alias
    assert [r for _, _, r in PredictionMode.paper_table(samples=(3,))] == [3, 3, 1, 1]


def test_weight_choices_and_regression_predictives_cover_their_vocabularies():
    assert sorted(WeightChoice.choices()) == sorted(w.value for w in WeightChoice)
    assert WeightChoice.choices()[0] == "mean"  # the form's default is first
    assert set(REGRESSION_PREDICTIVES) == {"mode", *COLLAPSED_MODES}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_statistic_samples_a_structure_exactly_when_its_family_has_one(family):
    cls = family_class(family)
    assert statistic_samples_structure(cls.spec.name) is cls.has_structure


def test_sampling_a_structure_follows_has_structure_and_the_inclusion_probabilities():
    from dashboard import backend

    alpha = [np.full((200, 100), 0.3)]
    structure_family = next(f for f in FAMILIES if family_class(f).has_structure)
    dense_family = next(f for f in FAMILIES if not family_class(f).has_structure)
    drawn = backend.sample_structure(alpha, family_class(structure_family).spec.name, seed=0)
    # 20,000 Bernoulli(0.3) draws: the kept fraction is within 5 standard errors of 0.3
    assert abs(float(np.mean(drawn[0])) - 0.3) < 5 * np.sqrt(0.3 * 0.7 / alpha[0].size)
    assert backend.expected_density(alpha, family_class(structure_family).spec.name) == pytest.approx(0.3)
    assert backend.sample_structure(alpha, family_class(dense_family).spec.name) is None
    assert backend.expected_density(alpha, family_class(dense_family).spec.name) is None


def test_the_family_list_is_the_registry_and_every_family_has_a_colour():
    from core.runs.presets import ALL_FAMILIES
    from dashboard.charts import FAMILY_COLOURS

    assert FAMILIES == tuple(FAMILY_PATHS)
    assert set(FAMILIES) <= set(FAMILY_COLOURS), sorted(set(FAMILIES) - set(FAMILY_COLOURS))
    assert set(FAMILY_COLOURS) <= set(FAMILIES), "colours only for registered families"
    assert len(set(FAMILY_COLOURS.values())) == len(FAMILY_COLOURS), "one colour per family"
    assert set(ALL_FAMILIES) == set(FAMILIES) - {"laplace"}


def test_the_dashboard_reads_cores_groups_and_constants():
    from core.predict.metrics.classification import DOUBT_LEVEL
    from core.predict.metrics.headline import HEADLINE_METRIC
    from dashboard import backend

    assert backend.DEFAULT_CUT_MODES == ("mpm", "mpm-mean")
    assert [m for _, m, _ in backend.COMPARE_MODES] == [m.value for _, m, _ in PredictionMode.paper_table()]
    assert backend.DOUBT_LEVEL == DOUBT_LEVEL
    assert {task: backend.headline_metric(task) for task in HEADLINE_METRIC} == HEADLINE_METRIC
