"""The floor under LBBNN's training step on this CPU: what no implementation of the method can skip,
timed in one process beside the plain MLP's whole step and LBBNN's own.

    python -m benchmarks.epoch_floor                       # batches 100 and 250, 784-400-600-10, 1 thread
    python -m benchmarks.epoch_floor --batches 100,250,500 --out benchmarks/results/epoch_floor.md

The speed issue asks for an LBBNN epoch within 2.5x a plain MLP's (benchmarks.epoch_time). LBBNN with
local reparameterisation (Hubin & Storvik 2024) cannot do less per step than:
- its matrix products: per layer two forward (the mean x.(a mu) and the variance x^2.var), two for the
  weight gradients and, past the first layer, two for the input gradient, each one GEMM of the shapes
  the fused layer uses (core/models/fused.py): twice the plain MLP's products;
- Adam on its three weight-sized parameters (mu, rho, the inclusion logit), torch's fused kernel;
- the noise, one normal draw per unit and example;
- four transcendental passes over the weights, each already one vectorised pass: the inclusion
  probability sigmoid(logit), sigma = softplus(rho) as log1p(exp(rho)) (two passes; sigmoid(rho),
  softplus's derivative, then costs a division of exp(rho)) and log sigma in the KL's gradient. Written
  into tensors allocated once, so allocation is not counted either.
Everything else (the weight moments' arithmetic, the per-example elementwise passes, the KL's gradient,
the loss) is left out, so the floor is below any real step. Every part is timed in CPU time of this
process (1 thread), the median of --blocks blocks of --steps repetitions, interleaved with the plain
MLP's and LBBNN's whole steps block by block.

Two more tables do the same for `lbbnn-lfmvn` (its low-rank logits' additions per weight) and `lbbnn-flow`
(Skaaret-Lund et al. 2024: its own products and noise, and its coupling flows timed as implemented), whose
target is the other families' 5x (see build).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGET = 2.5  # the speed issue's LBBNN epoch target, x the plain MLP
FLOW_TARGET = 5.0  # its target for every other family
PARTS = ("products", "adam", "noise", "transcendentals")


def build(batch_size: int, hidden: tuple[int, ...], seed: int = 0) -> dict[str, Callable[[], None]]:
    """The timed callables at one batch size: the plain MLP's and LBBNN's whole training steps, and
    each part of the floor."""
    import torch

    from core.cpu_settings import enable_flush_denormals
    from core.models import lbbnn_fused
    from core.models.network import BayesianMLP, ModelConfig
    from core.train import _adam, _training_step

    torch.manual_seed(seed)
    enable_flush_denormals()
    n_train = 60_000
    widths = [784, *hidden, 10]
    x = torch.rand(4 * batch_size, 784)
    y = torch.randint(0, 10, (4 * batch_size,))
    batches = [(x[i * batch_size : (i + 1) * batch_size], y[i * batch_size : (i + 1) * batch_size]) for i in range(4)]
    turn = {"plain": 0, "lbbnn": 0}

    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()] if i < len(widths) - 2 else [torch.nn.Linear(a, b)]
    plain = torch.nn.Sequential(*layers)
    plain_adam = _adam([{"params": list(plain.parameters()), "lr": 1e-3}])

    def plain_step() -> None:
        xb, yb = batches[turn["plain"] % 4]
        turn["plain"] += 1
        loss = torch.nn.functional.cross_entropy(plain(xb), yb)
        plain_adam.zero_grad(set_to_none=True)
        loss.backward()
        plain_adam.step()

    model = BayesianMLP(ModelConfig(in_features=784, out_classes=10, hidden=hidden, family="lbbnn"))
    lbbnn_adam = _adam([{"params": [p for p in model.parameters() if p.requires_grad], "lr": 1e-3}])

    def lbbnn_step() -> None:
        xb, yb = batches[turn["lbbnn"] % 4]
        turn["lbbnn"] += 1
        _training_step(model, lbbnn_adam, xb, yb, 1, 1.0 / n_train)

    # The same step with only its weight-sized elementwise kernels (the moments forward, the parameters'
    # gradients backward) compiled into one loop each: what a hand-written CPU kernel for them would be at
    # best. The eager layer looks the two functions up at call time, so they are swapped around the step.
    eager_kernels = (lbbnn_fused.weight_moments, lbbnn_fused.parameter_gradients)
    compiled_kernels = tuple(torch.compile(kernel, dynamic=False) for kernel in eager_kernels)

    def lbbnn_step_compiled_weights() -> None:
        lbbnn_fused.weight_moments, lbbnn_fused.parameter_gradients = compiled_kernels
        try:
            lbbnn_step()
        finally:
            lbbnn_fused.weight_moments, lbbnn_fused.parameter_gradients = eager_kernels

    # the products, in the fused layer's layouts: weights (out, in + 1), the input with a column of ones
    shapes = list(zip(widths[:-1], widths[1:]))
    inputs = [torch.rand(batch_size, a + 1) for a, _ in shapes]
    weights = [(torch.randn(b, a + 1), torch.rand(b, a + 1)) for a, b in shapes]
    grads = [torch.randn(batch_size, b) for _, b in shapes]

    def products() -> None:
        for index, (x_aug, (mean_w, var_w), grad) in enumerate(zip(inputs, weights, grads)):
            torch.mm(x_aug, mean_w.t())
            torch.mm(x_aug, var_w.t())
            torch.mm(grad.t(), x_aug)
            torch.mm(grad.t(), x_aug)
            if index > 0:
                torch.mm(grad, mean_w[:, :-1])
                torch.mm(grad, var_w[:, :-1])

    params = [torch.randn(b, a + 1, requires_grad=True) for a, b in shapes for _ in range(3)]
    for param in params:
        param.grad = torch.randn_like(param) * 1e-3
    floor_adam = _adam([{"params": params, "lr": 1e-3}])

    def adam() -> None:
        floor_adam.step()

    noise = [torch.empty(batch_size, b) for _, b in shapes]

    def draw_noise() -> None:
        for out in noise:
            out.normal_()

    flat = torch.randn(sum(b * (a + 1) for a, b in shapes))
    scratch = [torch.empty_like(flat) for _ in range(3)]

    def transcendentals() -> None:
        torch.sigmoid(flat, out=scratch[0])  # the inclusion probability
        torch.exp(flat, out=scratch[1])  # exp(rho)
        torch.log1p(scratch[1], out=scratch[2])  # sigma = softplus(rho)
        torch.log(scratch[2], out=scratch[0])  # log sigma

    # lbbnn-flow (Skaaret-Lund et al. 2024): the same floor with its own products, per layer three forward
    # (the mean x z.(a mu), the variances x^2.(a s^2) and (x z)^2.(a (1-a) mu^2)), three for the weight
    # gradients, two for the gradient of x z (the multipliers are trained) and, past the first layer, one
    # for the gradient of x (core/models/lbbnn_flow.py, FlowLinear); its noise adds one normal per input and
    # example (the multipliers' z0). Its flows (q's couplings on every example's row and the KL's, r's on
    # one row, forward and backward) are timed as implemented: small operations, not a floor.
    flow_model = BayesianMLP(ModelConfig(in_features=784, out_classes=10, hidden=hidden, family="lbbnn-flow"))
    flow_adam = _adam([{"params": [p for p in flow_model.parameters() if p.requires_grad], "lr": 1e-3}])
    turn["flow"] = 0

    def flow_step() -> None:
        xb, yb = batches[turn["flow"] % 4]
        turn["flow"] += 1
        _training_step(flow_model, flow_adam, xb, yb, 1, 1.0 / n_train)

    flow_inputs = [(x_aug, torch.rand_like(x_aug), torch.rand_like(x_aug)) for x_aug in inputs]
    flow_weights = [(mean_w, var_w, torch.rand_like(var_w)) for mean_w, var_w in weights]

    def flow_products() -> None:
        for index, ((x_aug, xz_aug, xz2_aug), (mean_w, slab_w, spike_w), grad) in enumerate(
            zip(flow_inputs, flow_weights, grads)
        ):
            torch.mm(xz_aug, mean_w.t())
            torch.mm(x_aug, slab_w.t())
            torch.mm(xz2_aug, spike_w.t())
            torch.mm(grad.t(), xz_aug)
            torch.mm(grad.t(), x_aug)
            torch.mm(grad.t(), xz2_aug)
            torch.mm(grad, spike_w[:, :-1])
            torch.mm(grad, mean_w[:, :-1])
            if index > 0:
                torch.mm(grad, slab_w[:, :-1])

    multipliers_noise = [torch.empty(batch_size + 1, a) for a, _ in shapes]

    def flow_noise() -> None:
        draw_noise()
        for out in multipliers_noise:
            out.normal_()

    flow_layers = list(flow_model.layers)
    flow_rows = [torch.randn(batch_size + 1, layer.in_features) for layer in flow_layers]

    def flows() -> None:
        total = 0.0
        for layer, rows in zip(flow_layers, flow_rows):
            z, log_det = layer.z_flow(rows.requires_grad_())
            z_b, reverse_log_det = layer.r_flow(z[-1])
            total = total + z.sum() + log_det.sum() + z_b.sum() + reverse_log_det.sum()
        total.backward()
        flow_model.zero_grad(set_to_none=True)

    # lbbnn-lfmvn (Hubin & Storvik 2024, LFMVN): LBBNN's floor plus what its low-rank logits add per weight
    # (core/models/lfmvn.py): a weight-sized normal draw for the diagonal part, the rank-r product F z (one
    # matrix-vector product over the (out (in + 1), r) factor), Adam on 1 + r more weight-sized parameters
    # (the diagonal's rho and the factor), and four more transcendental passes (softplus of the diagonal's
    # rho as log1p(exp), the probit approximation's rsqrt, log D in the KL).
    lfmvn_model = BayesianMLP(ModelConfig(in_features=784, out_classes=10, hidden=hidden, family="lbbnn-lfmvn"))
    lfmvn_adam_all = _adam([{"params": [p for p in lfmvn_model.parameters() if p.requires_grad], "lr": 1e-3}])
    turn["lfmvn"] = 0
    rank = lfmvn_model.layers[0].options.rank

    def lfmvn_step() -> None:
        xb, yb = batches[turn["lfmvn"] % 4]
        turn["lfmvn"] += 1
        _training_step(lfmvn_model, lfmvn_adam_all, xb, yb, 1, 1.0 / n_train)

    extra = [torch.randn(b, a + 1, requires_grad=True) for a, b in shapes for _ in range(1 + rank)]
    for param in extra:
        param.grad = torch.randn_like(param) * 1e-3
    extra_adam = _adam([{"params": extra, "lr": 1e-3}])
    weight_noise = torch.empty_like(flat)
    factor = torch.randn(flat.numel(), rank)
    z_rank = torch.randn(rank)
    low_rank = torch.empty_like(flat)

    def lfmvn_extra() -> None:
        extra_adam.step()
        weight_noise.normal_()
        torch.mv(factor, z_rank, out=low_rank)
        torch.exp(flat, out=scratch[1])  # the diagonal's softplus, log1p(exp)
        torch.log1p(scratch[1], out=scratch[2])
        torch.rsqrt(scratch[2], out=scratch[0])  # the probit approximation's scale
        torch.log(scratch[2], out=scratch[1])  # log D in the KL

    return {
        "plain": plain_step,
        "lbbnn": lbbnn_step,
        "lfmvn": lfmvn_step,
        "lfmvn_extra": lfmvn_extra,
        "flow": flow_step,
        "flow_products": flow_products,
        "flow_noise": flow_noise,
        "flows": flows,
        "lbbnn_compiled_weights": lbbnn_step_compiled_weights,
        "products": products,
        "adam": adam,
        "noise": draw_noise,
        "transcendentals": transcendentals,
    }


def time_interleaved(timed: dict[str, Callable[[], None]], steps: int, blocks: int) -> dict[str, float]:
    """CPU ms per call of each callable: the median over blocks, the callables taking turns block by block."""
    for call in timed.values():  # warm-up: allocator, caches, the first Adam step's state
        for _ in range(3):
            call()
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(blocks):
        for name, call in timed.items():
            start = time.process_time()
            for _ in range(steps):
                call()
            samples[name].append(1e3 * (time.process_time() - start) / steps)
    return {name: statistics.median(values) for name, values in samples.items()}


def _ratio(value: float, plain: float) -> str:
    """'12.30 (2.46x)': CPU ms and its ratio to the plain MLP's step."""
    return f"{value:.2f} ({value / plain:.2f}x)"


