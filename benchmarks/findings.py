"""The sparsity frontier's open findings, measured: why the horseshoe never prunes a node on MNIST and decides
almost every test image at doubt 0.95 (Hubin & Storvik 2024 report 3 of 10,000), why LBBNN's output layer keeps a
mean inclusion probability near 0.55 against Table 5's 0.2945, and where the input-skip LBBNN's density stalls.

    python -m benchmarks.findings horseshoe [--epochs 4] [--threads 1]   # trains 4 short horseshoe runs
    python -m benchmarks.findings table5 [--threads 1]                   # LBBNN: stored runs + one ELBO run
    python -m benchmarks.findings render                                 # findings.md from findings.json

Every training here is cut after its epochs (not stored): the numbers are the states after each epoch.
The islab section reads the islab-mnist entries of benchmarks/results/front_recipes.json (written by
`python -m benchmarks.front_recipes --preset islab-mnist ...`). Results: benchmarks/results/findings.json and
findings.md; benchmarks.results_page reads the json for its explanation lines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
JSON_PATH = RESULTS / "findings.json"
MD_PATH = RESULTS / "findings.md"
FRONT_JSON = RESULTS / "front_recipes.json"

PAPER_HORSESHOE_DOUBT_COUNT = 3  # Hubin & Storvik (2024) Table 2, BNN-HP-MF SIM-SIM R=10 at doubt 0.95
PAPER_HORSESHOE_PRN_DENSITY = 0.194  # the same table, PRN (pruned as in Louizos et al. 2017)
PAPER_TABLE5_MNIST = (0.0844, 0.0959, 0.2945)  # mean inclusion per layer, LBBNN-SSP-MF, MNIST
DELTAS = (1e-3, 1e-2, 1e-1)  # Ghosh et al. (2018) use delta = 1e-3 (or 1e-5); larger ones show how far units are
PRUNE_P0 = 0.9
# Stored LBBNN runs on MNIST (front_recipes.md): fast-mnist seeds 0 and 1 (KL x 0.05), sparse-mnist (KL x 0.2), and
# islab-mnist on the ELBO with the cosine and the constant step sizes.
STORED_LBBNN = ("06337ffb2442df5a", "cdd34fa101fab446", "1a2a382db49ab8b4", "b76f632c3ddf1a5a", "d23a68b5d2e832ab")


def _load() -> dict[str, Any]:
    return json.loads(JSON_PATH.read_text()) if JSON_PATH.exists() else {}


def _save(data: dict[str, Any], key: str | None = None) -> None:
    """Write `data`, or only its `key` into the file as it is now (another command may have written since)."""
    if key is not None:
        data = {**_load(), key: data[key]}
    JSON_PATH.write_text(json.dumps(data, indent=1) + "\n")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def horseshoe_state(model) -> list[dict[str, Any]]:
    """Per hidden layer: the node statistic P_q(tau_k v < delta) (mean, units over p0) at each delta, and the
    spread of E_q log(tau_k v) and of E_q[s_k] over its units; the mean posterior std of beta."""
    import torch

    layers = []
    with torch.no_grad():
        for layer in model.layers:
            if layer.is_output:
                continue
            mean, std = layer.log_node_scale_moments()
            row: dict[str, Any] = {
                "units": int(mean.numel()),
                "log_tv_mean": [float(mean.min()), float(mean.quantile(0.5)), float(mean.max())],
                "log_tv_std_median": float(std.quantile(0.5)),
                "log_v_mean": float(layer.log_layer_scale_mu),
                "expected_scale_median": float(layer.expected_node_scale().quantile(0.5)),
                "beta_sigma_mean": float(layer.weight_sigma.mean()),
            }
            for delta in DELTAS:
                stat = torch.special.ndtr((math.log(delta) - mean) / std)
                row[f"stat_mean@{delta:g}"] = float(stat.mean())
                row[f"pruned@{delta:g}"] = int((stat > PRUNE_P0).sum())
            row["stat_mean"] = float(layer.node_scale_statistic().mean())  # the model's own (delta option)
            layers.append(row)
    return layers


def doubt_numbers(model, dataset) -> dict[str, Any]:
    """SIM-SIM with R=10 draws (one prediction): accuracy, the images decided at doubt 0.95 (Hubin & Storvik 2024's
    rule, core's doubt_decision) and their accuracy, the mean max class probability; one draw's accuracy (R=1)."""
    import numpy as np

    from core.predict import predict
    from core.predict.metrics.classification import DOUBT_LEVEL, doubt_decision

    prediction = predict(model, dataset.x_test, "bma", 10, seed=0)
    y = np.asarray(dataset.y_test)
    doubt = doubt_decision(prediction.probs, y, DOUBT_LEVEL)
    return {
        "accuracy_r10": float((prediction.probs.argmax(axis=1) == y).mean()),
        "accuracy_r1": float((prediction.probs_per_draw[0].argmax(axis=1) == y).mean()),
        "doubt_count": int(doubt["count"]),
        "doubt_accuracy": doubt["accuracy"],
        "mean_max_probability": float(prediction.probs.max(axis=1).mean()),
    }


def train_watched(config, epochs_after_warm_start: int, on_epoch, data_dir=None) -> float:
    """Train `config` (not stored) and call on_epoch(model, record) after every epoch; stop after the given
    number of main-phase epochs. Returns the CPU seconds spent training (evaluation excluded)."""
    from benchmarks.front_recipes import watching_model
    from core.errors import TrainingCancelled
    from core.runs import train_run

    held: dict[str, Any] = {}
    state = {"main": 0, "cpu": 0.0, "mark": time.process_time()}

    def progress(record: dict[str, Any]) -> None:
        state["cpu"] += time.process_time() - state["mark"]
        if record["phase"] != "warm-start":
            state["main"] += 1
        on_epoch(held["model"], record, state)
        held["model"].train()
        state["mark"] = time.process_time()

    try:
        with watching_model(lambda model: held.update(model=model)):
            train_run(
                config,
                progress=progress,
                cancel=lambda: state["main"] >= epochs_after_warm_start,
                data_dir=data_dir,
                force=True,
            )
    except TrainingCancelled:
        pass
    return state["cpu"]


HORSESHOE_VARIANTS = {
    # name: (description, train changes over the fast grid's schedule)
    "grid": ("fast grid: warm start, KL x 0.05, step sizes 1e-3", {}),
    "elbo-warm": ("the ELBO (KL x 1) after the same warm start", {"kl_weight": 1.0}),
    "elbo-scratch": ("the ELBO from scratch, step sizes 1e-3", {"kl_weight": 1.0, "warm_start_epochs": 0}),
    "paper": (
        "the paper's setup: the ELBO from scratch, Adam at 1e-4 for every parameter",
        {
            "kl_weight": 1.0,
            "warm_start_epochs": 0,
            "learning_rates": {"weights": 1e-4, "scales": 1e-4, "inclusion": 1e-4},
        },
    ),
}


def run_horseshoe(epochs: int, variants: list[str], data_dir=None, echo=print, on_variant=None) -> dict[str, Any]:
    import torch

    from benchmarks.time_to_quality import load_average
    from core.runs.config import RunConfig
    from core.runs.presets import FAST_GRID_TRAIN

    out: dict[str, Any] = {}
    for name in variants:
        description, changes = HORSESHOE_VARIANTS[name]
        train = {**FAST_GRID_TRAIN, **changes}
        config = RunConfig(dataset="mnist", method="horseshoe", hidden=(400, 600), train=train)
        dataset = config.load_dataset(data_dir)
        rows: list[dict[str, Any]] = []

        def on_epoch(model, record, state, rows=rows, dataset=dataset, name=name):
            if record["phase"] == "warm-start":  # a deterministic net: nothing to measure yet
                echo(f"  {name} warm-start epoch done ({state['cpu']:.0f} CPU s)", flush=True)
                return
            with torch.no_grad():
                row = {
                    "epoch": len(rows) + 1,
                    "phase": record["phase"],
                    "cpu_seconds": round(state["cpu"], 1),
                    "load": round(load_average(), 1),
                    **doubt_numbers(model, dataset),
                    "layers": horseshoe_state(model),
                }
            rows.append(row)
            echo(
                f"  {name} epoch {row['epoch']} [{row['phase']}] R=1 {row['accuracy_r1']:.4f} R=10 "
                f"{row['accuracy_r10']:.4f} decided {row['doubt_count']} stat "
                f"{[round(layer['stat_mean'], 3) for layer in row['layers']]} log(tau v) median "
                f"{[round(layer['log_tv_mean'][1], 2) for layer in row['layers']]}",
                flush=True,
            )

        echo(f"horseshoe {name}: {description}", flush=True)
        cpu = train_watched(config, epochs, on_epoch, data_dir)
        out[name] = {"description": description, "train": train, "rows": rows, "cpu_seconds": round(cpu, 1)}
        if on_variant is not None:  # keep what is measured if a later variant is stopped
            on_variant({"epochs": epochs, "date": _now(), "variants": dict(out)})
    return {"epochs": epochs, "date": _now(), "variants": out}


def run_table5(epochs: int, stored: list[str], data_dir=None, echo=print) -> dict[str, Any]:
    """Mean inclusion per layer of stored LBBNN runs (each with its KL weight), and of fast-mnist trained on the
    ELBO (KL x 1) after the same warm start, epoch by epoch."""
    import torch

    from core.predict import mean_statistic
    from core.runs.presets import get_preset
    from core.runs.training import load_run

    runs = []
    for run_id in stored:
        run = load_run(run_id, data_dir=data_dir)
        train = run.config.train
        runs.append(
            {
                "run_id": run_id,
                "hidden": list(run.config.hidden),
                "input_skip": bool(run.config.to_dict().get("family_options", {}).get("input_skip", False)),
                "kl_weight": train.kl_weight,
                "epochs": train.epochs,
                "mean_inclusion": mean_statistic(run.model),
            }
        )
        echo(f"  stored {run_id}: KL x {train.kl_weight} mean inclusion {runs[-1]['mean_inclusion']}", flush=True)
    config = get_preset("fast-mnist")
    config = config.replace(train={**config.to_dict()["train"], "kl_weight": 1.0})
    rows: list[dict[str, Any]] = []
    if epochs == 0:  # the stored runs only
        return {"date": _now(), "stored": runs, "elbo": {"rows": []}, "paper": list(PAPER_TABLE5_MNIST)}

    def on_epoch(model, record, state):
        if record["phase"] == "warm-start":
            return
        with torch.no_grad():
            rows.append(
                {
                    "epoch": state["main"],
                    "mean_inclusion": mean_statistic(model),
                    "layer_density": [float((s > 0.5).float().mean()) for s in model.native_statistics()],
                }
            )
        echo(f"  ELBO epoch {state['main']}: {rows[-1]['mean_inclusion']}", flush=True)

    cpu = train_watched(config, epochs, on_epoch, data_dir)
    return {
        "date": _now(),
        "stored": runs,
        "elbo": {"train": config.to_dict()["train"], "rows": rows, "cpu_seconds": round(cpu, 1)},
        "paper": list(PAPER_TABLE5_MNIST),
    }


def islab_summary() -> list[dict[str, Any]]:
    """The islab-mnist entries of front_recipes.json: per try its step-size schedule, KL weight, the main phase's
    densities and the ratio of each epoch's density to the one before (how fast it still falls)."""
    if not FRONT_JSON.exists():
        return []
    entries = json.loads(FRONT_JSON.read_text())
    entries = entries.get("entries", entries) if isinstance(entries, dict) else entries
    out = []
    for entry in entries:
        config = entry.get("config") or {}
        if not config.get("family_options", {}).get("input_skip"):
            continue
        train = config.get("train", {})
        main = [row for row in entry.get("rows", []) if row.get("phase") == "train"]
        post = [row for row in entry.get("rows", []) if row.get("phase") == "posttrain"]
        if not main:
            continue
        densities = [row["active_density"] for row in main]
        out.append(
            {
                "label": entry.get("label") or entry.get("command", ""),
                "run_id": entry.get("run_id"),
                "stored": entry.get("stored"),
                "lr_schedule": train.get("lr_schedule", "constant"),
                "kl_weight": train.get("kl_weight"),
                "inclusion_rate": (train.get("learning_rates") or {}).get("inclusion"),
                "main_epochs": len(main),
                "main_cpu_per_epoch": (main[-1]["train_cpu_seconds"] - main[0]["train_cpu_seconds"])
                / max(1, len(main) - 1),
                "active_density": densities,
                "ratios": [b / a for a, b in zip(densities, densities[1:])],
                "main_accuracy": main[-1]["mpm_mean_accuracy"],
                "final_accuracy": (post or main)[-1]["mpm_mean_accuracy"],
                "posttrained": bool(post),
                "final_active_density": (post or main)[-1]["active_density"],
                "train_cpu_seconds": (post or main)[-1]["train_cpu_seconds"],
                "train_seconds": (post or main)[-1].get("train_seconds"),
            }
        )
    return out


def _f(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_horseshoe(data: dict[str, Any]) -> list[str]:
    lines = [
        "## The horseshoe on MNIST: no node pruned, nearly every image decided",
        "",
        f"`python -m benchmarks.findings horseshoe --epochs {data['epochs']} --variants "
        f"{','.join(data['variants'])} --threads 1` ({data['date']}): "
        "horseshoe 784-400-600-10 (regularised, b_g = 1e-5, factorised q), batch 100, each epoch evaluated by "
        "SIM-SIM with R=10 draws on the 10,000 test images. Node statistic: Ghosh et al.'s (2018) "
        f"P_q(tau_k v < delta), mean over each hidden layer's units; pruned: units with it above {PRUNE_P0}. "
        f"Hubin & Storvik (2024, Table 2): decided {PAPER_HORSESHOE_DOUBT_COUNT} of 10,000 at doubt 0.95 after "
        "250 epochs of the ELBO from scratch at step size 1e-4.",
        "",
        "| variant | epoch | phase | R=1 | R=10 | decided @0.95 | mean max prob | node stat (delta 1e-3) | "
        "pruned @1e-3 / 1e-2 / 1e-1 | E log(tau v) min / median / max | CPU s |",
        "|---|---:|---|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for name, variant in data["variants"].items():
        for row in variant["rows"]:
            stats = " / ".join(f"{layer['stat_mean@0.001']:.3f}" for layer in row["layers"])
            pruned = "; ".join(
                "/".join(str(layer[f"pruned@{d:g}"]) for d in DELTAS) + f" of {layer['units']}"
                for layer in row["layers"]
            )
            spread = "; ".join(" / ".join(f"{v:.2f}" for v in layer["log_tv_mean"]) for layer in row["layers"])
            lines.append(
                f"| {name}: {variant['description']} | {row['epoch']} | {row['phase']} | "
                f"{_f(row['accuracy_r1'], '.4f')} "
                f"| {row['accuracy_r10']:.4f} | {row['doubt_count']} | {row['mean_max_probability']:.3f} | {stats} "
                f"| {pruned} | {spread} | {row['cpu_seconds']:.0f} |"
            )
    lines += ["", *[f"- {line}" for line in horseshoe_explanation(data)], ""]
    return lines


def horseshoe_explanation(data: dict[str, Any]) -> list[str]:
    """The measured explanation, one sentence a line, built from the numbers (also read by the results page)."""
    variants = data.get("variants", {})
    out = []

    def last(name):
        rows = variants.get(name, {}).get("rows") or []
        return rows[-1] if rows else None

    threshold = math.log(DELTAS[0])
    for name, variant in variants.items():
        row = last(name)
        if row is None:
            continue
        medians = [layer["log_tv_mean"][1] for layer in row["layers"]]
        pruned = [layer["pruned@0.001"] for layer in row["layers"]]
        out.append(
            f"{variant['description']}, after {row['epoch']} epochs: decided {row['doubt_count']} of 10,000 "
            f"(mean max probability {row['mean_max_probability']:.3f}), R=10 accuracy {row['accuracy_r10']:.4f}; "
            f"median E log(tau v) per hidden layer {', '.join(f'{m:.2f}' for m in medians)} against log delta = "
            f"{threshold:.2f}; units pruned {', '.join(map(str, pruned))}"
        )
    return out


def render_table5(data: dict[str, Any]) -> list[str]:
    paper = " / ".join(f"{v:.4f}" for v in data["paper"])
    lines = [
        "## LBBNN's output layer against Table 5",
        "",
        f"`python -m benchmarks.findings table5 --epochs {len(data['elbo']['rows'])} --threads 1` ({data['date']}): "
        "mean inclusion probability per "
        f"layer (Hubin & Storvik 2024 Table 5, MNIST: {paper}) of stored LBBNN runs by KL weight; "
        + (
            "`fast-mnist` trained on the ELBO (KL weight 1, no ramp) after the same warm start."
            if data["elbo"]["rows"]
            else "no new training (`--epochs 0`)."
        ),
        "",
        "| network | KL weight | epochs | mean inclusion per layer | stored run |",
        "|---|---:|---:|---|---|",
    ]
    for run in data["stored"]:
        net = "784-" + "-".join(map(str, run["hidden"])) + "-10" + (" input-skip" if run["input_skip"] else "")
        lines.append(
            f"| {net} | {run['kl_weight']:g} | {run['epochs']} | "
            f"{' / '.join(f'{v:.4f}' for v in run['mean_inclusion'])} | `{run['run_id']}` |"
        )
    for row in data["elbo"]["rows"]:
        lines.append(
            f"| 784-400-600-10 | 1 | {row['epoch']} | {' / '.join(f'{v:.4f}' for v in row['mean_inclusion'])} | "
            "not stored |"
        )
    lines += ["", *[f"- {line}" for line in table5_explanation(data)], ""]
    return lines


SWEEP_JSON = RESULTS / "kl_weight_sweep.json"


def sweep_output_density() -> dict[float, tuple[int, float]]:
    """From `python -m benchmarks.kl_weight_sweep`'s json (fast-mnist, 784-400-600-10): per KL weight, the last
    epoch and the output layer's density (weights with inclusion probability above 0.5) there."""
    if not SWEEP_JSON.exists():
        return {}
    out = {}
    for entry in json.loads(SWEEP_JSON.read_text()):
        rows = entry.get("rows") or []
        if rows and rows[-1].get("layer_density"):
            out[float(entry["kl_weight"])] = (int(rows[-1]["epoch"]), float(rows[-1]["layer_density"][-1]))
    return out


def table5_explanation(data: dict[str, Any]) -> list[str]:
    by_weight: dict[float, list[float]] = {}
    for run in data.get("stored", []):
        if not run["input_skip"] and list(run["hidden"]) == [400, 600]:
            by_weight.setdefault(run["kl_weight"], []).append(run["mean_inclusion"][-1])
    parts = [f"KL x {w:g}: {', '.join(f'{v:.3f}' for v in values)}" for w, values in sorted(by_weight.items())]
    out = []
    if parts:
        out.append(
            "the output layer's mean inclusion falls as the KL weight rises (784-400-600-10, "
            + "; ".join(parts)
            + f"; Table 5: {data['paper'][-1]:.4f})"
        )
    sweep = sweep_output_density()
    if sweep:
        out.append(
            "the KL-weight sweep (`python -m benchmarks.kl_weight_sweep`, the same network) gives the output layer's "
            "density (inclusion above 0.5) at its last epoch: "
            + "; ".join(f"KL x {w:g}: {d:.3f} after {e} epochs" for w, (e, d) in sorted(sweep.items()))
        )
    rows = data.get("elbo", {}).get("rows") or []
    if rows:
        first, final = rows[0]["mean_inclusion"][-1], rows[-1]["mean_inclusion"][-1]
        out.append(
            f"on the ELBO (KL x 1) after the warm start it was {first:.3f} after 1 epoch and {final:.3f} after "
            f"{rows[-1]['epoch']}, below Table 5's {data['paper'][-1]:.4f}"
        )
    return out


def render_islab(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## islab-mnist: where the active-path density stops",
        "",
        "From the islab-mnist entries of `front_recipes.json` (each with its command in `front_recipes.md`): the "
        "main phase's active-path density after each epoch and its ratio to the epoch before.",
        "",
        "| try | schedule | KL weight | main epochs | active density, last 4 main epochs | ratio, last 3 | "
        "final MED-MEA | final active density | train CPU s |",
        "|---|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for e in entries:
        lines.append(
            f"| {e['label']} | {e['lr_schedule']} | {_f(e['kl_weight'], 'g')} | {e['main_epochs']} | "
            f"{', '.join(f'{d:.5f}' for d in e['active_density'][-4:])} | "
            f"{', '.join(f'{r:.3f}' for r in e['ratios'][-3:])} | {e['final_accuracy']:.4f} | "
            f"{e['final_active_density']:.5f} | {e['train_cpu_seconds']:.0f} |"
        )
    return lines + ["", *[f"- {line}" for line in islab_explanation(entries)], ""]


# What the measured numbers mean (the numbers themselves are in the generated lines and tables).
NOTES = {
    "islab": "The first islab-mnist run stopped falling because its cosine step sizes went to zero, not because the "
    "ELBO had reached its optimum: with constant step sizes the same recipe kept pruning. Under the prior inclusion "
    "e^-2 the ELBO's density then levelled off at 0.00084 after 100 epochs, and under e^-4 at 0.00082: the ELBO's "
    "optimum under those priors lies above 0.00067. Cutting the median probability model to 0.00067 by inclusion "
    "probability (posttrain_density) and post-training the rest recovered only 0.9631. The prior decides it: "
    "under e^-8 (0.000335), each kept weight costs about 6 nats more than under e^-2, and the ELBO itself "
    "reached 0.00067 after 18 main epochs at MED-MEA 0.9667; 12 post-training epochs at cosine-decayed steps "
    "settled it at 0.9674 "
    "(constant steps had ended at 0.9667, moving 0.9661-0.9675 from epoch to epoch). That recipe is now the preset, "
    "and it meets the target without the flow posterior of the published point",
    "horseshoe": "The node statistic and rule are Ghosh et al.'s (2018) P_q(tau_k v < delta) > p0, equal to a Monte "
    "Carlo estimate in tests/test_horseshoe.py: no bug. No unit falls below delta = 1e-3 in these runs, nor in "
    "the fast grid's: the scales E log(tau v) sit several units of log above log delta, and Ghosh et al. note "
    "that the factorised family's scales do not shrink towards zero. Hubin & Storvik's PRN density (0.194) "
    "comes from Louizos et al.'s (2017) pruning rule, another rule. The doubt count follows the training: "
    "the paper's setup (the ELBO from scratch at step size 1e-4) decides almost nothing after its first epochs, "
    "its predictive still flat, like the paper's 3 of 10,000 after 250 epochs (whether ours stays so for 250 "
    "epochs is not measured: that is hours here); the same ELBO at step size 1e-3 decides most images within "
    "two epochs, and the fast grid's tempered, warm-started posterior is narrow and confident",
    "table5": "The tempered KL explains the output layer: the KL weight scales the price of every kept weight, "
    "and the output layer's mean inclusion falls steadily as it rises, passing Table 5's value between the "
    "KL weights 0.05 and 0.2 and falling below it on the ELBO. Table 5 is the ELBO after 250 epochs from scratch "
    "at step size 1e-4; ours on the ELBO starts from a warm start at larger steps",
}

ISLAB_TARGET = 0.00067  # the published input-skip LBBNN's density (front_recipes.TARGETS)


def islab_explanation(entries: list[dict[str, Any]]) -> list[str]:
    """Per try: how fast the active-path density still fell over its last 3 main epochs, and at that rate how many
    more main epochs would reach the published density (the CPU seconds at its own cost per epoch)."""
    out = []
    for e in entries:
        ratios = e["ratios"][-3:]
        if not ratios:
            continue
        rate = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        last = e["active_density"][-1]
        text = (
            f"{e['label']} ({e['lr_schedule']} step sizes): active density {last:.5f} after {e['main_epochs']} main "
            f"epochs, falling {100 * (1 - rate):.1f} % an epoch over the last {len(ratios)}"
        )
        if last <= ISLAB_TARGET:
            text += f"; reached {ISLAB_TARGET}"
        elif rate < 0.995:
            more = math.log(ISLAB_TARGET / last) / math.log(rate)
            per_epoch = e["main_cpu_per_epoch"]
            text += (
                f"; at that rate {ISLAB_TARGET} needs about {more:.0f} more main epochs "
                f"(about {more * per_epoch / 60:.0f} CPU minutes)"
            )
        else:
            text += "; at that rate it has stopped"
        text += f"; MED-MEA {e['main_accuracy']:.4f} at the end of the main phase"
        if e.get("posttrained", True):
            text += f", {e['final_accuracy']:.4f} after post-training"
        else:
            text += " (stopped by its budget before post-training)"
        out.append(text)
    return out


def render(data: dict[str, Any]) -> str:
    out = [
        "# Findings of the sparsity frontier, measured",
        "",
        "Generated by `python -m benchmarks.findings render` from `findings.json` (and `front_recipes.json` for "
        "islab-mnist). Machine: the shared 2-core CPU, one torch thread, loaded by other work (load averages in "
        "the json).",
        "",
    ]
    out += render_islab(islab_summary())
    if data.get("horseshoe"):
        out += render_horseshoe(data["horseshoe"])
    if data.get("table5"):
        out += render_table5(data["table5"])
    notes = {**NOTES, **data.get("notes", {})}
    if notes:
        out += ["## What the numbers say", ""] + [f"- **{k}.** {v}" for k, v in notes.items()] + [""]
    return "\n".join(out)


def page_reasons(dataset: str, data: dict[str, Any] | None = None) -> dict[str, str]:
    """The results page's measured explanation per family (MNIST only: the findings were measured there);
    empty until `python -m benchmarks.findings horseshoe` has run."""
    data = _load() if data is None else data
    horseshoe = data.get("horseshoe")
    if dataset != "mnist" or not horseshoe:
        return {}
    sentences = horseshoe_explanation(horseshoe)
    why = {**NOTES, **data.get("notes", {})}.get("horseshoe")
    return {
        "horseshoe": "measured (`python -m benchmarks.findings horseshoe`, benchmarks/results/findings.md): "
        + "; ".join(sentences)
        + (f". {why}" if why else "")
    }


def page_notes(dataset: str, data: dict[str, Any] | None = None) -> str:
    """The Table 5 line under the results page's MNIST table (empty until `findings table5` has run)."""
    data = _load() if data is None else data
    table5 = data.get("table5")
    if dataset != "mnist" or not table5:
        return ""
    why = {**NOTES, **data.get("notes", {})}.get("table5")
    return (
        "- LBBNN's output-layer mean inclusion against Table 5 (`python -m benchmarks.findings table5`, "
        "benchmarks/results/findings.md): "
        + "; ".join(table5_explanation(table5))
        + (f". {why}" if why else "")
        + ".\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.findings", description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("horseshoe", "table5", "render"))
    parser.add_argument("--epochs", type=int, default=None, help="main-phase epochs per training (default 4)")
    parser.add_argument("--variants", default=",".join(HORSESHOE_VARIANTS), help="horseshoe variants, comma-separated")
    parser.add_argument("--stored", default=",".join(STORED_LBBNN), help="stored LBBNN run ids for table5")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    # Every value checked by core.validate's rules before anything is trained or any file rewritten.
    from core import validate
    from core.errors import BNNError, InputError

    try:
        low = 0 if args.what == "table5" else 1  # table5 --epochs 0: the stored runs only
        epochs = 4 if args.epochs is None else validate.whole_number(args.epochs, "--epochs", low, 1000)
        if args.threads is not None:
            validate.whole_number(args.threads, "--threads", 1, 256)
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        if args.what == "horseshoe" and not variants:
            raise InputError(f"--variants: give at least one of {', '.join(HORSESHOE_VARIANTS)}")
        unknown = [v for v in variants if v not in HORSESHOE_VARIANTS]
        if unknown:
            known = ", ".join(HORSESHOE_VARIANTS)
            raise InputError(f"--variants: unknown {', '.join(unknown)}; known: {known}")
    except BNNError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    data = _load()
    try:
        return _run(args, data, epochs, variants)
    except BNNError as exc:  # e.g. no MNIST under --data-dir: one line, nothing written
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args, data, epochs: int, variants: list[str]) -> int:
    if args.what == "horseshoe":

        def keep(partial):
            data["horseshoe"] = partial
            _save(data, "horseshoe")

        data["horseshoe"] = run_horseshoe(epochs, variants, args.data_dir, on_variant=keep)
    elif args.what == "table5":
        stored = [s.strip() for s in args.stored.split(",") if s.strip()]
        data["table5"] = run_table5(epochs, stored, args.data_dir)
    if args.what != "render":
        _save(data, args.what)
        data = _load()
    MD_PATH.write_text(render(data))
    print(f"wrote {MD_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
