"""Why the 1-D toy fits were straight lines, and what the small-regression defaults change.

Trains `lbbnn` and `bnn` on toy-sine-gaps and toy-cubic with the shipped defaults, with the
defaults before them (16-16, no KL annealing, LBBNN biases with inclusion indicators and initial
alpha in [0.1, 0.9]) and with one ingredient of the new defaults taken away at a time, plus a
deterministic net of both widths. For each: bma test RMSE (original units), the learned noise sd,
density, and the epistemic band (R = 100) inside the gaps and outside the data, each over its width
near the training points. The NUTS reference's gap ratio is added when a cached reference of the
set exists (`python -m core reference toy-sine-gaps`, found in --reference-cache).

    OMP_NUM_THREADS=1 python -m benchmarks.toy_regression [--seeds 0,1] [--reference-cache DIR]

Writes benchmarks/results/toy_regression.{md,json}; runs are cached in $BNN_CACHE_DIR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
OLD_LBBNN = {"bias_prior": "spike-and-slab", "init_inclusion_low": 0.1, "init_inclusion_high": 0.9}

# name -> (methods, config changes); every config starts from {"dataset": ..., "method": ...}.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "defaults": (("lbbnn", "bnn"), {}),
    "before (16-16, no annealing, old LBBNN options)": (
        ("lbbnn", "bnn"),
        {"hidden": [16, 16], "train": {"kl_anneal_epochs": 0}, "lbbnn_options": OLD_LBBNN},
    ),
    "defaults without KL annealing": (("lbbnn", "bnn"), {"train": {"kl_anneal_epochs": 0}}),
    "defaults with 16-16": (("lbbnn", "bnn"), {"hidden": [16, 16]}),
    "defaults, bias with inclusion indicator": (("lbbnn",), {"lbbnn_options": {"bias_prior": "spike-and-slab"}}),
    "defaults, initial alpha in [0.1, 0.9]": (
        ("lbbnn",),
        {"lbbnn_options": {"init_inclusion_low": 0.1, "init_inclusion_high": 0.9}},
    ),
    # Attempts at in-between uncertainty (the band inside the gaps; docs/why-lbbnn-over-prunes.md).
    "defaults with KL weight 1 (the ELBO)": (("lbbnn", "bnn"), {"train": {"kl_weight": 1.0}}),
    "defaults with prior variance 10": (
        ("lbbnn", "bnn"),
        {"lbbnn_options": {"slab_variance": 10.0}, "bnn_options": {"prior_variance": 10.0}},
    ),
    "defaults with 64-64-64": (("lbbnn", "bnn"), {"hidden": [64, 64, 64]}),
    "defaults with 256-256": (("lbbnn", "bnn"), {"hidden": [256, 256]}),
    "defaults, initial sigma 0.1": (
        ("lbbnn", "bnn"),
        {"lbbnn_options": {"init_sigma": 0.1}, "bnn_options": {"init_sigma": 0.1}},
    ),
    "deterministic 16-16": (("fnn",), {"hidden": [16, 16]}),
    "deterministic 64-64": (("fnn",), {}),
}
DATASETS = ("toy-sine-gaps", "toy-cubic")


FAMILY_OPTION_KEYS = {
    "lbbnn_options": lambda method: method.startswith("lbbnn"),
    "bnn_options": lambda method: method == "bnn",
}


def config_for(dataset: str, method: str, changes: dict[str, Any], seed: int):
    from core.runs import RunConfig

    values: dict[str, Any] = {"dataset": dataset, "method": method, "seed": seed}
    for key, value in changes.items():
        if key in FAMILY_OPTION_KEYS:  # family options, for that family only
            if FAMILY_OPTION_KEYS[key](method):
                values["family_options"] = dict(value)
        else:
            values[key] = value
    return RunConfig.from_dict(values)


def measure(config, cache_dir) -> dict[str, Any]:
    from core.predict import evaluate, predict
    from core.predict.metrics.regression import band_width_ratios
    from core.runs.training import train_run

    started = time.perf_counter()
    run = train_run(config, cache_dir=cache_dir)
    dataset = run.dataset()
    rmse = evaluate(run.model, dataset, "bma", 100)["rmse"]
    band = np.sqrt(predict(run.model, dataset.x_grid, "bma", 100).epistemic_variance)
    noise = None
    likelihood = run.model.likelihood
    if hasattr(likelihood, "log_noise_std"):
        noise = float(likelihood.log_noise_std.detach().exp()) * float(dataset.target_std)
    return {
        "rmse": float(rmse),
        "noise_sd": noise,
        "density": float(run.metrics.get("density", float("nan"))),
        **band_width_ratios(dataset.x_grid, dataset.x_train, band),
        "seconds": time.perf_counter() - started,
    }


ELBO_SETTINGS = {"hidden": [16, 16], "likelihood_options": {"noise": "fixed", "noise_std": 0.06}}


def elbo_rows(cache_dir, seed: int = 0) -> list[dict[str, Any]]:
    """The ELBO (KL weight 1) of the `bnn` trained with KL weight 1 and of the one trained with 0.1,
    both at a fixed noise sd of 0.06 (standardised) on toy-sine-gaps: which one the ELBO prefers."""
    import torch

    from benchmarks.elbo_solutions import elbo_terms
    from core.runs.training import train_run

    rows = []
    for kl_weight in (1.0, 0.1):
        config = config_for(
            "toy-sine-gaps", "bnn", {**ELBO_SETTINGS, "train": {"kl_anneal_epochs": 0, "kl_weight": kl_weight}}, seed
        )
        run = train_run(config, cache_dir=cache_dir)
        dataset = run.dataset()
        terms = elbo_terms(run.model, torch.from_numpy(dataset.x_train), torch.from_numpy(dataset.y_train), draws=200)
        rows.append(
            {
                "trained_kl_weight": kl_weight,
                "rmse": measure(config, cache_dir)["rmse"],
                **{k: terms[k] for k in ("expected_log_likelihood", "kl", "elbo")},
            }
        )
    return rows


def reference_gap_ratio(dataset_name: str, cache_dir: str | None) -> dict[str, float] | None:
    if not cache_dir:
        return None
    from core.predict.metrics.regression import band_width_ratios
    from core.reference.store import ReferenceStore, load_reference

    entries = [
        e
        for e in ReferenceStore(cache_dir).list()
        if e.get("status") == "ok" and e.get("config", {}).get("dataset") == dataset_name
    ]
    # The longest chain of the set's references: the best estimate of the posterior.
    for entry in sorted(entries, key=lambda e: -e["config"].get("samples", 0) * e["config"].get("chains", 1))[:1]:
        reference = load_reference(entry["reference_id"], cache_dir=cache_dir)
        dataset = reference.config.load_dataset()
        band = reference.function_samples(dataset.x_grid).std(axis=0).reshape(-1)
        return {"hidden": list(reference.config.hidden), **band_width_ratios(dataset.x_grid, dataset.x_train, band)}
    return None


def render(result: dict[str, Any]) -> str:
    lines = [
        "## Toy regression: the small-regression defaults",
        "",
        f"Command: `{result['command']}` ({result['date']}, {result['machine']}). bma with R = 100; "
        "RMSE and noise sd in the data's units; band ratios: mean epistemic sd in the gaps / outside "
        "the data over its mean within 5% of the training points. Each cell: one run per seed.",
        "",
    ]
    for dataset in result["datasets"]:
        lines += [
            f"### {dataset}",
            "",
            "| setting | method | seed | RMSE | noise sd | density | gap ratio | outside ratio |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in (r for r in result["rows"] if r["dataset"] == dataset):
            noise = "" if row["noise_sd"] is None else f"{row['noise_sd']:.3g}"
            lines.append(
                f"| {row['variant']} | {row['method']} | {row['seed']} | {row['rmse']:.3f} | {noise} | "
                f"{row['density']:.3f} | {row['gap_ratio']:.2f} | {row['outside_ratio']:.2f} |"
            )
        ref = result["references"].get(dataset)
        if ref:
            lines += [
                "",
                f"NUTS reference (1-{'-'.join(map(str, ref['hidden']))}-1, N(0, 1) prior): gap ratio "
                f"{ref['gap_ratio']:.2f}, outside ratio {ref['outside_ratio']:.2f}.",
            ]
        lines.append("")
    if result.get("elbo"):
        lines += [
            "### Which fit the ELBO prefers (toy-sine-gaps, `bnn` 1-16-16-1, noise sd fixed at 0.06 "
            "standardised, seed 0)",
            "",
            "| trained with KL weight | bma RMSE | E log-lik (nats) | KL (nats) | ELBO (nats) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for row in result["elbo"]:
            lines.append(
                f"| {row['trained_kl_weight']:g} | {row['rmse']:.3f} | {row['expected_log_likelihood']:.1f} | "
                f"{row['kl']:.1f} | {row['elbo']:.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import datetime
    import os
    import platform

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--reference-cache", default=None, help="run store with cached NUTS references")
    from core.settings import CACHE_DIR  # BNN_CACHE_DIR, read (and checked) where every BNN_* is

    parser.add_argument("--cache-dir", default=CACHE_DIR.read())
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    datasets = [d for d in args.datasets.split(",") if d]
    rows = []
    for dataset in datasets:
        for variant, (methods, changes) in VARIANTS.items():
            for method in methods:
                for seed in seeds:
                    row = {
                        "dataset": dataset,
                        "variant": variant,
                        "method": method,
                        "seed": seed,
                        **measure(config_for(dataset, method, changes, seed), args.cache_dir),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    result = {
        "command": "python -m benchmarks.toy_regression " + " ".join(argv or sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "datasets": datasets,
        "rows": rows,
        "references": {d: reference_gap_ratio(d, args.reference_cache) for d in datasets},
        "elbo": elbo_rows(args.cache_dir),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "toy_regression.json").write_text(json.dumps(result, indent=1))
    (RESULTS / "toy_regression.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
