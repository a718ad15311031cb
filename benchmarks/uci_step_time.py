"""Time one training step of each UCI family against a plain PyTorch MLP of the same shape.

    python -m benchmarks.uci_step_time [--set kin8nm] [--steps 1000] [--rounds 3] [--data-dir DIR]

The `uci-*` preset of each family (one hidden layer of 50, its batch size, the variational Gamma
noise), split 0; the plain MLP is torch's nn.Linear/ReLU stack with a squared-error loss and the
same fused Adam. A step of these small networks is a few dozen PyTorch operations, so their
per-operation overhead, not arithmetic, sets the grid's time (docs/uci-regression.md section 9).
Every family and the plain MLP run in one process, interleaved over --rounds rounds (median
reported), so the ratios compare like with like on a shared machine. Single-threaded, as the
grid's workers are. Writes benchmarks/results/uci_step_time.md and prints it.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "benchmarks" / "results" / "uci_step_time.md"
PLAIN = "plain-mlp"


def step_timers(dataset: str, data_dir: str | None) -> dict:
    """name -> a function that runs n training steps and returns the seconds they took."""
    import numpy as np
    import torch

    from core.data.registry import load_dataset
    from core.models.network import build_model
    from core.runs.presets import UCI_METHODS, _uci
    from core.train import _adam, _make_optimizer, _training_step

    data = load_dataset(dataset, split=0, data_dir=data_dir)
    x_all = torch.from_numpy(np.ascontiguousarray(data.x_train))
    y_all = torch.from_numpy(np.ascontiguousarray(data.y_train))
    timers = {}

    def batches(batch_size: int, n: int):
        generator = torch.Generator().manual_seed(0)
        order = torch.randint(0, len(x_all) - batch_size, (n,), generator=generator)
        return [(x_all[i : i + batch_size], y_all[i : i + batch_size]) for i in order.tolist()]

    for method in UCI_METHODS:
        config = _uci(dataset, 0, method)
        model = build_model(config.model_config(data), "cpu", torch.Generator().manual_seed(0))
        optimizer = _make_optimizer(model, config.train.learning_rates)
        model.train()

        def run(n: int, model=model, optimizer=optimizer, batch_size=config.train.batch_size) -> float:
            work = batches(batch_size, n)
            start = time.perf_counter()
            for xb, yb in work:
                _training_step(model, optimizer, xb, yb, 1, 1e-4)
            return time.perf_counter() - start

        timers[method] = run

    config = _uci(dataset, 0, "bnn")
    hidden = config.hidden[0]
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(x_all.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    plain_optimizer = _adam([{"params": list(plain.parameters()), "lr": 1e-2}])

    def run_plain(n: int) -> float:
        work = batches(config.train.batch_size, n)
        start = time.perf_counter()
        for xb, yb in work:
            loss = (plain(xb).squeeze(-1) - yb).pow(2).mean()
            plain_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            plain_optimizer.step()
        return time.perf_counter() - start

    timers[PLAIN] = run_plain
    return timers


def measure(dataset: str, steps: int, rounds: int, data_dir: str | None) -> dict[str, float]:
    """name -> median ms per step over the rounds (after one untimed warm-up round of 50 steps)."""
    import torch

    torch.set_num_threads(1)
    timers = step_timers(dataset, data_dir)
    for run in timers.values():
        run(50)
    times: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, run in timers.items():
            times[name].append(run(steps) / steps * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def render(ms: dict[str, float], dataset: str, command: str) -> str:
    import torch

    revision = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    lines = [
        "# UCI training step time",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, one thread, revision {revision}. Median over the rounds; the ratio is to "
        f"the plain MLP measured in the same rounds.",
        "",
        f"| family ({dataset}, `uci-*` preset) | ms per step | x plain MLP |",
        "|---|---|---|",
    ]
    for name, value in ms.items():
        lines.append(f"| {name} | {value:.3f} | {value / ms[PLAIN]:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="kin8nm", help="a UCI set without the uci- prefix")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    dataset = args.set if args.set.startswith("uci-") else f"uci-{args.set}"
    ms = measure(dataset, args.steps, args.rounds, args.data_dir)
    command = f"python -m benchmarks.uci_step_time --set {args.set} --steps {args.steps} --rounds {args.rounds}"
    text = render(ms, dataset, command)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