def _within(value: float, plain: float, target: float) -> str:
    return "yes" if value / plain <= target else "no"


def _section(family: str, intro: str, columns: list[str]) -> list[str]:
    """A family's table under LBBNN's: its heading, what it times, and the head of a table whose rows begin
    with the batch and end with the verdict against the other families' target."""
    heads = ["batch", *columns, f"within {FLOW_TARGET:g}x?"]
    return [f"## {family}", "", intro, "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]


def render(rows: list[dict], command: str, hidden: tuple[int, ...], threads: int) -> str:
    network = "-".join(map(str, (784, *hidden, 10)))
    lines = [
        f"# The floor under LBBNN's training step, {network}, CPU",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch threads {threads}; load "
        f"average (1 min) at the start {rows[0]['load']:.1f}. CPU ms per step, medians over blocks "
        "(see the module docstring for what each part is).",
        "",
        "| batch | plain MLP step | LBBNN step (x plain) | LBBNN, weight kernels compiled (x plain) | products | "
        f"Adam | noise | transcendentals | floor (x plain) | floor within {TARGET:g}x? |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        plain, floor = row["plain"], sum(row[part] for part in PARTS)
        lines.append(
            f"| {row['batch']} | {plain:.2f} | {_ratio(row['lbbnn'], plain)} | "
            f"{_ratio(row['lbbnn_compiled_weights'], plain)} | "
            + " | ".join(f"{row[part]:.2f}" for part in PARTS)
            + f" | {_ratio(floor, plain)} | {_within(floor, plain, TARGET)} |"
        )
    lines += [
        "",
        "The floor leaves out every elementwise pass but the four transcendentals, and all allocation: a "
        "step that reaches it does nothing else. Where the floor is above the target, no implementation of "
        "the method in float32 reaches the target at that batch on this machine. The compiled column is "
        "LBBNN's own step with only its weight-sized elementwise kernels compiled by torch.compile (one loop "
        "each way): what a hand-written CPU kernel for them could buy at best.",
        "",
    ]
    if all("lfmvn" in row for row in rows):
        lines += _section(
            "lbbnn-lfmvn",
            "LBBNN's floor plus what `lbbnn-lfmvn`'s low-rank logits add per weight (a weight-sized normal draw, "
            "the rank-r product F z, Adam on 1 + r more weight-sized parameters, four more transcendental passes), "
            f"against the other families' target of {FLOW_TARGET:g}x:",
            ["plain MLP step", "lbbnn-lfmvn step (x plain)", "LBBNN's floor", "its additions", "floor (x plain)"],
        )
        for row in rows:
            plain, base = row["plain"], sum(row[part] for part in PARTS)
            floor = base + row["lfmvn_extra"]
            lines.append(
                f"| {row['batch']} | {plain:.2f} | {_ratio(row['lfmvn'], plain)} | {base:.2f} | "
                f"{row['lfmvn_extra']:.2f} | {_ratio(floor, plain)} | {_within(floor, plain, FLOW_TARGET)} |"
            )
        lines.append("")
    if all("flow" in row for row in rows):
        lines += _section(
            "lbbnn-flow",
            "The same floor for `lbbnn-flow` (its nine products a layer, its noise; Adam and the transcendentals "
            f"as LBBNN's), and its flows as implemented, against the other families' target of {FLOW_TARGET:g}x:",
            ["plain MLP step", "lbbnn-flow step (x plain)", "products", "noise", "floor (x plain)", "its flows"]
            + ["floor and its flows (x plain)"],
        )
        for row in rows:
            plain = row["plain"]
            floor = row["flow_products"] + row["adam"] + row["flow_noise"] + row["transcendentals"]
            with_flows = floor + row["flows"]
            lines.append(
                f"| {row['batch']} | {plain:.2f} | {_ratio(row['flow'], plain)} | {row['flow_products']:.2f} | "
                f"{row['flow_noise']:.2f} | {_ratio(floor, plain)} | {row['flows']:.2f} | "
                f"{_ratio(with_flows, plain)} | {_within(with_flows, plain, FLOW_TARGET)} |"
            )
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core import validate
    from core.errors import BNNError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="100,250", help="batch sizes, comma-separated")
    parser.add_argument("--hidden", default="400,600", help="hidden widths")
    parser.add_argument("--steps", default="20", help="repetitions per block")
    parser.add_argument("--blocks", default="7", help="blocks per callable (the median is reported)")
    parser.add_argument("--threads", default="1", help="torch intra-op threads")
    parser.add_argument("--out", type=Path, default=RESULTS / "epoch_floor.md")
    args = parser.parse_args(argv)
    try:
        args.batches = tuple(validate.whole_number(b, "--batches", 1, 10_000) for b in args.batches.split(","))
        args.hidden = tuple(validate.whole_number(w, "--hidden", 1, 4096) for w in args.hidden.split(","))
        args.steps = validate.whole_number(args.steps, "--steps", 1, 1000)
        args.blocks = validate.whole_number(args.blocks, "--blocks", 1, 100)
        args.threads = validate.whole_number(args.threads, "--threads", 1, 256)
    except BNNError as exc:
        parser.error(str(exc))
    if not 1 <= len(args.hidden) <= 4:
        parser.error("--hidden: give 1 to 4 widths separated by commas, e.g. 400,600")
    if len(args.batches) > 8:
        parser.error("--batches: at most 8 batch sizes")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    for batch_size in args.batches:
        load = os.getloadavg()[0]
        timed = time_interleaved(build(batch_size, args.hidden), args.steps, args.blocks)
        rows.append({"batch": batch_size, "load": load, **timed})
    command = shlex.join(["python", "-m", "benchmarks.epoch_floor", *(argv if argv is not None else sys.argv[1:])])
    text = render(rows, command, args.hidden, args.threads)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
