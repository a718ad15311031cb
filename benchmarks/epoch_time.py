"""Time one training epoch per family against the plain deterministic MLP.

    python benchmarks/epoch_time.py [--dataset mnist] [--device auto] [--families lbbnn,bnn,...]

Full MNIST, 784-400-600-10, batch 100, M = 1 (seed 000's setup). Each family
runs in its own subprocess so the peak memory is its own; all of them run in
one invocation so the ratios compare like with like on a shared machine. The
plain MLP is torch's nn.Linear/ReLU stack trained by the same fused Adam. The
first epoch (allocator warm-up, and torch.compile for "+compile") is not timed.
Writes a Markdown table to benchmarks/results/epoch_time.md and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN = "plain-mlp"


def time_one(family: str, dataset: str, device_name: str, epochs: int, hidden: tuple[int, ...]) -> dict:
    import torch

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
    seconds = []
    if family == PLAIN:
        widths = [x.shape[1], *hidden, ds.n_classes]
        layers = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(widths) - 2:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers).to(device)
        optimizer = _adam([{"params": list(net.parameters()), "lr": 1e-3}])
        for _ in range(epochs + 1):  # the first epoch warms up allocators and kernels
            start = time.perf_counter()
            order = torch.randperm(len(x), device=device)
            for i in range(0, len(x), 100):
                index = order[i:i + 100]
                loss = torch.nn.functional.cross_entropy(net(x[index]), y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    else:
        # "lbbnn+compile": the same family trained with TrainConfig(compile=True).
        family_name, _, compiled = family.partition("+")
        model = BayesianMLP(ModelConfig(in_features=x.shape[1], out_classes=ds.n_classes, hidden=hidden,
                                        family=family_name)).to(device)
        result = train(model, x, y, TrainConfig(epochs=epochs + 1, batch_size=100, compile=bool(compiled)),
                       seed=0)
        seconds = [h["seconds"] for h in result.history]
    peak = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"family": family, "seconds_per_epoch": min(seconds[1:]), "peak_bytes": peak, "device": str(device),
            "n_train": len(x)}


def main(argv: list[str] | None = None) -> int:
    from core.models.registry import FAMILY_PATHS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", help="mnist (needs BNN_DATA_DIR) or mnist-small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs per family (the best is reported)")
    parser.add_argument("--hidden", default="400,600")
    parser.add_argument("--families", default=",".join([PLAIN, *FAMILY_PATHS, "lbbnn+compile"]),
                        help="comma-separated; FAMILY+compile trains with TrainConfig(compile=True)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "epoch_time.md"))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: time one family, print JSON
    args = parser.parse_args(argv)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    if args.one:
        print(json.dumps(time_one(args.one, args.dataset, args.device, args.epochs, hidden)))
        return 0
    rows = []
    for family in args.families.split(","):
        command = [sys.executable, __file__, "--one", family, "--dataset", args.dataset, "--device", args.device,
                   "--epochs", str(args.epochs), "--hidden", args.hidden]
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
        if done.returncode != 0:
            rows.append({"family": family, "error": done.stderr.strip().splitlines()[-1:]})
            print(f"{family}: failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{family}: {rows[-1]['seconds_per_epoch']:.2f} s/epoch", file=sys.stderr)
    base = next((r["seconds_per_epoch"] for r in rows if r.get("family") == PLAIN and "error" not in r), None)
    device = next((r["device"] for r in rows if "device" in r), args.device)
    lines = [f"# One training epoch, {args.dataset}, 784-{'-'.join(map(str, hidden))}-10, batch 100, M=1, {device}",
             "", "| family | s / epoch | x plain MLP | peak memory (MiB) |", "|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['family']} | failed: {' '.join(r['error'])} | | |")
            continue
        ratio = f"{r['seconds_per_epoch'] / base:.2f}" if base else "-"
        lines.append(f"| {r['family']} | {r['seconds_per_epoch']:.2f} | {ratio} | {r['peak_bytes'] / 2**20:.0f} |")
    table = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
