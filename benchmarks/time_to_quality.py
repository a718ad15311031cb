"""Time to quality: training seconds until a preset's median probability model is good and sparse.

    python -m benchmarks.time_to_quality [--preset fast-mnist] [--seeds 0,1,2]
        [--target-accuracy 0.975] [--target-density 0.10] [--budget-minutes 15] [--no-stop]

Trains the preset on its dataset (full MNIST needs $BNN_DATA_DIR or --data-dir) and, after every
epoch, measures on the test set the MED-MEA accuracy (`mpm-mean`: the median probability model with
the weights' means, one sparse network) and the density. Only training counts towards the seconds:
the evaluation after each epoch is not timed. A seed stops at the first epoch that reaches both
targets (unless --no-stop), or when the training budget is spent.

Results are appended to benchmarks/results/time_to_quality.json (one entry per preset, seed and
config id: a rerun skips what is there, so the command resumes), and the table
benchmarks/results/time_to_quality.md and the learning curves time_to_quality.png are rewritten
from all entries.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
JSON_PATH = RESULTS / "time_to_quality.json"


# How to read the CPU seconds, and what the explorations of fast-mnist's schedule were (the rows labelled with
# their training changes above; "stopped" rows were ended by hand and their curves come from their logs).
NOTES = """
## Reading the seconds on a shared machine

The runs from 2026-11-26 trained while seven other engineers' jobs held the 2-core machine at a load of
20-35, so their wall seconds say little about the recipe. Each row also has the process's CPU seconds
(`time.process_time`, all its threads, evaluation excluded) and the load. They trained with one torch
thread (`--threads 1`): at this load two threads spend most of their time waiting for each other (a
batch-100 LBBNN epoch: about 250 CPU seconds with two threads against 16 with one). One thread's CPU
seconds under load are an upper bound on a quiet machine's one-thread wall time. On the quiet machine of
the 2026-11-23 rows a batch-100 epoch took 8.7 s of wall time with two threads, against 16.3 CPU seconds
with one thread under this load (the same training step, timed in one process on 2026-11-26, load 25):
a quiet two-thread wall time is about 0.53 times the CPU seconds reported here.

## What was tried for fast-mnist (MED-MEA >= 0.981 at density <= 0.08 in 60 s)

The batch-100 schedule reaches the target at epoch 20 (174-354 s): its accuracy is there after the
warm start, the density is what takes long (the inclusion logits move at 3e-3 a step from logit(0.9)).
An LBBNN step's cost is mostly per step (elementwise passes over the weights, Adam's update of three
tensors), so larger batches make an epoch cheaper: one thread, CPU seconds per 60,000 examples at load
25: batch 100 16.3, 250 10.5, 500 8.4, 1000 7.3, 2000 5.0. Then:

- batch 1000, 2 warm-start epochs, cosine, weights 3e-3, inclusion 3e-2: the warm start (still at 1e-3,
  60 steps an epoch) left the network at 0.958, and it was 0.975 at density 0.10 after 67 CPU seconds.
  Hence `train.warm_start_learning_rate`.
- batch 500, warm start 3 epochs at 3e-3, then 10 epochs, cosine, weights 2e-3, inclusion 3e-2: 0.978
  after the warm start and one epoch, 0.981 at density 0.10, then the density overshot (0.070, 0.057)
  with the accuracy at 0.980.
- the same with the inclusion logits at 1.5e-2 and 8 epochs: 0.982 at density 0.099 after 59 CPU seconds,
  the density falling ever more slowly as the step sizes decayed. Across these runs the density was
  close to one function of the inclusion logits' summed step sizes (0.224 at 3.5-3.6 units of logit,
  0.10 at 7.1-7.2, 0.07 at 10.4), 0.08 at about 9.2: 2e-2 over 8 epochs of 120 steps (cosine) sums to
  10.8 and passes 9.2 in the fifth epoch, with the step sizes at half.
