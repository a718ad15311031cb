"""One training loop for every family.

Objective (the standard ELBO, one minibatch convention everywhere): for a
minibatch B of a training set of size N, minimise

    loss = -(1/|B|) sum_{i in B} (1/M) sum_m log p(y_i | x_i, w_m) + kl_weight * KL(q || p) / N

which is -ELBO / N in expectation. (Bleahu 2025 divides the KL by N^2; that is a
bug we do not copy.) kl_weight follows a linear annealing schedule from 0 to 1
over `kl_anneal_epochs` and is 1 afterwards.

Phases: optional warm start (a deterministic net of the same shape trained
first, its weights copied into the variational means), pre-training (own
learning rates; empirical Bayes on the prior hyperparameters if asked),
main training, and post-training with the structure fixed (Hubin & Storvik 2024 section
3.4.5): "mpm" fixes the median probability model, "alpha" freezes the
inclusion probabilities.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import torch
from torch import Tensor

from core import step_graphs, validate
from core.cpu_settings import enable_flush_denormals
from core.enums import LearningRateSchedule, PosttrainStructure
from core.errors import ConfigError, TrainingCancelled, TrainingDivergedError
from core.models.network import BayesianMLP
from core.scale_head import check_scale_head
from core.snapshots import SnapshotRecorder, TrainingSnapshots
from core.validate import MAX_LEARNING_RATE

# Flushing subnormals is on for the whole process from the moment training code is loaded
# (every thread started afterwards inherits it) and is never switched off.
enable_flush_denormals()

# Defaults tuned for short runs (a few epochs on 10k images of mnist-small):
# with the inclusion logits at the weights' step size (1e-2) nearly every alpha is
# pulled below 0.5 within three epochs and the median probability model
# disconnects; at 3e-3 the density falls steadily (0.43 -> 0.17 over six
# epochs, MPM accuracy 0.92). The paper's 250-epoch schedule (Hubin & Storvik (2024) Table 1)
# is the `paper-*` presets' business.
DEFAULT_LEARNING_RATES = {
    "weights": 1e-2,
    "scales": 1e-2,
    "inclusion": 3e-3,
    "prior": 1e-3,  # inclusion-prior hyperparameters (psi, or a_psi and b_psi) in empirical Bayes
    # slab hyperparameters (sigma_beta^2, or a_beta and b_beta); Hubin & Storvik (2024) Table 1: 1e-5
    "slab_prior": 1e-3,
    "likelihood": 1e-2,
}
# Hubin & Storvik (2024) Table 1 raises the inclusion step size during pre-training.
DEFAULT_PRETRAIN_LEARNING_RATES = {**DEFAULT_LEARNING_RATES, "inclusion": 1e-2}
POSTTRAIN_STRUCTURES = tuple(PosttrainStructure)

# The default objective is tempered: the KL enters with weight 0.1. With the ELBO itself (kl_weight=1)
# the mean-field optimum of an LBBNN keeps almost nothing (full MNIST after a warm start: density
# 0.004 after 15 epochs, MED-MEA 0.72 against ALL-MEA 0.97; mnist-small: density 0.012, MED-MEA 0.85
# against ALL-MEA 0.94), and small regression sets fit a flat line; see docs/why-lbbnn-over-prunes.md.
DEFAULT_KL_WEIGHT = 0.1
# Default length of training: about this many optimiser steps, whatever the dataset's size.
DEFAULT_STEPS = 3000
MIN_DEFAULT_EPOCHS, MAX_DEFAULT_EPOCHS = 5, 3000
# Adam's step size for the deterministic warm-start net. 1e-3 suits batches of 100; larger batches take
# fewer steps an epoch and can take larger ones (the fast-mnist recipe: batch 500 at 3e-3).
WARM_START_LEARNING_RATE = 1e-3


def default_epochs(n_train: int, batch_size: int) -> int:
    """Epochs of about DEFAULT_STEPS steps: 5 on full MNIST, 30 on a 10k subset, 3000 on 40 points."""
    steps_per_epoch = max(1, math.ceil(int(n_train) / max(1, int(batch_size))))
    return int(min(MAX_DEFAULT_EPOCHS, max(MIN_DEFAULT_EPOCHS, math.ceil(DEFAULT_STEPS / steps_per_epoch))))


def check_learning_rate(rate: Any, name: str) -> float:
    """A rate given in a config is a number (never text or a flag), under core.validate's one rule for
    rates; config tables and files (core.runs.config) and TrainConfig both come through here."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise ConfigError(
            f"{name}: must be a number above 0 and at most {MAX_LEARNING_RATE:g}, got {validate.shown(rate)}"
        )
    return validate.learning_rate(rate, name)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int | None = None  # None: default_epochs(training-set size, batch_size), filled in before training
    pretrain_epochs: int = 0
    posttrain_epochs: int = 0
    posttrain_structure: PosttrainStructure = PosttrainStructure.MPM
    batch_size: int = 100
    learning_rates: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LEARNING_RATES))
    pretrain_learning_rates: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRETRAIN_LEARNING_RATES))
    empirical_bayes: bool = False
    mc_samples: int = 1
    # None: 0, except where RunConfig resolves a dataset-dependent default (small regression sets).
    kl_anneal_epochs: int | None = None
    # A tempered objective: the KL's weight after annealing (1 is the ELBO).
    kl_weight: float = DEFAULT_KL_WEIGHT
    warm_start_epochs: int = 0
    warm_start_learning_rate: float = WARM_START_LEARNING_RATE
    # Mean first: the first this many warm-start epochs fit the mean output alone under a fixed unit noise
    # scale (standardised targets), the rest of the warm start the full likelihood. A heteroscedastic
    # net trained jointly from the start can explain its residuals by a wide scale before the mean has
    # found the function (energy, lbbnn+het split 0: RMSE 1.68 against 0.53 homoscedastic). 0: off.
    warm_start_mean_epochs: int = 0
    # torch.compile the families' hot kernels (LBBNN): ~20 s once, then faster epochs.
    compile: bool = False
    # Replay each training step as one CUDA graph (core/step_graphs.py): on a GPU these small nets' steps are
    # bound by kernel launches. CUDA devices only. A replay takes the eager steps of the same optimiser, but
    # that optimiser (Adam with its step sizes on the device) rounds differently from the plain fused one
    # (6e-8 apart after four epochs, tests/test_step_graphs.py), so the option is part of the run's id when on.
    cuda_graphs: bool = False
    # The main phase's step sizes: constant, or a cosine decay to zero over its epochs (every group),
    # so the last epochs average out the minibatch noise instead of bouncing around at full step.
    lr_schedule: LearningRateSchedule = LearningRateSchedule.CONSTANT
    # The post-training phase's step sizes, likewise (its own phase length). At constant steps the
    # post-trained islab-mnist's MED-MEA moved by up to 0.0014 from one epoch to the next (0.9661-0.9675):
    # a decay lets its last epochs settle instead of ending wherever the last minibatches left it.
    posttrain_lr_schedule: LearningRateSchedule = LearningRateSchedule.CONSTANT
    # Train to a target density (as the R package LBBNN's min_density): the main phase stops after the
    # first epoch whose end-of-epoch density (the median probability model's: weights kept at the
    # family's default threshold over all weights, each record's "density") is at most this, in
    # (0, 1]. Pre-training never stops early; post-training follows as configured. None: every epoch.
    target_density: float | None = None
    # Post-train at most this density: the structure fixed for post-training keeps, of the median
    # probability model's weights, those with the largest statistic (inclusion probability for LBBNN), at
    # most this fraction of all weights (biases included, as every density). None: the whole mpm. Where
    # the ELBO levels off above a density target (islab-mnist: 0.00084-0.00086 against 0.00067), the cut
    # reaches it and post-training lets the kept weights take over the work of the dropped ones.
    posttrain_density: float | None = None
    # A noise-scale head on a frozen homoscedastic mean (a heteroscedastic run of a SCALE_HEAD_FAMILIES family):
    # None is off. A table {epochs: E, likelihood_options: {...}}: first the homoscedastic run of the same
    # settings (Gaussian likelihood with those noise options, this config without scale_head) is trained, or
    # loaded from the run store, then E epochs (the main phase's step sizes and schedule) fit only the
    # output layer's scale row, every parameter of the mean path frozen, so the run predicts the
    # homoscedastic run's means bit for bit. Trained jointly, the scale head absorbs residuals the mean
    # should fit (protein, concrete-dropout+het split 2: RMSE 11.6 against 4.2 homoscedastic).
    scale_head: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        def check(ok: bool, name: str, message: str) -> None:
            if not ok:
                raise ConfigError(f"{name}: {message}")

        check(self.epochs is None or self.epochs >= 0, "epochs", f"must be >= 0, got {self.epochs}")
        check(self.pretrain_epochs >= 0, "pretrain_epochs", f"must be >= 0, got {self.pretrain_epochs}")
        check(self.posttrain_epochs >= 0, "posttrain_epochs", f"must be >= 0, got {self.posttrain_epochs}")
        check(
            self.epochs is None or self.epochs + self.pretrain_epochs + self.posttrain_epochs > 0,
            "epochs",
            "at least one epoch of training is needed",
        )
        object.__setattr__(
            self, "posttrain_structure", PosttrainStructure.parse(self.posttrain_structure, "posttrain_structure")
        )
        for name in ("lr_schedule", "posttrain_lr_schedule"):
            object.__setattr__(self, name, LearningRateSchedule.parse(getattr(self, name), name))
        check(isinstance(self.cuda_graphs, bool), "cuda_graphs", f"must be true or false, got {self.cuda_graphs!r}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.mc_samples >= 1, "mc_samples", f"must be >= 1, got {self.mc_samples}")
        check(
            self.kl_anneal_epochs is None or self.kl_anneal_epochs >= 0,
            "kl_anneal_epochs",
            f"must be >= 0, got {self.kl_anneal_epochs}",
        )
        check(
            isinstance(self.kl_weight, (int, float)) and math.isfinite(self.kl_weight) and 0 < self.kl_weight <= 1,
            "kl_weight",
            f"must lie in (0, 1] (1 is the ELBO; below 1 tempers the KL), got {self.kl_weight!r}",
        )
        check(self.warm_start_epochs >= 0, "warm_start_epochs", f"must be >= 0, got {self.warm_start_epochs}")
        check_learning_rate(self.warm_start_learning_rate, "warm_start_learning_rate")
        check(
            0 <= self.warm_start_mean_epochs <= self.warm_start_epochs,
            "warm_start_mean_epochs",
            f"must lie between 0 and warm_start_epochs ({self.warm_start_epochs}), got {self.warm_start_mean_epochs}",
        )
        for name in ("target_density", "posttrain_density"):
            target = getattr(self, name)
            check(
                target is None
                or (
                    isinstance(target, (int, float))
                    and not isinstance(target, bool)
                    and math.isfinite(target)
                    and 0 < target <= 1
                ),
                name,
                f"must be a number in (0, 1] (or unset), got {target!r}",
            )
        check(
            self.posttrain_density is None or self.posttrain_epochs > 0,
            "posttrain_density",
            "needs posttrain_epochs > 0 (it sets the structure post-training fixes)",
        )
        check(
            self.posttrain_density is None or self.posttrain_structure is PosttrainStructure.MPM,
            "posttrain_density",
            'needs posttrain_structure "mpm" (it cuts the structure that post-training fixes)',
        )
        if self.scale_head is not None:
            object.__setattr__(self, "scale_head", check_scale_head(self.scale_head))
        for label, rates in (
            ("learning_rates", self.learning_rates),
            ("pretrain_learning_rates", self.pretrain_learning_rates),
        ):
            unknown = sorted(set(rates) - set(DEFAULT_LEARNING_RATES))
            check(not unknown, label, f"unknown group(s) {unknown}; groups are {', '.join(DEFAULT_LEARNING_RATES)}")
            for group, rate in rates.items():
                check_learning_rate(rate, f"{label}.{group}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def resolved(self, n_train: int, kl_anneal_fraction: float = 0.0) -> "TrainConfig":
        """This config with the defaults filled in for a training set of n_train examples: the number of
        epochs, and a KL annealed in over `kl_anneal_fraction` of them where none was given."""
        config = self
        if config.epochs is None:
            config = replace(config, epochs=default_epochs(n_train, config.batch_size))
        if config.kl_anneal_epochs is None:
            config = replace(config, kl_anneal_epochs=int(round(config.epochs * kl_anneal_fraction)))
        return config

    def total_epochs(self) -> int:
        """Every epoch of every phase (warm start and a scale head's stages included); the epochs must be
        resolved."""
        head = 0 if self.scale_head is None else self.scale_head["epochs"]
        return int(self.warm_start_epochs + self.pretrain_epochs + (self.epochs or 0) + self.posttrain_epochs + head)

    def mean_stage(self) -> "TrainConfig":
        """The training of a scale head's first stage: this config without scale_head."""
        return replace(self, scale_head=None)


@dataclass
class TrainResult:
    history: list[dict[str, Any]]
    seconds: float
    snapshots: TrainingSnapshots | None = None  # one per history record (core/snapshots.py)
    posterior_fit: dict[str, float] = field(default_factory=dict)  # what a network-level posterior's fit found

    @property
    def seconds_per_epoch(self) -> float:
        epochs = [h for h in self.history if h["phase"] != "warm-start"]
        return sum(h["seconds"] for h in epochs) / max(len(epochs), 1)


ProgressCallback = Callable[[dict[str, Any]], None]


def _make_optimizer(model: BayesianMLP, rates: dict[str, float], capturable: bool = False) -> torch.optim.Optimizer:
    # Groups with the same step size share one optimiser group: Adam's update of a tensor does not
    # depend on its group, and each group costs a fused-kernel call and a Python loop per step.
    by_rate: dict[float, dict[str, Any]] = {}
    for name, params in model.parameter_groups().items():
        params = [p for p in params if p.requires_grad]
        if params:
            rate = rates.get(name, DEFAULT_LEARNING_RATES[name])
            by_rate.setdefault(rate, {"params": [], "lr": rate, "base_lr": rate})["params"] += params
    return _adam(by_rate.values(), capturable=capturable)


# Device types whose Adam has the fused kernel (several times faster than the
# per-tensor loop on CPU and on CUDA). torch checks this only at the first step.
FUSED_ADAM_DEVICES = ("cpu", "cuda", "mps", "xpu")


def _adam(params, capturable: bool = False) -> torch.optim.Optimizer:
    """Adam, fused where the device has the kernel. capturable: safe to replay in a CUDA graph (its step
    counts and step sizes live on the device; core/step_graphs.py), the fused kernel alone."""
    groups = list(params)
    device_types = {p.device.type for group in groups for p in group["params"]}
    if capturable:
        device = next(p.device for group in groups for p in group["params"])
        for group in groups:  # a step size a replay reads from the device, so that a schedule can change it
            group["lr"] = torch.tensor(float(group["lr"]), device=device)
        return torch.optim.Adam(groups, fused=True, capturable=True)
    if device_types <= set(FUSED_ADAM_DEVICES):
        try:
            return torch.optim.Adam(groups, fused=True)
        except (RuntimeError, TypeError, ValueError):  # a build without the fused kernel
            pass
    return torch.optim.Adam(groups, foreach=True)


def _is_cancelled(cancel: Any) -> bool:
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return cancel.is_set()
    return bool(cancel())


def train(
    model: BayesianMLP,
    x_train: Tensor,
    y_train: Tensor,
    config: TrainConfig,
    seed: int = 0,
    progress: ProgressCallback | None = None,
    cancel: Any = None,
    snapshots: bool = True,
    mean_model: BayesianMLP | None = None,
    mean_history: list[dict[str, Any]] | None = None,
) -> TrainResult:
    """Train `model` in place. x_train and y_train should already be on the model's device.

    With `config.scale_head` the model is heteroscedastic and trains in two stages (TrainConfig.scale_head):
    `mean_model` is the trained homoscedastic first stage and `mean_history` its records (core.runs.training
    passes the stored run); without them the first stage is trained here, from the initial values a run of
    its own config starts from. Such a run records no snapshots (its history starts with the first stage's).

    `cancel` is a threading.Event or a callable; it is checked every minibatch.
    Raises TrainingDivergedError on a NaN/Inf loss, TrainingCancelled on cancel.
    `snapshots` records the statistic's histograms and densities after every epoch (TrainResult.snapshots).
    Each epoch's record (history entry and progress argument) has the data term
    averaged over the epoch's minibatches and the KL (total and per layer) at the
    end of the epoch: steps take the KL's gradient, its value is read once.
    """
    device = model.device
    x_train, y_train = x_train.to(device), y_train.to(device)
    n = x_train.shape[0]
    if n == 0:
        raise ConfigError("training data: the training set is empty")
    if x_train.shape[1] != model.config.in_features:
        raise ConfigError(
            f"training data: inputs have {x_train.shape[1]} features, the model expects {model.config.in_features}"
        )
    config = config.resolved(n)
    if config.cuda_graphs and device.type not in step_graphs.CUDA_GRAPH_DEVICES:
        raise ConfigError(
            f"train.cuda_graphs: replays each step as a CUDA graph and needs a CUDA device; this run trains on "
            f"{device.type}. Leave it off (false) here."
        )
    if config.scale_head is not None:  # two stages (core/scale_head.py)
        from core.scale_head import train_scale_head

        return train_scale_head(model, x_train, y_train, config, seed, progress, cancel, mean_model, mean_history)
    history: list[dict[str, Any]] = []
    started = time.perf_counter()
    # (a meta-device model has no values to record)
    recorder = SnapshotRecorder(model, config.total_epochs()) if snapshots and device.type != "meta" else None

    def finish_epoch(record: dict[str, Any]) -> None:
        history.append(record)
        if recorder is not None:
            recorder.record(model, record)
        if progress is not None:
            progress(dict(record, elapsed=time.perf_counter() - started))

    enable_flush_denormals()  # for this thread; never turned off (core/cpu_settings.py)
    # Every draw comes from this run's own generators, never torch's global one,
    # which concurrent trainings in one process (dashboard sessions) would share.
    noise_generator = run_generator(device, seed)
    with model.noise_from(noise_generator):
        batch_generator = torch.Generator(device="cpu").manual_seed(seed)

        def run_phase(phase: str, epochs: int, rates: dict[str, float], epoch_offset: int) -> None:
            optimizer = _make_optimizer(model, rates, capturable=config.cuda_graphs)
            step = _steps(model, optimizer, x_train, y_train, config, noise_generator)
            schedule = {"train": config.lr_schedule, "posttrain": config.posttrain_lr_schedule}.get(phase)
            decay = schedule is not None and schedule is not LearningRateSchedule.CONSTANT
            for epoch in range(epochs):
                global_epoch = epoch_offset + epoch
                if decay:
                    factor = learning_rate_factor(schedule, epoch, epochs)
                    for group in optimizer.param_groups:
                        set_learning_rate(group, group["base_lr"] * factor)
                kl_weight = config.kl_weight
                if config.kl_anneal_epochs and phase != "posttrain":
                    kl_weight *= min(1.0, (global_epoch + 1) / config.kl_anneal_epochs)
                record = _run_epoch(
                    model, step, x_train, config, kl_weight, batch_generator, cancel, phase, global_epoch
                )
                if decay:
                    record["learning_rate_factor"] = factor
                reached = (
                    phase == "train"
                    and config.target_density is not None
                    and record["density"] <= config.target_density
                )
                if reached:
                    record["target_density_reached"] = True
                finish_epoch(record)
                if reached:  # the median probability model is as sparse as asked: stop the main phase
                    break

        for layer in model.layers:
            layer.use_compiled_kernels(config.compile)
        model.likelihood.initialise_from_data(x_train, y_train)  # noise_init="data"; a no-op otherwise
        if config.warm_start_mean_epochs and getattr(model.likelihood, "name", None) not in MEAN_FIRST_LIKELIHOODS:
            raise ConfigError(
                f"warm_start_mean_epochs: a mean-first warm start needs a Gaussian likelihood "
                f"({' or '.join(MEAN_FIRST_LIKELIHOODS)}), not {getattr(model.likelihood, 'name', '?')}"
            )
        if config.warm_start_epochs:
            _warm_start(model, x_train, y_train, config, seed, batch_generator, noise_generator, cancel, finish_epoch)
        offset = 0
        if config.pretrain_epochs:
            _set_empirical_bayes(model, config.empirical_bayes)
            run_phase("pretrain", config.pretrain_epochs, config.pretrain_learning_rates, offset)
            _set_empirical_bayes(model, False)
            offset += config.pretrain_epochs
        if config.epochs:
            run_phase("train", config.epochs, config.learning_rates, offset)
            offset += config.epochs
        if config.posttrain_epochs:
            with torch.no_grad():
                masks = model.keep_masks()
                if config.posttrain_density is not None:
                    masks = model.keep_masks_at_density(config.posttrain_density)
            for layer, mask in zip(model.layers, masks):
                if config.posttrain_structure is PosttrainStructure.MPM:
                    layer.fix_structure(mask)
                else:
                    for param in layer.parameter_groups().get("inclusion", []):
                        param.requires_grad_(False)
            run_phase("posttrain", config.posttrain_epochs, config.learning_rates, offset)
        # A network-level posterior (laplace) is fitted at the trained weights: milliseconds on the toys.
        posterior_fit = model.fit_posterior(x_train, y_train) if device.type != "meta" else {}
    return TrainResult(
        history=history,
        seconds=time.perf_counter() - started,
        snapshots=None if recorder is None else recorder.result(),
        posterior_fit=posterior_fit,
    )


def learning_rate_factor(schedule: LearningRateSchedule | str, epoch: int, epochs: int) -> float:
    """The multiplier of the base step sizes during epoch `epoch` (0-based) of a phase of `epochs`:
    1 throughout for constant; for cosine 0.5 (1 + cos(pi epoch / epochs)), 1 in the first epoch
    and above zero in the last, so every epoch takes steps."""
    if LearningRateSchedule.parse(schedule, "lr_schedule") is LearningRateSchedule.CONSTANT or epochs <= 0:
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))


