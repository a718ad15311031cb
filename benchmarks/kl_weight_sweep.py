"""Density and MED-MEA accuracy per epoch of LBBNN on full MNIST for several KL weights.

    python -m benchmarks.kl_weight_sweep [--weights 1,0.1,0.05,0.02] [--epochs 15] [--preset fast-mnist]

Every run starts like the preset (a 3-epoch deterministic warm start, the same step sizes) and
differs only in the KL's weight: 1 is the ELBO. After every epoch the median probability model
(`mpm-mean`) and the posterior-mean network (`mean`) are scored on the test set. Runs are kept in
benchmarks/results/kl_weight_sweep.json (a rerun skips weights already there); the plot
kl_weight_sweep.png and the table kl_weight_sweep.md are rewritten from it.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
JSON_PATH = RESULTS / "kl_weight_sweep.json"


def sweep_one(preset: str, kl_weight: float, epochs: int, data_dir: str | None) -> dict[str, Any]:
    import numpy as np
    import torch

    from core.models.network import build_model
    from core.predict import evaluate
    from core.runs.presets import get_preset
    from core.train import train

    config = get_preset(preset).replace(train={"kl_weight": kl_weight, "epochs": epochs})
    dataset = config.load_dataset(data_dir)
    torch.manual_seed(config.seed)
    model = build_model(config.model_config(dataset), "cpu")
    rows: list[dict[str, Any]] = []
    seconds = [0.0]

    def after_epoch(record: dict[str, Any]) -> None:
        seconds[0] += record["seconds"]
        if record["phase"] == "warm-start":
            return
        mpm = evaluate(model, dataset, "mpm-mean", 1)
        mean = evaluate(model, dataset, "mean", 1)
        rows.append(
            {
                "epoch": len(rows) + 1,
                "train_seconds": round(seconds[0], 1),
                "density": mpm["density"],
                "layer_density": mpm.get("layer_density"),
                "mpm_mean_accuracy": mpm["accuracy"],
                "mean_accuracy": mean["accuracy"],
                "data_term": record["data_term"],
                "kl": record["kl"],
            }
        )
        print(
            f"  kl_weight {kl_weight}: epoch {len(rows)} density {mpm['density']:.4f} "
            f"MED-MEA {mpm['accuracy']:.4f} ALL-MEA {mean['accuracy']:.4f}",
            flush=True,
        )

    x = torch.from_numpy(np.ascontiguousarray(dataset.x_train))
    y = torch.from_numpy(np.ascontiguousarray(dataset.y_train))
    train(model, x, y, config.train, seed=config.seed, progress=after_epoch)
    return {
        "preset": preset,
        "kl_weight": kl_weight,
        "epochs": epochs,
        "rows": rows,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def render_markdown(entries: list[dict[str, Any]]) -> str:
    lines = ["| KL weight | epochs | density | MED-MEA | ALL-MEA | per-layer density |", "|---|---|---|---|---|---|"]
    for e in sorted(entries, key=lambda e: -e["kl_weight"]):
        for r in e["rows"]:
            if r["epoch"] in (1, 2, 5, 10, e["epochs"]):
                layers = " / ".join(f"{d:.3f}" for d in (r.get("layer_density") or []))
                lines.append(
                    f"| {e['kl_weight']:g} | {r['epoch']} | {r['density']:.4f} | "
                    f"{r['mpm_mean_accuracy']:.4f} | "
                    f"{r['mean_accuracy']:.4f} | {layers} |"
                )
    return "\n".join(lines) + "\n"


def plot(entries: list[dict[str, Any]], path: Path) -> None:
    from benchmarks.figures import save, subplots

    fig, (ax_density, ax_acc) = subplots(2, (10, 3.8))
    for e in sorted(entries, key=lambda e: -e["kl_weight"]):
        epochs = [r["epoch"] for r in e["rows"]]
        label = f"KL x {e['kl_weight']:g}" + (" (ELBO)" if e["kl_weight"] == 1 else "")
        ax_density.plot(epochs, [r["density"] for r in e["rows"]], marker=".", label=label)
        ax_acc.plot(epochs, [r["mpm_mean_accuracy"] for r in e["rows"]], marker=".", label=label)
    ax_density.axhspan(0.079, 0.090, color="grey", alpha=0.2, label="Hubin & Storvik 2024 Table 2")
    ax_density.set(xlabel="epoch after the warm start", ylabel="density of the MPM", yscale="log")
    ax_acc.axhline(0.981, color="grey", ls="--", lw=1, label="Table 2 MED-MEA")
    ax_acc.set(xlabel="epoch after the warm start", ylabel="MED-MEA test accuracy", ylim=(0.9, 0.99))
    ax_density.legend(fontsize=7)
    ax_acc.legend(fontsize=7)
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="1,0.1,0.05,0.02")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--preset", default="fast-mnist")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    entries = json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else []
    for weight in (float(w) for w in args.weights.split(",") if w.strip()):
        if any(e["kl_weight"] == weight and e["epochs"] == args.epochs and e["preset"] == args.preset for e in entries):
            print(f"kl_weight {weight}: recorded already")
            continue
        entries.append(sweep_one(args.preset, weight, args.epochs, args.data_dir))
        RESULTS.mkdir(parents=True, exist_ok=True)
        JSON_PATH.write_text(json.dumps(entries, indent=1))
    (RESULTS / "kl_weight_sweep.md").write_text(render_markdown(entries))
    plot(entries, RESULTS / "kl_weight_sweep.png")
    print(render_markdown(entries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
