"""RunConfig: validation, canonical serialisation, run ids, config files, presets."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.errors import ConfigError
from core.runs import PRESETS, GridSpec, RunConfig, load_config
from core.runs import config as config_module

FINGERPRINT = "f" * 64


def tiny(**changes) -> RunConfig:
    values = {"dataset": "two-moons", "hidden": [16], "train": {"epochs": 2}}
    values.update(changes)
    return RunConfig.from_dict(values)


def test_same_config_same_id_and_round_trip():
    a, b = tiny(), tiny()
    assert a.run_id(FINGERPRINT) == b.run_id(FINGERPRINT)
    again = RunConfig.from_dict(json.loads(json.dumps(a.to_dict())))
    assert again == a
    assert again.run_id(FINGERPRINT) == a.run_id(FINGERPRINT)
    assert len(a.run_id(FINGERPRINT)) == 16 and int(a.run_id(FINGERPRINT), 16) >= 0


@pytest.mark.parametrize(
    "changes",
    [
        {"dataset": "two-spirals"},
        {"dataset_params": {"noise": 0.2}},
        {"data_seed": 1},
        {"method": "bnn"},
        {"hidden": [17]},
        {"hidden": [16, 16]},
        {"activation": "tanh"},
        {"likelihood": "bernoulli"},
        {"family_options": {"prior_inclusion": 0.3}},
        {"train": {"epochs": 3}},
        {"train": {"epochs": 2, "batch_size": 50}},
        {"train": {"epochs": 2, "learning_rates": {"weights": 0.02}}},
        {"train": {"epochs": 2, "pretrain_learning_rates": {"inclusion": 0.5}}},
        {"train": {"epochs": 2, "mc_samples": 2}},
        {"train": {"epochs": 2, "kl_anneal_epochs": 1}},
        {"train": {"epochs": 2, "warm_start_epochs": 1}},
        {"train": {"epochs": 2, "empirical_bayes": True}},
        {"train": {"epochs": 2, "posttrain_epochs": 1, "posttrain_structure": "alpha"}},
        {"train": {"epochs": 2, "lr_schedule": "cosine"}},
        {"seed": 1},
    ],
)
def test_every_result_changing_field_changes_the_id(changes):
    assert tiny(**changes).run_id(FINGERPRINT) != tiny().run_id(FINGERPRINT)


def test_dataset_fingerprint_and_schema_version_enter_the_id(monkeypatch):
    config = tiny()
    base = config.run_id(FINGERPRINT)
    assert config.run_id("0" * 64) != base
    monkeypatch.setattr(config_module, "SCHEMA_VERSION", config_module.SCHEMA_VERSION + 1)
    assert config.run_id(FINGERPRINT) != base


def test_a_constant_learning_rate_schedule_keeps_the_ids_of_runs_stored_before_the_option():
    """Runs stored before lr_schedule existed hashed a train table without it; constant is what they used."""
    explicit = tiny(train={"epochs": 2, "lr_schedule": "constant"})
    assert "lr_schedule" not in json.loads(explicit.canonical_json())["train"]
    assert explicit.run_id(FINGERPRINT) == tiny().run_id(FINGERPRINT)
    cosine = tiny(train={"epochs": 2, "lr_schedule": "cosine"})
    assert json.loads(cosine.canonical_json())["train"]["lr_schedule"] == "cosine"
    assert RunConfig.from_dict(json.loads(json.dumps(cosine.to_dict()))) == cosine


def test_device_is_excluded_from_the_id():
    assert tiny(device="cpu").run_id(FINGERPRINT) == tiny(device="cuda:1").run_id(FINGERPRINT)
    assert "device" not in json.loads(tiny(device="cpu").canonical_json())


def test_numbers_are_normalised():
    reference = tiny(family_options={"slab_variance": 1}, train={"epochs": 2, "learning_rates": {"weights": 0.01}})
    for slab, epochs, rate in ((1.0, 2.0, 1e-2), (1e0, 2, 0.010), (1, 2.0, 10e-3)):
        other = tiny(
            family_options={"slab_variance": slab}, train={"epochs": epochs, "learning_rates": {"weights": rate}}
        )
        assert other.run_id(FINGERPRINT) == reference.run_id(FINGERPRINT)
    assert isinstance(tiny(train={"epochs": 2.0}).train.epochs, int)


def test_defaults_are_filled_in():
    # Naming the default value of an option, likelihood or learning rate is the same run.
    explicit = tiny(
        likelihood="categorical",
        family_options={"prior_inclusion": tiny().family_options["prior_inclusion"]},
        train={"epochs": 2, "learning_rates": {"weights": 1e-2}},
    )
    assert explicit.run_id(FINGERPRINT) == tiny().run_id(FINGERPRINT)
    assert tiny().likelihood == "categorical"
    assert RunConfig(dataset="toy-sine-gaps", hidden=(8,)).likelihood == "gaussian"
    assert set(tiny().train.learning_rates) == {"weights", "scales", "inclusion", "prior", "slab_prior", "likelihood"}


def test_paper_alias_is_the_same_method():
    assert tiny(method="LBBNN-SSP-MF") == tiny(method="lbbnn")
    assert tiny(method="BNN-GP-MF").method == "bnn"


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"dataset": "no-such-data"}, "dataset"),
        ({"split": 3}, "split"),
        ({"dataset_params": 5}, "dataset_params"),
        ({"data_seed": -1}, "data_seed"),
        ({"method": "lbbn-typo"}, "method"),
        ({"hidden": [16, 0]}, "hidden"),
        ({"hidden": [1.5]}, "hidden"),
        ({"activation": "swish"}, "activation"),
        ({"likelihood": "gaussian"}, "likelihood"),
        ({"family_options": {"prior_inclusion": 1.5}}, "prior_inclusion"),
        ({"family_options": {"no_such_option": 1}}, "no_such_option"),
        ({"train": {"epochs": -1}}, "train.epochs"),
        ({"train": {"epochs": 1.5}}, "train.epochs"),
        ({"train": {"epochs": 2, "batch_size": 0}}, "batch_size"),
        ({"train": {"epochs": 2, "learning_rates": {"weights": -1}}}, "train.learning_rates.weights"),
        ({"train": {"epochs": 2, "learning_rates": {"wieghts": 1e-3}}}, "train.learning_rates"),
        ({"train": {"epochs": 2, "posttrain_structure": "median"}}, "posttrain_structure"),
        ({"train": {"epochs": 2, "empirical_bayes": "yes"}}, "train.empirical_bayes"),
        ({"train": {"epoch": 2}}, "epoch"),
        ({"seed": -3}, "seed"),
        ({"seed": True}, "seed"),
        ({"device": "gpu7"}, "device"),
    ],
)
def test_validation_names_the_field(changes, field):
    with pytest.raises(ConfigError) as info:
        tiny(**changes)
    assert field in str(info.value)


def test_unknown_top_level_field_is_named():
    with pytest.raises(ConfigError, match="hiden"):
        RunConfig.from_dict({"dataset": "two-moons", "hiden": [3]})


def test_config_is_frozen():

    config = tiny()
    with pytest.raises(dataclasses.FrozenInstanceError, match="seed"):
        config.seed = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="hidden"):
        config.hidden = (4,)  # type: ignore[misc]
    assert config.seed == tiny().seed and config.hidden == tiny().hidden


def test_model_config_takes_shapes_from_the_dataset():
    from core.data import load_dataset

    dataset = load_dataset("two-moons")
    model_config = tiny(hidden=[8, 4]).model_config(dataset)
    assert model_config.in_features == dataset.in_features == 2
    assert model_config.out_classes == 2 and model_config.hidden == (8, 4)


def test_toml_and_json_files_give_the_same_run(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(
        'dataset = "two-moons"\nhidden = [16]\nseed = 0\n[train]\nepochs = 2.0\n'
        "[train.learning_rates]\nweights = 1e-2\n"
    )
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"dataset": "two-moons", "hidden": [16], "train": {"epochs": 2}}))
    assert (
        load_config(toml).run_id(FINGERPRINT) == load_config(as_json).run_id(FINGERPRINT) == tiny().run_id(FINGERPRINT)
    )
    broken = tmp_path / "broken.toml"
    broken.write_text("dataset = \n")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(broken)


def test_paper_presets_follow_hubin_storvik_2024():
    """Section 4 and Table 1 of Hubin & Storvik (2024), restated here from the paper (not from presets.py)."""
    for name, dataset in (("paper-mnist", "mnist"), ("paper-fmnist", "fashion-mnist")):
        paper = PRESETS[name]
        assert paper.dataset == dataset and paper.hidden == (400, 600) and paper.method == "lbbnn"
        schedule = paper.train
        assert schedule.pretrain_epochs == 20 and schedule.pretrain_epochs + schedule.epochs == 250
        assert schedule.posttrain_epochs == 0  # Tables 2-3: "No post-training is used"
        assert schedule.batch_size == 100 and schedule.mc_samples == 1 and schedule.empirical_bayes
        assert schedule.kl_weight == 1.0  # the ELBO, not a tempered objective
        pre, main = schedule.pretrain_learning_rates, schedule.learning_rates
        assert pre["weights"] == pre["scales"] == main["weights"] == main["scales"] == 1e-4
        assert pre["inclusion"] == 1e-1 and main["inclusion"] == 1e-4
        assert pre["prior"] == 1e-3 and pre["slab_prior"] == 1e-5  # a_psi, b_psi and a_beta, b_beta
        options = paper.family_options
        assert options["inclusion_prior"] == "beta-bernoulli" and options["slab"] == "student-t"
        assert options["estimator"] == "relaxed-bernoulli"
    post = PRESETS["paper-mnist-posttrain"]
    assert post.train.posttrain_epochs == 50 and post.train.posttrain_structure == "mpm"
    assert post.replace(train={"posttrain_epochs": 0}) == PRESETS["paper-mnist"]
    assert PRESETS["quick-mnist"].dataset == "mnist-small" and PRESETS["quick-mnist"].hidden == (400, 600)
    assert PRESETS["lenet-300-100"].hidden == (300, 100)
    assert PRESETS["regression-1-64-1"].hidden == (64,)


def test_paper_grid_baselines_follow_hubin_storvik_2024_section_4():
    """Hubin & Storvik (2024) section 4: 10 repeats; BNN-GP-MF, BNN-MGP-MF (mixture 0.5 N(0, 1) + 0.5 N(0, 2.479e-3)),
    BNN-GP-CMF, BNN-HP-MF and FNN beside the LBBNN; 400-600 hidden units; baselines 250 epochs of Adam
    at 1e-4 for every parameter, batch 100, no pre- or post-training. (Restated from the paper.)"""
    from core.models.network import build_model

    grid = PRESETS["paper"]
    cells = grid.cells()
    assert {c[0] for c in cells} == {"paper-mnist", "paper-fmnist"}
    assert set(grid.seeds) == set(range(10))
    assert set(grid.methods) == {"lbbnn", "lbbnn-lfmvn", "bnn", "bnn-mixture", "concrete-dropout", "horseshoe", "fnn"}
    for label, method, _seed, _, config in cells:
        assert config.hidden == (400, 600) and config.train.batch_size == 100, (label, method)
        assert config.dataset == {"paper-mnist": "mnist", "paper-fmnist": "fashion-mnist"}[label]
        schedule = config.train
        assert schedule.pretrain_epochs + schedule.epochs == 250 and schedule.posttrain_epochs == 0
        assert schedule.kl_weight == 1.0 and schedule.mc_samples == 1
        if not method.startswith("lbbnn"):
            assert schedule.pretrain_epochs == 0 and schedule.warm_start_epochs == 0
            assert set(schedule.learning_rates.values()) == {1e-4}, (label, method)
    mixture = next(c[-1] for c in cells if c[1] == "bnn-mixture")
    layer = build_model(_model_config(mixture, 784, 10)).layers[0]
    assert float(layer.mixture_weight) == 0.5
    assert float(layer.prior_variance) == 1.0 and float(layer.prior_variance_2) == pytest.approx(2.479e-3)


def _model_config(config: RunConfig, in_features: int, classes: int):
    from core.models.network import ModelConfig

    return ModelConfig(
        in_features=in_features,
        out_classes=classes,
        hidden=config.hidden,
        family=config.method,
        family_options=dict(config.family_options),
    )


def test_paper_grid_lbbnn_cells_use_the_prior_of_hubin_storvik_2024_section_4():
    """Hubin & Storvik (2024) section 4: "Priors for the parameters and model indicators were chosen
    according to (3)"."""
    for label, method, seed, _, config in PRESETS["paper"].cells():
        if method.startswith("lbbnn"):
            options = config.family_options
            assert options["slab"] == "student-t", (label, method, seed)
            if method == "lbbnn":
                assert options["inclusion_prior"] == "beta-bernoulli", (label, seed)
            assert options["estimator"] == "relaxed-bernoulli"