- that schedule with the inclusion logits at 2e-2, `fast-mnist (batch 500, 3 + 8 epochs)`
  (`python -m benchmarks.time_to_quality --seeds 0,1,2 --target-accuracy 0.981 --target-density 0.08
  --threads 1`): seeds 0 and 1 reach the target in 56 and 64 CPU seconds (about 30-34 s of a quiet
  2-core machine by the calibration above); seed 2 peaks at 0.9798 (density 0.068). The accuracy dips
  while the weights are pruned at large step sizes (0.977-0.978 at density 0.08-0.10) and recovers as
  they decay, so the density crosses 0.08 too early in the cosine.
- the same with 10 epochs and the inclusion logits at 1.5e-2 (the density crosses 0.08 later, at smaller
  step sizes), on the seed that missed: 0.9807 at density 0.072 after 96 CPU seconds, still short.
- the 8-epoch schedule with the means and scales at 1e-3, on the same seed: the density fell faster
  (0.065 after 6 epochs) and the accuracy stayed lower (at most 0.979 at density <= 0.08).
- the 8-epoch schedule with batches of 250 (about 10 CPU seconds an epoch) and the inclusion logits at
  1e-2, on the same seed: the accuracy stayed high (0.982-0.985) but the density stalled at 0.104; at a
  batch of 250 the logits drift less per unit of step size than the batch-500 runs suggested.
- fast-mnist now, `fast-mnist (batch 250, 3 + 8 epochs)`: the same with the inclusion logits at 2e-2
  (`python -m benchmarks.time_to_quality --seeds 0,1,2 --target-accuracy 0.981 --target-density 0.08
  --threads 1`): all 3 seeds reach the target in the third or fourth epoch, after 37-53 training CPU
  seconds with one thread (these ran when the load had fallen to 1-5: 36-93 s of wall time, one
  thread; about 20-28 s of a quiet 2-core machine by the calibration above).

The `fast` grid and fast-fmnist keep the batch-100 schedule (`FAST_GRID_TRAIN` in core/runs/presets.py)
and their run ids, so the tables built from them stay valid.
"""


class _Stop(Exception):
    pass


def run_seed(
    preset: str,
    seed: int,
    target_accuracy: float,
    target_density: float,
    budget_seconds: float,
    stop_at_target: bool,
    data_dir: str | None,
    echo=print,
    device: str = "cpu",
    hidden: tuple[int, ...] | None = None,
    train_changes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    import numpy as np
    import torch

    from core.errors import TrainingCancelled
    from core.models.network import build_model
    from core.predict import evaluate
    from core.runs.presets import get_preset
    from core.train import train

    config = configure(get_preset(preset), seed, hidden, train_changes)
    dataset = config.load_dataset(data_dir)
    run_id = config.run_id(dataset.fingerprint)
    from core.device import resolve_device

    target = resolve_device(device)
    torch.manual_seed(config.seed)
    model = build_model(config.model_config(dataset), target)
    x = torch.from_numpy(np.ascontiguousarray(dataset.x_train)).to(target)
    y = torch.from_numpy(np.ascontiguousarray(dataset.y_train)).to(target)
    rows: list[dict[str, Any]] = []
    # CPU seconds of this process (all its threads) spent training, evaluation excluded: on a shared
    # machine wall seconds measure the neighbours as much as the recipe.
    state = {"seconds": 0.0, "cpu": 0.0, "reached": None, "stop": False, "cpu_mark": time.process_time()}

    def after_epoch(record: dict[str, Any]) -> None:
        state["seconds"] += record["seconds"]
        state["cpu"] += time.process_time() - state["cpu_mark"]
        with torch.no_grad():
            result = evaluate(model, dataset, "mpm-mean", 1)
        row = {
            "epoch": len(rows) + 1,
            "phase": record["phase"],
            "train_seconds": round(state["seconds"], 2),
            "train_cpu_seconds": round(state["cpu"], 2),
            "load": round(load_average(), 1),
            "mpm_mean_accuracy": result["accuracy"],
            "density": result["density"],
            "layer_density": result.get("layer_density"),
            "kl_weight": record.get("kl_weight"),
        }
        rows.append(row)
        echo(
            f"  seed {seed} epoch {row['epoch']:>3} [{row['phase']}] {row['train_seconds']:8.1f} s "
            f"{row['train_cpu_seconds']:8.1f} cpu-s (load {row['load']})  "
            f"MED-MEA {row['mpm_mean_accuracy']:.4f}  density {row['density']:.4f}"
        )
        good = row["mpm_mean_accuracy"] >= target_accuracy and row["density"] <= target_density
        if good and state["reached"] is None and record["phase"] != "warm-start":
            state["reached"] = dict(row)
            if stop_at_target:
                state["stop"] = True
        if state["seconds"] >= budget_seconds:
            state["stop"] = True
        state["cpu_mark"] = time.process_time()

    started = time.time()
    state["cpu_mark"] = time.process_time()
    try:
        train(model, x, y, config.train, seed=config.seed, progress=after_epoch, cancel=lambda: state["stop"])
    except TrainingCancelled:
        pass
    return {
        "preset": preset,
        "seed": seed,
        "run_id": run_id,
        "config": config.to_dict(),
        "target_accuracy": target_accuracy,
        "target_density": target_density,
        "budget_seconds": budget_seconds,
        "reached": state["reached"],
        "rows": rows,
        "wall_seconds": round(time.time() - started, 1),
        "machine": machine(target),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def configure(preset: Any, seed: int, hidden: tuple[int, ...] | None, train_changes: dict[str, Any] | None):
    """The preset's config for one seed, with other widths or training settings where given."""
    config = preset.replace(seed=seed)
    if hidden is not None:
        config = config.replace(hidden=hidden)
    if train_changes:
        config = config.replace(train={**config.to_dict()["train"], **train_changes})
    return config


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def machine(device: Any = "cpu") -> dict[str, Any]:
    import torch

    load = load_average()
    info = {
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_at_end": load,
        "device": str(device),
    }
    if getattr(device, "type", device) == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def load_entries(path: Path = JSON_PATH) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return json.loads(path.read_text())


