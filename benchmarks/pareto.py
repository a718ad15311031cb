"""The sparsity frontier: test accuracy against density (the fraction of weights kept), MNIST and
Fashion-MNIST, for RESULTS.md (benchmarks/results_page.py calls `pareto_section`).

Our points are read from the benchmark result files in benchmarks/results/ (time_to_quality.json,
lenet.json, elbo_solutions.json, kl_weight_sweep.json, front_recipes.json) and from the run store (the
`fast` grid's runs and the front presets' runs, sparse-mnist and islab-mnist, MED-MEA accuracy); none is
typed here. The published points are in PUBLISHED with their
sources. The figure is results/pareto.png (log density axis); the table lists every point with its
training seconds where the result file records them, and marks each family's Pareto-optimal points
(no other point of the family is at least as accurate at no more density).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
FIGURE = RESULTS / "pareto.png"
DATASETS = ("mnist", "fashion-mnist")


@dataclass(frozen=True)
class Point:
    dataset: str
    family: str
    accuracy: float
    density: float
    source: str  # where the number comes from (a result file and its entry, a run, or a paper)
    seconds: float | None = None  # training seconds, where known
    published: bool = False


# Published points (accuracy, density = 1 - sparsity), MNIST unless said otherwise.
PUBLISHED = (
    Point("mnist", "lbbnn", 0.981, 0.079, "Hubin & Storvik 2024, Table 2 (MED-MEA, median of 10)", published=True),
    Point("mnist", "sparse-vd", 0.9808, 0.0147, "Molchanov et al. 2017, LeNet-300-100", published=True),
    Point("mnist", "sparse-vd (LeNet-5)", 0.9925, 0.0036, "Molchanov et al. 2017, LeNet-5", published=True),
    Point("mnist", "bayesian-compression (LeNet-5)", 0.990, 0.0064, "Louizos et al. 2017, LeNet-5", published=True),
    Point(
        "mnist",
        "lbbnn-flow (input-skip)",
        0.967,
        0.00067,
        "Hubin, Storvik, Skaaret-Lund et al., input-skip LBBNN with flows",
        published=True,
    ),
)


def _read(name: str, folder: Path) -> Any:
    path = folder / name
    if not path.is_file():
        return None
    with open(path) as handle:
        return json.load(handle)


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _preset_config(name: str) -> dict[str, Any]:
    from core.runs.presets import get_preset

    return get_preset(name).to_dict()


def cached_points(folder: Path = RESULTS) -> list[Point]:
    """Every point the benchmark result files in `folder` hold (files that are missing add none)."""
    points: list[Point] = []
    for entry in _read("time_to_quality.json", folder) or []:
        last = entry["rows"][-1] if entry.get("rows") else None
        if last and _finite(last.get("mpm_mean_accuracy"), last.get("density")):
            # explorations stopped by hand were recorded from their logs, without a config: their preset's
            config = entry.get("config") or _preset_config(entry["preset"])
            points.append(
                Point(
                    config["dataset"],
                    config["method"],
                    last["mpm_mean_accuracy"],
                    last["density"],
                    f"time_to_quality.json: {entry['preset']} seed {entry['seed']}, epoch {last['epoch']}",
                    last.get("train_seconds"),
                )
            )
    lenet = _read("lenet.json", folder) or {}
    for entry in lenet.get("entries", []):
        result = entry.get("result") or {}
        if _finite(result.get("pruned"), result.get("density")):
            points.append(
                Point(
                    entry["dataset"],
                    entry["method"],
                    result["pruned"],
                    result["density"],
                    f"lenet.json: LeNet-300-100 {entry['method']} ({entry['start']}), pruned",
                    entry.get("train_seconds"),
                )
            )
    elbo = _read("elbo_solutions.json", folder)
    if elbo:
        recipe = elbo.get("recipe") or {}
        if _finite(recipe.get("accuracy"), recipe.get("density")):
            points.append(
                Point(
                    "mnist",
                    "lbbnn",
                    recipe["accuracy"],
                    recipe["density"],
                    f"elbo_solutions.json: {elbo['preset']} recipe",
                )
            )
        trajectory = elbo.get("trajectory") or []
        if trajectory and _finite(trajectory[-1].get("accuracy"), trajectory[-1].get("density")):
            points.append(
                Point(
                    "mnist",
                    "lbbnn",
                    trajectory[-1]["accuracy"],
                    trajectory[-1]["density"],
                    f"elbo_solutions.json: the ELBO continued to epoch {trajectory[-1]['epoch']}",
                )
            )
    for sweep in _read("kl_weight_sweep.json", folder) or []:
        last = sweep["rows"][-1] if sweep.get("rows") else None
        if last and _finite(last.get("mpm_mean_accuracy"), last.get("density")):
            points.append(
                Point(
                    "mnist",
                    "lbbnn",
                    last["mpm_mean_accuracy"],
                    last["density"],
                    f"kl_weight_sweep.json: {sweep['preset']} KL weight {sweep['kl_weight']:g}, epoch {last['epoch']}",
                    last.get("train_seconds"),
                )
            )
    points += front_points(_read("front_recipes.json", folder) or [])
    return points


# The recipes on the front (benchmarks/front_recipes.py): an input-skip network is placed at its active-path
# density (the kept weights on an input-to-output path), the measure of the published input-skip point.
FRONT_PRESETS = ("sparse-mnist", "islab-mnist")


def _front_family(config: dict[str, Any]) -> str:
    skip = (config.get("family_options") or {}).get("input_skip")
    if config.get("conv"):  # a convolutional network is its own family, as the published LeNet-5 points are
        lenet5 = [list(block) for block in config["conv"]] == [[20, 5], [50, 5]]
        return f"{config['method']} ({'LeNet-5' if lenet5 else 'conv'})"
    return f"{config['method']} (input-skip)" if skip else config["method"]


def _front_point(config: dict[str, Any], accuracy: Any, density: Any, active: Any, source: str, seconds=None):
    skip = (config.get("family_options") or {}).get("input_skip")
    if skip and _finite(active):
        source = f"{source}; active-path density (all kept weights: {density:.5f})"
        density = active
    if not _finite(accuracy, density) or density <= 0:
        return None
    return Point(config["dataset"], _front_family(config), accuracy, density, source, seconds)


def front_points(entries: list[dict[str, Any]], skip_runs: set[str] = frozenset()) -> list[Point]:
    """Each recipe tried (front_recipes.json): its first epoch meeting a target, else its last (outside the
    warm start); entries whose run is among `skip_runs` (read from the store instead) add none."""
    from benchmarks.front_recipes import best_row

    points = []
    for entry in entries:
        row = best_row(entry)
        if row is None or entry.get("run_id") in skip_runs:
            continue
        point = _front_point(
            entry["config"],
            row["mpm_mean_accuracy"],
            row["density"],
            row.get("active_density"),
            f"front_recipes.json: {entry['label']}, epoch {row['epoch']}",
            row.get("train_seconds"),
        )
        if point is not None:
            points.append(point)
    return points


def front_store_points(
    store: Any, find_runs: Any, presets: tuple[str, ...] = FRONT_PRESETS
) -> tuple[list[Point], set[str]]:
    """The front presets' runs in the run store (every seed), MED-MEA accuracy at the stored density, and
    their run ids."""
    from core.predict.structure import overall_density
    from core.runs import load_run
    from core.runs.presets import get_preset
    from core.runs.store import RunStore

    points, run_ids = [], set()
    for name in presets:
        config = get_preset(name)
        for info in find_runs(store, config):
            run_ids.add(info.run_id)
            accuracy, density = info.metrics.get("MED-MEA R=1 accuracy"), info.metrics.get("density")
            active = None
            # the active paths need the weights, which only a real store holds
            if config.to_dict()["family_options"].get("input_skip") and isinstance(store, RunStore):
                active = overall_density(load_run(info.run_id, cache_dir=store).active_paths())
            point = _front_point(
                config.to_dict(), accuracy, density, active, f"run {info.run_id} ({name})", _seconds(info)
            )
            if point is not None:
                points.append(point)
    return points, run_ids


def _seconds(run: Any) -> float | None:
    """A stored run's training seconds (the store's rows keep them among the metrics)."""
    seconds = run.metrics.get("train_seconds")
    return seconds if _finite(seconds) else (getattr(run, "info", None) or {}).get("seconds")


def store_points(store: Any, setups: dict[str, dict[str, Any]], find_runs: Any) -> list[Point]:
    """The `fast` grid's runs in the run store: MED-MEA accuracy at the stored density, per run."""
    points = []
    for dataset, by_family in setups.items():
        for family, config in by_family.items():
            for run in find_runs(store, config):
                accuracy, density = run.metrics.get("MED-MEA R=1 accuracy"), run.metrics.get("density")
                if _finite(accuracy, density) and density > 0:
                    points.append(
                        Point(dataset, family, accuracy, density, f"run {run.run_id} (fast grid)", _seconds(run))
                    )
    return points