def test_bleahu_2025_presets_follow_the_thesis():
    """Bleahu (2025): LeNet-300-100 (784-300-100-10) with variational dropout, frequentist pre-training at
    learning rate 1e-3 then the KL annealed in (section 4.2); a 1-64-1 MLP on the gapped sine toy with
    150 warm-up epochs without KL, then the KL annealed over the remaining 250 at learning rate 0.01
    (section 4.3). Both use the standard ELBO (the thesis's Algorithm 1 divides the KL by N relative to it)."""
    for name, dataset in (
        ("lenet-300-100", "mnist"),
        ("lenet-300-100-mnist", "mnist"),
        ("lenet-300-100-fmnist", "fashion-mnist"),
    ):
        lenet = PRESETS[name]
        assert lenet.dataset == dataset and lenet.hidden == (300, 100) and lenet.method == "sparse-vd"
        assert lenet.train.warm_start_epochs > 0 and lenet.train.kl_anneal_epochs > 0
        assert lenet.train.learning_rates["weights"] == 1e-3 and lenet.train.kl_weight == 1.0
    toy = PRESETS["regression-1-64-1"]
    assert toy.dataset == "toy-sine-gaps" and toy.hidden == (64,) and toy.method == "sparse-vd"
    assert toy.train.warm_start_epochs == 150
    assert toy.train.epochs == 250 and toy.train.kl_anneal_epochs == 250
    assert toy.train.learning_rates["weights"] == toy.train.learning_rates["scales"] == 1e-2
    assert toy.train.kl_weight == 1.0


