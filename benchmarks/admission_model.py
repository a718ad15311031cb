"""The admission cost model (core.cost) against measurement: peak memory and time of real work.

    python -m benchmarks.admission_model            # measures what is missing, writes the table
    python -m benchmarks.admission_model --table    # only rewrites the table from the measurements
    python -m benchmarks.admission_model --quick    # the cases under a million weights only

Each case runs in a fresh child process (one PyTorch thread, the classroom setting): the child
imports torch and core, runs the speed probe the server runs at start-up (core.cost.measure_speed),
resets its peak resident set (`5 > /proc/self/clear_refs`), does the work, and reports the peak
(VmHWM) minus the resident set just before the work, and the work's wall and CPU seconds. The
cases: trainings as the dashboard's training process runs them (core.runs.train_run into a
temporary store: training, snapshots, the stored sweep) over widths, families and dataset sizes;
generating a dataset with large n / n_test; the Pruning page's test-set prediction and metrics
over test-set sizes x R; building a playground model.

Measurements go to benchmarks/results/admission_model.json as each case finishes (a rerun
measures only the missing ones); the table benchmarks/results/admission_model.md puts the
model's estimate (with the probe the child measured) beside each measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MEASURED = RESULTS / "admission_model.json"
TABLE = RESULTS / "admission_model.md"
# The benchmark measures sets and widths larger than a server admits (BNN_MAX_GENERATED_POINTS,
# BNN_MAX_HIDDEN_WIDTH): the model must hold beyond them.
BEYOND_LIMITS = {"BNN_MAX_GENERATED_POINTS": str(10**7), "BNN_MAX_HIDDEN_WIDTH": str(10**6)}

# (case id, description of the work). Sizes stay below ~1.5 GB of peak: the machine is shared.
CASES: list[dict] = []
for family in ("lbbnn", "bnn", "horseshoe"):
    for hidden, epochs in (((16, 16), 60), ((200, 200), 10), ((1000, 1000), 2), ((3000, 3000), 1)):
        CASES.append(
            {
                "kind": "train",
                "dataset": "two-moons",
                "params": {},
                "method": family,
                "hidden": list(hidden),
                "epochs": epochs,
                "batch_size": 100,
            }
        )
CASES += [
    {
        "kind": "train",
        "dataset": "two-moons",
        "params": {"n": 50000, "n_test": 5000},
        "method": "lbbnn",
        "hidden": [64, 64],
        "epochs": 1,
        "batch_size": 100,
    },
    {
        "kind": "train",
        "dataset": "toy-hetero",
        "params": {"n": 100000},
        "method": "lbbnn",
        "hidden": [100, 100],
        "epochs": 1,
        "batch_size": 500,
    },
    {
        "kind": "train",
        "dataset": "toy-sine-gaps",
        "params": {},
        "method": "lbbnn",
        "hidden": [64, 64],
        "epochs": 300,
        "batch_size": 500,
    },
    {
        "kind": "train",
        "dataset": "mnist-small",
        "params": {},
        "method": "lbbnn",
        "hidden": [400, 400],
        "epochs": 1,
        "batch_size": 100,
    },
    {
        "kind": "train",
        "dataset": "mnist-small",
        "params": {},
        "method": "bnn",
        "hidden": [1200, 1200],
        "epochs": 1,
        "batch_size": 100,
    },
    {"kind": "dataset", "dataset": "two-moons", "params": {"n": 1000000, "n_test": 1000000}},
    {"kind": "dataset", "dataset": "toy-hetero", "params": {"n": 1000000, "n_test": 1000000}},
    {"kind": "dataset", "dataset": "toy-sine-gaps", "params": {"n": 200000, "n_pool": 1000000}},
    {"kind": "build", "dataset": "two-moons", "method": "lbbnn", "hidden": [6000, 6000]},
    {"kind": "build", "dataset": "two-moons", "method": "horseshoe", "hidden": [4000, 4000]},
]
for n_test, samples in ((10000, 100), (100000, 10), (100000, 100), (1000000, 10)):
    CASES.append(
        {
            "kind": "predict",
            "dataset": "two-moons",
            "params": {"n": 200, "n_test": n_test},
            "method": "lbbnn",
            "hidden": [16, 16],
            "samples": samples,
        }
    )
CASES += [
    {
        "kind": "predict",
        "dataset": "two-moons",
        "params": {"n": 200, "n_test": 20000},
        "method": "lbbnn",
        "hidden": [400, 400],
        "samples": 100,
    },
    {
        "kind": "predict",
        "dataset": "toy-hetero",
        "params": {"n": 200, "n_test": 200000},
        "method": "bnn",
        "hidden": [64, 64],
        "samples": 50,
    },
]


CASES.sort(key=lambda case: (case["kind"] == "train", max(case.get("hidden", [0])) >= 3000))


def case_id(case: dict) -> str:
    return json.dumps(case, sort_keys=True)


def status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def child(case: dict) -> dict:
    """Runs one case in this (fresh) process and returns its measurement."""
    import resource

    os.environ.update(BEYOND_LIMITS)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from core import cost
    from core.runs.config import RunConfig

    speed = cost.measure_speed()
    load_at_start = os.getloadavg()[0]
    config = None
    if case["kind"] != "dataset":
        train = {"epochs": case.get("epochs", 1), "batch_size": case.get("batch_size", 100)}
        config = RunConfig(
            dataset=case["dataset"],
            dataset_params=case.get("params", {}),
            method=case["method"],
            hidden=case["hidden"],
            train=train,
            device="cpu",
        )
    prepared: dict = {}
    if case["kind"] == "predict":  # the run the page reads is in memory before the prediction
        from core.models.network import build_model

        dataset = config.load_dataset()
        prepared["dataset"] = dataset
        prepared["model"] = build_model(config.model_config(dataset), "cpu", torch.Generator().manual_seed(0))
    if case["kind"] == "train":
        import core.runs  # noqa: F401  (imported before the clock starts, as in the worker)
    # The load over the case, not only at its start: the 1-minute average sampled every second.
    import threading

    loads, done = [os.getloadavg()[0]], threading.Event()

    def sample_load() -> None:
        while not done.wait(1.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    with open("/proc/self/clear_refs", "w") as handle:  # reset VmHWM to the current resident set
        handle.write("5")
    before = status_kb("VmRSS")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    if case["kind"] == "train":
        from core.runs import train_run

        run = train_run(config)
        measured_epochs = len(run.history) if getattr(run, "history", None) else None
    elif case["kind"] == "dataset":
        from core.data import load_dataset

        load_dataset(case["dataset"], **case["params"])
    elif case["kind"] == "build":
        from core.models.network import build_model

        dataset = RunConfig(dataset=case["dataset"]).load_dataset()
        build_model(config.model_config(dataset), "cpu", torch.Generator().manual_seed(0))
    elif case["kind"] == "predict":
        # The Pruning page: the test set's prediction (kept in the page cache), its metric cards and
        # the accuracy-vs-R chart.
        from core.predict import predict
        from dashboard import backend

        dataset, model = prepared["dataset"], prepared["model"]
        prediction = predict(model, dataset.x_test, mode="bma", samples=case["samples"], seed=0)
        arrays = {
            name: np.asarray(getattr(prediction, name))
            for name in (
                "probs",
                "probs_per_draw",
                "mean",
                "mean_per_draw",
                "std_per_draw",
                "epistemic_variance",
                "aleatoric_variance",
                "total_variance",
                "density",
                "disconnected",
            )
            if getattr(prediction, name, None) is not None
        }
        backend.test_metrics(arrays, dataset)
        if dataset.task == "classification":
            backend.accuracy_by_samples(arrays["probs_per_draw"], dataset.y_test, case["samples"])
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    done.set()
    loads.append(os.getloadavg()[0])
    result = {
        "peak_added_bytes": (status_kb("VmHWM") - before) * 1024,
        "rss_before_bytes": before * 1024,
        "seconds": seconds,
        "cpu_seconds": (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime),
        "speed": speed.as_dict(),
        "load": os.getloadavg()[0],
        "load_at_start": load_at_start,
        "load_mean": sum(loads) / len(loads),
    }
    if case["kind"] == "train":
        result["epochs_done"] = measured_epochs
    return result


def measure(cases: list[dict]) -> dict:
    measured = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    for case in cases:
        key = case_id(case)
        if key in measured:
            continue
        print(f"measuring {key}", flush=True)
        with tempfile.TemporaryDirectory() as store:
            env = {**os.environ, "BNN_CACHE_DIR": store, "OMP_NUM_THREADS": "1", **BEYOND_LIMITS}
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.admission_model", "--child", key],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
        if done.returncode != 0:
            print(done.stderr[-3000:], flush=True)
            measured[key] = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
        else:
            measured[key] = json.loads(done.stdout.strip().splitlines()[-1])
        MEASURED.write_text(json.dumps(measured, indent=1, sort_keys=True))
    return measured


def estimate(case: dict, speed: dict) -> tuple[float, float]:
    """The model's (bytes, seconds) for a case, with the speed the child measured."""
    from core import cost
    from core.runs.config import RunConfig

    probe = cost.Speed.from_dict(speed)
    if case["kind"] == "dataset":
        need = cost.dataset_cost(case["dataset"], case["params"], speed=probe)
        return need.bytes, need.seconds
    train = {"epochs": case.get("epochs", 1), "batch_size": case.get("batch_size", 100)}
    config = RunConfig(
        dataset=case["dataset"],
        dataset_params=case.get("params", {}),
        method=case["method"],
        hidden=case["hidden"],
        train=train,
        device="cpu",
    )
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    if case["kind"] == "build":
        need = cost.model_build_cost(config, shape, probe)
    elif case["kind"] == "train":
        need = cost.training_cost(config, shape, speed=probe)
    else:
        need = cost.prediction_cost(config, shape, n_inputs=shape.n_test, samples=case["samples"], speed=probe)
    return need.bytes, need.seconds


