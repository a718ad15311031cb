"""Experiment grids: run every cell of a GridSpec (skipping stored runs), then summarise.

Backends
- "local": a pool of worker processes (spawn) on this machine.
- "ray": one Ray task per run with its CPU/GPU request, on the cluster at
  --ray-address or $RAY_ADDRESS (a local Ray instance when neither is set).
  Ray is an optional extra; the workers write to the same store layout, so
  the cache directory must be a path every node sees.

A grid can be interrupted and started again: finished runs are in the store
and are not trained twice.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from core import limits, validate
from core.errors import BNNError, ConfigError
from core.jsonable import jsonable
from core.runs.config import RunConfig, read_config_file
from core.runs.presets import PRESETS, GridSpec
from core.runs.store import RunStore

BACKENDS = ("local", "ray")
# Columns that describe the run rather than its quality; listed last in tables.
TRAILING_METRICS = ("density", "seconds_per_epoch")
HIDDEN_METRICS = ("train_seconds", "final_loss")


@dataclass
class CellResult:
    setup: str
    method: str
    seed: int
    split: int | None
    run_id: str | None
    from_cache: bool
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class GridResult:
    spec: GridSpec
    cells: list[CellResult]
    markdown_path: Path | None = None
    csv_path: Path | None = None

    @property
    def failed(self) -> list[CellResult]:
        return [cell for cell in self.cells if cell.error]


# --- loading a grid ----------------------------------------------------------------------------
def load_grid(name_or_path: str) -> GridSpec:
    """A grid preset by name, a single-run preset (a grid of one), or a TOML/JSON grid file.

    File layout: name, methods = [...], seeds = [...], setups = {label = "preset-name" | {config
    table}} (or `setup = {...}` for one), optional method_overrides = {method = {...}} and
    splits = {label = [...]}.
    """
    if name_or_path in PRESETS:
        preset = PRESETS[name_or_path]
        if isinstance(preset, GridSpec):
            return preset
        return GridSpec(
            name=name_or_path, setups={name_or_path: preset}, methods=(preset.method,), seeds=(preset.seed,)
        )
    path = Path(name_or_path)
    if not path.suffix:
        raise ConfigError(f"grid: {name_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a .toml/.json file")
    return grid_from_dict(read_config_file(path), default_name=path.stem)


def _table(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"grid: {name}: must be a table, got {validate.shown(value)}")
    return value


def grid_from_dict(values: Mapping[str, Any], default_name: str = "grid") -> GridSpec:
    known = {"name", "methods", "seeds", "setups", "setup", "method_overrides", "splits", "description"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"grid: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    raw_setups = dict(_table(values.get("setups", {}), "setups"))
    if "setup" in values:
        raw_setups.setdefault(str(values.get("name", default_name)), values["setup"])
    if not raw_setups:
        raise ConfigError("grid: setups: give at least one setup (a preset name or a config table)")
    setups: dict[str, RunConfig] = {}
    for label, setup in raw_setups.items():
        if isinstance(setup, str):
            preset = PRESETS.get(setup)
            if not isinstance(preset, RunConfig):
                raise ConfigError(f"grid: setups.{label}: {setup!r} is not a single-run preset")
            setups[label] = preset
        else:
            try:
                setups[label] = RunConfig.from_dict(setup)
            except ConfigError as exc:
                raise ConfigError(f"grid: setups.{label}.{exc}") from None
    methods = values.get("methods") or sorted({setup.method for setup in setups.values()})
    seeds = values.get("seeds", [0])
    if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
        raise ConfigError(f"grid: methods: must be a list of method names, got {methods!r}")
    if not isinstance(seeds, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= limits.SEED_MAX for s in seeds
    ):
        raise ConfigError(
            f"grid: seeds: must be a list of integers from 0 to {limits.SEED_MAX}, got {validate.shown(seeds)}"
        )
    splits = {}
    for label, given in _table(values.get("splits", {}), "splits").items():
        if not isinstance(given, list) or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and float(s).is_integer()
            for s in given
        ):
            raise ConfigError(f"grid: splits.{label}: must be a list of split numbers, got {validate.shown(given)}")
        splits[label] = tuple(int(s) for s in given)
    overrides = {
        str(method): dict(_table(override, f"method_overrides.{method}"))
        for method, override in _table(values.get("method_overrides", {}), "method_overrides").items()
    }
    for method, override in overrides.items():
        if "train" in override:
            _table(override["train"], f"method_overrides.{method}.train")
    return GridSpec(
        name=str(values.get("name", default_name)),
        setups=setups,
        methods=tuple(methods),
        seeds=tuple(seeds),
        method_overrides=overrides,
        splits=splits,
        description=str(values.get("description", "")),
    )


# --- one cell (runs in a worker process or a Ray task) ---------------------------------------------
def run_cell(
    config_dict: dict[str, Any], cache_dir: str, data_dir: str | None = None, threads: int | None = None
) -> dict[str, Any]:
    """Train (or reuse) one run; returns plain data so any backend can carry it back."""
    import torch

    from core.runs.training import train_run

    if threads:
        torch.set_num_threads(threads)
    config = RunConfig.from_dict(config_dict)
    try:
        run = train_run(config, cache_dir=cache_dir, data_dir=data_dir)
    except BNNError as exc:
        return {"run_id": None, "from_cache": False, "metrics": {}, "error": f"{type(exc).__name__}: {exc}"}
    return {"run_id": run.run_id, "from_cache": run.from_cache, "metrics": run.metrics, "error": None}


# --- running -----------------------------------------------------------------------------------
Reporter = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_grid(
    spec: GridSpec,
    cache_dir: str | Path | None = None,
    backend: str = "local",
    workers: int = 1,
    out_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    ray_address: str | None = None,
    num_gpus: float | None = None,
    report: Reporter = _stderr,
) -> GridResult:
    """Run every cell not in the store yet, then write <out>/<name>.md and .csv (if out_dir is given)."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if int(workers) < 1:
        raise ConfigError(f"workers: must be >= 1, got {workers}")
    store = RunStore(cache_dir)
    cache_root = str(store.root.parent)
    cells = spec.cells()
    results: list[CellResult | None] = [None] * len(cells)
    pending: list[int] = []
    for index, (label, method, seed, split, config) in enumerate(cells):
        run_id = _stored_run_id(config, store, data_dir)
        if run_id is not None:
            metrics = store.info(run_id).metrics
            results[index] = CellResult(label, method, seed, split, run_id, True, metrics)
        else:
            pending.append(index)
    report(
        f"grid {spec.name}: {len(cells)} runs, {len(cells) - len(pending)} already stored, "
        f"{len(pending)} to train ({backend}, {workers} worker{'s' if workers != 1 else ''})"
    )
    started = time.perf_counter()

    def finished(index: int, outcome: dict[str, Any]) -> None:
        label, method, seed, split, _ = cells[index]
        results[index] = CellResult(
            label, method, seed, split, outcome["run_id"], outcome["from_cache"], outcome["metrics"], outcome["error"]
        )
        done = sum(r is not None for r in results)
        status = f"failed: {outcome['error']}" if outcome["error"] else outcome["run_id"]
        report(
            f"[{done}/{len(cells)}] {label} {method} seed {seed}"
            f"{'' if split is None else f' split {split}'}: {status} ({time.perf_counter() - started:.1f} s)"
        )

    jobs = [(index, cells[index][-1].to_dict()) for index in pending]
    data_dir_text = str(data_dir) if data_dir else None
    if jobs and backend == "local":
        _run_local(jobs, cache_root, data_dir_text, int(workers), finished)
    elif jobs:
        _run_ray(jobs, cache_root, data_dir_text, ray_address, num_gpus, finished)
    result = GridResult(spec, [r for r in results if r is not None])
    if out_dir is not None:
        result.markdown_path, result.csv_path = write_summary(result, Path(out_dir))
        report(f"summary: {result.markdown_path} and {result.csv_path}")
    return result


