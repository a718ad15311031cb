"""A short check that the `lenet5-mnist` preset's network trains, and its step time.

Trains the preset's LeNet-5 (its family, or --method) on the bundled MNIST subset for --steps
minibatches of 100 (the ELBO of the whole subset, no warm start: a trend check, not the target;
`--method fnn` is the preset's deterministic warm start), reports test
accuracy and density (mpm-mean at the family's default threshold) and the seconds per step; the
epoch time on full MNIST (60,000 images, 600 steps) is that times 600. The 0.9925 target itself
needs the preset's full schedule (hours on a CPU).

    python -m benchmarks.lenet5_check --steps 300 [--method sparse-vd]

Writes benchmarks/results/lenet5_check_<method>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from core.data import load_dataset
from core.models.network import build_model
from core.predict import evaluate
from core.runs.presets import PRESETS
from core.train import TrainConfig, train

RESULTS = Path(__file__).parent / "results"
FULL_MNIST_IMAGES = 60_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--method", default="sparse-vd", help="any family with a conv layer; fnn: the warm start")
    parser.add_argument("--batch-size", type=int, default=100, help="minibatch size (the cost per image depends on it)")
    args = parser.parse_args()
    from core import validate
    from core.errors import BNNError

    try:  # checked before anything is loaded or allocated
        validate.whole_number(args.steps, "--steps", 1, 100_000)
        validate.whole_number(args.batch_size, "--batch-size", 1, 10_000)
    except BNNError as exc:
        parser.error(str(exc))
    preset = PRESETS["lenet5-mnist"].replace(dataset="mnist-small", method=args.method, family_options={})
    data = load_dataset("mnist-small")
    model = build_model(preset.model_config(data), generator=torch.Generator().manual_seed(0))
    x, y = torch.as_tensor(data.x_train), torch.as_tensor(data.y_train)
    n_full = len(x)
    batch = args.batch_size
    if args.steps * batch < len(x):  # fewer steps than an epoch: one epoch of the first steps * batch images
        x, y = x[: args.steps * batch], y[: args.steps * batch]
    epochs = max(1, round(args.steps * batch / len(x)))
    # The KL weighs as in the ELBO of the whole subset (KL / n_full per example), not of the images used.
    kl_weight = len(x) / n_full
    rates = preset.train.learning_rates
    config = TrainConfig(epochs=epochs, batch_size=batch, kl_weight=kl_weight, learning_rates=rates)
    start = time.perf_counter()
    result = train(model, x, y, config, seed=0)
    seconds = time.perf_counter() - start
    steps = epochs * (len(x) // batch)
    model.eval()
    metrics = evaluate(model, data, mode="mpm-mean")
    row = {
        "method": args.method,
        "dataset": "mnist-small",
        "steps": steps,
        "batch_size": batch,
        "n_weights": model.n_weights(),
        "accuracy": metrics["accuracy"],
        "density": metrics["density"],
        "final_loss": result.history[-1]["loss"],
        "seconds_per_step": seconds / steps,
        "full_mnist_epoch_seconds": seconds / steps * FULL_MNIST_IMAGES / batch,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "load": os.getloadavg()[0],
        "command": f"python -m benchmarks.lenet5_check --steps {args.steps} --method {args.method} "
        f"--batch-size {batch}",
    }
    RESULTS.mkdir(exist_ok=True)
    name = f"lenet5_check_{args.method}{'' if batch == 100 else f'_b{batch}'}.json"
    (RESULTS / name).write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
