"""More post-training on a stored run's cut: N epochs with its structure fixed, MED-MEA and density after each.

    python -m benchmarks.continue_posttrain RUN --epochs 10 [--schedule cosine] [--weights-lr 0.003]
        [--scales-lr 0.05] [--density 0.0036] [--threads 2] [--seed 1]
        [--freeze-scales | --deterministic [--stored-structure]]
    python -m benchmarks.continue_posttrain RUN --density 0.01,0.006,0.0036 --epochs 3,3,6

Cuts in steps: with several densities (falling), the run is cut to each in turn and post-trained for the
matching number of epochs (a fresh optimiser per stage, as a new phase of core.train gets), so that the
weights left after a cut can take over what the dropped ones did before the next cut.

An experiment beside the recipes (benchmarks/front_recipes.md's notes quote it): would a recipe's point
move with more post-training on the same cut? The run is loaded from the store (checksums verified), its
weights trained further in this process under its own training settings (KL weight, batch size) with the
main phases set to zero, and never stored: the stored run is unchanged. `--density` cuts the median
probability model to at most that density first (`posttrain_density`; default: the run's own). Writes
benchmarks/results/continue_posttrain.json (one entry per command) and continue_posttrain.md.

What trains (each section's heading says which):
- default: the ELBO, means and scales, as the run's own post-training did;
- `--freeze-scales`: the same ELBO with the same weight noise, the scales (sparse VD's log sigma^2, the
  'scales' parameter group) held at their stored values: only the means train;
- `--deterministic`: NOT the ELBO. The cut's weights, at their posterior means, are copied into a
  deterministic network (`fnn`) of the same shape with the cut fixed, and fine-tuned on the data term
  alone (no weight noise, no KL): the point is then a pruned-and-fine-tuned network, not a posterior.
  With `--stored-structure` its structure is the stored run's fixed structure whole (the cut it was
  post-trained on, every weight of it, also those sparse VD's rule dropped since), cut to `--density`.

Two readings of each point: "MED-MEA" is the model's own median probability model (for sparse VD the
cut AND log alpha < 3, see below), "structure" is the fixed cut itself with the mean weights (every weight
of the cut kept). For `--deterministic` the two coincide: its median probability model is the cut.

Why the ELBO variants' MED-MEA stays "cut AND the family's rule" (core/models/base.py's keep_mask)
rather than the fixed cut: sparse VD has no inclusion variable; its median probability model is the
rule log alpha < 3 itself (Molchanov et al. 2017 prune by it: a weight with alpha > e^3 has a posterior
mean under a fifth of its posterior sd). Fixing the structure only says which weights may be non-zero;
the kept weights' q is still sparse VD's, so a weight whose log alpha passes 3 during post-training is,
by the same rule that made the cut, noise, and evaluating it at its mean would count a weight the
posterior cannot tell from zero. The "structure" column shows what keeping it anyway would give.
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
    from core.errors import BNNError, InputError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a stored run's id (or unique prefix)")
    parser.add_argument("--epochs", default="10", help="epochs (one number per --density stage, comma-separated)")
    parser.add_argument("--schedule", default="cosine", choices=["constant", "cosine"])
    parser.add_argument("--weights-lr", default=None, help="step size of the weights (default: the run's)")
    parser.add_argument("--scales-lr", default=None, help="step size of the scales (default: the run's)")
    parser.add_argument(
        "--density",
        default=None,
        help="cut to at most this density first (default: the run's); several, falling and comma-separated, "
        "cut in steps",
    )
    parser.add_argument("--threads", default="1")
    parser.add_argument("--seed", default="1", help="the minibatch order's seed (the run's own was 0)")
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument(
        "--freeze-scales", action="store_true", help="the ELBO with the scales held at their stored values"
    )
    variant.add_argument(
        "--deterministic", action="store_true", help="not the ELBO: fine-tune the cut's mean weights, no noise or KL"
    )
    parser.add_argument(
        "--stored-structure",
        action="store_true",
        help="with --deterministic: the stored run's fixed structure whole, not its median probability model",
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        args.run = validate.text_of(args.run, "run", 64, r"[0-9a-f]{4,64}", "a run id (hex)")
        if args.density is not None:
            args.density = [validate.real_number(d, "--density", 1e-6, 1.0) for d in str(args.density).split(",", 8)]
            if any(b >= a for a, b in zip(args.density, args.density[1:])):
                raise InputError(f"--density: the stages must fall, got {args.density}")
            if len(args.density) > 1 and args.deterministic:
                raise InputError("--density: cuts in steps are for the ELBO variants, not --deterministic")
        stages = len(args.density) if args.density is not None else 1
        args.epochs = [validate.whole_number(e, "--epochs", 1, 200) for e in str(args.epochs).split(",", 8)]
        if len(args.epochs) != stages:
            raise InputError(f"--epochs: one number per --density stage ({stages}), got {len(args.epochs)}")
        args.threads = validate.whole_number(args.threads, "--threads", 1, 64)
        args.seed = validate.whole_number(args.seed, "--seed", 0, 2**31 - 1)
        for name in ("weights_lr", "scales_lr"):
            if getattr(args, name) is not None:
                setattr(args, name, validate.real_number(getattr(args, name), "--" + name.replace("_", "-"), 1e-6, 1.0))
        if args.scales_lr is not None and (args.freeze_scales or args.deterministic):
            flag = "--freeze-scales" if args.freeze_scales else "--deterministic"
            raise InputError(f"--scales-lr: nothing trains the scales with {flag}; leave it out")
        if args.stored_structure and not args.deterministic:
            raise InputError("--stored-structure: only with --deterministic (the ELBO's structure is its own mpm)")
    except BNNError as exc:
        parser.error(str(exc))
    return args


TRAINS = {
    "elbo": "the ELBO (means and scales)",
    "freeze-scales": "the ELBO with the scales frozen at their stored values (means only, same noise)",
    "deterministic": (
        "NOT the ELBO: the cut's mean weights fine-tuned without weight noise or KL "
        "(a pruned-and-fine-tuned network, not a posterior)"
    ),
}


def variant_of(args: argparse.Namespace) -> str:
    return "freeze-scales" if args.freeze_scales else "deterministic" if args.deterministic else "elbo"


def cut_masks(model, density: float | None) -> list:
    """The structure post-training fixes, as core.train's post-training phase cuts it."""
    return model.keep_masks() if density is None else model.keep_masks_at_density(density)


