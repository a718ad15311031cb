"""Why LBBNN over-prunes: the ELBO of the recipe's network against the ELBO-converged one.

    python -m benchmarks.elbo_solutions [--preset fast-mnist] [--epochs 20] [--draws 5]

1. Trains (or loads from the run store) the preset: a tempered objective that stops near Hubin & Storvik (2024)
   Table 2's density.
2. Continues from that network with the untempered objective (kl_weight = 1, the ELBO itself),
   every other setting unchanged, for --epochs epochs, measuring after each epoch the MED-MEA test
   accuracy, the density and the ELBO.
3. Compares the ELBO of both networks on the full training set: the expected log-likelihood by
   Monte Carlo (--draws passes of the training estimator over all N examples) minus the exact KL,
   split into its inclusion and slab parts, per kept weight.

Writes benchmarks/results/elbo_solutions.json, .md and .png.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def elbo_terms(model, x, y, draws: int, batch: int = 2000) -> dict[str, float]:
    """E_q log p(D | w) (Monte Carlo over the training estimator) and KL(q || p), in nats."""
    import torch

    from core.models.lbbnn import bernoulli_kl_from_logits

    model.eval()
    with torch.no_grad():
        total = 0.0
        for _ in range(draws):
            for start in range(0, x.shape[0], batch):
                out = model(x[start : start + batch])
                total += float(model.likelihood.log_prob(out, y[start : start + batch]).sum())
        expected_log_lik = total / draws
        kl = float(model.kl())
        inclusion_kl, slab_kl, kept = 0.0, 0.0, 0
        for layer in model.layers:
            if hasattr(layer, "inclusion_logit") and hasattr(layer, "slab_kl"):
                alpha = layer.inclusion_probability
                inclusion_kl += float(
                    bernoulli_kl_from_logits(layer.inclusion_logit, layer.prior_inclusion_logit).sum()
                )
                slab_kl += float((alpha * layer.slab_kl()).sum())
                kept += int((alpha > 0.5).sum())
    # Both KL parts are summed over every weight (the excluded ones cost little) and divided by the
    # number kept in the table: the cost of the network per weight it keeps.
    return {
        "expected_log_likelihood": expected_log_lik,
        "kl": kl,
        "elbo": expected_log_lik - kl,
        "inclusion_kl": inclusion_kl,
        "slab_kl": slab_kl,
        "kept_weights": kept,
    }


def mpm_accuracy(model, dataset) -> tuple[float, float]:
    from core.predict import evaluate

    result = evaluate(model, dataset, "mpm-mean", 1)
    return float(result["accuracy"]), float(result["density"])


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import torch

    from core.runs.presets import get_preset
    from core.runs.training import train_run
    from core.train import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fast-mnist")
    parser.add_argument("--epochs", type=int, default=20, help="epochs of the untempered objective")
    parser.add_argument("--draws", type=int, default=5, help="Monte Carlo passes for the expected log-likelihood")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)

    config = get_preset(args.preset)
    run = train_run(
        config,
        data_dir=args.data_dir,
        progress=lambda r: print(
            f"  [{args.preset}] epoch {r['epoch']} [{r['phase']}] density {r['density']:.4f}", flush=True
        ),
    )
    dataset = run.dataset()
    x = torch.from_numpy(np.ascontiguousarray(dataset.x_train))
    y = torch.from_numpy(np.ascontiguousarray(dataset.y_train))
    n = x.shape[0]
    tempered = run.model
    acc, density = mpm_accuracy(tempered, dataset)
    start = {"accuracy": acc, "density": density, **elbo_terms(tempered, x, y, args.draws)}
    print(f"recipe network: MED-MEA {acc:.4f} at density {density:.4f}, ELBO {start['elbo']:.0f} nats")

    elbo_model = copy.deepcopy(tempered)
    elbo_config = dataclasses.replace(
        config.train,
        warm_start_epochs=0,
        pretrain_epochs=0,
        posttrain_epochs=0,
        epochs=args.epochs,
        kl_weight=1.0,
        kl_anneal_epochs=0,
    )
    trajectory: list[dict[str, Any]] = []

    def after_epoch(record: dict[str, Any]) -> None:
        acc_e, density_e = mpm_accuracy(elbo_model, dataset)
        row = {
            "epoch": record["epoch"],
            "accuracy": acc_e,
            "density": density_e,
            "minus_elbo_per_example": record["data_term"] + record["kl"] / n,
        }
        trajectory.append(row)
        print(
            f"  ELBO epoch {row['epoch']}: MED-MEA {acc_e:.4f} density {density_e:.4f} "
            f"-ELBO/N {row['minus_elbo_per_example']:.4f}",
            flush=True,
        )

    train(elbo_model, x, y, elbo_config, seed=config.seed + 1, progress=after_epoch)
    acc, density = mpm_accuracy(elbo_model, dataset)
    end = {"accuracy": acc, "density": density, **elbo_terms(elbo_model, x, y, args.draws)}
    result = {
        "preset": args.preset,
        "run_id": run.run_id,
        "n_train": n,
        "recipe": start,
        "elbo_converged": end,
        "trajectory": trajectory,
        "epochs": args.epochs,
        "draws": args.draws,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "elbo_solutions.json").write_text(json.dumps(result, indent=1))
    (RESULTS / "elbo_solutions.md").write_text(render_markdown(result))
    plot(result, RESULTS / "elbo_solutions.png")
    print(render_markdown(result))
    return 0


def render_markdown(result: dict[str, Any]) -> str:
    n = result["n_train"]
    rows = [
        ("recipe (`%s`, KL x 0.05)" % result["preset"], result["recipe"]),
        (f"the same, then {result['epochs']} epochs of the ELBO", result["elbo_converged"]),
    ]
    lines = [
        "| network | MED-MEA accuracy | density | E log-lik (nats) | KL (nats) | ELBO (nats) | ELBO / N | "
        "inclusion KL / kept weights | slab KL / kept weights |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows:
        kept = max(r["kept_weights"], 1)
        lines.append(
            f"| {label} | {r['accuracy']:.4f} | {r['density']:.4f} | {r['expected_log_likelihood']:.0f} | "
            f"{r['kl']:.0f} | {r['elbo']:.0f} | {r['elbo'] / n:.3f} | {r['inclusion_kl'] / kept:.2f} | "
            f"{r['slab_kl'] / kept:.2f} |"
        )
    gain = result["elbo_converged"]["elbo"] - result["recipe"]["elbo"]
    lines.append("")
    lines.append(
        f"The ELBO-trained network's ELBO is {gain:+.0f} nats ({gain / n:+.3f} per training example) "
        "against the recipe's: "
        f"{'higher, so the mean-field optimum is sparser than the recipe' if gain > 0 else 'lower'}. "
        f"N = {n}; {result['draws']} Monte Carlo passes; {result['date']}."
    )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    from benchmarks.figures import save, subplots

    t = result["trajectory"]
    epochs = [0] + [r["epoch"] for r in t]
    fig, axes = subplots(3, (12, 3.6))
    series = [
        ("MED-MEA test accuracy", [result["recipe"]["accuracy"]] + [r["accuracy"] for r in t], "linear"),
        ("density", [result["recipe"]["density"]] + [r["density"] for r in t], "log"),
        ("-ELBO / N (training average)", [None] + [r["minus_elbo_per_example"] for r in t], "linear"),
    ]
    for ax, (label, values, scale) in zip(axes, series):
        xs = [e for e, v in zip(epochs, values) if v is not None]
        ax.plot(xs, [v for v in values if v is not None], marker=".")
        ax.set(xlabel="epochs of the ELBO after the recipe", title=label, yscale=scale)
    save(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