def run_generator(device: torch.device, seed: int) -> torch.Generator | None:
    """A generator on `device` seeded with `seed`: the same stream torch.manual_seed(seed) gave
    the global generator of that device. None on devices without generators (meta), whose
    draws have no values."""
    if device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(int(seed))


def _set_empirical_bayes(model: BayesianMLP, enabled: bool) -> None:
    for layer in model.layers:
        layer.set_empirical_bayes(enabled)


def set_learning_rate(group: dict[str, Any], rate: float) -> None:
    """An optimiser group's step size; a capturable optimiser's lives on the device, where a replayed
    step reads it, and is overwritten in place."""
    if isinstance(group["lr"], Tensor):
        group["lr"].fill_(rate)
    else:
        group["lr"] = rate


def _steps(model, optimizer, x_train: Tensor, y_train: Tensor, config: TrainConfig, generator) -> Callable:
    """The phase's step: (row index, KL scale) -> the data term on the device. Eager, or with
    config.cuda_graphs replayed as one CUDA graph per phase (core/step_graphs.py)."""

    def body(index: Tensor, kl_scale: Any) -> Tensor:
        x, y = x_train.index_select(0, index), y_train.index_select(0, index)
        return _training_step(model, optimizer, x, y, config.mc_samples, kl_scale)

    if not config.cuda_graphs:
        return body
    backend = step_graphs.graph_backend(x_train.device, generator)
    return step_graphs.ReplayedSteps(body, config.batch_size, x_train.device, backend)


