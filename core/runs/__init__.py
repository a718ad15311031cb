"""Runs: validated configs, a content-addressed run store, training with caching, grids.

from core.runs import RunConfig, train_run, load_run
run = train_run(RunConfig(dataset="two-moons", hidden=(16,), train={"epochs": 2}))
same = load_run(run.run_id)   # from the store, checksums verified
run.predict(x), run.summary(), run.coef(), run.masks(), run.sweep(), run.evaluate()   # core.runs.run
"""

from core.runs.config import SCHEMA_VERSION, RunConfig, load_config
from core.runs.presets import PRESETS, GridSpec, get_preset
from core.runs.run import LayerCoefficients, Run
from core.runs.store import RunInfo, RunStore, default_cache_dir
from core.runs.training import (
    LoadedRun,
    delete_run,
    list_runs,
    load_run,
    run_from_handover,
    run_handover,
    run_id_for,
    train_run,
)

__all__ = [
    "PRESETS",
    "SCHEMA_VERSION",
    "GridSpec",
    "LayerCoefficients",
    "LoadedRun",
    "RunConfig",
    "RunInfo",
    "Run",
    "RunStore",
    "default_cache_dir",
    "delete_run",
    "get_preset",
    "list_runs",
    "load_config",
    "load_run",
    "run_from_handover",
    "run_handover",
    "run_id_for",
    "train_run",
]
