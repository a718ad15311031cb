"""Named setups: single-run presets (RunConfig) and grids (GridSpec).

PRESETS["quick-mnist"]         -> RunConfig
PRESETS["quick-paper"]         -> GridSpec (methods x setups x seeds)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from core.errors import ConfigError
from core.models.registry import FAMILIES
from core.runs.config import RunConfig

# Hubin & Storvik (2024) section 4 and Table 1 (LBBNN-SSP-MF). Prior (3): gamma ~ BetaBinomial(1, a_psi, b_psi) per
# weight and a Student-t slab t_{2 a_beta}(0, b_beta / a_beta), the four hyperparameters learned by
# empirical Bayes during 20 pre-training epochs, then frozen. Step sizes (Table 1): mu and rho 1e-4
# throughout; omega 1e-1 in pre-training, then 1e-4; a_psi, b_psi 1e-3 and a_beta, b_beta 1e-5 in
# pre-training. 250 epochs in all, batch 100, M = 1, the relaxed-Bernoulli (Concrete) estimator of
# section 3.3. Table 2 uses no post-training; Table A8 adds 50 epochs with the structure fixed.
PAPER_PRETRAIN_RATES = {
    "weights": 1e-4,
    "scales": 1e-4,
    "inclusion": 1e-1,
    "prior": 1e-3,
    "slab_prior": 1e-5,
    "likelihood": 1e-4,
}
PAPER_RATES = {
    "weights": 1e-4,
    "scales": 1e-4,
    "inclusion": 1e-4,
    "prior": 1e-3,
    "slab_prior": 1e-5,
    "likelihood": 1e-4,
}
PAPER_TRAIN = {
    "pretrain_epochs": 20,
    "epochs": 230,
    "posttrain_epochs": 0,
    "posttrain_structure": "mpm",
    "batch_size": 100,
    "mc_samples": 1,
    "empirical_bayes": True,
    "kl_weight": 1.0,
    "learning_rates": PAPER_RATES,
    "pretrain_learning_rates": PAPER_PRETRAIN_RATES,
}
PAPER_POSTTRAIN = {**PAPER_TRAIN, "posttrain_epochs": 50}
# The hyperparameters start at psi = e^-2 (Hubin & Storvik 2019's fixed choice: a_psi = 1, b_psi = e^2 - 1) and a
# Student-t slab with 2 degrees of freedom and scale 1 (a_beta = b_beta = 1).
PAPER_PRIOR = {
    "inclusion_prior": "beta-bernoulli",
    "beta_a": 1.0,
    "beta_b": math.exp(2.0) - 1.0,
    "slab": "student-t",
    "slab_a": 1.0,
    "slab_b": 1.0,
    "estimator": "relaxed-bernoulli",
}
PAPER_PRIOR_LOW_RANK = {
    **{k: v for k, v in PAPER_PRIOR.items() if k not in ("inclusion_prior", "beta_a", "beta_b")},
    "prior_inclusion": math.exp(-2.0),
}
# Hubin & Storvik's (2024) baselines: Adam at 1e-4 for every parameter, 250 epochs, no pre-/post-training.
PAPER_BASELINE_TRAIN = {
    "pretrain_epochs": 0,
    "epochs": 250,
    "posttrain_epochs": 0,
    "empirical_bayes": False,
    "learning_rates": {g: 1e-4 for g in PAPER_RATES},
}
QUICK_TRAIN = {"epochs": 3, "batch_size": 100}

# The fast recipe (docs/why-lbbnn-over-prunes.md): a deterministic warm start, then the LBBNN objective with the
# KL tempered by 0.05 (the ELBO itself converges to a far sparser and less accurate network than Hubin & Storvik's
# (2024) Table 2 reports). Gaussian slab N(0, 1), fixed psi = e^-2, local reparameterisation (the fused training
# path). FAST_GRID_TRAIN is the first schedule: batch 100, 3 warm-start epochs, 20 epochs, weights at 1e-3 and
# inclusion logits at 3e-3 (Table 2's quality after about 3 min of a 2-core CPU). The `fast` grid and fast-fmnist
# keep it, so the tables built from them and their run ids stay valid.
FAST_GRID_TRAIN = {
    "warm_start_epochs": 3,
    "epochs": 20,
    "kl_weight": 0.05,
    "batch_size": 100,
    "learning_rates": {"weights": 1e-3, "scales": 1e-3, "inclusion": 3e-3},
}
# fast-mnist takes fewer, cheaper steps (benchmarks/results/time_to_quality.md): with batches of 250 an epoch
# costs about 0.65 of one with batches of 100 (the elementwise passes over the weights and Adam's update are per
# step); a warm start at 3e-3 reaches the accuracy the batch-100 warm start had; the inclusion logits move at 2e-2,
# so the density reaches 0.08 in about three epochs; the step sizes decay by a cosine. With batches of 500 the
# accuracy dipped while the weights were pruned and one seed of three missed 0.981.
FAST_TRAIN = {
    "warm_start_epochs": 3,
    "warm_start_learning_rate": 3e-3,
    "epochs": 8,
    "kl_weight": 0.05,
    "batch_size": 250,
    "lr_schedule": "cosine",
    "learning_rates": {"weights": 2e-3, "scales": 2e-3, "inclusion": 2e-2},
}

# Recipes on the sparsity front (benchmarks/results/front_recipes.md has every point tried, with its curve).
# sparse-mnist: fast-mnist's warm start and cosine schedule with the KL tempered by 0.2 instead of 0.05, ramped in
# over 4 epochs, until the density is at most 0.0147 (target_density); the median probability model's weights are
# then post-trained with the structure fixed, which recovers accuracy the pruning cost. The slower the structure is
# chosen, the better it is (benchmarks/results/front_recipes.md): where the density crossed 0.0147, MED-MEA was
# 0.949 with the KL at 0.3 and no ramp, 0.975 with the ramp, 0.978 with the ramp to 0.2, and post-training took
# them to 0.978 (3 epochs), 0.980 and 0.982.
SPARSE_TRAIN = {
    **FAST_TRAIN,
    "kl_weight": 0.2,
    "kl_anneal_epochs": 4,
    "epochs": 20,
    "target_density": 0.0147,
    "posttrain_epochs": 4,
}
# islab-mnist: the input-skip LBBNN (every layer after the first also reads the inputs) on the published shape
# 784-600-600-10, trained on the ELBO (kl_weight 1, reached by a linear ramp over 4 epochs: the ELBO continued
# from a tempered fit is far more accurate than the ELBO from the warm start, benchmarks/results/elbo_solutions.md)
# after the fast warm start, at constant step sizes, until the density is at most 0.00067, then 12 post-training
# epochs with the structure fixed, their step sizes decayed by a cosine. The prior inclusion probability is
# 0.000335 (about e^-8): under e^-2 the ELBO's density levelled off at 0.00084 after 100 epochs, under e^-4 at
# 0.00082; under e^-8 it reached 0.00067 after 18 epochs (MED-MEA 0.9667), and the decayed post-training settled
# at 0.9674 where constant steps had ended at 0.9667 (0.9661-0.9675 from epoch to epoch). If the ELBO stops above
# the target, post-training keeps the most probable weights at 0.00067 (posttrain_density). Measurements:
# benchmarks/results/front_recipes.md.
ISLAB_HIDDEN = (600, 600)
ISLAB_PRIOR_INCLUSION = 0.000335
ISLAB_TRAIN = {
    **FAST_TRAIN,
    "kl_weight": 1.0,
    "kl_anneal_epochs": 4,
    "epochs": 40,
    "lr_schedule": "constant",
    "target_density": 0.00067,
    "posttrain_epochs": 12,
    "posttrain_lr_schedule": "cosine",
    "posttrain_density": 0.00067,
}


def _paper(dataset: str, posttrain: bool = False) -> RunConfig:
    return RunConfig(
        dataset=dataset,
        method="lbbnn",
        hidden=(400, 600),
        family_options=dict(PAPER_PRIOR),
        train=dict(PAPER_POSTTRAIN if posttrain else PAPER_TRAIN),
    )


def _fast(dataset: str, train: Mapping[str, Any] = FAST_TRAIN) -> RunConfig:
    return RunConfig(dataset=dataset, method="lbbnn", hidden=(400, 600), train=dict(train))


def _sparse(dataset: str) -> RunConfig:
    return RunConfig(dataset=dataset, method="lbbnn", hidden=(400, 600), train=dict(SPARSE_TRAIN))


def _islab(dataset: str) -> RunConfig:
    return RunConfig(
        dataset=dataset,
        method="lbbnn",
        hidden=ISLAB_HIDDEN,
        family_options={"input_skip": True, "prior_inclusion": ISLAB_PRIOR_INCLUSION},
        train=dict(ISLAB_TRAIN),
    )


def _quick(dataset: str) -> RunConfig:
    return RunConfig(dataset=dataset, method="lbbnn", hidden=(400, 600), train=dict(QUICK_TRAIN))


def _lenet(dataset: str) -> RunConfig:
    # Bleahu (2025): LeNet-300-100 with sparse variational dropout, a deterministic warm start, then KL annealing.
    return RunConfig(
        dataset=dataset,
        method="sparse-vd",
        hidden=(300, 100),
        train={
            "warm_start_epochs": 10,
            "epochs": 100,
            "kl_anneal_epochs": 50,
            "batch_size": 100,
            "kl_weight": 1.0,
            "learning_rates": {"weights": 1e-3, "scales": 1e-3},
        },
    )


# LeNet-5 as in Caffe (conv 20@5x5, max-pool 2, conv 50@5x5, max-pool 2, fc 500, fc 10: 431,080 weights), the
# network of Molchanov et al. (2017) and Louizos et al. (2017).
LENET5_CONV = ((20, 5), (50, 5))
LENET5_HIDDEN = (500,)


# The 60-minute recipe tried on the sparsity front (`lenet5 A` in benchmarks/results/front_recipes.md): sparse VD
# on the ELBO (kl_weight 1, ramped in over 2 epochs) after 2 deterministic warm-start epochs, batches of 250 (half
# the cost per image of batches of 100 here: benchmarks/results/lenet5_check_*.json), log sigma^2 at 1e-2, the step
# sizes decaying by a cosine, stopped at Molchanov et al.'s (2017) density 0.0036, then 2 post-training epochs with
# the structure fixed. It missed on density: 0.9918 at 0.0224 in 42 minutes (after its first epochs the ELBO
# pruned at most a fifth of the kept weights an epoch), so lenet5-mnist keeps a 200-epoch schedule (_lenet5).
LENET5_FRONT_TRAIN = {
    "warm_start_epochs": 2,
    "warm_start_learning_rate": 2e-3,
    "batch_size": 250,
    "epochs": 10,
    "kl_weight": 1.0,
    "kl_anneal_epochs": 2,
    "lr_schedule": "cosine",
    "learning_rates": {"weights": 1e-3, "scales": 1e-2},
    "target_density": 0.0036,
    "posttrain_epochs": 2,
}


def _lenet5(dataset: str) -> RunConfig:
    # The ELBO (kl_weight 1) after a deterministic warm start for 300 epochs (Molchanov et al. (2017) train 200),
    # with the steps decaying by a cosine (theirs decay linearly to zero), then the median probability model cut to
    # their density by log alpha and post-trained with the structure fixed. Six 200-epoch recipes on an H100
    # (benchmarks/results/front_recipes.md, `lenet5 GPU ...`): constant steps kept the posterior at density 0.018,
    # decaying ones took it to 0.0084 (steps 1e-3) and 0.0053 (weights 3e-3, log sigma^2 5e-2); these steps
    # (weights 1e-3, log sigma^2 5e-2) kept the most accuracy, 0.9928 at 0.0079, and gave the best 200-epoch cut,
    # 0.9920 at 0.0034 (`lenet5 GPU d-weights-1e-3`). Over 300 epochs the posterior reached 0.0060 and 0.0057
    # before the cut, and the cut 0.9932 at 0.00346 and 0.9922 at 0.00348 (seeds 0 and 1, an H200,
    # `lenet5 GPU w-1e-3-300`); log sigma^2's step at 1e-1 pruned past the target and lost accuracy (0.990 at
    # 0.0027). Batches of 250: about half the CPU cost per image of 100.
    return RunConfig(
        dataset=dataset,
        method="sparse-vd",
        hidden=LENET5_HIDDEN,
        conv=LENET5_CONV,
        train={
            "warm_start_epochs": 1,
            "epochs": 300,
            "kl_anneal_epochs": 1,
            "batch_size": 250,
            "kl_weight": 1.0,
            "lr_schedule": "cosine",
            "learning_rates": {"weights": 1e-3, "scales": 5e-2},
            "target_density": 0.0036,
            "posttrain_density": 0.0036,
            "posttrain_epochs": 10,
            "posttrain_lr_schedule": "cosine",
        },
    )


def _regression_1_64_1() -> RunConfig:
    # Bleahu (2025) section 4.3: one hidden layer of 64, 150 epochs without KL (here: a deterministic warm
    # start), then the KL annealed in over 250 epochs at learning rate 1e-2.
    return RunConfig(
        dataset="toy-sine-gaps",
        method="sparse-vd",
        hidden=(64,),
        train={
            "warm_start_epochs": 150,
            "epochs": 250,
            "kl_anneal_epochs": 250,
            "batch_size": 40,
            "kl_weight": 1.0,
            "learning_rates": {"weights": 1e-2, "scales": 1e-2, "likelihood": 1e-2},
        },
    )


# The UCI regression protocol (Hernandez-Lobato & Adams 2015; Ghosh, Yao & Doshi-Velez 2018): one hidden layer
# of 50 ReLU
# units (100 for protein), 20 train/test splits (5 for protein). What the MC-dropout reference tunes
# on a validation split (noise precision, regularisation) is learned here: a vague Gamma(1, 0.01)
# prior on the noise precision (the Gamma(6, 6) of Hernandez-Lobato & Adams 2015 says "noise sd ~ 1 target sd", worth 12
# pseudo-observations: on yacht it inflates the noise sd 3x, docs/uci-regression.md) with a
# variational Gamma posterior, started at the residual sd of a least-squares fit, and weight priors
# scaled by fan-in. Training length is a budget of about 6000 Adam steps per
# run (batch grows with the set); docs/uci-regression.md has the convergence measurements.
UCI_DATASETS = (
    "uci-boston",
    "uci-concrete",
    "uci-energy",
    "uci-kin8nm",
    "uci-naval",
    "uci-power",
    "uci-protein",
    "uci-wine",
    "uci-yacht",
)
# (batch size, epochs) per set: ~6000 steps each, kin8nm ~21000, protein ~26000. kin8nm: at 100
# epochs the training objective was still falling (split 0, last
# 10 epochs: lbbnn 0.477 against 0.446 after 400, sparse-vd 0.399 against 0.362; docs/uci-regression.md).
# protein: at 40 epochs likewise (splits 0-2, final loss 40 -> 160 epochs: concrete dropout 1.057 -> 1.022,
# fnn 1.054 -> 1.006, bnn 1.156 -> 1.140; docs/uci-regression.md section 9).
UCI_SCHEDULES = {
    "uci-boston": (32, 400),
    "uci-concrete": (32, 200),
    "uci-energy": (32, 300),
    "uci-kin8nm": (128, 400),
    "uci-naval": (128, 80),
    "uci-power": (128, 80),
    "uci-protein": (256, 160),
    "uci-wine": (64, 200),
    "uci-yacht": (32, 600),
}
UCI_NOISE = {
    "noise": "variational",
    "precision_prior": "gamma",
    "precision_a": 1.0,
    "precision_b": 0.01,
    "noise_init": "data",
}
# Per-family options of the UCI grid (docs/uci-regression.md: why LBBNN needs these on small data).
UCI_FAMILY_OPTIONS: dict[str, dict[str, Any]] = {
    "lbbnn": {"prior_inclusion": 0.5, "bias_prior": "gaussian", "prior_scaling": "fan-in"},
    "bnn": {"prior_scaling": "fan-in"},
}
UCI_METHODS = ("lbbnn", "bnn", "horseshoe", "concrete-dropout", "sparse-vd")
# The mean-field families start from a deterministic net trained for a third of the epochs and
# anneal the KL in over the first third (Bleahu 2025's recipe): from a cold start the KL inflates
# the weight variances before the means have found the function (energy, bnn: test LL -1.75 ->
# -1.21; docs/uci-regression.md). Concrete dropout has point weights and trains from scratch.
UCI_COLD_START = ("concrete-dropout",)
# LBBNN: after the warm start every alpha is 0.9; at the default inclusion step size (3e-3) they
# move too slowly to reach 1 before the slab noise has wrecked the fit (energy: test LL -2.19);
# at 3e-2 they do (-0.82; either change alone: -2.19 / -2.20).
UCI_TRAIN_OVERRIDES: dict[str, dict[str, Any]] = {"lbbnn": {"learning_rates": {"inclusion": 3e-2}}}


def _uci_train(dataset: str, method: str) -> dict[str, Any]:
    batch_size, epochs = UCI_SCHEDULES[dataset]
    warm = 0 if method in UCI_COLD_START else epochs // 3
    # The UCI presets were measured with the ELBO (kl_weight 1), not the tempered default.
    # Step sizes decay to zero over the main phase (cosine): at a constant 1e-2 the last epochs bounce
    # around the optimum (split 0, test LL constant -> cosine: kin8nm lbbnn 1.100 -> 1.144, concrete
    # sparse-vd -3.136 -> -3.089, power bnn -2.878 -> -2.867; docs/uci-regression.md section 8).
    train = {
        "epochs": epochs,
        "batch_size": batch_size,
        "warm_start_epochs": warm,
        "kl_anneal_epochs": warm,
        "kl_weight": 1.0,
        "lr_schedule": "cosine",
    }
    if method in UCI_TRAIN_OVERRIDES:
        train.update(UCI_TRAIN_OVERRIDES[method])
    return train


def uci_splits(dataset: str) -> tuple[int, ...]:
    return tuple(range(5 if dataset == "uci-protein" else 20))


def _uci(dataset: str, split: int = 0, method: str = "lbbnn") -> RunConfig:
    hidden = (100,) if dataset == "uci-protein" else (50,)
    return RunConfig(
        dataset=dataset,
        split=split,
        method=method,
        hidden=hidden,
        family_options=dict(UCI_FAMILY_OPTIONS.get(method, {})),
        likelihood_options=dict(UCI_NOISE),
        train=_uci_train(dataset, method),
    )


@dataclass(frozen=True)
class GridSpec:
    """A grid of runs: every setup x every method x every seed (x every split of a UCI setup).

    setups: base configs by label (a dataset setup, e.g. "quick-mnist"); the method and seed are
    replaced per cell. method_overrides: per-method field changes (e.g. family_options, or a `train`
    table merged into the setup's training settings). splits: per setup label, the splits to run.
    """

    name: str
    setups: Mapping[str, RunConfig]
    methods: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    method_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    splits: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.setups:
            raise ConfigError(f"grid {self.name}: setups: give at least one dataset setup")
        if not self.methods:
            raise ConfigError(f"grid {self.name}: methods: give at least one method")
        if not self.seeds:
            raise ConfigError(f"grid {self.name}: seeds: give at least one seed")

    def cells(self) -> list[tuple[str, str, int, int | None, RunConfig]]:
        """(setup label, method, seed, split, config) for every run of the grid, in a stable order."""
        cells = []
        for label, base in self.setups.items():
            for method in self.methods:
                changes: dict[str, Any] = {"method": method, "family_options": {}}
                override = dict(self.method_overrides.get(method, {}))
                if "train" in override:
                    base_train = base.to_dict()["train"]
                    changes["train"] = {**base_train, **dict(override.pop("train"))}
                changes.update(override)
                for split in self.splits.get(label, (base.split,)):
                    for seed in self.seeds:
                        config = base.replace(**changes, seed=seed, split=split)
                        cells.append((label, config.method, seed, split, config))
        return cells

    def configs(self) -> list[RunConfig]:
        return [cell[-1] for cell in self.cells()]


PAPER_METHODS = ("lbbnn", "lbbnn-lfmvn", "bnn", "bnn-mixture", "concrete-dropout", "horseshoe", "fnn")


def _paper_grid() -> GridSpec:
    baseline = {"train": PAPER_BASELINE_TRAIN}
    return GridSpec(
        name="paper",
        setups={"paper-mnist": _paper("mnist"), "paper-fmnist": _paper("fashion-mnist")},
        methods=PAPER_METHODS,
        seeds=tuple(range(10)),
        # Hubin & Storvik (2024) section 4: the LBBNN variants use prior (3) (a grid cell keeps only the options given
        # here). The low-rank variant's Gaussian prior on the inclusion logits is centred on prior (3)'s mean
        # inclusion a_psi / (a_psi + b_psi) = e^-2, with the same Student-t slab.
        method_overrides={
            **{m: baseline for m in PAPER_METHODS if not m.startswith("lbbnn")},
            "lbbnn": {"family_options": dict(PAPER_PRIOR)},
            "lbbnn-lfmvn": {"family_options": PAPER_PRIOR_LOW_RANK},
        },
        description="Hubin & Storvik (2024) Tables 2-3: 10 repeats x 7 methods x MNIST/FMNIST, 250 epochs (GPU-sized)",
    )


def _quick_paper_grid() -> GridSpec:
    tiny = RunConfig(dataset="mnist-small", method="lbbnn", hidden=(400, 600), train={"epochs": 1, "batch_size": 100})
    return GridSpec(
        name="quick-paper",
        setups={"quick-mnist": tiny},
        methods=("lbbnn", "bnn", "fnn"),
        seeds=(0, 1),
        description="a laptop-sized version of the paper grid (about a minute)",
    )


# Every registered family that trains MNIST-sized networks: laplace's covariance is bounded by
# BNN_LAPLACE_MAX_WEIGHTS (5000 weights), far below the grid's 784-400-600-10 network.
ALL_FAMILIES = tuple(family for family in FAMILIES if family != "laplace")


def _fast_grid() -> GridSpec:
    setups = {"fast-mnist": _fast("mnist", FAST_GRID_TRAIN), "fast-fmnist": _fast("fashion-mnist", FAST_GRID_TRAIN)}
    return GridSpec(
        name="fast",
        setups=setups,
        methods=ALL_FAMILIES,
        seeds=(0, 1, 2),
        description="every family with the fast recipe's schedule on full MNIST and Fashion-MNIST, "
        "3 seeds (about 3 min a run on a 2-core CPU)",
    )


def _uci_grid() -> GridSpec:
    # The setups carry no family-specific training settings (those are method overrides), so each
    # family's run ids depend on its own settings only.
    setups = {name: _uci(name, method="bnn").replace(method="lbbnn", family_options={}) for name in UCI_DATASETS}
    # Per-method options; the schedule's warm start is the same length for every set (a third of
    # its epochs) except for the cold-start families, so one override per method suffices.
    overrides = {method: {"family_options": dict(UCI_FAMILY_OPTIONS.get(method, {}))} for method in UCI_METHODS}
    for method in UCI_COLD_START:
        overrides[method]["train"] = {"warm_start_epochs": 0, "kl_anneal_epochs": 0}
    for method, train in UCI_TRAIN_OVERRIDES.items():
        overrides[method]["train"] = {**overrides[method].get("train", {}), **train}
    return GridSpec(
        name="uci",
        setups=setups,
        methods=UCI_METHODS,
        seeds=(0,),
        method_overrides=overrides,
        splits={name: uci_splits(name) for name in UCI_DATASETS},
        description="UCI regression protocol: 20 splits (5 for protein) per dataset, 5 families; "
        "table: python -m benchmarks.uci_table render",
    )


def _build_presets() -> dict[str, RunConfig | GridSpec]:
    builders = {
        "paper-mnist": lambda: _paper("mnist"),
        "paper-fmnist": lambda: _paper("fashion-mnist"),
        "paper-mnist-posttrain": lambda: _paper("mnist", posttrain=True),
        "paper-fmnist-posttrain": lambda: _paper("fashion-mnist", posttrain=True),
        "fast-mnist": lambda: _fast("mnist"),
        "fast-fmnist": lambda: _fast("fashion-mnist", FAST_GRID_TRAIN),
        "sparse-mnist": lambda: _sparse("mnist"),
        "islab-mnist": lambda: _islab("mnist"),
        "quick-mnist": lambda: _quick("mnist-small"),
        "quick-fmnist": lambda: _quick("fashion-mnist-small"),
        "lenet-300-100": lambda: _lenet("mnist"),
        "lenet-300-100-mnist": lambda: _lenet("mnist"),
        "lenet-300-100-fmnist": lambda: _lenet("fashion-mnist"),
        "lenet5-mnist": lambda: _lenet5("mnist"),
        "regression-1-64-1": _regression_1_64_1,
        **{name: (lambda name=name: _uci(name)) for name in UCI_DATASETS},  # split 0; the grid runs all
        "quick-paper": _quick_paper_grid,
        "paper": _paper_grid,
        "fast": _fast_grid,
        "uci": _uci_grid,
    }
    return {name: build() for name, build in builders.items()}


PRESETS: dict[str, RunConfig | GridSpec] = _build_presets()

_PAPER_TEXT = (
    "Hubin & Storvik 2024 {table}: LBBNN-SSP-MF with prior (3) (Beta-Binomial(1, a_psi, b_psi) inclusion, "
    "Student-t "
    "slab), empirical Bayes in 20 pre-training epochs, Table 1 step sizes, 250 epochs, relaxed-Bernoulli "
    "(Concrete) estimator{post}"
)
_FAST_TEXT = (
    "fast recipe on {data}: {schedule} of LBBNN with the KL "
    "tempered by 0.05 (a tempered objective, not the ELBO: see docs/why-lbbnn-over-prunes.md); "
    "Bernoulli(e^-2) prior, N(0, 1) slab, local reparameterisation"
)
_FAST_SCHEDULE = (
    "batches of 250, 3 deterministic warm-start epochs, then 8 epochs with the step sizes decaying by a cosine"
)
_FAST_GRID_SCHEDULE = "batches of 100, 3 deterministic warm-start epochs, then 20 epochs"
PRESET_DESCRIPTIONS: dict[str, str] = {
    "paper-mnist": _PAPER_TEXT.format(table="Table 2 (MNIST)", post="; no post-training"),
    "paper-fmnist": _PAPER_TEXT.format(table="Table 3 (Fashion-MNIST)", post="; no post-training"),
    "paper-mnist-posttrain": _PAPER_TEXT.format(
        table="Table A8 (MNIST)",
        post=", then 50 post-training epochs on the median probability model (only the MED modes exist afterwards)",
    ),
    "paper-fmnist-posttrain": _PAPER_TEXT.format(
        table="Table A9 (Fashion-MNIST)",
        post=", then 50 post-training epochs on the median probability model (only the MED modes exist afterwards)",
    ),
    "fast-mnist": _FAST_TEXT.format(data="full MNIST", schedule=_FAST_SCHEDULE),
    "fast-fmnist": _FAST_TEXT.format(data="full Fashion-MNIST", schedule=_FAST_GRID_SCHEDULE),
    "sparse-mnist": "recipe on the sparsity front: fast-mnist's warm start and schedule with LBBNN's KL tempered by "
    "0.2 (a tempered objective, not the ELBO; ramped in over 4 epochs), stopped at density 0.0147 "
    "(target_density), then 4 post-training epochs on the median probability model. Aims at Molchanov et al.'s "
    "(2017) sparse VD LeNet-300-100 point, "
    "0.9808 at density 0.0147, with a fully connected 784-400-600-10 network",
    "islab-mnist": "recipe on the sparsity front: the input-skip LBBNN (input_skip; every layer after the first also "
    "reads the inputs), 784-600-600-10, prior inclusion probability 0.000335 (about e^-8), trained on the ELBO "
    "(kl_weight 1, ramped in over 4 epochs; constant step sizes, up to 40 epochs) after fast-mnist's warm start, "
    "stopped at density 0.00067 (target_density), then 12 post-training epochs at cosine-decayed step sizes on the "
    "median probability model (cut to 0.00067 if it is denser: posttrain_density). Aims at the input-skip LBBNN "
    "of Hubin, Storvik, Skaaret-Lund et al.: 0.967 at active-path density 0.00067",
    "quick-mnist": "3 epochs of LBBNN with the default settings on the bundled MNIST subset",
    "quick-fmnist": "3 epochs of LBBNN with the default settings on the bundled Fashion-MNIST subset",
    "lenet-300-100": "Bleahu (2025): LeNet-300-100 with sparse variational dropout on MNIST, 10 deterministic "
    "warm-start "
    "epochs, then 100 epochs with the KL annealed in over 50",
    "lenet-300-100-mnist": "the same as lenet-300-100",
    "lenet-300-100-fmnist": "lenet-300-100 on Fashion-MNIST",
    "lenet5-mnist": "Molchanov et al. (2017): LeNet-5 (Caffe: conv 20@5x5, max-pool, conv 50@5x5, max-pool, fc "
    "500, fc 10; 431k weights) with sparse variational dropout on full MNIST, trained on the ELBO "
    "(kl_weight 1, log-uniform prior) for 300 epochs (they train 200) after one deterministic warm-start epoch, "
    "batches of 250, the step sizes decaying by a cosine; then the median probability model cut to density 0.0036 "
    "by log alpha and post-trained 10 epochs with the structure fixed (a cut, not the ELBO's own density). Target: "
    "their 0.9925 accuracy at density 0.0036 (Louizos et al. 2017: 0.990 at 0.0064); the recipe's measured "
    "points are in benchmarks/results/front_recipes.md. Hours on a CPU, minutes on a GPU with "
    "train.cuda_graphs. --method lbbnn, bnn or fnn and --dataset any image set keep the shape",
    "regression-1-64-1": "Bleahu (2025) section 4.3: a 1-64-1 sparse-VD MLP on toy-sine-gaps, warm start then "
    "KL annealing",
}


def describe_preset(name: str) -> str:
    preset = get_preset(name)
    if isinstance(preset, GridSpec):
        return preset.description
    if name in PRESET_DESCRIPTIONS:
        return PRESET_DESCRIPTIONS[name]
    return f"{preset.label()}"


def get_preset(name: str) -> RunConfig | GridSpec:
    import difflib

    if name in PRESETS:
        return PRESETS[name]
    close = difflib.get_close_matches(name, list(PRESETS), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"preset: unknown {name!r}.{hint} Known: {', '.join(PRESETS)}")
