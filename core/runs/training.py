"""train_run / load_run: train a config once, then re-open it from the store.

run = train_run(RunConfig(dataset="two-moons", hidden=(16,), train={"epochs": 2}))
run.model, run.metrics, run.history, run.summaries; run.predict(x), run.summary(), ... (core.runs.run)
again = train_run(same_config)   # from the store: again.from_cache is True
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from core.errors import BNNError, ConfigError, RunStoreError
from core.models.network import BayesianMLP, ModelConfig, build_model
from core.predict import default_summaries, evaluate
from core.runs.config import SCHEMA_VERSION, RunConfig, stored_config
from core.runs.run import Run
from core.runs.store import RunContents, RunInfo, RunStore, state_dict_for_saving
from core.snapshots import TrainingSnapshots

ProgressCallback = Callable[[dict[str, Any]], None]

# Final evaluations stored with every run: (prediction mode, number of samples R).
FINAL_EVALUATIONS: tuple[tuple[str, int], ...] = (
    ("SIM-SIM", 1),
    ("SIM-SIM", 10),
    ("MED-SIM", 10),
    ("MED-MEA", 1),
    ("ALL-MEA", 1),
)


LoadedRun = Run  # the older name of a run object


def _store(cache_dir: str | Path | RunStore | None) -> RunStore:
    return cache_dir if isinstance(cache_dir, RunStore) else RunStore(cache_dir)


def run_id_for(config: RunConfig, data_dir: str | Path | None = None) -> str:
    """The run id of a config (loads the dataset for its fingerprint)."""
    return config.run_id(config.load_dataset(data_dir).fingerprint)


def first_stage_stored(
    config: RunConfig, cache_dir: str | Path | RunStore | None = None, data_dir: str | Path | None = None
) -> bool:
    """Whether a scale head's homoscedastic first stage (config.mean_stage()) is in the run store at
    `cache_dir` (None: the default store), so that train_run loads it instead of training it: what the
    admission estimate counts (core.cost.training_cost's first_stage_stored). False for a config without a
    scale head, and when it cannot be told (the dataset, whose fingerprint is in the run id, does not load;
    the store cannot be read): the whole first stage is counted then, and the training says what is wrong."""
    if config.train.scale_head is None:
        return False
    try:
        return _store(cache_dir).exists(run_id_for(config.mean_stage(), data_dir))
    except (BNNError, OSError):
        return False


def train_run(
    config: RunConfig,
    cache_dir: str | Path | RunStore | None = None,
    progress: ProgressCallback | None = None,
    cancel: Any = None,
    force: bool = False,
    data_dir: str | Path | None = None,
    device: str | torch.device | None = None,
) -> Run:
    """Train `config` and store it, or return the stored run (from_cache=True) without training.

    `force` retrains and replaces a stored run. A second process asking for the
    same id waits for the first and then reuses its run. Raises
    TrainingDivergedError / TrainingCancelled with nothing written.
    """
    from core.device import resolve_device

    if not isinstance(config, RunConfig):
        raise ConfigError(f"config: expected a RunConfig, got {type(config).__name__}")
    store = _store(cache_dir)
    dataset = config.load_dataset(data_dir)
    run_id = config.run_id(dataset.fingerprint)
    target = resolve_device(device if device is not None else config.device)
    if not force and store.exists(run_id):
        cached = _try_cached(store, run_id, target, data_dir, dataset)
        if cached is not None:
            return cached
    with store.lock(run_id):
        if not force and store.exists(run_id):  # another process finished it while we waited
            cached = _try_cached(store, run_id, target, data_dir, dataset)
            if cached is not None:
                return cached
        contents, model = _train(config, dataset, run_id, target, progress, cancel, store, data_dir)
        path = store.write(run_id, contents, replace=True)
    model.eval()
    run = Run(
        run_id=run_id,
        config=config,
        model=model,
        metrics=contents.metrics,
        history=contents.history,
        summaries=contents.summaries,
        path=path,
        from_cache=False,
        created=contents.info["created"],
        info=dict(contents.info, run_id=run_id),
        data_dir=data_dir,
        _dataset=dataset,
    )
    if contents.snapshots is not None:
        run._snapshots = TrainingSnapshots.from_arrays(contents.snapshots)
    return run


def _try_cached(store: RunStore, run_id: str, device: torch.device, data_dir, dataset) -> Run | None:
    """The stored run, or None when it is corrupt (then it is retrained and replaced)."""
    try:
        run = load_run(run_id, cache_dir=store, device=device, data_dir=data_dir)
    except RunStoreError:
        return None
    run._dataset = dataset
    return run


def estimated_run_bytes(model: BayesianMLP, config: RunConfig) -> int:
    """About how many bytes the run folder of `model` trained with `config` will take: its
    parameters, the snapshots' budget, a record per epoch and the small JSON files. Generous by
    design (measured: a two-moons 16-unit run takes 22 KB, a 200-200 one 675 KB, of which 659 KB are
    weights), so that a training never ends on a full disk."""
    from core.snapshots import STATISTIC_BUDGET_BYTES

    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    epochs = config.train.total_epochs()
    return int(weights * 1.1) + STATISTIC_BUDGET_BYTES + 2048 * epochs + (1 << 20)


def _train(
    config: RunConfig,
    dataset,
    run_id: str,
    device: torch.device,
    progress,
    cancel,
    store: RunStore | None = None,
    data_dir: str | Path | None = None,
) -> tuple[RunContents, BayesianMLP]:
    from core.train import train

    model_config = config.model_config(dataset)
    # Initial weights depend on the seed only, never on what ran before or runs beside in this
    # process: they come from the run's own generator (the stream torch.manual_seed(seed) gave).
    model = build_model(model_config, "cpu", torch.Generator(device="cpu").manual_seed(config.seed))
    if store is not None:  # refuse now rather than after the training (a read-only store, a full disk)
        store.check_room(run_id, estimated_run_bytes(model, config))
    model = model.to(device)
    x_train = torch.from_numpy(np.ascontiguousarray(dataset.x_train)).to(device)
    y_train = torch.from_numpy(np.ascontiguousarray(dataset.y_train)).to(device)
    mean_stage: dict[str, Any] = {}
    if config.train.scale_head is not None and store is not None:
        # The homoscedastic first stage is a run of its own: loaded when stored (the grid's run), else
        # trained and stored like any other.
        mean_run = train_run(
            config.mean_stage(), cache_dir=store, progress=progress, cancel=cancel, data_dir=data_dir, device=device
        )
        mean_stage = {"mean_model": mean_run.model.to(device), "mean_history": list(mean_run.history)}
    result = train(
        model, x_train, y_train, config.train, seed=config.seed, progress=progress, cancel=cancel, **mean_stage
    )
    model.eval()
    metrics = final_metrics(model, dataset)
    metrics["seconds_per_epoch"] = result.seconds_per_epoch
    metrics["train_seconds"] = result.seconds
    metrics.update(result.posterior_fit)  # laplace: its prior precision, evidence, fit time
    if result.history:
        metrics["final_loss"] = result.history[-1]["loss"]
    summaries = final_summaries(model, dataset, config.seed)
    info = {
        "run_id": run_id,
        "schema_version": SCHEMA_VERSION,
        "created": time.time(),
        "dataset_fingerprint": dataset.fingerprint,
        "model": {"in_features": model_config.in_features, "out_classes": model_config.out_classes},
        "trained_on": str(device),
        "seconds": result.seconds,
        "seconds_per_epoch": result.seconds_per_epoch,
        "epochs": len(result.history),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_pid": os.getpid(),
    }
    if mean_stage:
        info["mean_run_id"] = mean_run.run_id
    contents = RunContents(
        config=config.to_dict(),
        info=info,
        state_dict=model.state_dict(),
        metrics=metrics,
        history=_plain_history(result.history),
        summaries=summaries,
        snapshots=None if result.snapshots is None else result.snapshots.to_arrays(),
    )
    return contents, model


def _plain_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: (float(v) if isinstance(v, (np.floating, torch.Tensor)) else v) for k, v in record.items()}
        for record in history
    ]


# --- metrics and summaries ---------------------------------------------------------------------
# Scalars of an evaluate() result that describe the request rather than the model.
NOT_METRICS = ("samples", "seed", "n_test", "threshold", "ece_bins", "draw_density")


def final_metrics(model: BayesianMLP, dataset) -> dict[str, Any]:
    """Hubin & Storvik's (2024) evaluation grid: every prediction mode at its R, keyed "MODE R=n metric"."""
    with torch.no_grad():
        metrics: dict[str, Any] = {"density": model.density(model.keep_masks())}
    from core.predict.engine import structure_fixed

    evaluations = FINAL_EVALUATIONS
    if structure_fixed(model):
        # Post-trained on the median probability model: SIM-SIM and ALL-MEA would be the MPM's own
        # predictions under other names (Hubin & Storvik 2024 Table A8 reports MED rows only), so they are not stored.
        evaluations = tuple((mode, r) for mode, r in FINAL_EVALUATIONS if mode.startswith("MED")) + (("MED-SIM", 1),)
        metrics["structure_fixed"] = 1.0
    for mode, samples in evaluations:
        result = evaluate(model, dataset, mode, samples)
        for key, value in result.items():
            if key in NOT_METRICS or isinstance(value, bool):
                continue
            if isinstance(value, (int, float, np.floating, np.integer)):
                metrics[f"{mode} R={samples} {key}"] = float(value)
        doubt = result.get("doubt")
        if isinstance(doubt, dict) and samples > 1:  # the paper reports doubt for model averages only
            metrics[f"{mode} R={samples} doubt_count"] = float(doubt["count"])
            if doubt.get("accuracy") is not None:  # None when no case clears the threshold
                metrics[f"{mode} R={samples} doubt_accuracy"] = float(doubt["accuracy"])
        # Hubin & Storvik (2024) Table 5's "mean inclusion per layer"; other families' own statistic.
        for layer, mean_statistic in enumerate(result.get("mean_statistic") or [], start=1):
            metrics[f"mean_{result.get('statistic', 'statistic')}_layer_{layer}"] = float(mean_statistic)
    return metrics


def final_summaries(model: BayesianMLP, dataset, seed: int) -> dict[str, Any]:
    return default_summaries(model, dataset, samples=10, seed=seed)


# --- re-opening, listing, deleting ---------------------------------------------------------------
def load_run(
    run: str,
    cache_dir: str | Path | RunStore | None = None,
    device: str | torch.device = "cpu",
    data_dir: str | Path | None = None,
) -> Run:
    """A stored run by id or unique prefix, every checksum verified first.

    Never unpickles: weights come from safetensors, the rest from JSON. The
    dataset is not loaded until `Run.dataset()` is called.
    """
    from core.device import resolve_device

    store = _store(cache_dir)
    run_id = store.resolve(run)
    stored = store.read(run_id)
    try:
        config, model = _model_from_state(stored.config, stored.info, stored.state_dict)
    except (BNNError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise RunStoreError(
            f"run {run_id}: the stored files do not describe a loadable model ({exc}); "
            f"delete it with `python -m core rm {run_id}` and train again"
        ) from None
    model = model.to(resolve_device(device)).eval()
    return Run(
        run_id=run_id,
        config=config,
        model=model,
        metrics=stored.metrics,
        history=stored.history,
        summaries=stored.summaries,
        path=stored.path,
        from_cache=True,
        created=float(stored.info.get("created", 0.0)),
        info=stored.info,
        data_dir=data_dir,
    )


def _model_from_state(
    config_fields: dict[str, Any] | RunConfig, info: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[RunConfig, BayesianMLP]:
    """The config and the model (CPU, eval mode) of a run written by this or an earlier version
    (a RunConfig already validated is taken as it is)."""
    config = config_fields if isinstance(config_fields, RunConfig) else stored_config(config_fields)
    shape = info["model"]
    model_config = ModelConfig(
        in_features=int(shape["in_features"]),
        out_classes=shape["out_classes"],
        hidden=config.hidden,
        family=config.method,
        family_options=dict(config.family_options),
        activation=config.activation,
        likelihood=config.likelihood,
        likelihood_options=dict(config.likelihood_options),
        **config.conv_fields(),
    )
    model = build_model(model_config, "cpu")
    model.load_state_dict(state_dict)
    return config, model.eval()


# --- handing a trained run to another process ------------------------------------------------------
def run_handover(run: Run) -> dict[str, Any]:
    """A trained run as data a process queue carries (the weights as safetensors bytes, the config as
    the validated object) for the process that asked for it (the dashboard trains in a child
    process): `run_from_handover` rebuilds it without reading the store."""
    from safetensors.torch import save

    # The validated config object itself (pickled by the process queue): not validated again.
    return {
        "run_id": run.run_id,
        "config": run.config,
        "info": dict(run.info),
        "weights": save(state_dict_for_saving(run.model.state_dict())),
        "metrics": dict(run.metrics),
        "history": list(run.history),
        "summaries": dict(run.summaries),
        "path": None if run.path is None else str(run.path),
        "created": float(run.created),
    }


def run_from_handover(payload: dict[str, Any], data_dir: str | Path | None = None) -> Run:
    """The Run of a `run_handover` payload (CPU, eval mode)."""
    from safetensors.torch import load

    config, model = _model_from_state(payload["config"], payload["info"], load(payload["weights"]))
    return Run(
        run_id=payload["run_id"],
        config=config,
        model=model,
        metrics=payload["metrics"],
        history=payload["history"],
        summaries=payload["summaries"],
        path=None if payload["path"] is None else Path(payload["path"]),
        from_cache=False,
        created=payload["created"],
        info=payload["info"],
        data_dir=data_dir,
    )


def list_runs(cache_dir: str | Path | RunStore | None = None) -> list[RunInfo]:
    """Every run folder in the store, oldest first; corrupt ones have status "corrupt"."""
    return _store(cache_dir).list()


def delete_run(run: str, cache_dir: str | Path | RunStore | None = None) -> str:
    """Delete a run by id or unique prefix; returns the full id."""
    store = _store(cache_dir)
    run_id = store.resolve(run)
    store.delete(run_id)
    return run_id
