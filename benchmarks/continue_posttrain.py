"""More post-training on a stored run's cut: N epochs with its structure fixed, MED-MEA and density after each.

    python -m benchmarks.continue_posttrain RUN --epochs 10 [--schedule cosine] [--weights-lr 0.003]
        [--scales-lr 0.05] [--density 0.0036] [--threads 2] [--seed 1]

An experiment beside the recipes (benchmarks/front_recipes.md's notes quote it): would a recipe's point
move with more post-training on the same cut? The run is loaded from the store (checksums verified), its
weights trained further in this process under its own training settings (KL weight, batch size) with the
main phases set to zero, and never stored: the stored run is unchanged. `--density` cuts the median
probability model to at most that density first (`posttrain_density`; default: the run's own). Writes
benchmarks/results/continue_posttrain.json (one entry per command) and continue_posttrain.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
JSON_PATH = RESULTS / "continue_posttrain.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core import validate
    from core.errors import BNNError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a stored run's id (or unique prefix)")
    parser.add_argument("--epochs", default="10")
    parser.add_argument("--schedule", default="cosine", choices=["constant", "cosine"])
    parser.add_argument("--weights-lr", default=None, help="step size of the weights (default: the run's)")
    parser.add_argument("--scales-lr", default=None, help="step size of the scales (default: the run's)")
    parser.add_argument("--density", default=None, help="cut to at most this density first (default: the run's)")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--seed", default="1", help="the minibatch order's seed (the run's own was 0)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        args.run = validate.text_of(args.run, "run", 64, r"[0-9a-f]{4,64}", "a run id (hex)")
        args.epochs = validate.whole_number(args.epochs, "--epochs", 1, 200)
        args.threads = validate.whole_number(args.threads, "--threads", 1, 64)
        args.seed = validate.whole_number(args.seed, "--seed", 0, 2**31 - 1)
        for name in ("weights_lr", "scales_lr"):
            if getattr(args, name) is not None:
                setattr(args, name, validate.real_number(getattr(args, name), "--" + name.replace("_", "-"), 1e-6, 1.0))
        if args.density is not None:
            args.density = validate.real_number(args.density, "--density", 1e-6, 1.0)
    except BNNError as exc:
        parser.error(str(exc))
    return args


def continue_posttrain(args: argparse.Namespace, echo=print) -> dict[str, Any]:
    import torch

    from core.predict import evaluate
    from core.runs import load_run
    from core.train import train

    torch.set_num_threads(args.threads)
    run = load_run(args.run)
    model, dataset, settings = run.model, run.dataset(), run.config.train
    rates = dict(settings.learning_rates)
    rates.update({k: v for k, v in (("weights", args.weights_lr), ("scales", args.scales_lr)) if v is not None})
    config = dataclasses.replace(
        settings,
        warm_start_epochs=0,
        pretrain_epochs=0,
        epochs=0,
        target_density=None,
        posttrain_epochs=args.epochs,
        posttrain_lr_schedule=args.schedule,
        posttrain_density=args.density if args.density is not None else settings.posttrain_density,
        learning_rates=rates,
    )

    def measure(phase: str, seconds: float) -> dict[str, Any]:
        with torch.no_grad():
            result = evaluate(model, dataset, "mpm-mean", 1)
        model.train()
        row = {
            "phase": phase,
            "mpm_mean_accuracy": result["accuracy"],
            "density": result["density"],
            "layer_density": result.get("layer_density"),
            "seconds": round(seconds, 1),
        }
        echo(f"  {phase:>10}: MED-MEA {row['mpm_mean_accuracy']:.4f} at density {row['density']:.5f}", flush=True)
        return row

    rows = [measure("stored", 0.0)]
    x, y = torch.as_tensor(dataset.x_train), torch.as_tensor(dataset.y_train)
    train(
        model,
        x,
        y,
        config,
        seed=args.seed,
        progress=lambda record: rows.append(measure(f"epoch {len(rows)}", record["seconds"])),
        snapshots=False,
    )
    return {
        "run_id": run.run_id,
        "settings": {
            "epochs": args.epochs,
            "schedule": args.schedule,
            "learning_rates": rates,
            "posttrain_density": config.posttrain_density,
            "seed": args.seed,
            "threads": args.threads,
        },
        "rows": rows,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def render(entries: list[dict[str, Any]]) -> str:
    lines = [
        "# More post-training on a stored run's cut",
        "",
        "Generated by `python -m benchmarks.continue_posttrain` (one section per command). MED-MEA: the median "
        "probability model with mean weights, R=1, on the test set; density: kept weights over all weights. "
        "The stored run is not changed.",
        "",
    ]
    for entry in entries:
        s = entry["settings"]
        lines += [
            f"## {entry['run_id']}: {s['epochs']} epochs, {s['schedule']} steps {s['learning_rates']}, "
            f"cut at {s['posttrain_density']}",
            "",
            f"{entry['date']}; `{entry['command']}`",
            "",
            "| after | MED-MEA | density | seconds |",
            "|---|---|---|---|",
            *(
                f"| {r['phase']} | {r['mpm_mean_accuracy']:.4f} | {r['density']:.5f} | {r['seconds']:.0f} |"
                for r in entry["rows"]
            ),
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from core.errors import BNNError

    started = time.time()
    try:
        entry = continue_posttrain(args)
    except BNNError as exc:
        print(f"continue_posttrain: {exc}", file=sys.stderr)
        return 2
    entry["command"] = "python -m benchmarks.continue_posttrain " + " ".join(argv if argv is not None else sys.argv[1:])
    entry["wall_seconds"] = round(time.time() - started, 1)
    path = args.results_dir / JSON_PATH.name
    entries = json.loads(path.read_text()) if path.exists() else []
    entries.append(entry)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1))
    (args.results_dir / "continue_posttrain.md").write_text(render(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
