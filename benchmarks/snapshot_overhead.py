"""What the per-epoch snapshots (core/snapshots.py) cost: epoch time with and without, and bytes.

    python -m benchmarks.snapshot_overhead [--dataset mnist-small] [--hidden 400,600] [--epochs 3] [--rounds 3]

Trains the same LBBNN (same seed) with snapshots on and off, interleaved over --rounds rounds so
that both see the same load on a shared machine, and reports the median epoch time of each and
their ratio (the first epoch of each training is not timed). Then the stored size of the
snapshots per epoch (snapshots.npz, compressed) for 784-400-600-10 and 784-100-100-10, and for a
small toy net that keeps its per-weight statistic. Writes benchmarks/results/snapshot_overhead.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_epochs(dataset, hidden, epochs: int, snapshots: bool) -> list[float]:
    """Wall time of each epoch after the first, snapshot included (from the progress callback)."""
    import torch

    from core.models.network import BayesianMLP, ModelConfig
    from core.train import TrainConfig, train

    x, y = torch.tensor(dataset.x_train), torch.tensor(dataset.y_train)
    model = BayesianMLP(
        ModelConfig(in_features=x.shape[1], out_classes=dataset.n_classes, hidden=hidden),
        torch.Generator().manual_seed(0),
    )
    stamps: list[float] = []
    # progress runs after the epoch's snapshot: the gaps between calls are whole epochs with snapshots
    train(
        model,
        x,
        y,
        TrainConfig(epochs=epochs + 1, batch_size=100),
        seed=0,
        snapshots=snapshots,
        progress=lambda record: stamps.append(time.perf_counter()),
    )
    return [b - a for a, b in zip(stamps[:-1], stamps[1:])]


def stored_bytes(dataset_name: str, hidden, epochs: int) -> tuple[int, int, float, bool]:
    """(file size, epochs, uncompressed bytes per epoch of the per-epoch arrays, per-weight statistic kept)."""
    from core.runs import RunConfig, train_run
    from core.runs.store import SNAPSHOTS

    with tempfile.TemporaryDirectory() as cache:
        run = train_run(RunConfig(dataset=dataset_name, hidden=hidden, train={"epochs": epochs}), cache_dir=cache)
        size = (run.path / SNAPSHOTS).stat().st_size
        snapshots = run.snapshots()
        per_epoch = sum(
            value.nbytes
            for name, value in snapshots.to_arrays().items()
            if name in ("phase", "epoch", "histogram", "kept", "mean") or name.startswith("statistics_")
        )
        return size, snapshots.n_epochs, per_epoch / snapshots.n_epochs, snapshots.has_statistics


def record_seconds(dataset, hidden, repeats: int = 20) -> float:
    """Median time of one SnapshotRecorder.record on a freshly built model (what an epoch adds)."""
    import torch

    from core.models.network import BayesianMLP, ModelConfig
    from core.snapshots import SnapshotRecorder

    model = BayesianMLP(
        ModelConfig(in_features=dataset.x_train.shape[1], out_classes=dataset.n_classes, hidden=hidden),
        torch.Generator().manual_seed(0),
    )
    recorder = SnapshotRecorder(model, total_epochs=repeats)
    times = []
    for epoch in range(repeats):
        start = time.perf_counter()
        recorder.record(model, {"phase": "train", "epoch": epoch + 1})
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-small")
    parser.add_argument("--hidden", default="400,600")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    from core.data import load_dataset

    torch.set_num_threads(1)
    hidden = tuple(int(w) for w in args.hidden.split(","))
    dataset = load_dataset(args.dataset)
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for snapshots in (False, True):
            times[snapshots] += timed_epochs(dataset, hidden, args.epochs, snapshots)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    record = record_seconds(dataset, hidden)
    lines = [
        "# Per-epoch snapshots: cost",
        "",
        f"`python -m benchmarks.snapshot_overhead --dataset {args.dataset} --hidden {args.hidden} "
        f"--epochs {args.epochs} --rounds {args.rounds}` (1 thread, LBBNN, batch 100; {len(times[True])} epochs "
        "timed each way, interleaved; each epoch timed from one progress call to the next, so it includes its "
        "snapshot).",
        "",
        "| snapshots | median epoch (s) | ratio |",
        "|---|---|---|",
        f"| off | {off:.3f} | 1.000 |",
        f"| on | {on:.3f} | {on / off:.3f} |",
        "",
        f"Recording one epoch's snapshot alone (median of 20 calls on the same net): {record * 1000:.1f} ms, "
        f"{record / off:.4f} of an epoch without snapshots.",
        "",
        "Stored size of snapshots.npz (compressed):",
        "",
        "| net | dataset | epochs | snapshots.npz bytes | file bytes per epoch | array bytes per epoch "
        "(uncompressed) | per-weight statistic |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, widths, epochs in (
        (args.dataset, (400, 600), 5),
        (args.dataset, (100, 100), 5),
        ("two-moons", (16, 16), 50),
    ):
        size, n, raw, kept = stored_bytes(name, widths, epochs)
        in_features = 784 if name == args.dataset else 2
        outputs = 10 if name == args.dataset else 2
        net = "-".join(str(w) for w in (in_features, *widths, outputs))
        lines.append(f"| {net} | {name} | {n} | {size} | {size / n:.0f} | {raw:.0f} | {'yes' if kept else 'no'} |")
    text = "\n".join(lines) + "\n"
    out = ROOT / "benchmarks" / "results" / "snapshot_overhead.md"
    out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