def _stored_run_id(config: RunConfig, store: RunStore, data_dir) -> str | None:
    """The run id if the run is complete in the store; None when it must be trained.

    A dataset that cannot be loaded here (e.g. only the workers have it) counts as not stored.
    """
    try:
        run_id = config.run_id(config.load_dataset(data_dir).fingerprint)
    except BNNError:
        return None
    if not store.exists(run_id):
        return None
    try:
        store.verify(run_id)
    except BNNError:
        return None  # corrupt: the worker retrains and replaces it
    return run_id


def _run_local(jobs, cache_root: str, data_dir: str | None, workers: int, finished) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // workers)
    if workers == 1:
        for index, config_dict in jobs:
            finished(index, run_cell(config_dict, cache_root, data_dir, None))
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        futures = {
            pool.submit(run_cell, config_dict, cache_root, data_dir, threads): index for index, config_dict in jobs
        }
        for future in as_completed(futures):
            finished(futures[future], future.result())
    except BaseException:
        # Ctrl-C: drop queued runs; running ones get the same SIGINT and leave nothing half-written.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_ray(
    jobs, cache_root: str, data_dir: str | None, ray_address: str | None, num_gpus: float | None, finished
) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "backend: ray is not installed; `pip install ray` (an optional extra) or use --backend local"
        ) from None
    address = ray_address or os.environ.get("RAY_ADDRESS") or None
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    gpus = num_gpus if num_gpus is not None else (1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0)
    remote = ray.remote(num_cpus=1, num_gpus=gpus)(run_cell)
    refs = {remote.remote(config_dict, cache_root, data_dir, 1): index for index, config_dict in jobs}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                finished(refs[ref], ray.get(ref))
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