def stored_structure(model, density: float | None) -> list:
    """The stored run's fixed structure whole (every weight of it kept), refused where there is none or
    where it is denser than `density` (never cut again: that would be a different structure)."""
    from core.errors import InputError

    if not all(layer.is_structure_fixed for layer in model.layers):
        raise InputError("--stored-structure: the stored run has no fixed structure (it was not post-trained)")
    masks = [layer.fixed_mask.bool() for layer in model.layers]
    if density is not None and model.density(masks) > density:
        raise InputError(
            f"--stored-structure: the stored structure keeps {model.density(masks):.6g} of the weights, "
            f"more than --density {density}"
        )
    return masks


def pruned_network(model, masks):
    """A deterministic network (`fnn`) of model's shape holding model's mean weights on `masks`, with that
    structure fixed: its median probability model is the structure itself (|w| > 0 on it)."""
    import torch

    from core.models.network import BayesianMLP

    config = dataclasses.replace(model.config, family="fnn", family_options={})
    net = BayesianMLP(config, torch.Generator().manual_seed(0)).to(model.device)
    net.likelihood.load_state_dict(model.likelihood.state_dict())
    with torch.no_grad():
        for layer, point, mask in zip(model.layers, net.layers, masks):
            point.load_point_estimate(layer.conditional_mean_weights() * mask.to(point.weight.dtype))
            point.fix_structure(mask)
    return net