def describe(case: dict) -> str:
    params = ",".join(f"{k}={v}" for k, v in case.get("params", {}).items())
    where = case["dataset"] + (f"({params})" if params else "")
    if case["kind"] == "dataset":
        return f"generate {where}"
    widths = "-".join(map(str, case["hidden"]))
    if case["kind"] == "build":
        return f"build {case['method']} [{widths}] on {where}"
    if case["kind"] == "train":
        return f"train {case['method']} [{widths}] on {where}, {case['epochs']} ep, batch {case['batch_size']}"
    return f"predict {case['method']} [{widths}] on {where} test set, R={case['samples']}"


def write_table(measured: dict) -> None:
    from core.cost import MB

    rows, ratios = [], {"memory": [], "cpu": [], "wall": [], "wall_mean": []}
    shares = []
    loads = []
    for case in CASES:
        result = measured.get(case_id(case))
        if result is None:
            continue
        if "error" in result:
            rows.append(f"| {describe(case)} | error: {result['error'][:80]} |" + " |" * 10)
            continue
        bytes_estimate, seconds_estimate = estimate(case, result["speed"])
        # The wall-clock estimate: CPU seconds x the load factor the server would read at the start.
        load = result.get("load_at_start", result["load"])
        factor = max(1.0, load / (os.cpu_count() or 1))
        memory_ratio = bytes_estimate / max(result["peak_added_bytes"], 1)
        cpu_ratio = seconds_estimate / max(result["cpu_seconds"], 1e-3)
        wall_ratio = seconds_estimate * factor / max(result["seconds"], 1e-3)
        if "load_mean" in result:  # the same rule on the load averaged over the case
            mean_factor = max(1.0, result["load_mean"] / (os.cpu_count() or 1))
            ratios["wall_mean"].append((seconds_estimate * mean_factor / max(result["seconds"], 1e-3), describe(case)))
        shares.append(result["cpu_seconds"] / max(result["seconds"], 1e-3))
        for name, value in (("memory", memory_ratio), ("cpu", cpu_ratio), ("wall", wall_ratio)):
            ratios[name].append((value, describe(case)))
        loads += [load, result["load"]]
        rows.append(
            f"| {describe(case)} | {result['peak_added_bytes'] / MB:,.1f} | {bytes_estimate / MB:,.1f} | "
            f"{memory_ratio:.2f} | {result['cpu_seconds']:.2f} | {seconds_estimate:.2f} | {cpu_ratio:.2f} | "
            f"{result['seconds']:.2f} | {seconds_estimate * factor:.2f} | {wall_ratio:.2f} | "
            f"{load:.1f} / {result['load']:.1f} |"
        )
    lines = [
        "# Admission cost model against measurement",
        "",
        "`python -m benchmarks.admission_model` (each case in a fresh child process, one PyTorch thread;",
        "`--table` rewrites this table from benchmarks/results/admission_model.json with the current model).",
        "",
        "Memory: peak resident set added by the work (VmHWM after, minus VmRSS before; the peak is reset",
        "just before the work with `5 > /proc/self/clear_refs`). Estimates: core.cost with the speed probe",
        "the child measured at its start (what the server does once per process). CPU: the work's user +",
        "system seconds against the estimate; wall: the work's elapsed seconds against the estimate times",
        "the load factor (1-minute load average per core, at least 1) read when the case started.",
        "Ratio = estimate / measured; the target is 1 <= ratio <= 1.5.",
        "",
        f"The machine: {os.cpu_count()} cores shared with several other engineers' test and benchmark runs",
        "while this ran: the load column (start / end of the case) shows how loaded. The times are noisy:",
        "the wall-clock ratios most of all, since the load changed during a case. A work's share of a",
        "core near 1 at a load of 3-4 means the 1-minute load average overstated the contention it met.",
        "",
    ]
    if ratios["memory"]:
        for name, label in (
            ("memory", "Memory"),
            ("cpu", "CPU time"),
            ("wall", "Wall time"),
            ("wall_mean", "Wall time with the load averaged over the case (sampled each second)"),
        ):
            if not ratios[name]:
                continue
            low, high = min(ratios[name]), max(ratios[name])
            outside = sum(1 for value, _ in ratios[name] if not 1.0 <= value <= 1.5)
            lines.append(
                f"- {label} ratio from {low[0]:.2f} ({low[1]}) to {high[0]:.2f} ({high[1]}); "
                f"{outside} of {len(ratios[name])} outside 1-1.5."
            )
        lines += [
            f"- Load average during the cases: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores; "
            f"the work's share of a core (CPU / wall seconds) from {min(shares):.2f} to {max(shares):.2f}.",
            "",
        ]
    lines += [
        "| work | peak added MB | estimate MB | ratio | CPU s | estimate s | ratio | wall s | "
        "estimate x load | ratio | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    TABLE.write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--table", action="store_true", help="only rewrite the table from the measurements")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="measure only the cases under a million weights and 10 million predicted values "
        "(the full grid took about 30 minutes at load 7-12 on 2 cores and 16 minutes at "
        "load 4-10, mostly the 3000-wide trainings)",
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    os.environ.update(BEYOND_LIMITS)  # the estimates take the same configs
    cases = [
        case
        for case in CASES
        if not args.quick
        or (
            max(case.get("hidden", [0])) < 1000
            and case.get("samples", 0) * case.get("params", {}).get("n_test", 0) < 10**7
        )
    ]
    measured = json.loads(MEASURED.read_text()) if args.table and MEASURED.exists() else measure(cases)
    write_table(measured)


if __name__ == "__main__":
    main()