def test_family_defaults_follow_the_papers():
    """The papers' rules, restated: sparse VD prunes at log alpha > 3 and clips log alpha to [-8, 8] (Bleahu 2025);
    variational dense prunes at |mu|/sigma < 0.83 (Bleahu 2025); the horseshoe drops a unit when
    P(tau v < 1e-3) > 0.9 (Ghosh, Yao & Doshi-Velez 2018); LBBNN's median probability model cuts alpha at 0.5
    (Hubin & Storvik 2024)."""
    from core.models.base import Keep
    from core.models.horseshoe import HorseshoeOptions
    from core.models.registry import family_class

    spec = family_class("sparse-vd").spec
    assert (spec.keep, spec.default_threshold, spec.low, spec.high) == (Keep.BELOW, 3.0, -8.0, 8.0)
    spec = family_class("variational-dense").spec
    assert (spec.keep, spec.default_threshold) == (Keep.ABOVE, 0.83)
    spec = family_class("horseshoe").spec
    assert (spec.keep, spec.default_threshold) == (Keep.BELOW, 0.9) and HorseshoeOptions().prune_delta == 1e-3
    spec = family_class("lbbnn").spec
    assert (spec.keep, spec.default_threshold) == (Keep.ABOVE, 0.5)


def test_fast_presets_are_tempered_and_say_so():
    from core.runs.presets import describe_preset

    for name, dataset in (("fast-mnist", "mnist"), ("fast-fmnist", "fashion-mnist")):
        fast = PRESETS[name]
        assert fast.dataset == dataset and fast.method == "lbbnn" and fast.hidden == (400, 600)
        assert fast.train.kl_weight < 1 and fast.train.warm_start_epochs > 0
        assert "tempered" in describe_preset(name)


