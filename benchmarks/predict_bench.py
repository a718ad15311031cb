"""Prediction benchmarks (issue 4) on a 784-400-600-10 LBBNN and the 10k MNIST test set.

Targets on the 2-core CPU: one mpm-mean evaluation at a new threshold < 200 ms,
a 51-point sweep < 5 s, bma with R=10 < 2 s; plus the inference speed-up of an
exported pruned model over the dense mean network.

The model is trained for 1 epoch on 10k training images (timings do not depend
on how well it is trained, only on its densities). Full MNIST comes from
$BNN_DATA_DIR (or ../shared/data); without it the 2k mnist-small test set is used.

    PYTHONPATH=. python benchmarks/predict_bench.py [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from core.data import load_dataset
from core.errors import BNNError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import evaluate, export_pruned, load_exported, predict, sweep, thresholds_for_densities
from core.train import TrainConfig, train

RESULTS = Path(__file__).parent / "results" / "predict.md"


def timed(fn, repeats=3):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def load_mnist():
    candidates = [os.environ.get("BNN_DATA_DIR"), str(Path(__file__).resolve().parents[2] / "shared" / "data")]
    for data_dir in filter(None, candidates):
        try:
            return load_dataset("mnist", data_dir=data_dir)
        except BNNError:
            continue
    return load_dataset("mnist-small")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_mnist()
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(784, 10, hidden=(400, 600), family="lbbnn"))
    n_train = min(10_000, data.n_train)
    x_train, y_train = torch.as_tensor(data.x_train[:n_train]), torch.as_tensor(data.y_train[:n_train])
    train_seconds = train(model, x_train, y_train, TrainConfig(epochs=1), seed=0).seconds
    x = data.x_test
    rows = []

    def add(what, seconds, target=None, note=""):
        rows.append((what, f"{seconds * 1000:.0f} ms", f"< {target * 1000:.0f} ms" if target else "", note))

    predict(model, x[:100], "mpm-mean")  # warm up
    seconds, result = timed(lambda: evaluate(model, data, mode="mpm-mean", threshold=0.37))
    add("mpm-mean evaluation at a new threshold (0.37)", seconds, 0.2,
        f"density {result['density']:.3f}, accuracy {result['accuracy']:.4f}")
    seconds, curve = timed(lambda: sweep(model, data, mode="mpm-mean"), repeats=1)
    add("51-point mpm-mean sweep", seconds, 5.0, f"density {curve.density.min():.2f}..{curve.density.max():.2f}")
    seconds, _ = timed(lambda: predict(model, x, "bma", samples=10, seed=0), repeats=1)
    add("bma R=10 prediction", seconds, 2.0)
    seconds, _ = timed(lambda: predict(model, x, "mean"))
    add("dense mean network (ALL-MEA) prediction", seconds)
    dense_seconds = seconds
    with tempfile.TemporaryDirectory() as folder:
        for density in (0.5, 0.1, 0.02):
            threshold = float(thresholds_for_densities(model, [density])[0])
            exported = load_exported(export_pruned(model, threshold, Path(folder) / f"d{density}"))
            inputs = torch.as_tensor(x)
            with torch.no_grad():
                exported(inputs)
                seconds, _ = timed(lambda: exported(inputs), repeats=5)
            units = [s[0] for s in exported.meta["layer_shapes"]]
            add(f"exported model at density {density}", seconds, None,
                f"speed-up x{dense_seconds / seconds:.1f} over dense; units {units}, "
                f"{exported.meta['n_weights_kept']} weights, {len(exported.input_index)} inputs")
    header = (f"# Prediction benchmarks\n\n{data.name}: {len(x)} test images, 784-400-600-10 LBBNN trained 1 epoch "
              f"on {n_train} images ({train_seconds:.0f} s). torch threads: {torch.get_num_threads()}, "
              f"load average before: {os.getloadavg()[0]:.1f} (the 2 cores are shared).\n\n")
    table = "| what | median time | target | note |\n|---|---|---|---|\n"
    table += "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(header + table)
    print(header + table)


if __name__ == "__main__":
    main()
