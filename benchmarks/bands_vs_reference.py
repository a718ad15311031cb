"""Regression bands of every family against the NUTS reference posterior.

For each toy set: train every regression family (settings from `band_config`, the one
place to change after the training defaults move), predict on the dataset's dense x
grid with bma, mpm, the collapsed predictive (Gaussian last layer) and its box
variant (Zeng & Van den Broeck 2023), and compare with the cached NUTS reference (`python -m core
reference DATASET`, computed here when missing):

- MAE of the predictive mean, of the 5% and of the 95% quantile against the
  reference's, over the grid (original units);
- coverage of the held-out test points by the central 90% interval (nominal 0.90).

Writes benchmarks/results/bands_vs_reference.{md,json,png}. Needs
requirements-reference.txt (pyro-ppl, matplotlib).

    OMP_NUM_THREADS=1 python -m benchmarks.bands_vs_reference [--datasets toy-cubic] [--families bnn,lbbnn]

`results_section()` returns the markdown section from the stored JSON, for the
generated benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
JSON_PATH = RESULTS / "bands_vs_reference.json"
MD_PATH = RESULTS / "bands_vs_reference.md"
PNG_PATH = RESULTS / "bands_vs_reference.png"

DATASETS = ("toy-sine-gaps", "toy-cubic", "toy-hetero")
FAMILIES = (
    "bnn",
    "bnn-mixture",
    "variational-dense",
    "lbbnn",
    "lbbnn-lfmvn",
    "horseshoe",
    "sparse-vd",
    "concrete-dropout",
    "fnn",
)
PREDICTIONS = ("bma", "mpm", "collapsed", "collapsed-box")
SAMPLES = 100  # posterior draws R of every family's prediction
BOX_TERMS = 4
LEVELS = (0.05, 0.95)
SEED = 0

# Training for the bands: full batch, a deterministic warm start, then the KL annealed in.
# Set BAND_TRAIN = None to use the shipped defaults (e.g. after a change of the small-regression defaults).
BAND_TRAIN: dict[str, Any] | None = {
    "warm_start_epochs": 1000,
    "epochs": 3000,
    "kl_anneal_epochs": 1000,
    "learning_rates": {"weights": 1e-2, "scales": 1e-2, "likelihood": 1e-2},
}


def band_config(dataset: str, method: str):
    """The RunConfig a family is trained with for this benchmark: the reference's widths, full batch."""
    from core.data import load_dataset
    from core.reference.posterior import DEFAULT_HIDDEN
    from core.runs import RunConfig

    train = None if BAND_TRAIN is None else dict(BAND_TRAIN, batch_size=load_dataset(dataset).n_train)
    values = dict(dataset=dataset, method=method, hidden=DEFAULT_HIDDEN.get(dataset, (64,)), seed=SEED)
    if train is not None:
        values["train"] = train
    return RunConfig(**values)