def test_default_widths_and_epochs_follow_the_dataset():
    assert RunConfig(dataset="mnist-small").hidden == (100, 100)
    assert RunConfig(dataset="two-moons").hidden == (16, 16)
    assert RunConfig(dataset="toy-sine-gaps").hidden == (64, 64)
    assert RunConfig(dataset="mnist-small").train.epochs == 30
    assert RunConfig(dataset="toy-sine-gaps").train.epochs == 3000
    assert RunConfig(dataset="toy-cubic", dataset_params={"n": 400}).train.epochs == 750
    assert RunConfig(dataset="mnist-small", train={"epochs": 2}).train.epochs == 2


def test_small_regression_defaults_apply_only_what_the_family_takes():
    # lbbnn-lfmvn has lbbnn's bias_prior field but only takes spike-and-slab: its defaults once
    # failed on every small regression set with "bias_prior: ... got 'gaussian'".
    low_rank = RunConfig(dataset="toy-sine-gaps", method="lbbnn-lfmvn")
    assert low_rank.family_options["bias_prior"] == "spike-and-slab"
    assert (low_rank.family_options["init_inclusion_low"], low_rank.family_options["init_inclusion_high"]) == (
        0.95,
        0.99,
    )
    assert RunConfig(dataset="toy-sine-gaps", method="lbbnn").family_options["bias_prior"] == "gaussian"