def _run_epoch(model, step, x_train, config, kl_weight, batch_generator, cancel, phase, epoch) -> dict[str, Any]:
    model.train()
    n = x_train.shape[0]
    epoch_start = time.perf_counter()
    order = torch.randperm(n, generator=batch_generator).to(x_train.device)
    data_sum = torch.zeros((), device=x_train.device)
    n_batches = 0
    for start in range(0, n, config.batch_size):
        if _is_cancelled(cancel):
            raise TrainingCancelled(f"training cancelled during epoch {epoch + 1}")
        data_sum += step(order[start : start + config.batch_size], kl_weight / n)
        n_batches += 1
    data_term = (data_sum / n_batches).item()  # one device sync per epoch
    with torch.no_grad():
        kl_per_layer = [float(layer.kl()) for layer in model.layers]
        noise_kl = model.likelihood.kl()
    kl_value = sum(kl_per_layer) + (0.0 if noise_kl is None else float(noise_kl))  # at the end of the epoch
    if not (math.isfinite(data_term) and math.isfinite(kl_value)):
        raise TrainingDivergedError(
            f"the loss became {'NaN' if math.isnan(data_term + kl_value) else 'infinite'} in epoch {epoch + 1} "
            f"({phase}): data term {data_term}, KL {kl_value}. Likely causes: a learning rate too large for "
            f"this model, or a prior variance too small; lower the learning rates and train again."
        )
    with torch.no_grad():
        density = model.density(model.keep_masks())
    record = {
        "epoch": epoch + 1,
        "phase": phase,
        "loss": data_term + kl_weight * kl_value / n,
        "data_term": data_term,
        "kl": kl_value,
        "kl_per_layer": kl_per_layer,
        "kl_weight": kl_weight,
        "density": density,
        "seconds": time.perf_counter() - epoch_start,
    }
    if hasattr(step, "state"):  # replayed steps: whether the graph was captured ("replayed") or why not
        record["cuda_graphs"] = step.state
    return record