def family_bands(run, x: np.ndarray, prediction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predictive mean and the LEVELS quantiles on x (original units)."""
    from core.predict import predict
    from core.predict.collapsed import collapsed_predict, gaussian_mixture_quantiles

    dataset = run.dataset()
    if prediction.startswith("collapsed"):
        variant = "box" if prediction == "collapsed-box" else "gaussian"
        predictive = collapsed_predict(run, x, samples=SAMPLES, seed=SEED, variant=variant, box_terms=BOX_TERMS)
        predictive = predictive.unstandardised(dataset.target_mean, dataset.target_std)
        low, high = predictive.quantiles(LEVELS)
        return predictive.mean, low, high
    p = predict(run, x, mode=prediction, samples=SAMPLES, seed=SEED).unstandardised(
        dataset.target_mean, dataset.target_std
    )
    low, high = gaussian_mixture_quantiles(p.mean_per_draw, p.std_per_draw, LEVELS)
    return np.asarray(p.mean, dtype=np.float64), low, high


def coverage(low: np.ndarray, high: np.ndarray, x_grid: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> float:
    """Fraction of test points inside [low, high], the band interpolated from the grid."""
    grid = x_grid[:, 0]
    lo, hi = np.interp(x_test[:, 0], grid, low), np.interp(x_test[:, 0], grid, high)
    return float(np.mean((y_test >= lo) & (y_test <= hi)))


def run_benchmark(datasets, families, predictions) -> dict[str, Any]:
    from core.reference import compute_reference, default_config
    from core.runs import train_run

    results: dict[str, Any] = {"samples": SAMPLES, "box_terms": BOX_TERMS, "train": BAND_TRAIN, "datasets": {}}
    for name in datasets:
        posterior, _ = compute_reference(default_config(name))
        ref_cfg = posterior.config
        dataset = ref_cfg.load_dataset()
        x, y_test = dataset.x_grid.astype(np.float64), dataset.unstandardise(dataset.y_test)
        ref = posterior.bands(x, LEVELS)
        ref_low, ref_high = ref[f"q{LEVELS[0]:g}"], ref[f"q{LEVELS[1]:g}"]
        entry = {
            "reference": {
                "id": posterior.reference_id,
                "hidden": list(ref_cfg.hidden),
                "chains": ref_cfg.chains,
                "samples": ref_cfg.samples,
                "warmup": ref_cfg.warmup,
                "seconds": posterior.seconds,
                "diagnostics": {k: v for k, v in posterior.diagnostics.items()},
                "coverage_90": coverage(ref_low, ref_high, x, dataset.x_test, y_test),
            },
            "rows": [],
            "curves": {"x": x[:, 0].tolist(), "reference": [ref["mean"].tolist(), ref_low.tolist(), ref_high.tolist()]},
        }
        for family in families:
            started = time.perf_counter()
            run = train_run(band_config(name, family))
            train_seconds = time.perf_counter() - started
            for prediction in predictions:
                started = time.perf_counter()
                mean, low, high = family_bands(run, x, prediction)
                row = {
                    "family": family,
                    "prediction": prediction,
                    "mae_mean": float(np.mean(np.abs(mean - ref["mean"]))),
                    "mae_q05": float(np.mean(np.abs(low - ref_low))),
                    "mae_q95": float(np.mean(np.abs(high - ref_high))),
                    "coverage_90": coverage(low, high, x, dataset.x_test, y_test),
                    "run_id": run.run_id,
                    "train_seconds": train_seconds,
                    "predict_seconds": time.perf_counter() - started,
                }
                entry["rows"].append(row)
                entry["curves"][f"{family}/{prediction}"] = [mean.tolist(), low.tolist(), high.tolist()]
                print(
                    f"{name:14s} {family:18s} {prediction:14s} mean {row['mae_mean']:8.4f}  "
                    f"q05 {row['mae_q05']:8.4f}  q95 {row['mae_q95']:8.4f}  cover90 {row['coverage_90']:.3f}",
                    flush=True,
                )
        results["datasets"][name] = entry
    return results


def render_section(results: dict[str, Any]) -> str:
    """The markdown section (tables per dataset) for benchmarks/RESULTS.md."""
    lines = [
        "## Regression bands vs the NUTS reference",
        "",
        "Each family trained on the toy set (settings: `benchmarks/bands_vs_reference.py:BAND_TRAIN`, "
        f"`{json.dumps(results.get('train'))}`, full batch), predicted with R = {results['samples']} draws on "
        "the dataset's 400-point x grid, against the NUTS posterior of the `bnn` model (same widths, N(0, 1) "
        "prior, sampled noise scale; `python -m core reference DATASET`). MAE of the predictive mean and of the "
        "5% / 95% quantiles over the grid, in the data's units; coverage: share of the 200 held-out points in "
        f"the central 90% interval. collapsed-box integrates the {results['box_terms']} widest last-layer terms "
        "out under a box q (Zeng & Van den Broeck 2023). `bnn` and `variational-dense` are the same model and q "
        "(same rows); "
        "fnn and concrete-dropout have point-mass last layers, so their collapsed rows equal bma up to the "
        "box's triangular noise. Plot: `bands_vs_reference.png`; printed output: `bands_vs_reference.log`.",
        "",
    ]
    for name, entry in results["datasets"].items():
        ref = entry["reference"]
        d = ref["diagnostics"]
        lines += [
            f"### {name}",
            "",
            f"Reference `{ref['id']}`: 1-{'-'.join(map(str, ref['hidden']))}-1, {ref['chains']} chains x "
            f"{ref['samples']} draws after {ref['warmup']} warm-up, {ref['seconds']:.0f} s; function R-hat max "
            f"{d['function_rhat_max']:.3f}, ESS min {d['function_ess_min']:.0f}, noise std "
            f"{d['noise_std_mean']:.3g}; its own 90% coverage {ref['coverage_90']:.3f}."
            + "".join(f" Warning: {w}." for w in d.get("warnings", [])),
            "",
            "| family | prediction | MAE mean | MAE q05 | MAE q95 | coverage 90% |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for row in entry["rows"]:
            lines.append(
                f"| {row['family']} | {row['prediction']} | {row['mae_mean']:.4g} | {row['mae_q05']:.4g} | "
                f"{row['mae_q95']:.4g} | {row['coverage_90']:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def without_curves(results: dict[str, Any]) -> dict[str, Any]:
    """The numbers only: the grid curves go into the plot, not the committed JSON."""
    return {
        **results,
        "datasets": {
            name: {k: v for k, v in entry.items() if k != "curves"} for name, entry in results["datasets"].items()
        },
    }


def results_section(path: Path = JSON_PATH) -> str:
    """render_section of the committed results (what RESULTS.md includes)."""
    return render_section(json.loads(Path(path).read_text(encoding="utf-8")))


def plot(
    results: dict[str, Any], path: Path, families=("bnn", "lbbnn", "horseshoe"), predictions=("bma", "collapsed")
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from core.data import load_dataset

    names = list(results["datasets"])
    columns = [(f, p) for f in families for p in predictions]
    fig, axes = plt.subplots(len(names), len(columns), figsize=(3.2 * len(columns), 2.8 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        entry, dataset = results["datasets"][name], load_dataset(name)
        x = np.asarray(entry["curves"]["x"])
        ref_mean, ref_low, ref_high = map(np.asarray, entry["curves"]["reference"])
        for j, (family, prediction) in enumerate(columns):
            ax = axes[i][j]
            ax.fill_between(x, ref_low, ref_high, color="0.8", label="NUTS 5-95%")
            ax.plot(x, ref_mean, color="0.4", lw=1)
            curves = entry["curves"].get(f"{family}/{prediction}")
            if curves is not None:
                mean, low, high = map(np.asarray, curves)
                ax.plot(x, mean, color="C0", lw=1)
                ax.plot(x, low, color="C0", lw=0.8, ls="--")
                ax.plot(x, high, color="C0", lw=0.8, ls="--", label=f"{prediction} 5-95%")
            ax.scatter(dataset.x_train[:, 0], dataset.unstandardise(dataset.y_train), s=4, color="k", zorder=3)
            span = ref_high.max() - ref_low.min()
            ax.set_ylim(ref_low.min() - 0.3 * span, ref_high.max() + 0.3 * span)
            ax.set_title(f"{name}: {family} {prediction}", fontsize=8)
            ax.tick_params(labelsize=6)
            if i == 0 and j == 0:
                ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--predictions", default=",".join(PREDICTIONS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = run_benchmark(args.datasets.split(","), args.families.split(","), args.predictions.split(","))
    RESULTS.mkdir(parents=True, exist_ok=True)
    JSON_PATH.write_text(json.dumps(without_curves(results), indent=1), encoding="utf-8")
    MD_PATH.write_text(render_section(results) + "\n", encoding="utf-8")
    plot(results, PNG_PATH)
    print(f"wrote {MD_PATH}, {JSON_PATH.name}, {PNG_PATH.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