def test_small_regression_defaults_fill_only_what_was_left_out():
    toy = RunConfig(dataset="toy-sine-gaps", method="lbbnn")
    assert toy.train.kl_anneal_epochs == toy.train.epochs // 2
    assert toy.family_options["bias_prior"] == "gaussian" and toy.family_options["init_inclusion_low"] == 0.95
    chosen = RunConfig(
        dataset="toy-sine-gaps",
        method="lbbnn",
        family_options={"bias_prior": "spike-and-slab"},
        train={"kl_anneal_epochs": 0},
    )
    assert chosen.family_options["bias_prior"] == "spike-and-slab" and chosen.train.kl_anneal_epochs == 0
    # A stored config names every option, so reading it back never applies a default again.
    assert RunConfig.from_dict(chosen.to_dict()) == chosen
    for other in ("mnist-small", "two-moons", "uci-boston"):
        config = RunConfig(dataset=other, method="lbbnn")
        assert config.train.kl_anneal_epochs == 0 and config.family_options["bias_prior"] == "spike-and-slab"
    # Families without those options are untouched; every family gets the anneal.
    bnn = RunConfig(dataset="toy-cubic", method="bnn")
    assert "bias_prior" not in bnn.family_options and bnn.train.kl_anneal_epochs == bnn.train.epochs // 2


def test_grid_presets_expand_to_distinct_runs():
    quick = PRESETS["quick-paper"]
    assert isinstance(quick, GridSpec)
    cells = quick.cells()
    assert len(cells) == len(quick.methods) * len(quick.seeds)
    assert len({cell[-1].canonical_json() for cell in cells}) == len(cells)
    uci = PRESETS["uci"]
    splits = {}
    for label, _, _, split, config in uci.cells():
        splits.setdefault(label, set()).add(split)
        assert config.hidden in ((50,), (100,))
    assert splits["uci-boston"] == set(range(20)) and splits["uci-protein"] == set(range(5))


def test_a_stored_config_from_before_kl_weight_means_the_elbo():
    from core.runs.config import stored_config

    old = tiny().to_dict()
    del old["train"]["kl_weight"]
    assert stored_config(old).train.kl_weight == 1.0
    new = tiny(train={"kl_weight": 0.3}).to_dict()
    assert stored_config(new).train.kl_weight == 0.3
    assert RunConfig.from_dict(old).train.kl_weight == 0.1  # a user's config without it gets the default
