"""The scale head on a frozen homoscedastic mean (`<family>+het-frozen-mean`, train.scale_head), checked
on the UCI runs in the store.

    python -m benchmarks.uci_frozen_mean [--sets protein,power] [--splits 0-4] [--samples 100]
                                         [--cache-dir DIR] [--data-dir DIR] [--out FILE]

Trains nothing (`python -m benchmarks.uci_table run --methods concrete-dropout+het-frozen-mean ...` does).
For every stored run of the variant on the asked sets and splits, beside its first stage (the homoscedastic
run named by its info's mean_run_id) and MC dropout on the same split: whether the means of its R posterior
draws on the test inputs are the first stage's bit for bit; test LL (bma, R draws, original units) of both;
the RMSE; the best test LL any homoscedastic Gaussian with that RMSE reaches (uci_paired.gaussian_bound),
which the first stage cannot exceed by much and the per-input scale can; the per-input noise sd's 10th,
50th and 90th percentile over the test inputs (posterior-mean network, original units). Writes
benchmarks/results/uci_frozen_mean.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import uci_table
from benchmarks.uci_paired import gaussian_bound
from core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "uci_frozen_mean.md"
METHOD = "concrete-dropout+het-frozen-mean"


def measure(
    sets: tuple[str, ...], splits: tuple[int, ...] | None, samples: int, cache_dir=None, data_dir=None
) -> list[dict[str, Any]]:
    from core.predict.engine import predict
    from core.runs.training import load_run

    store = RunStore(cache_dir)
    rows = []
    for _, _, _, split, config in uci_table.uci_grid((METHOD,), sets, splits).cells():
        run_id = config.run_id(config.load_dataset(data_dir).fingerprint)
        if not store.exists(run_id):
            continue
        run = load_run(run_id, cache_dir=store, data_dir=data_dir)
        mean_run = load_run(run.info["mean_run_id"], cache_dir=store, data_dir=data_dir)
        dataset = run.dataset()
        ours, theirs = (predict(r.model, dataset.x_test, "bma", samples=samples, seed=0) for r in (run, mean_run))
        noise = predict(run.model, dataset.x_test, "mean").std_per_draw[0] * dataset.target_std
        numbers = {
            r.run_id: uci_table.evaluate_run(r.run_id, cache_dir, data_dir, samples)["modes"]["bma"]
            for r in (run, mean_run)
        }
        ref = uci_table.reference(config.dataset, data_dir) or {}
        rows.append(
            {
                "set": uci_table.short_name(config.dataset),
                "split": split,
                "run_id": run_id,
                "mean_run_id": mean_run.run_id,
                "identical": bool(np.array_equal(ours.mean_per_draw, theirs.mean_per_draw)),
                "ll": numbers[run_id]["log_likelihood"],
                "mean_ll": numbers[mean_run.run_id]["log_likelihood"],
                "rmse": numbers[run_id]["rmse"],
                "mean_rmse": numbers[mean_run.run_id]["rmse"],
                "reference_ll": ref["log_likelihood"][split] if ref else float("nan"),
                "noise": np.percentile(noise, [10, 50, 90]).tolist(),
            }
        )
    return rows


def render(rows: list[dict[str, Any]], command: str, samples: int) -> str:
    lines = [
        "## A scale head on a frozen homoscedastic mean (UCI)",
        "",
        f"`{command}`: every stored `{METHOD}` run beside its first stage (the homoscedastic "
        f"`concrete-dropout` run) and MC dropout on the same split. Test LL: bma, R = {samples}, per test "
        "point in original units; bound: -0.5 log(2 pi e RMSE^2), the best any homoscedastic Gaussian with "
        "this RMSE reaches; same draws: the R draws' means on the test inputs equal the first stage's bit "
        "for bit; noise sd: the per-input sd's 10th / 50th / 90th percentile over the test inputs "
        "(posterior-mean network, original units).",
        "",
        "| set | split | same draws | RMSE (first stage) | bound | test LL first stage | test LL scale head "
        "| gain | MC dropout | noise sd p10 / p50 / p90 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        same = "yes" if row["identical"] else "**no**"
        lines.append(
            f"| {row['set']} | {row['split']} | {same} | {row['rmse']:.4f} ({row['mean_rmse']:.4f}) | "
            f"{gaussian_bound(row['rmse']):.3f} | {row['mean_ll']:.3f} | {row['ll']:.3f} | "
            f"{row['ll'] - row['mean_ll']:+.3f} | {row['reference_ll']:.3f} | "
            + " / ".join(f"{v:.2f}" for v in row["noise"])
            + " |"
        )
    for name in sorted({row["set"] for row in rows}):
        gains = [row["ll"] - row["mean_ll"] for row in rows if row["set"] == name]
        se = np.std(gains, ddof=1) / np.sqrt(len(gains)) if len(gains) > 1 else float("nan")
        lines += ["", f"{name}: gain of the scale head over its first stage {np.mean(gains):+.3f} ± {se:.3f} "]
        lines[-1] += f"(mean ± se over {len(gains)} splits)."
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="protein")
    parser.add_argument("--splits", default=None)
    parser.add_argument("--samples", type=int, default=uci_table.DEFAULT_SAMPLES)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sets = uci_table._names(args.sets, uci_table.UCI_DATASETS, prefix="uci-")
    rows = measure(sets, uci_table.parse_splits(args.splits), args.samples, args.cache_dir, args.data_dir)
    command = f"python -m benchmarks.uci_frozen_mean --sets {args.sets}" + (
        f" --splits {args.splits}" if args.splits else ""
    )
    args.out.write_text(render(rows, command, args.samples), encoding="utf-8")
    print(f"wrote {args.out} ({len(rows)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
