"""Time one training epoch per family against the plain deterministic MLP.

    python -m benchmarks.epoch_time [--dataset mnist] [--device auto] [--families lbbnn,bnn,...] [--repeats 3]
        [--threads 1] [--steps 40 [--breakdown]]

Full MNIST, 784-400-600-10, batch 100, M = 1 (Hubin & Storvik 2024's setup). Each family
runs in its own subprocess so the peak memory is its own; all of them run in
one invocation, interleaved over --repeats rounds, so the ratios compare like
with like on a shared machine. The plain MLP is torch's nn.Linear/ReLU stack
trained by the same fused Adam. The first epoch (allocator warm-up, and torch.compile for "+compile") is not timed.
--threads sets torch's intra-op threads in every timing process (1 is what the classroom runs
with, and on a loaded machine it keeps one family's threads from stealing from the next).
Writes a Markdown table to benchmarks/results/epoch_time.md and prints it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAIN = "plain-mlp"
BREAKDOWN_HEADING = "CPU ms per step by phase"


# A row's suffix: "+compile" trains with TrainConfig(compile=True) (torch.compile of the layer kernels),
# "+graphs" with TrainConfig(cuda_graphs=True) (each step replayed as one CUDA graph; CUDA only).
SUFFIXES = ("compile", "graphs")


def split_variant(family: str) -> tuple[str, str, int]:
    """ "lbbnn+compile@1000" -> ("lbbnn", "compile", 1000): the family, its suffix ("" for none), the batch size."""
    name, _, batch = family.partition("@")
    family_name, _, suffix = name.partition("+")
    return family_name, suffix, int(batch) if batch else 100


def baseline_of(family: str, timed) -> str:
    """The plain-MLP row a row is compared with: the plain MLP with the same suffix and batch when that row
    is timed (a replayed family against a replayed plain MLP), else the plain MLP at the same batch, else
    the plain MLP."""
    _, suffix, batch_size = split_variant(family)
    at = f"@{batch_size}" if batch_size != 100 else ""
    for key in (f"{PLAIN}+{suffix}{at}" if suffix else None, f"{PLAIN}{at}"):
        if key and key != family and key in timed:
            return key
    return PLAIN


def time_one(
    family: str,
    dataset: str,
    device_name: str,
    epochs: int,
    hidden: tuple[int, ...],
    threads: int | None = None,
    steps: int | None = None,
    breakdown: bool = False,
) -> dict:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)

    from core.cpu_settings import enable_flush_denormals
    from core.data import load_dataset
    from core.device import resolve_device
    from core.models.network import BayesianMLP, ModelConfig
    from core.train import TrainConfig, _adam, train

    device = resolve_device(device_name)
    ds = load_dataset(dataset)
    x, y = torch.tensor(ds.x_train, device=device), torch.tensor(ds.y_train, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    family_name, suffix, batch_size = split_variant(family)
    compiled, graphs = suffix == "compile", suffix == "graphs"
    if steps:
        return _time_steps(family_name, compiled, batch_size, x, y, ds.n_classes, hidden, steps, epochs, breakdown)
    if family_name == PLAIN:
        widths = [x.shape[1], *hidden, ds.n_classes]
        layers = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(widths) - 2:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers).to(device)
        optimizer = _adam([{"params": list(net.parameters()), "lr": 1e-3}], capturable=graphs)
        enable_flush_denormals()  # as train() does for the families (it stays on)
        seconds = _plain_epochs(net, optimizer, x, y, epochs, device, batch_size, graphs)
        members = 1
    else:
        # "lbbnn+compile": the same family trained with TrainConfig(compile=True); "@1000": batch 1000.
        model = BayesianMLP(
            ModelConfig(in_features=x.shape[1], out_classes=ds.n_classes, hidden=hidden, family=family_name)
        ).to(device)
        config = TrainConfig(epochs=epochs + 1, batch_size=batch_size, compile=compiled, cuda_graphs=graphs)
        result = train(model, x, y, config, seed=0)
        if graphs and result.history[-1].get("cuda_graphs") != "replayed":
            raise RuntimeError(f"not replayed ({result.history[-1].get('cuda_graphs')})")
        seconds = [h["seconds"] for h in result.history]
        members = getattr(model.layers[0].options, "members", 1)  # an ensemble trains K networks at once
    peak = (
        torch.cuda.max_memory_allocated(device)
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return {
        "family": family,
        "members": members,
        "seconds_per_epoch": min(seconds[1:]),
        "peak_bytes": peak,
        "device": str(device),
        "n_train": len(x),
        "threads": torch.get_num_threads(),
    }


def _time_steps(
    family_name, compiled, batch_size, x, y, n_classes, hidden, steps: int, repeats: int, breakdown: bool = False
) -> dict:
    """CPU seconds of `steps` training steps, scaled to one epoch: the process's own CPU time, so
    that on a loaded machine the other processes' share of the cores does not count (cache and
    memory-bus contention still does). The best of `repeats` passes, after 5 warm-up steps. With
    `breakdown`, one more pass gives the CPU ms per step of the forward pass (with the KL), the backward
    pass and the optimizer step."""
    import torch

    from core.cpu_settings import enable_flush_denormals
    from core.models.network import BayesianMLP, ModelConfig
    from core.train import _adam, _training_step

    torch.manual_seed(0)
    enable_flush_denormals()
    if family_name == PLAIN:
        widths = [x.shape[1], *hidden, n_classes]
        layers = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()] if i < len(widths) - 2 else [torch.nn.Linear(a, b)]
        net = torch.nn.Sequential(*layers)
        optimizer = _adam([{"params": list(net.parameters()), "lr": 1e-3}])

        def forward(xb, yb):
            return torch.nn.functional.cross_entropy(net(xb), yb)

    else:
        model = BayesianMLP(
            ModelConfig(in_features=x.shape[1], out_classes=n_classes, hidden=hidden, family=family_name)
        )
        for layer in model.layers:
            layer.use_compiled_kernels(compiled)
        optimizer = _adam([{"params": [p for p in model.parameters() if p.requires_grad], "lr": 1e-3}])

        def forward(xb, yb):  # what _training_step does before its backward pass (M = 1)
            output, kl = model.forward_with_kl(xb, kl_value=False)
            return -model.likelihood.log_prob(output, yb).mean() + kl / len(x)

    def step(xb, yb, clock: list[float] | None = None):
        """One training step; with `clock`, its forward, backward and optimizer CPU seconds are added to it."""
        if clock is None:
            if family_name == PLAIN:
                loss = forward(xb, yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            else:
                _training_step(model, optimizer, xb, yb, 1, 1.0 / len(x))
            return
        start = time.process_time()
        loss = forward(xb, yb)
        after_forward = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        after_backward = time.process_time()
        optimizer.step()
        if family_name != PLAIN:
            model.update_auxiliaries()
        end = time.process_time()
        for i, seconds in enumerate((after_forward - start, after_backward - after_forward, end - after_backward)):
            clock[i] += seconds

    order = torch.randperm(len(x))
    batches = [order[i * batch_size : (i + 1) * batch_size] for i in range(steps)]
    for index in batches[:5]:
        step(x[index], y[index])
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for index in batches:
            step(x[index], y[index])
        best = min(best, time.process_time() - start)
    phases = None
    if breakdown:  # one more pass, timed by phase (the timer calls cost a little; the total above does not)
        clock = [0.0, 0.0, 0.0]
        for index in batches:
            step(x[index], y[index], clock)
        phases = [1e3 * seconds / steps for seconds in clock]
    epoch = best / steps * math.ceil(len(x) / batch_size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    members = 1 if family_name == PLAIN else getattr(model.layers[0].options, "members", 1)
    return {
        "family": family_name,
        "members": members,
        "seconds_per_epoch": epoch,
        "peak_bytes": peak,
        "device": "cpu",
        "n_train": len(x),
        **({"phases_ms": phases} if phases else {}),
    }


def _plain_epochs(
    net, optimizer, x, y, epochs: int, device, batch_size: int = 100, graphs: bool = False
) -> list[float]:
    """Wall seconds of each epoch; graphs: each full batch's step replayed as one CUDA graph, as
    TrainConfig(cuda_graphs=True) does for the families (core/step_graphs.py)."""
    import torch

    def step(index, _kl_scale=None):
        loss = torch.nn.functional.cross_entropy(net(x.index_select(0, index)), y.index_select(0, index))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if graphs:
        if device.type != "cuda":
            raise RuntimeError("+graphs replays CUDA graphs: it needs --device cuda")
        from core.step_graphs import CudaGraphBackend, ReplayedSteps

        step = ReplayedSteps(step, batch_size, device, CudaGraphBackend(device, None))
    seconds = []
    for _ in range(epochs + 1):  # the first epoch warms up allocators and kernels
        start = time.perf_counter()
        order = torch.randperm(len(x), device=device)
        for i in range(0, len(x), batch_size):
            step(order[i : i + batch_size], 0.0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def render_table(args, hidden: tuple[int, ...], families: list[str], runs: dict[str, list[dict]]) -> str:
    """The Markdown table of what was timed so far; a family not timed yet says so."""
    device = next((r["device"] for rs in runs.values() for r in rs if "device" in r), args.device)
    lines = [
        f"# One training epoch, {args.dataset}, 784-{'-'.join(map(str, hidden))}-10, batch 100, M=1, {device}",
        "",
        f"{args.repeats} round(s), families interleaved; seconds are the median over rounds, the ratio "
        "is the median (min-max) over rounds of the family's epoch over the plain MLP's epoch in the same "
        "round. FAMILY@B trains at batch B and is compared with plain-mlp@B when that row is timed; "
        "FAMILY+graphs (each step replayed as one CUDA graph) with plain-mlp+graphs likewise. "
        "A family that trains K networks at once (ensemble) also gets the ratio per network (/ K).",
        "",
        f"torch threads per process: {args.threads or 'torch default'}; load average (1 min) at the start: "
        f"{args.load_at_start:.1f}."
        + (
            f" Timed as CPU seconds of {args.steps} steps (best of --epochs passes) scaled to an epoch."
            if args.steps
            else ""
        ),
        "",
        "| family | s / epoch | x plain MLP | peak memory (MiB) |",
        "|---|---|---|---|",
    ]
    for family in families:
        plain_runs = runs.get(baseline_of(family, runs), [])
        ok = [(i, r) for i, r in enumerate(runs[family]) if "error" not in r]
        if not ok:
            if runs[family]:
                lines.append(f"| {family} | failed: {' '.join(runs[family][-1]['error'])} | | |")
            else:
                lines.append(f"| {family} | not timed (the run stopped before it) | | |")
            continue
        seconds = statistics.median(r["seconds_per_epoch"] for _, r in ok)
        ratios = [
            r["seconds_per_epoch"] / plain_runs[i]["seconds_per_epoch"]
            for i, r in ok
            if i < len(plain_runs) and "error" not in plain_runs[i]
        ]
        ratio = "-"
        if ratios:
            ratio = f"{statistics.median(ratios):.2f}"
            if len(ratios) > 1:
                ratio += f" ({min(ratios):.2f}-{max(ratios):.2f})"
            members = ok[0][1].get("members", 1)
            if members > 1:
                ratio += f"; per network ({members}): {statistics.median(ratios) / members:.2f}"
        peak = max(r["peak_bytes"] for _, r in ok)
        lines.append(f"| {family} | {seconds:.2f} | {ratio} | {peak / 2**20:.0f} |")
    lines += breakdown_table(families, runs)
    return "\n".join(lines) + "\n"


def breakdown_table(families: list[str], runs: dict[str, list[dict]]) -> list[str]:
    """With --breakdown: CPU ms per step by phase, the median over rounds; none without it."""
    timed = [f for f in families if any("phases_ms" in r for r in runs[f])]
    if not timed:
        return []
    lines = [
        "",
        BREAKDOWN_HEADING + " (`--breakdown`: one more pass of the same steps, the median over rounds; "
        "forward includes the KL's gradient path, optimizer is Adam's step):",
        "",
        "| family | forward | backward | optimizer | sum |",
        "|---|---|---|---|---|",
    ]
    for family in timed:
        phases = [statistics.median(r["phases_ms"][i] for r in runs[family] if "phases_ms" in r) for i in range(3)]
        lines.append(f"| {family} | {' | '.join(f'{ms:.2f}' for ms in phases)} | {sum(phases):.2f} |")
    return lines


def written_notes(out: Path) -> str:
    """What follows the generated table in an existing results file (the notes people wrote under it,
    from the first line after the table on): kept when the table is regenerated. The generated table by
    phase (--breakdown) right under it is part of the table, not of the notes."""
    if not out.exists():
        return ""
    lines = out.read_text().splitlines(keepends=True)
    tables_to_pass = 1
    in_table = False
    for index, line in enumerate(lines):
        if line.startswith("|"):
            in_table = True
            continue
        if in_table:
            in_table = False
            tables_to_pass -= 1
            rest = [text for text in lines[index:] if text.strip()]
            if tables_to_pass == 0 and rest and rest[0].startswith(BREAKDOWN_HEADING):
                tables_to_pass = 1  # the phase table follows: pass it too
            elif tables_to_pass == 0:
                return "".join(lines[index:])
    return ""


def main(argv: list[str] | None = None) -> int:
    from core import validate
    from core.errors import InputError
    from core.models.registry import FAMILY_PATHS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", help="mnist (needs BNN_DATA_DIR) or mnist-small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs per family (the best is reported)")
    parser.add_argument("--hidden", default="400,600")
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds over all families, interleaved; ratios are medians over rounds"
    )
    parser.add_argument(
        "--families",
        default=",".join([PLAIN, *FAMILY_PATHS, "lbbnn+compile"]),
        help="comma-separated; FAMILY+compile trains with TrainConfig(compile=True), FAMILY+graphs with "
        "TrainConfig(cuda_graphs=True) (CUDA only), FAMILY@B at batch B",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "epoch_time.md"))
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="time every family in this process (on a GPU: one CUDA context; peak memory is reset per family)",
    )
    parser.add_argument(
        "--threads", default=None, help="torch intra-op threads per timing process (default: torch's own choice)"
    )
    parser.add_argument(
        "--steps",
        default=None,
        help="time this many training steps per family in CPU time (scaled to an epoch; CPU only), "
        "not a wall-clock epoch: for a loaded machine",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="with --steps: also time each step's forward pass, backward pass and optimizer step (CPU ms)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: time one family, print JSON
    args = parser.parse_args(argv)
    threads = None
    if args.threads is not None:
        try:
            threads = validate.whole_number(args.threads, "threads", 1, 256)
        except InputError as exc:
            parser.error(str(exc))
    steps = None
    if args.steps is not None:
        try:
            steps = validate.whole_number(args.steps, "steps", 10, 10000)
        except InputError as exc:
            parser.error(str(exc))
    if args.breakdown and steps is None:
        parser.error("--breakdown: times the phases of --steps N steps; give --steps too")
    try:
        validate.whole_number(args.repeats, "repeats", 1, 100)
        validate.whole_number(args.epochs, "epochs", 1, 100)
        hidden = tuple(validate.whole_number(h, "hidden", 1, 100_000) for h in args.hidden.split(","))
        for family in args.families.split(","):
            name, _, batch = family.partition("@")
            base, plus, suffix = name.partition("+")
            if plus and suffix not in SUFFIXES:
                raise InputError(f"families: {family!r}: the suffixes are {', '.join('+' + s for s in SUFFIXES)}")
            if suffix == "graphs" and steps is not None:
                raise InputError(f"families: {family!r}: +graphs replays CUDA graphs; --steps times the CPU")
            if base not in (PLAIN, *FAMILY_PATHS):
                raise InputError(f"families: unknown family {name!r}; known: {', '.join((PLAIN, *FAMILY_PATHS))}")
            if batch:
                validate.whole_number(batch, f"families: {family}'s batch", 1, 1_000_000)
    except InputError as exc:
        parser.error(str(exc))
    if args.one:
        timed = time_one(args.one, args.dataset, args.device, args.epochs, hidden, threads, steps, args.breakdown)
        print(json.dumps(timed))
        return 0
    args.load_at_start = os.getloadavg()[0]
    families = args.families.split(",")
    runs: dict[str, list[dict]] = {family: [] for family in families}
    # Round-robin: each round times every family once, so a slow spell on this
    # shared machine hits the plain MLP and the families alike; ratios are taken
    # within a round.
    for round_index in range(args.repeats):
        for family in families:
            if args.in_process:  # one process, one CUDA context: on a GPU a subprocess per family costs its start
                try:
                    runs[family].append(
                        time_one(family, args.dataset, args.device, args.epochs, hidden, threads, steps, args.breakdown)
                    )
                except Exception as exc:  # noqa: BLE001 - one family's failure is a row of the table
                    runs[family].append({"error": [f"{type(exc).__name__}: {exc}"[:300]]})
                    print(f"{family}: failed: {exc}", file=sys.stderr)
            else:
                command = [
                    sys.executable,
                    __file__,
                    "--one",
                    family,
                    "--dataset",
                    args.dataset,
                    "--device",
                    args.device,
                    "--epochs",
                    str(args.epochs),
                    "--hidden",
                    args.hidden,
                    *([] if threads is None else ["--threads", str(threads)]),
                    *([] if steps is None else ["--steps", str(steps)]),
                    *(["--breakdown"] if args.breakdown else []),
                ]
                done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
                if done.returncode != 0:
                    runs[family].append({"error": done.stderr.strip().splitlines()[-1:]})
                    print(f"{family}: failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
                else:
                    runs[family].append(json.loads(done.stdout.strip().splitlines()[-1]))
            if "error" not in runs[family][-1]:
                print(
                    f"round {round_index + 1}, {family}: {runs[family][-1]['seconds_per_epoch']:.2f} s/epoch",
                    file=sys.stderr,
                )
            # Written after every family: a run stopped at a time cap keeps what it measured.
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(render_table(args, hidden, families, runs) + written_notes(out))
    print(render_table(args, hidden, families, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