def _training_step(model, optimizer, x: Tensor, y: Tensor, mc_samples: int, kl_scale: float) -> Tensor:
    """One optimiser step on a minibatch; returns the data term, still on the device.

    Nothing here reads a value back to the host, so on a GPU the steps of an
    epoch queue up without waiting (tests/test_device_placement.py runs it on
    the meta device, where any such read raises).
    """
    # The KL's value is read once, after the epoch; a step needs only its gradient.
    output, kl = model.forward_with_kl(x, kl_value=False)
    nll = -model.likelihood.log_prob(output, y).mean()
    for _ in range(mc_samples - 1):
        nll = nll - model.likelihood.log_prob(model(x), y).mean()
    nll = nll / mc_samples
    loss = nll + kl_scale * kl
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    model.update_auxiliaries()
    return nll.detach()


def _warm_start(model, x_train, y_train, config, seed, batch_generator, noise_generator, cancel, finish_epoch) -> None:
    """Train a deterministic net of the same shape; copy its weights into the means. Each epoch's
    record (phase "warm-start") goes to finish_epoch, which snapshots `model` (still at its initial
    values: the point net is what trains)."""
    from core.models.network import BayesianMLP, ModelConfig

    point_config = ModelConfig(
        in_features=model.config.in_features,
        out_classes=model.config.out_classes,
        hidden=model.config.hidden,
        family="fnn",
        activation=model.config.activation,
        likelihood=model.config.likelihood,
        family_options={"input_skip": True} if model.input_skip else {},
        conv=model.config.conv,
        image_shape=model.config.image_shape,
    )
    # On a CPU the point net's initial values continue the noise stream, as they did
    # when both came from the global generator; elsewhere they come from the CPU stream.
    on_cpu = model.device.type == "cpu"
    init = noise_generator if on_cpu else torch.Generator(device="cpu").manual_seed(int(seed))
    point = BayesianMLP(point_config, init).to(model.device)
    optimizer = _adam(
        [{"params": list(point.parameters()), "lr": config.warm_start_learning_rate}], capturable=config.cuda_graphs
    )
    no_anneal = TrainConfig(epochs=1, batch_size=config.batch_size, cuda_graphs=config.cuda_graphs)
    likelihood = point.likelihood
    for epoch in range(config.warm_start_epochs):
        # mean first: a unit-scale Gaussian on the first output, then the net's own likelihood
        point.likelihood = _MeanOnly() if epoch < config.warm_start_mean_epochs else likelihood
        if epoch in (0, config.warm_start_mean_epochs):  # a new objective: a new step (a graph replays its own)
            step = _steps(point, optimizer, x_train, y_train, no_anneal, noise_generator)
        finish_epoch(_run_epoch(point, step, x_train, no_anneal, 0.0, batch_generator, cancel, "warm-start", epoch))
    point.likelihood = likelihood
    with torch.no_grad():
        for layer, point_layer in zip(model.layers, point.layers):
            layer.load_point_estimate(point_layer.mean_weights())
        if getattr(getattr(model.likelihood, "options", None), "noise", None) in ("point", "variational"):
            model.likelihood.set_noise_std(float(point.likelihood.log_noise_std.exp()))


# Likelihoods whose first output is a mean that a fixed-noise warm start can fit alone.
MEAN_FIRST_LIKELIHOODS = ("gaussian", "heteroscedastic")


class _MeanOnly(torch.nn.Module):
    """log N(y; output[..., 0], 1): the mean output under a fixed unit noise scale, no KL."""

    def log_prob(self, output: Tensor, y: Tensor) -> Tensor:
        return -0.5 * (math.log(2 * math.pi) + (y - output[..., 0]) ** 2)

    def kl(self) -> None:
        return None
