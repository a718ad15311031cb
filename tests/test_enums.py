"""Option vocabularies are str-Enums (core.enums) accepted as members or strings, and stored
configs and run ids are what they were when they were plain strings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.enums import Estimator, InclusionPrior, PosttrainStructure, Slab, Task, VariationalFamily
from core.errors import ConfigError
from core.models.horseshoe import HorseshoeOptions
from core.models.lbbnn import LBBNNOptions
from core.runs import PRESETS, RunConfig
from core.runs.config import stored_config
from core.train import TrainConfig

FROM_MAIN = json.loads((Path(__file__).parent / "fixtures" / "configs_from_main.json").read_text())
FINGERPRINT = "fingerprint-0"


@pytest.mark.parametrize("name", sorted(FROM_MAIN["preset_run_ids"]))
def test_preset_run_ids_are_unchanged(name):
    assert PRESETS[name].run_id(FINGERPRINT) == FROM_MAIN["preset_run_ids"][name]


@pytest.mark.parametrize("index", range(len(FROM_MAIN["stored_configs"])))
def test_a_config_stored_by_main_loads_with_its_run_id_and_round_trips(index):
    case = FROM_MAIN["stored_configs"][index]
    config = stored_config(case["stored"])
    assert config.run_id(FINGERPRINT) == case["run_id"]
    assert json.loads(json.dumps(config.to_dict())) == case["stored"]
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.run_id(FINGERPRINT) == case["run_id"] and again.to_dict() == config.to_dict()


def test_options_accept_a_member_or_its_string_and_hold_the_member():
    by_string = LBBNNOptions(slab="Student-T ", inclusion_prior="beta-binomial", estimator="relaxed-bernoulli")
    by_member = LBBNNOptions(
        slab=Slab.STUDENT_T, inclusion_prior=InclusionPrior.BETA_BINOMIAL, estimator=Estimator.RELAXED_BERNOULLI
    )
    assert by_string == by_member
    assert by_string.slab is Slab.STUDENT_T and by_string.slab == "student-t"
    assert HorseshoeOptions(variational_family="structured").variational_family is VariationalFamily.STRUCTURED
    assert TrainConfig(posttrain_structure="alpha").posttrain_structure is PosttrainStructure.ALPHA
    with pytest.raises(ConfigError, match="slab: must be one of gaussian, student-t"):
        LBBNNOptions(slab="laplace")
    with pytest.raises(ConfigError, match="estimator"):  # a member of the vocabulary, not this family's
        LBBNNOptions.from_dict({"estimator": "weight-sampling"})
    with pytest.raises(ConfigError, match="posttrain_structure"):
        TrainConfig(posttrain_structure="median")


def test_a_config_given_members_is_the_config_given_strings():
    strings = RunConfig(
        dataset="two-moons",
        hidden=(8,),
        family_options={"slab": "student-t"},
        train={"epochs": 2, "posttrain_epochs": 1, "posttrain_structure": "alpha"},
    )
    members = RunConfig(
        dataset="two-moons",
        hidden=(8,),
        family_options={"slab": Slab.STUDENT_T},
        train={"epochs": 2, "posttrain_epochs": 1, "posttrain_structure": PosttrainStructure.ALPHA},
    )
    assert strings.run_id(FINGERPRINT) == members.run_id(FINGERPRINT)
    stored = members.to_dict()
    assert type(stored["family_options"]["slab"]) is str and type(stored["train"]["posttrain_structure"]) is str


def test_tasks_are_members():
    config = RunConfig(dataset="toy-cubic", hidden=(4,), train={"epochs": 1})
    dataset = config.load_dataset()
    assert dataset.task is Task.REGRESSION and dataset.task == "regression"
    assert json.loads(json.dumps({"task": dataset.task})) == {"task": "regression"}
