"""Recipes on the sparsity front: train a preset (or a variation of it) into the run store and record,
after every epoch, the MED-MEA accuracy (`mpm-mean`, R=1), the density and the active-path density.

    python -m benchmarks.front_recipes --preset sparse-mnist [--train JSON] [--family-options JSON]
        [--hidden 400,600] [--seed 0] [--budget-minutes 60] [--threads 1] [--device cuda] [--label TEXT]
    python -m benchmarks.front_recipes --render-only
    python -m benchmarks.front_recipes --import-ttq PATH --label TEXT   # a time_to_quality.json's entries

The run is trained by `core.runs.train_run`, so the finished run lands in the run store under the same
id as `python -m core train --preset ...` would give it (the Pareto section of RESULTS.md reads the
presets' stored runs). A recipe stops where its config says (e.g. `target_density`, then post-training);
a run stopped by the budget is recorded but not stored. Each entry keeps its curve, the training wall
and CPU seconds (`time.process_time`, evaluation excluded) and the load; the table and curves go to
benchmarks/results/front_recipes.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from benchmarks.time_to_quality import load_average, load_entries, machine, save_entries

RESULTS = Path(__file__).resolve().parent / "results"
JSON_PATH = RESULTS / "front_recipes.json"
MD_PATH = RESULTS / "front_recipes.md"

# Targets on MNIST (issue: the sparsity frontier): MED-MEA >= 0.981 at density <= 0.0147 (Molchanov et al. 2017's
# sparse VD LeNet-300-100), >= 0.967 at active-path density <= 0.00067 (the input-skip LBBNN of Hubin, Storvik,
# Skaaret-Lund et al.); a convolutional network (LeNet-5) has its own: >= 0.9925 at density <= 0.0036 (Molchanov
# et al. 2017's sparse VD LeNet-5), a fully connected target being no claim for it.
TARGETS = {"density": (0.981, 0.0147), "active_density": (0.967, 0.00067)}
CONV_TARGETS = {"density": (0.9925, 0.0036)}


def targets_of(config: dict[str, Any] | None) -> dict[str, tuple[float, float]]:
    """The targets of an entry's network: the convolutional ones where its config has conv layers."""
    return CONV_TARGETS if (config or {}).get("conv") else TARGETS


@contextmanager
def watching_model(on_model: Callable[[Any], None]):
    """While active, hand the model that `core.runs.train_run` trains to `on_model` before its training
    starts: train_run builds the model inside, and the per-epoch evaluation needs it (the training itself
    is untouched, so the stored run is the one `python -m core train` would store)."""
    import core.train

    original = core.train.train

    def train(model, *args, **kwargs):
        on_model(model)
        return original(model, *args, **kwargs)

    core.train.train = train
    try:
        yield
    finally:
        core.train.train = original


def configure(preset: str, seed: int, hidden, train_changes, option_changes, method: str | None = None):
    from core.runs.presets import get_preset

    config = get_preset(preset).replace(seed=seed)
    if method is not None and method != config.method:
        # another family on the preset's network and data: the preset's family options are its family's
        config = config.replace(method=method, family_options={})
    if hidden is not None:
        config = config.replace(hidden=hidden)
    if train_changes:
        config = config.replace(train={**config.to_dict()["train"], **train_changes})
    if option_changes:
        config = config.replace(family_options={**config.to_dict()["family_options"], **option_changes})
    return config