# --- summary tables ---------------------------------------------------------------------------------
def metric_columns(cells: list[CellResult]) -> list[str]:
    names = set()
    for cell in cells:
        names.update(k for k, v in cell.metrics.items() if _is_number(v) and k not in HIDDEN_METRICS)
    leading = sorted(n for n in names if n not in TRAILING_METRICS)
    return leading + [n for n in TRAILING_METRICS if n in names]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summary_rows(result: GridResult) -> list[dict[str, Any]]:
    """One row per (setup, method): n runs and median/min/max of every metric over seeds."""
    columns = metric_columns(result.cells)
    rows = []
    groups: dict[tuple[str, str], list[CellResult]] = {}
    for cell in result.cells:
        groups.setdefault((cell.setup, cell.method), []).append(cell)
    for (setup, method), cells in groups.items():
        ok = [cell for cell in cells if not cell.error]
        row: dict[str, Any] = {"setup": setup, "method": method, "runs": len(ok), "failed": len(cells) - len(ok)}
        for column in columns:
            values = np.array(
                [cell.metrics[column] for cell in ok if _is_number(cell.metrics.get(column))], dtype=float
            )
            values = values[np.isfinite(values)]
            for stat, fn in (("median", np.median), ("min", np.min), ("max", np.max)):
                row[f"{column} {stat}"] = float(fn(values)) if values.size else math.nan
        rows.append(row)
    return rows


def _format(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2e}"


def _split_metric(name: str) -> tuple[str, str]:
    """'MED-SIM R=10 accuracy' -> ('MED-SIM R=10', 'accuracy'); plain names -> ('', name)."""
    parts = name.split(" ")
    if len(parts) == 3 and parts[1].startswith("R="):
        return f"{parts[0]} {parts[1]}", parts[2]
    return "", name


def summary_markdown(result: GridResult) -> str:
    """Hubin & Storvik (2024) Tables 2-5 layout: per setup, one row per method and prediction mode
    (M beta, R), columns the metrics, cells 'median (min, max)' over seeds; then
    one row per method of the run-level numbers (density, mean inclusion, time)."""
    columns = metric_columns(result.cells)
    rows = summary_rows(result)
    lines = [f"# Grid {result.spec.name}", ""]
    if result.spec.description:
        lines += [result.spec.description, ""]
    lines += [f"Medians over seeds {', '.join(map(str, result.spec.seeds))} with (min, max).", ""]
    modes = list(dict.fromkeys(_split_metric(c)[0] for c in columns if _split_metric(c)[0]))
    mode_metrics = list(dict.fromkeys(_split_metric(c)[1] for c in columns if _split_metric(c)[0]))
    run_metrics = [c for c in columns if not _split_metric(c)[0]]

    def cell(row: dict[str, Any], column: str) -> str:
        if f"{column} median" not in row or not math.isfinite(row[f"{column} median"]):
            return "-"
        return f"{_format(row[f'{column} median'])} ({_format(row[f'{column} min'])}, {_format(row[f'{column} max'])})"

    for setup in dict.fromkeys(row["setup"] for row in rows):
        setup_rows = [r for r in rows if r["setup"] == setup]
        lines += [f"## {setup}", ""]
        if modes:
            lines += ["| method | M β R | " + " | ".join(mode_metrics) + " |", "|---|---|" + "---|" * len(mode_metrics)]
            for row in setup_rows:
                for mode in modes:
                    lines.append(
                        f"| {row['method']} | {mode} | "
                        + " | ".join(cell(row, f"{mode} {m}") for m in mode_metrics)
                        + " |"
                    )
            lines.append("")
        lines += ["| method | runs | " + " | ".join(run_metrics) + " |", "|---|---|" + "---|" * len(run_metrics)]
        for row in setup_rows:
            runs = f"{row['runs']}" + (f" ({row['failed']} failed)" if row["failed"] else "")
            lines.append(f"| {row['method']} | {runs} | " + " | ".join(cell(row, c) for c in run_metrics) + " |")
        lines.append("")
    for failed in result.failed:
        lines.append(f"- failed: {failed.setup} {failed.method} seed {failed.seed}: {failed.error}")
    return "\n".join(lines).rstrip() + "\n"


def summary_csv(result: GridResult) -> str:
    rows = summary_rows(result)
    columns = metric_columns(result.cells)
    header = ["setup", "method", "runs", "failed"] + [f"{c} {s}" for c in columns for s in ("median", "min", "max")]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: ("" if isinstance(row.get(k), float) and math.isnan(row[k]) else row.get(k)) for k in header}
        )
    return buffer.getvalue()


def write_summary(result: GridResult, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown_path = out_dir / f"{result.spec.name}.md"
    csv_path = out_dir / f"{result.spec.name}.csv"
    runs_path = out_dir / f"{result.spec.name}.runs.json"
    markdown_path.write_text(summary_markdown(result), encoding="utf-8")
    csv_path.write_text(summary_csv(result), encoding="utf-8")
    runs_path.write_text(
        json.dumps(jsonable([cell.__dict__ for cell in result.cells], keep_nonfinite=True, fallback=str), indent=1),
        encoding="utf-8",
    )
    return markdown_path, csv_path