def continue_posttrain(args: argparse.Namespace, echo=print) -> tuple[dict[str, Any], Any]:
    """The entry (settings and per-epoch rows) and the trained copy (for `--deterministic` the pruned net)."""
    import torch

    from core.errors import InputError
    from core.predict import evaluate
    from core.runs import load_run
    from core.train import train

    torch.set_num_threads(args.threads)
    variant = variant_of(args)
    run = load_run(args.run)
    model, dataset, settings = run.model, run.dataset(), run.config.train
    rates = dict(settings.learning_rates)
    rates.update({k: v for k, v in (("weights", args.weights_lr), ("scales", args.scales_lr)) if v is not None})
    densities = args.density if args.density is not None else [settings.posttrain_density]
    config = dataclasses.replace(
        settings,
        warm_start_epochs=0,
        pretrain_epochs=0,
        epochs=0,
        target_density=None,
        posttrain_epochs=args.epochs[0],
        posttrain_lr_schedule=args.schedule,
        posttrain_density=densities[0],
        learning_rates=rates,
    )
    with torch.no_grad():
        structure = cut_masks(model, densities[0])
        if args.stored_structure:
            structure = stored_structure(model, densities[0])
    if variant == "freeze-scales":
        scales = model.parameter_groups().get("scales", [])
        if not scales:
            raise InputError(f"--freeze-scales: the {model.family} family has no scales to freeze")
        for param in scales:
            param.requires_grad_(False)
    elif variant == "deterministic":
        # The stored cut, once, into a network of point weights; train() then fixes the same structure
        # again (its median probability model is the cut: every weight of it is non-zero).
        model = pruned_network(model, structure)
        config = dataclasses.replace(config, posttrain_density=None, mc_samples=1)

    def measure(phase: str, seconds: float) -> dict[str, Any]:
        with torch.no_grad():
            result = evaluate(model, dataset, "mpm-mean", 1)
            if variant == "deterministic":
                fixed = result
            else:  # the fixed structure with every weight of it kept, at the means
                fixed = evaluate(pruned_network(model, structure), dataset, "mpm-mean", 1)
        model.train()
        row = {
            "phase": phase,
            "mpm_mean_accuracy": result["accuracy"],
            "density": result["density"],
            "layer_density": result.get("layer_density"),
            "structure_accuracy": fixed["accuracy"],
            "structure_density": fixed["density"],
            "seconds": round(seconds, 1),
        }
        echo(
            f"  {phase:>10}: MED-MEA {row['mpm_mean_accuracy']:.4f} at density {row['density']:.5f}; "
            f"the structure {row['structure_accuracy']:.4f} at {row['structure_density']:.5f}",
            flush=True,
        )
        return row

    echo(f"  trains: {TRAINS[variant]}", flush=True)
    rows = [measure("stored", 0.0)]
    x, y = torch.as_tensor(dataset.x_train), torch.as_tensor(dataset.y_train)
    for stage, (density, epochs) in enumerate(zip(densities, args.epochs)):
        if stage:
            # The next cut ranks the weights the last stage left (core.train fixes it from the mpm's scores).
            with torch.no_grad():
                structure = cut_masks(model, density)
            config = dataclasses.replace(config, posttrain_epochs=epochs, posttrain_density=density)
        train(
            model,
            x,
            y,
            config,
            seed=args.seed + stage,
            progress=lambda record: rows.append(measure(f"epoch {len(rows)}", record["seconds"])),
            snapshots=False,
        )
    entry = {
        "run_id": run.run_id,
        "settings": {
            "epochs": args.epochs[0] if len(args.epochs) == 1 else args.epochs,
            "schedule": args.schedule,
            "learning_rates": rates,
            "posttrain_density": densities[-1] if len(densities) == 1 else densities,
            "seed": args.seed,
            "threads": args.threads,
            "trains": variant,
            "structure": "stored" if args.stored_structure else "cut",
        },
        "rows": rows,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    return entry, model


def _epochs(epochs: int | list[int]) -> str:
    return f"{sum(epochs)} ({' + '.join(map(str, epochs))})" if isinstance(epochs, list) else str(epochs)


def render(entries: list[dict[str, Any]]) -> str:
    lines = [
        "# More post-training on a stored run's cut",
        "",
        "Generated by `python -m benchmarks.continue_posttrain` (one section per command). MED-MEA: the median "
        "probability model with mean weights, R=1, on the test set (for sparse VD: the fixed cut AND log alpha "
        "< 3); density: kept weights over all weights. Structure: the fixed cut itself with the mean weights, "
        "every weight of it kept. Each heading says what trains. The stored run is not changed.",
        "",
    ]
    for entry in entries:
        s = entry["settings"]
        trains = TRAINS[s.get("trains", "elbo")]
        with_structure = all("structure_accuracy" in r for r in entry["rows"])
        lines += [
            f"## {entry['run_id']}: {_epochs(s['epochs'])} epochs of {trains}; "
            f"{s['schedule']} steps {s['learning_rates']}, "
            + (
                f"the stored structure whole (at most {s['posttrain_density']})"
                if s.get("structure") == "stored"
                else f"cut in steps at {', '.join(map(str, s['posttrain_density']))}"
                if isinstance(s["posttrain_density"], list)
                else f"cut at {s['posttrain_density']}"
            ),
            "",
            f"{entry['date']}; `{entry['command']}`",
            "",
            "| after | MED-MEA | density | structure | its density | seconds |"
            if with_structure
            else "| after | MED-MEA | density | seconds |",
            "|---|---|---|---|---|---|" if with_structure else "|---|---|---|---|",
            *(
                f"| {r['phase']} | {r['mpm_mean_accuracy']:.4f} | {r['density']:.5f} | "
                + (f"{r['structure_accuracy']:.4f} | {r['structure_density']:.5f} | " if with_structure else "")
                + f"{r['seconds']:.0f} |"
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
        entry, _ = continue_posttrain(args)
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