def train_recipe(config, budget_seconds: float, data_dir: str | None = None, echo=print) -> dict[str, Any]:
    """Train `config` into the run store, evaluating after every epoch; the entry for the results file."""
    import torch

    from core.errors import TrainingCancelled
    from core.predict import evaluate
    from core.predict.structure import network_active_masks, overall_density
    from core.runs import train_run

    dataset = config.load_dataset(data_dir)
    held: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    state = {"seconds": 0.0, "cpu": 0.0, "mark": time.process_time(), "stop": False}

    def after_epoch(record: dict[str, Any]) -> None:
        state["cpu"] += time.process_time() - state["mark"]
        state["seconds"] += record["seconds"]
        model = held["model"]
        with torch.no_grad():
            result = evaluate(model, dataset, "mpm-mean", 1)
            masks = model.keep_masks()
            active = overall_density(network_active_masks(model, masks))
        row = {
            "epoch": len(rows) + 1,
            "phase": record["phase"],
            "kl_weight": record.get("kl_weight"),
            # the epoch's mean training NLL (in the warm start: the deterministic net's, whose test accuracy is
            # not measured; the rows' accuracy there is the untrained variational net's)
            "data_term": record.get("data_term"),
            "train_seconds": round(state["seconds"], 2),
            "train_cpu_seconds": round(state["cpu"], 2),
            "load": round(load_average(), 1),
            "mpm_mean_accuracy": result["accuracy"],
            "density": result["density"],
            "active_density": active,
            "layer_density": result.get("layer_density"),
            # replayed, eager or why not (core/step_graphs.py); absent without train.cuda_graphs
            "cuda_graphs": record.get("cuda_graphs"),
        }
        model.train()
        rows.append(row)
        echo(
            f"  epoch {row['epoch']:>3} [{row['phase']}] {row['train_seconds']:8.1f} s {row['train_cpu_seconds']:8.1f} "
            f"cpu-s (load {row['load']})  MED-MEA {row['mpm_mean_accuracy']:.4f}  density {row['density']:.5f}  "
            f"active {row['active_density']:.5f}",
            flush=True,
        )
        state["stop"] = state["seconds"] >= budget_seconds
        state["mark"] = time.process_time()

    started = time.time()
    run_id, stored = config.run_id(dataset.fingerprint), False
    try:
        with watching_model(lambda model: held.update(model=model)):
            state["mark"] = time.process_time()
            run = train_run(config, progress=after_epoch, cancel=lambda: state["stop"], data_dir=data_dir)
        stored = not run.from_cache
        run_id = run.run_id
    except TrainingCancelled:
        echo("  stopped by the budget: recorded, not stored", flush=True)
    return {
        "run_id": run_id,
        "stored": stored,
        "config": config.to_dict(),
        "budget_seconds": budget_seconds,
        "rows": rows,
        "wall_seconds": round(time.time() - started, 1),
        "machine": machine(next(held["model"].parameters()).device if "model" in held else config.device),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def reached(row: dict[str, Any], targets: dict[str, tuple[float, float]] = TARGETS) -> list[str]:
    """The targets (of `targets`) a row meets (outside the warm start)."""
    if row.get("phase") == "warm-start":
        return []
    return [
        f"{accuracy:g} @ {'active-path ' if key == 'active_density' else ''}density {density:g}"
        for key, (accuracy, density) in targets.items()
        if row.get(key) is not None and row["mpm_mean_accuracy"] >= accuracy and row[key] <= density
    ]


def best_row(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The point an entry contributes to the front: its first row meeting a target, else its last row."""
    targets = targets_of(entry.get("config"))
    rows = [r for r in entry.get("rows", []) if r.get("phase") != "warm-start"]
    hits = [r for r in rows if reached(r, targets)]
    return hits[0] if hits else (rows[-1] if rows else None)


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(entries: list[dict[str, Any]], notes: str = "") -> str:
    lines = [
        "# Recipes on the sparsity front (MNIST)",
        "",
        "Generated by `python -m benchmarks.front_recipes` from `front_recipes.json`. Targets: MED-MEA "
        ">= 0.981 at density <= 0.0147 (Molchanov et al. 2017, sparse VD LeNet-300-100: 0.9808 @ 0.0147) and "
        ">= 0.967 at active-path density <= 0.00067 (the input-skip LBBNN of Hubin, Storvik, Skaaret-Lund et al.); "
        "for the convolutional LeNet-5 (`lenet5-mnist`), >= 0.9925 at density <= 0.0036 (Molchanov et al. 2017, "
        "sparse VD LeNet-5). "
        "Accuracy: MED-MEA (median probability model, mean weights, R=1) on the 10,000 test images after "
        "every epoch; density: kept weights over all weights (biases included); active: the kept weights on an "
        "input-to-output path (`Run.active_paths`). Seconds: training only, wall and CPU of this process "
        "(torch threads: one unless the command says `--threads`); load: the 1-minute load average of the shared "
        "2-core machine at the end of the epoch.",
        "",
        "| recipe | command | epochs | MED-MEA | density | active density | targets met | train s | CPU s | load | "
        "stored run |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for entry in entries:
        row = best_row(entry)
        if row is None:
            continue
        stored = f"`{entry['run_id']}`" if entry.get("stored") else "not stored"
        lines.append(
            f"| {entry['label']} | `{entry.get('command', '-')}` | {row['epoch']} | {row['mpm_mean_accuracy']:.4f} | "
            f"{row['density']:.5f} | {_fmt(row.get('active_density'), '.5f')} | "
            f"{', '.join(reached(row, targets_of(entry.get('config')))) or 'none'} | "
            f"{row['train_seconds']:.0f} | {_fmt(row.get('train_cpu_seconds'), '.0f')} | "
            f"{_fmt(row.get('load'), '.1f')} | {stored} |"
        )
    lines += ["", "## Curves", ""]
    for entry in entries:
        lines += [f"### {entry['label']}", "", f"{entry.get('date', '')}; `{entry.get('command', '-')}`", ""]
        lines += [
            "| epoch | phase | KL weight | MED-MEA | density | active density | train s | CPU s | load |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in entry.get("rows", []):
            lines.append(
                f"| {r['epoch']} | {r['phase']} | {_fmt(r.get('kl_weight'), 'g')} | {r['mpm_mean_accuracy']:.4f} | "
                f"{r['density']:.5f} | {_fmt(r.get('active_density'), '.5f')} | {r['train_seconds']:.0f} | "
                f"{_fmt(r.get('train_cpu_seconds'), '.0f')} | {_fmt(r.get('load'), '.1f')} |"
            )
        lines.append("")
    return "\n".join(lines) + ("\n" + notes.strip() + "\n" if notes.strip() else "")


# What the explorations showed (written from the curves above; each claim names its recipe).
NOTES = """
## What the curves say

- **Without a ramp the tempered KL prunes before the weights adapt.** `fast-mnist` with the KL weight at 0.3
  (20 cosine epochs) took the density from 1 to 0.0253 in one epoch and 0.0138 in two, with MED-MEA at 0.856 and
  0.949; it recovered slowly (0.964 at 0.0099 after 4 epochs). Stopping at 0.0147 (`target_density`) and
  post-training the median probability model's weights with the structure fixed gave 0.9759, 0.9770, 0.9776 in
  three post-training epochs: each epoch adds less, and 0.981 at this structure is out of reach. Hence
  `sparse-mnist` ramps the KL weight in over 4 epochs.
- **The ramp chooses a better structure.** The first `sparse-mnist` (KL weight 0.075, 0.15, 0.225, 0.3 in its
  first four epochs): the density fell 0.140, 0.042, 0.023, 0.016, 0.0133 and the main phase stopped there at
  MED-MEA 0.9751 (0.949 without the ramp); four post-training epochs gave 0.9789, 0.9797, 0.9800, 0.9801, the
  gain per epoch falling (0.0038, 0.0008, 0.0003, 0.0001): 0.0009 short of 0.981 on that structure.
- **Target met: `sparse-mnist` with the KL ramped to 0.2** stopped at density 0.01445 (epoch 8 of the main
  phase, MED-MEA 0.9775) and post-training took it to 0.9823, 0.9828, 0.9822, 0.9821: **0.9821 at density
  0.0145** after 150 CPU seconds of training (364 s of wall time at a load of 5-12), one seed. It dominates
  Molchanov et al.'s (2017) sparse VD LeNet-300-100 point (0.9808 at 0.0147): more accurate and sparser.
- **The ELBO on the input-skip network stalls at an active-path density of 0.0015, twice the published 0.00067.**
  `islab-mnist` (KL weight ramped to 1 over 4 epochs): 0.0097 after one epoch, then 0.0039, 0.0026, 0.0020,
  0.00181, 0.00170, 0.00162, 0.00159, 0.00155, 0.00153, 0.00153, 0.00153 as the cosine step sizes decayed; the
  kept weights are almost all on active paths (0.00150 of 0.00153). MED-MEA rose to 0.968 in the main phase
  and to 0.9745 in 4 post-training epochs with the structure fixed. The density target of the recipe (0.00067)
  was never reached, so the main phase ran all 12 epochs. Not yet measured: which of the Gaussian N(0, 1)
  slab, the fixed prior inclusion e^-2, the mean-field posterior (the published point uses normalizing flows,
  `lbbnn-flow`) or the length of training keeps the extra weights.
- Points no published point dominates: `islab-mnist`'s 0.9745 at active-path density 0.0015 is more accurate
  than the published input-skip point (0.967 at 0.00067) and sparser than every other published point (the
  sparsest of which, Molchanov et al.'s 2017 LeNet-5, keeps 0.0036). `sparse-mnist`'s 0.9821 at 0.0145 is
  dominated only by the convolutional LeNet-5 points (0.9925 at 0.0036, 0.990 at 0.0064), none fully
  connected.
- **LeNet-5 (`lenet5-mnist`'s network, target 0.9925 at density 0.0036 in 60 minutes): missed by 5-6 times on
  density, by under 0.001 on accuracy.**
  `lenet5 A` (sparse VD on the ELBO, ramped in over 2 epochs after 2 deterministic warm-start epochs,
  batches of 250, log sigma^2 at 1e-2, cosine over 10 epochs, stop at 0.0036, 2 post-training epochs):
  **0.9918 at density 0.0224** (about 9,700 of 431,080 weights; the target keeps 1,550) after 2,524 training
  seconds (1,831 CPU s, load 7-15), stored. Which phase: not the warm start nor the pruning's accuracy (MED-MEA
  rose while the density fell: 0.9849 at 0.098 after the first ELBO epoch, 0.9910 at 0.0264 when the main phase
  ended, 0.9918 at 0.0224 after post-training); the density fell too slowly: 0.098, 0.054, 0.047, 0.040, 0.039,
  0.032, 0.029, 0.027, 0.0266, 0.0264 in the 10 main epochs (each epoch pruning at most a fifth of the kept
  weights after the second, less as the cosine step sizes decayed; the constant-step post-training pruned again,
  0.0264 to 0.0224, within the fixed structure: sparse VD drops a weight whose log alpha passes 3). Per layer at
  the end: conv1 0.78, conv2 0.129, fc1 0.0123 (4,900 of its 400,500), fc2 0.217. The time is not what ran out:
  the run ended after 42 of its 60 minutes (its first ELBO epoch took 740 s of wall time while my tests shared the
  CPU, later ones about 80 s, 113 CPU s each at batches of 250).
- **A larger step for log sigma^2 did not prune faster.** `lenet5 B` (1 warm-start epoch, the full ELBO from the
  first epoch, log sigma^2 at 5e-2, constant steps; stopped by hand after 3 main epochs to free the CPU, so it has
  no entry above; its log): density 0.093, 0.074, 0.070 at MED-MEA 0.9807, 0.9854, 0.9859, slower than A (0.098,
  0.054, 0.047). `lenet5 C` (B with the weights at 3e-3): density 0.084, 0.063, 0.064, 0.054, 0.047, 0.045,
  0.040, 0.039, 0.036, 0.034, 0.034, 0.031 in its 12 main epochs (MED-MEA 0.9816 to 0.9917), as slow as A;
  then the 2 post-training epochs
  (the structure fixed, a fresh optimiser at the same steps) took the density to 0.0194 and 0.0185: **0.9922 at
  density 0.0185** (conv1 0.58, conv2 0.118, fc1 0.0103, fc2 0.116) after 1,146 training seconds (1,664 CPU s,
  load 8-21), stored: the most accurate and sparsest LeNet-5 point here, 5 times the target density and 0.0003
  short of its accuracy. Why post-training pruned so much faster than the main phase (the fresh Adam state of a
  new phase is one candidate) is not measured.
- So the cause measured: on the ELBO (kl_weight 1, the most `TrainConfig` allows) sparse VD prunes LeNet-5 by a
  few per cent to a fifth of its kept weights an epoch once the first epochs have removed the bulk, and neither
  a 5x step on log sigma^2 nor a 3x step on the weights changed that in the main phase; Molchanov et al. (2017)
  train 200 epochs.
  At about 80 s an epoch here (batches of 250, 2 threads, load 7-20), 60 minutes hold about 40 epochs.
- **At constant steps the ELBO levels off far above 0.0036; the cut gives the best conv point so far.** `lenet5 D`
  (C's steps, constant, up to 38 main epochs): the density levelled off at 0.021-0.023 with MED-MEA 0.990-0.991
  from epoch 30 on, so time is not what stops it: the ELBO's optimum under sparse VD's prior lies far above the
  target. Cut to 0.0036 by log alpha (`posttrain_density`) and post-trained 3 cosine epochs: **0.9908 at density
  0.00329** (conv1 0.237, conv2 0.0237, fc1 0.00139, fc2 0.0289), beyond Louizos et al.'s (2017) 0.990 at 0.0064,
  0.0017 short of Molchanov et al.'s 0.9925 at 0.0036.
- **More post-training on that cut adds 0.0009.** Ten more cosine epochs on D's stored run (the structure fixed,
  steps restarted at 3e-3; `python -m benchmarks.continue_posttrain 72ede99686b47eb6 --epochs 10 --threads 2`,
  benchmarks/results/continue_posttrain.md): 0.9901 after the restart's first two epochs, then rising as the steps
  decayed to **0.9917 at density 0.00323** (0.0008 short). The cut keeps exactly 0.0036 of the weights, but
  sparse VD goes on pruning inside the fixed structure (a weight whose log alpha passes 3 is dropped): 0.0036 to
  0.00329 in D's post-training, 0.00323 after these ten.
- **Which median probability model on a fixed structure: the cut AND sparse VD's own rule (unchanged).** Sparse
  VD has no inclusion variable: its median probability model is the rule log alpha < 3 itself (Molchanov et al.
  2017 prune by it). Fixing the structure only says which weights may be non-zero; the kept weights' q is still
  sparse VD's, so a weight whose log alpha passes 3 during post-training is noise by the same rule that made the
  cut (its posterior mean under a fifth of its sd), and evaluating it at its mean would count a weight the
  posterior cannot tell from zero. So MED-MEA stays as stored runs report it (core/models/base.py `keep_mask`);
  `continue_posttrain` now also reports "the structure", the fixed cut itself with every weight at its mean.
- **Keeping the cut's density does not close the gap: every variant levels off at 0.990-0.991 on D's cut.**
  On 72ede99686b47eb6, each from the stored state, cosine steps from 3e-3, one thread each, the first two
  commands side by side on the shared machine (load 5-20; benchmarks/results/continue_posttrain.md):
  `--freeze-scales` (the ELBO, same noise, log sigma^2 held; 6 epochs; `python -m benchmarks.continue_posttrain
  72ede99686b47eb6 --threads 1 --density 0.0036 --epochs 6 --freeze-scales`): 0.9894 after the restart's first
  epoch, then 0.9900-0.9909, **0.9907 at density 0.00326** at the end (the structure itself: 0.9906 at 0.00329).
  Freezing the scales does not keep the density: the KL still pulls means down past log alpha 3 (0.00329 to
  0.00325-0.00327, as with the scales trained).
  `--deterministic` (NOT the ELBO: the cut's posterior means fine-tuned as a pruned deterministic net, no noise,
  no KL; 10 epochs; `... --epochs 10 --deterministic`): the density stays exactly 0.00329; 0.9899 after the first
  epoch, at most 0.9909, **0.9907** at the end.
  `--deterministic --stored-structure` (the same, on the stored structure whole: D's cut at 0.0036, also the
  weights sparse VD's rule dropped in D's post-training; 10 epochs): exactly 0.00360 throughout; 0.9908 before
  (the extra weights add nothing at their means), 0.9901-0.9908 after, **0.9905** at the end. With a third of
  the step (`--weights-lr 0.001`, 5 epochs, 2 threads, load 2-6) the restart's dip goes: 0.9908, 0.9909, 0.9913,
  0.9912, **0.9909** at the end, exactly 0.00360.
  So on this structure the point stays within 0.0015 of the 0.9908 the cut started from (0.9894-0.9917) whatever
  trains, the ELBO with everything trained the best of them: the limit measured is the cut, not its
  post-training. It is a cut by rank of an ELBO optimum at density 0.021, where Molchanov et al. (2017) train
  sparse VD 200 epochs into a posterior that is itself that sparse (every log sigma^2 throughout, the density
  counted by log alpha < 3 alone, no cut and no fine-tuning). No variant
  beats the stored ELBO post-training's 0.9917 at 0.00323, so `lenet5-mnist` should not change for it.
- **Cutting in steps does not either: at 0.0036 it levels off at 0.9907 again.** From `lenet5 C` retrained
  (the same run id, dcac01631d591500: 535 s of training on a quiet machine, 2 threads), cut to 0.01, then 0.006,
  then 0.0036, each cut post-trained on the ELBO with cosine steps from C's (4, 4 and 10 epochs, a fresh
  optimiser per cut; `python -m benchmarks.continue_posttrain dcac01631d591500 --density 0.01,0.006,0.0036
  --epochs 4,4,10 --threads 2`, 667 s, benchmarks/results/continue_posttrain.md): 0.9924 at 0.00927 after the
  first cut's epochs, 0.9916 at 0.00594 after the second's (0.9912-0.9929 over its four epochs, beyond Louizos
  et al.'s 0.990 at 0.0064), and after the third 0.9898 at first, then 0.9901-0.9915, **0.9907 at 0.00353** at
  the end (20 minutes of training in all). The weights a gentler cut leaves at 0.0036 serve no better than one
  cut's: each stage ends within the epoch-to-epoch spread (about +-0.0007 at a fixed structure) of the one-cut
  points above, so the structure at this density, not how it was reached, holds the point at 0.991. What is
  left is a sparser posterior itself (Molchanov et al. 2017: 200 epochs of sparse VD, about 5 times the epochs
  60 minutes hold here at 33-80 s an epoch), untried here.
- **200 epochs, tried on a lent H100: a longer training does give a sparser posterior, but only with decaying
  steps; the best cut is 0.9920 at 0.00340, 0.0005 short.** Six recipes, three at a time side by side on one
  H100 (torch 2.11), each step replayed as a CUDA graph (every epoch's record says "replayed": the conv layers
  capture), `lenet5-mnist` with `--device cuda` (`OUT=FOLDER bash benchmarks/lenet5_gpu.sh 6.5` and
  `... 4.5 d-cut d-scales-0.1 d-weights-1e-3`; 200 epochs in 196-347 s of training each). Densities after the
  200 epochs, MED-MEA beside them:
  the preset itself (constant steps 1e-3, batch 100): 0.0357 at epoch 50, 0.0204 at 100, 0.0185 at 150, **0.0176**
  (0.9919) at 210, levelling off at 0.018-0.020 as `lenet5 D` did on the CPU at 0.021-0.023;
  the same with the steps decaying by a cosine: 0.0314, 0.0180, 0.0107, **0.00844** (0.9918), still falling
  until the steps neared zero;
  D's steps (weights 3e-3, log sigma^2 5e-2, batch 250) decaying by a cosine: 0.0173, 0.0107, 0.0064,
  **0.00525** (0.9907), twice in two runs (0.00505);
  with log sigma^2's step at 1e-1: the posterior itself reached 0.0036 at epoch 183 (0.9908 there), no cut
  needed, **0.9904 at 0.00325** after post-training;
  with the weights' step at 1e-3: **0.9928 at 0.00793** after 200 epochs (0.9917-0.9931 from epoch 50 on),
  then cut to 0.0036 by log alpha and post-trained 10 cosine epochs: 0.9914-0.9922, **0.9920 at 0.00340**
  (conv1 0.267, conv2 0.0228, fc1 0.0015, fc2 0.0295), the best point at <= 0.0036 here, stored as
  d6e72c9e0aefc5d1 on the GPU machine (it loads on a CPU and gives MED-MEA 0.9920 there as well).
  So what measured holds the CPU's LeNet-5 at 0.991: constant steps, which keep the posterior at 0.02 however
  long it trains, and 40 epochs instead of 200. A smaller step for the weights keeps the accuracy (0.9928 at
  0.0079, more accurate than every published LeNet-5 point) and a larger one for log sigma^2 prunes further;
  neither alone reached 0.9925 at 0.0036 in 200 epochs. At 35 s a CPU epoch (batches of 250, quiet), 200
  epochs are about two hours, twice the 60 minutes.
- **Both steps together in 75 cosine epochs on the CPU: worse.** `lenet5 E` (weights 1e-3, log sigma^2 1e-1, batch
  250, 1 warm-start epoch, cut to 0.0036 and 4 cosine post-training epochs; 2,801 s of training, 2 threads, load
  2-4): the density fell to 0.0197 by epoch 49 and levelled at 0.0159 as the steps decayed, MED-MEA 0.986-0.987
  throughout (D's constant steps held 0.990-0.991 at 0.021); the cut took it to 0.00287 (sparse VD's rule dropped
  more than the cut) at 0.9799, and post-training to **0.9833**. A short decay stops the posterior far from the
  target, and a cut from a less accurate posterior costs more: in 60 CPU minutes the best conv point stays
  `lenet5 D`'s cut and its continuation (0.9917 at 0.00323).
  `lenet5-mnist` is now the d-weights-1e-3 recipe (its run id changed; the old preset is `long` above).
- **LBBNN on LeNet-5 prunes to the target density within minutes, but stays near 0.988.** The same network with
  `--method lbbnn` (`python -m benchmarks.front_recipes --preset lenet5-mnist --method lbbnn --family-options
  '{"prior_inclusion": 0.0183}' --train '{...}' --threads 2`, the settings in each entry's command; prior inclusion
  e^-4, 2 deterministic warm-start epochs at 3e-3, the ELBO ramped in, cosine steps, stop at 0.0036, 10 cosine
  post-training epochs; 2 threads, quiet machine, about 31 s an epoch). `lenet5 lbbnn F` (the inclusion logits'
  step 2e-2, as `fast-mnist`; ramp over 4 epochs): density 0.0154 after the first ELBO epoch, 0.00322 after the
  fifth (MED-MEA 0.982), post-trained to **0.9876 at 0.00322** (active 0.00299) in 498 s of training.
  `lenet5 lbbnn G` (inclusion step 2e-3, ramp over 10 epochs, cosine over 80): the density fell more slowly
  (0.086 after the first ELBO epoch, 0.0036 at epoch 41), but MED-MEA stayed at 0.90-0.97 while it fell, and
  post-training ended at **0.9840 at 0.00359** (active 0.00290) after 1,578 s. Choosing the structure slowly,
  which helped LBBNN on the fully connected front, did not help here; per layer both keep half of conv1's taps
  (sparse VD a quarter) and under 0.1% of fc1's. Sparse VD's cuts (0.9907-0.9920 at the same density) stay
  the conv points.
- **The best cut with its weights sampled: 0.9921-0.9925, converging to 0.9922.** `d6e72c9e0aefc5d1` (`lenet5 GPU
  d-weights-1e-3`, 0.9920 at 0.00340 by MED-MEA) evaluated on this CPU with the median probability model's
  structure and its weights drawn from sparse VD's posterior (`mpm`, R draws averaged; `core.predict.evaluate`):
  0.9925 at R = 10, 0.9921 at R = 30, 0.9922 at R = 100. The value at R = 10 equals the published 0.9925 by
  the luck of ten draws; the converged one is 0.0003 short. For scale: the standard error of an accuracy near
  0.992 on 10,000 test images is 0.0009, so the published point and these are not told apart by the test set.
- **300 epochs, on a lent H200: the target is met, on a GPU.** `lenet5 GPU w-1e-3-300` (d-weights-1e-3 over 300
  cosine epochs; `OUT=FOLDER bash benchmarks/lenet5_gpu.sh 6.5 w-1e-3-s-0.1 w-1e-3-300 w-1e-3-s-0.1-300`, three
  runs side by side, 265-273 s of training each for 300 epochs): the posterior itself reached density 0.0060 at
  MED-MEA 0.9929 (d-weights-1e-3's 200 epochs: 0.0079 at 0.9928), so the cut to 0.0036 removed less, and
  post-training ended at **0.9932 at 0.00346** (0.9924-0.9932 over its ten epochs), above Molchanov et al.'s
  0.9925 at 0.0036. A second seed (`lenet5 GPU w-1e-3-300 seed 1`, alone on the GPU, 102 s): 0.0057 before the
  cut, **0.9922 at 0.00348** at the end (0.9918-0.9925 over the ten epochs). With the weights sampled (`python -m
  core evaluate RUN --mode mpm --samples R` on this CPU, the runs copied from the GPU machine): seed 0 0.9926,
  0.9929, 0.9928 at R = 10, 30, 100, seed 1 0.9923, 0.9922, 0.9929. So one seed of two meets the target by
  MED-MEA and both by the converged sampled prediction; the seeds differ by 0.0010, about the test set's standard
  error. `lenet5-mnist` is now this recipe. log sigma^2's step at 1e-1 prunes past the target without a cut
  and loses accuracy: 0.9895 at 0.00278 after 200 epochs, 0.9900 at 0.00270 after 300 (`w-1e-3-s-0.1`,
  `w-1e-3-s-0.1-300`). On this 2-core CPU the 300 epochs would take about three hours (35 s an epoch), three
  times the issue's 60 minutes; what the CPU reached in 60 minutes stays 0.9917 at 0.00323 (`lenet5 D`).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="sparse-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", default=None, help="JSON of training settings to change")
    parser.add_argument("--family-options", default=None, help="JSON of family options to change")
    parser.add_argument("--hidden", default=None, help="hidden widths instead of the preset's (e.g. 400,600)")
    parser.add_argument("--method", default=None, help="another family on the preset's network (its options reset)")
    parser.add_argument("--budget-minutes", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default=None, help="cpu, cuda, auto (default: the preset's)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--label", default=None)
    parser.add_argument("--render-only", action="store_true")
    parser.add_argument("--import-ttq", default=None, help="add the entries of a time_to_quality json")
    parser.add_argument("--results-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    json_path = results / JSON_PATH.name
    entries = load_entries(json_path)
    given = list(argv if argv is not None else sys.argv[1:])
    # the data folder is this machine's (BNN_DATA_DIR says it as well): the recorded command leaves it out
    for flag in ("--data-dir",):
        while flag in given[:-1]:
            at = given.index(flag)
            del given[at : at + 2]
    given = [a for a in given if not a.startswith("--data-dir=")]
    command = "python -m benchmarks.front_recipes " + " ".join(
        a if " " not in a and '"' not in a else f"'{a}'" for a in given
    )
    changes = {}
    for name in ("train", "family_options"):
        text = getattr(args, name)
        if text:
            try:
                changes[name] = json.loads(text)
            except json.JSONDecodeError as exc:
                parser.error(f"--{name.replace('_', '-')}: not JSON ({exc.msg})")
            if not isinstance(changes[name], dict):
                parser.error(f"--{name.replace('_', '-')}: give a JSON object")
    if args.import_ttq:
        for entry in load_entries(Path(args.import_ttq)):
            entries.append(
                {
                    **{k: entry[k] for k in ("run_id", "config", "rows", "wall_seconds", "machine", "date")},
                    "stored": False,
                    "label": args.label or entry.get("label") or entry["preset"],
                    "command": args.label or "python -m benchmarks.time_to_quality",
                }
            )
    elif not args.render_only:
        import torch

        from core import validate
        from core.errors import BNNError, ConfigError

        try:  # checked before anything is loaded or trained
            if args.threads is not None:
                validate.whole_number(args.threads, "--threads", 1, 256)
            budget = validate.real_number(args.budget_minutes, "--budget-minutes", 0.1, 24 * 60)
        except BNNError as exc:
            parser.error(str(exc))
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        hidden = tuple(int(h) for h in args.hidden.split(",")) if args.hidden else None
        try:
            config = configure(
                args.preset, args.seed, hidden, changes.get("train"), changes.get("family_options"), args.method
            )
            if args.device is not None:
                config = config.replace(device=args.device)
            from core.device import resolve_device

            resolve_device(config.device)  # a GPU that is not here: refused before the data is loaded
        except ConfigError as exc:
            parser.error(str(exc))
        print(f"{args.preset} seed {args.seed}", flush=True)
        try:
            entry = train_recipe(config, budget * 60, args.data_dir)
        except BNNError as exc:  # e.g. the data is missing: one line, the table untouched
            print(f"error: {exc}", file=sys.stderr)
            return 2
        entry.update(label=args.label or args.preset, command=command, threads=args.threads)
        entries.append(entry)
        save_entries(entries, json_path)
    notes = NOTES if results == RESULTS else ""
    results.mkdir(parents=True, exist_ok=True)
    (results / MD_PATH.name).write_text(render(entries, notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