def frontier(points: list[Point]) -> set[Point]:
    """Each family's (per dataset) Pareto-optimal points: none of the family's others is at least as
    accurate at no more density and strictly better in one."""
    best = set()
    for p in points:
        rivals = [q for q in points if q.dataset == p.dataset and q.family == p.family and q is not p]
        if not any(
            q.accuracy >= p.accuracy and q.density <= p.density and (q.accuracy > p.accuracy or q.density < p.density)
            for q in rivals
        ):
            best.add(p)
    return best


def plot(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(DATASETS), figsize=(11, 4.2))
    families = sorted({p.family for p in points})
    colours = {family: plt.cm.tab10(i % 10) for i, family in enumerate(families)}
    for ax, dataset in zip(axes, DATASETS):
        shown = [p for p in points if p.dataset == dataset]
        for family in families:
            ours = [p for p in shown if p.family == family and not p.published]
            papers = [p for p in shown if p.family == family and p.published]
            if ours:
                ax.scatter(
                    [p.density for p in ours], [p.accuracy for p in ours], color=colours[family], s=22, label=family
                )
            if papers:
                ax.scatter(
                    [p.density for p in papers],
                    [p.accuracy for p in papers],
                    color=colours[family],
                    marker="*",
                    s=140,
                    edgecolor="black",
                    label=f"{family} (published)",
                )
        ax.set_xscale("log")
        ax.set_xlabel("density (fraction of weights kept, log scale)")
        ax.set_ylabel("test accuracy")
        ax.set_title(dataset)
        ax.grid(True, which="both", alpha=0.3)
        if shown:
            ax.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def table(points: list[Point]) -> str:
    best = frontier(points)
    lines = [
        "| dataset | family | accuracy | density | training s | frontier | source |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for p in sorted(points, key=lambda p: (p.dataset, p.family, p.density)):
        seconds = "-" if p.seconds is None else f"{p.seconds:.0f}"
        lines.append(
            f"| {p.dataset} | {p.family} | {p.accuracy:.4f} | {p.density:.5f} | {seconds} | "
            f"{'yes' if p in best else ''} | {p.source}{' (published)' if p.published else ''} |"
        )
    return "\n".join(lines) + "\n"


def pareto_section(
    store: Any = None,
    setups: dict | None = None,
    find_runs: Any = None,
    folder: Path = RESULTS,
    figure: Path | None = FIGURE,
) -> str:
    """The RESULTS.md section: the figure (written to `figure` unless None) and the table."""
    points = list(PUBLISHED) + cached_points(folder)
    if store is not None and setups is not None and find_runs is not None:
        points += store_points(store, setups, find_runs)
        stored, run_ids = front_store_points(store, find_runs)
        # a recipe whose run is in the store is shown once, from the store
        points = [p for p in points if not p.source.startswith("front_recipes.json")] + stored
        points += front_points(_read("front_recipes.json", folder) or [], skip_runs=run_ids)
    if figure is not None:
        plot(points, figure)
    return (
        "## The sparsity frontier: accuracy against density (MNIST, Fashion-MNIST)\n\n"
        "Generated by `python -m benchmarks.results_page` (this section alone: `--only pareto`). "
        "Every point the benchmark result files and the run store hold, and the published points "
        "(stars), on a log density axis. Accuracy: MED-MEA (the median probability model with mean "
        "weights) for LBBNN, the pruned network's for LeNet-300-100 sparse VD / variational dense "
        "(`python -m benchmarks.lenet`). The recipes on the front (`python -m benchmarks.front_recipes`, "
        "benchmarks/results/front_recipes.md) come from the run store where their run is stored; an input-skip "
        "network is placed at its active-path density (the kept weights on an input-to-output path), as the "
        "published input-skip point is. *frontier*: no point of the same family and dataset is at "
        "least as accurate at no more density. Training seconds as the result file records them on "
        "this shared CPU (inflated under load), except where the source names a GPU (an H100 or H200: "
        "`benchmarks/lenet5_gpu.sh`, three runs sharing it, or one run alone where its label says so).\n\n"
        + (f"![sparsity frontier](results/{figure.name})\n\n" if figure is not None else "")
        + table(points)
    )


HEADING = "## The sparsity frontier"


def splice(page: str, section: str, before: str = "## UCI regression") -> str:
    """`page` with its sparsity-frontier section replaced by `section` (or, when it has none, put in
    front of the `before` heading, else at the end): `results_page --only pareto` leaves the rest as is."""
    lines = page.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADING)), None)
    block = section.rstrip("\n").split("\n") + [""]
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        return "\n".join(lines[:start] + block + lines[end:])
    at = next((i for i, line in enumerate(lines) if line.startswith(before)), len(lines))
    return "\n".join(lines[:at] + block + lines[at:])