def save_entries(entries: list[dict[str, Any]], path: Path = JSON_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1))
    tmp.replace(path)


def entry_name(entry: dict[str, Any]) -> str:
    """The label of an exploration, else the preset with its schedule (a preset's schedule can change)."""
    if entry.get("label"):
        return entry["label"]
    train = entry.get("config", {}).get("train")
    if not train:
        return entry["preset"]
    return (
        f"{entry['preset']} (batch {train['batch_size']}, {train.get('warm_start_epochs', 0)} + "
        f"{train['epochs']} epochs)"
    )


def render_markdown(entries: list[dict[str, Any]]) -> str:
    """The results section: one line per (preset, seed), then the median time to target per preset."""
    if not entries:
        return "No time-to-quality runs recorded yet: run `python -m benchmarks.time_to_quality`.\n"
    lines = [
        "| preset | seed | target | reached at epoch | training seconds | MED-MEA accuracy | density | "
        "training CPU seconds (threads), load | best MED-MEA at density <= target | machine, date |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        target = f">= {e['target_accuracy']:.3f} at <= {e['target_density']:.2f}"
        point = e["reached"] or (e["rows"][-1] if e["rows"] else {})
        cpu = (
            f"{point['train_cpu_seconds']:.0f} ({e.get('threads') or 'default'}), {point['load']:.0f}"
            if "train_cpu_seconds" in point
            else "-"
        )
        eligible = [r for r in e["rows"] if r["density"] <= e["target_density"] and r["phase"] != "warm-start"]
        best = max(eligible, key=lambda r: r["mpm_mean_accuracy"]) if eligible else None
        best_text = (
            f"{best['mpm_mean_accuracy']:.4f} (density {best['density']:.3f}, {best['train_seconds']:.0f} s)"
            if best
            else "-"
        )
        where = f"{e['machine']['cpu_count']} cores, {e['date']}"
        name = entry_name(e)
        if e["reached"]:
            r = e["reached"]
            lines.append(
                f"| {name} | {e['seed']} | {target} | {r['epoch']} | {r['train_seconds']:.0f} | "
                f"{r['mpm_mean_accuracy']:.4f} | {r['density']:.4f} | {cpu} | {best_text} | {where} |"
            )
        else:
            last = e["rows"][-1] if e["rows"] else None
            stopped = "stopped" if e.get("interrupted") else "not reached"
            tail = (
                (
                    f"{stopped} ({last['epoch']} epochs) | {last['train_seconds']:.0f} | "
                    f"{last['mpm_mean_accuracy']:.4f} | {last['density']:.4f}"
                )
                if last
                else "no epochs | - | - | -"
            )
            lines.append(f"| {name} | {e['seed']} | {target} | {tail} | {cpu} | {best_text} | {where} |")
    by_preset: dict[tuple, list[dict]] = {}
    for e in entries:
        by_preset.setdefault((entry_name(e), e["target_accuracy"], e["target_density"]), []).append(e)
    lines.append("")
    for (preset, accuracy, density), group in by_preset.items():
        times = sorted(e["reached"]["train_seconds"] for e in group if e["reached"])
        if times:
            middle = len(times) // 2
            median = times[middle] if len(times) % 2 else 0.5 * (times[middle - 1] + times[middle])
            cpu = sorted(e["reached"].get("train_cpu_seconds", math.nan) for e in group if e["reached"])
            cpu_text = (
                ""
                if any(math.isnan(c) for c in cpu)
                else f"; {_median(cpu):.0f} training CPU seconds (range {cpu[0]:.0f}-{cpu[-1]:.0f})"
            )
            lines.append(
                f"- `{preset}`, MED-MEA >= {accuracy:.3f} at density <= {density:.2f}: reached by "
                f"{len(times)} of {len(group)} seeds; median "
                f"{median / 60:.1f} min of training (range {times[0] / 60:.1f}-{times[-1] / 60:.1f})"
                f"{cpu_text}."
            )
        else:
            lines.append(
                f"- `{preset}`, MED-MEA >= {accuracy:.3f} at density <= {density:.2f}: not reached by "
                f"any of {len(group)} seeds."
            )
    curves = [e for e in entries if e["rows"] and "train_cpu_seconds" in e["rows"][-1]]
    if curves:
        lines += ["", "Curves (main phase; per epoch: MED-MEA accuracy / density @ training CPU seconds):", ""]
        for e in curves:
            points = ", ".join(
                f"{r['mpm_mean_accuracy']:.4f} / {r['density']:.3f} @ {r['train_cpu_seconds']:.0f}"
                for r in e["rows"]
                if r["phase"] != "warm-start"
            )
            lines.append(f"- {entry_name(e)}, seed {e['seed']}: {points}")
    return "\n".join(lines) + "\n"


def _median(values: list[float]) -> float:
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else 0.5 * (values[middle - 1] + values[middle])


def plot(entries: list[dict[str, Any]], path: Path) -> None:
    from benchmarks.figures import save, subplots

    fig, (ax_acc, ax_den) = subplots(2, (10, 4))
    for e in entries:
        rows = [r for r in e["rows"] if r["phase"] != "warm-start"]
        if not rows:
            continue
        t = [r["train_seconds"] / 60 for r in rows]
        label = f"{e['preset']} seed {e['seed']}"
        ax_acc.plot(t, [r["mpm_mean_accuracy"] for r in rows], marker=".", label=label)
        ax_den.plot(t, [r["density"] for r in rows], marker=".", label=label)
    if entries:
        ax_acc.axhline(entries[0]["target_accuracy"], color="grey", ls="--", lw=1)
        ax_den.axhline(entries[0]["target_density"], color="grey", ls="--", lw=1)
    ax_acc.set(xlabel="training minutes", ylabel="MED-MEA test accuracy", title="accuracy of the MPM")
    ax_acc.set_ylim(0.95, 0.99)
    ax_den.set(xlabel="training minutes", ylabel="density of the MPM", title="density", yscale="log")
    ax_acc.legend(fontsize=7)
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fast-mnist")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--target-accuracy", type=float, default=0.975)
    parser.add_argument("--target-density", type=float, default=0.10)
    parser.add_argument("--budget-minutes", type=float, default=15.0, help="training time per seed at most")
    parser.add_argument("--no-stop", action="store_true", help="train every epoch of the preset")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--force", action="store_true", help="rerun seeds already recorded")
    parser.add_argument("--render-only", action="store_true", help="rewrite the table and plot, train nothing")
    parser.add_argument("--device", default="cpu", help="cpu (the recorded tables), cuda, auto")
    parser.add_argument(
        "--name",
        default="time_to_quality",
        help="results basename under benchmarks/results (the GPU check writes time_to_quality_gpu)",
    )
    parser.add_argument("--hidden", default=None, help="hidden widths instead of the preset's (e.g. 16,16)")
    parser.add_argument("--results-dir", default=str(RESULTS), help="where the json, table and plot go")
    parser.add_argument(
        "--train",
        default=None,
        help="JSON of training settings to change, e.g. '{\"batch_size\": 1000}' (an exploration: "
        "recorded under its own run id and labelled with the changes)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (1 on a loaded machine: two threads waiting on each other cost more)",
    )
    args = parser.parse_args(argv)
    train_changes = None
    if args.train:
        try:
            train_changes = json.loads(args.train)
        except json.JSONDecodeError as exc:
            parser.error(f"--train: not JSON ({exc.msg})")
        if not isinstance(train_changes, dict):
            parser.error("--train: give a JSON object of training settings")
    if args.threads is not None:
        if not 1 <= args.threads <= (os.cpu_count() or 1):
            parser.error(f"--threads: between 1 and {os.cpu_count()}, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)

    results = Path(args.results_dir)
    json_path = results / f"{args.name}.json"
    entries = load_entries(json_path)
    if not args.render_only:
        from core.errors import ConfigError
        from core.runs.presets import get_preset

        hidden = tuple(int(h) for h in args.hidden.split(",")) if args.hidden else None
        for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
            try:
                config = configure(get_preset(args.preset), seed, hidden, train_changes)
            except ConfigError as exc:
                parser.error(str(exc))
            run_id = config.run_id(config.load_dataset(args.data_dir).fingerprint)
            done = [
                e
                for e in entries
                if e["run_id"] == run_id
                and e["target_accuracy"] == args.target_accuracy
                and e["target_density"] == args.target_density
            ]
            if done and not args.force:
                print(f"{args.preset} seed {seed}: recorded already (run id {run_id}); --force reruns it")
                continue
            print(f"{args.preset} seed {seed} (run id {run_id})", flush=True)
            entry = run_seed(
                args.preset,
                seed,
                args.target_accuracy,
                args.target_density,
                args.budget_minutes * 60,
                not args.no_stop,
                args.data_dir,
                device=args.device,
                hidden=hidden,
                train_changes=train_changes,
            )
            if train_changes:
                entry["label"] = f"{args.preset} {json.dumps(train_changes, separators=(',', ':'))}"
            entry["threads"] = args.threads
            print(f"  {'reached' if entry['reached'] else 'not reached'}", flush=True)
            entries = [e for e in entries if e not in done] + [entry]
            save_entries(entries, json_path)
    table = render_markdown(entries)
    header = (
        f"# Time to quality\n\nGenerated by `python -m benchmarks.time_to_quality` from "
        f"`{json_path.name}`. Training seconds only (evaluation after each epoch excluded).\n\n"
    )
    results.mkdir(parents=True, exist_ok=True)
    notes = NOTES if args.name == "time_to_quality" else ""
    (results / f"{args.name}.md").write_text(header + table + notes)
    if entries:
        plot(entries, results / f"{args.name}.png")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
