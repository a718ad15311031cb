"""Prediction benchmarks on 784-400-600-10 LBBNNs and the 10k MNIST test set.

Targets on the 2-core CPU: one mpm-mean evaluation at a new threshold < 200 ms,
a 51-point sweep < 5 s, bma with R=10 < 2 s; plus the inference speed-up of an
exported pruned model over the dense network.

Two models, because the sparse paths' speed depends on the densities:
- `sparse`: trained on full MNIST (60k) for a few epochs with the inclusion
  learning rate raised so the KL sparsifies it as a long run would (most
  inclusion probabilities near 0);
- `dense-ish`: 1 epoch on 10k images with the default rates (inclusion
  probabilities still spread around their initial 0.1..0.9).
Each trained state_dict is cached under $BNN_BENCH_CACHE (default
/tmp/bnn-predict-bench), so reruns only time predictions. Full MNIST comes from
$BNN_DATA_DIR; without it mnist-small is used.

    python -m benchmarks.predict_bench [--threads N] [--models sparse,dense-ish] [--only draws]

`--only draws --models synthetic-sparse,synthetic-dense-ish` times the draws on untrained networks
whose inclusion probabilities are set as a trained one's (`SYNTHETIC`): no training needed.
`--only draws` regenerates only the "Cheaper sampled draws" section of the results file: each
sampled mode's draws run by every path of core.predict.draw_paths, interleaved in one process
(path after path, repeat after repeat) so that a change in the load hits them alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from core.data import load_dataset
from core.errors import BNNError
from core.models.network import BayesianMLP, ModelConfig
from core.predict import (
    evaluate,
    export_pruned,
    load_exported,
    mean_inclusion,
    predict,
    sweep,
    thresholds_for_densities,
)
from core.predict.draw_paths import DrawPath, candidates, forget_paths, path_key, probe_path
from core.predict.engine import as_inputs, make_plan, run_network, sampled_forward
from core.train import DEFAULT_LEARNING_RATES, TrainConfig, train

RESULTS = Path(__file__).parent / "results" / "predict.md"
CACHE = Path(os.environ.get("BNN_BENCH_CACHE", "/tmp/bnn-predict-bench"))


@dataclass(frozen=True)
class BenchModel:
    name: str
    n_train: int | None  # None: the whole training set
    epochs: int
    inclusion_rate: float

    def describe(self, n_train: int) -> str:
        return f"trained {self.epochs} epoch(s) on {n_train} images, inclusion learning rate {self.inclusion_rate:g}"


MODELS = {
    "sparse": BenchModel("sparse", None, 3, 2e-3),
    "dense-ish": BenchModel("dense-ish", 10_000, 1, 3e-3),  # the default inclusion rate
}


# Untrained 784-400-600-10 LBBNNs whose inclusion probabilities are set as a sparse trained one's are
# (most near 0, some near 1, whole hidden units off): (fraction of weights on, fraction of hidden units
# off, logit). With logit 6 a weight is in a draw with probability 0.9975 if on, else 0.0025.
# For the draws section when training the models does not fit (a loaded machine): no accuracy.
SYNTHETIC = {
    "synthetic-sparse": (0.05, 0.4, 6.0),
    "synthetic-dense-ish": (0.45, 0.0, 1.0),
}


def synthetic_model(name: str) -> tuple[BayesianMLP, str]:
    on_fraction, off_units, logit = SYNTHETIC[name]
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(784, 10, hidden=(400, 600), family="lbbnn"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for index, layer in enumerate(model.layers):
            on = torch.rand(layer.inclusion_logit.shape, generator=generator) < on_fraction
            if index < len(model.layers) - 1:
                on[torch.rand(layer.out_features, generator=generator) < off_units] = False
            layer.inclusion_logit.copy_(torch.where(on, torch.tensor(logit), torch.tensor(-logit)))
    return model, (
        f"untrained, inclusion logits set: {on_fraction:g} of the weights at +{logit:g}, the rest at "
        f"-{logit:g}, {off_units:g} of the hidden units with every weight at -{logit:g}"
    )


def timed(fn, repeats=3):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def load_mnist():
    from core.settings import DATA_DIR  # BNN_DATA_DIR, read (and checked) where every BNN_* is

    candidates = [DATA_DIR.read(), str(Path(__file__).resolve().parents[2] / "shared" / "data")]
    for data_dir in filter(None, candidates):
        try:
            return load_dataset("mnist", data_dir=data_dir)
        except BNNError:
            continue
    return load_dataset("mnist-small")


def trained_model(spec: BenchModel, data) -> tuple[BayesianMLP, str]:
    n_train = data.n_train if spec.n_train is None else min(spec.n_train, data.n_train)
    torch.manual_seed(0)
    model = BayesianMLP(ModelConfig(784, 10, hidden=(400, 600), family="lbbnn"))
    path = CACHE / f"{data.name}-{spec.name}-{n_train}-{spec.epochs}-{spec.inclusion_rate:g}.pt"
    if path.is_file():
        model.load_state_dict(torch.load(path))
        return model, spec.describe(n_train) + " (cached)"
    rates = dict(DEFAULT_LEARNING_RATES, inclusion=spec.inclusion_rate)
    x_train, y_train = torch.as_tensor(data.x_train[:n_train]), torch.as_tensor(data.y_train[:n_train])
    seconds = train(model, x_train, y_train, TrainConfig(epochs=spec.epochs, learning_rates=rates), seed=0).seconds
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model, spec.describe(n_train) + f" ({seconds:.0f} s)"


def dense_forward(model: BayesianMLP):
    """The dense network as a plain torch MLP (F.linear stack): the export's baseline."""
    weights = [w.contiguous() for w in model.conditional_mean_weights()]
    params = [(w[:, :-1].contiguous(), w[:, -1].contiguous()) for w in weights]

    def forward(x):
        for i, (w, b) in enumerate(params):
            x = F.linear(x, w, b)
            if i < len(params) - 1:
                x = torch.relu(x)
        return x

    return forward


def bench_model(model: BayesianMLP, data, rows: list) -> None:
    x = data.x_test
    inputs = torch.as_tensor(x)

    forward = dense_forward(model)
    with torch.no_grad():
        forward(inputs)
        dense_seconds, _ = timed(lambda: forward(inputs), repeats=7)

    def add(what, seconds, target=None, note=""):
        # Time in dense forwards: how loaded the shared cores are cancels out of this column.
        rows.append(
            (
                what,
                f"{seconds * 1000:.0f} ms",
                f"{seconds / dense_seconds:.1f}",
                f"< {target * 1000:.0f} ms" if target else "",
                note,
            )
        )

    predict(model, x[:100], "mpm-mean")  # warm up
    mpm = predict(model, x[:10], "mpm-mean")
    add(
        "mpm-mean at the median probability model (0.5)",
        timed(lambda: evaluate(model, data, mode="mpm-mean"), repeats=5)[0],
        0.2,
        f"density {mpm.density:.3f}, per layer {', '.join(f'{d:.3f}' for d in mpm.layer_density)}",
    )
    seconds, result = timed(lambda: evaluate(model, data, mode="mpm-mean", threshold=0.37), repeats=5)
    add(
        "mpm-mean evaluation at a new threshold (0.37)",
        seconds,
        0.2,
        f"density {result['density']:.3f}, accuracy {result['accuracy']:.4f}",
    )
    seconds, curve = timed(lambda: sweep(model, data, mode="mpm-mean"), repeats=3)
    add("51-point mpm-mean sweep", seconds, 5.0, f"density {curve.density.min():.2f}..{curve.density.max():.2f}")
    seconds, result = timed(lambda: evaluate(model, data, mode="bma", samples=10, seed=0), repeats=3)
    add("bma R=10 evaluation", seconds, 2.0, f"accuracy {result['accuracy']:.4f}")
    seconds, _ = timed(lambda: predict(model, x, "mean"), repeats=5)
    add("mean network (ALL-MEA) prediction", seconds)
    add("dense 784-400-600-10 forward (plain torch MLP)", dense_seconds)
    with tempfile.TemporaryDirectory() as folder:
        for density in (0.5, 0.1, 0.02):
            threshold = float(thresholds_for_densities(model, [density])[0])
            exported = load_exported(export_pruned(model, threshold, Path(folder) / f"d{density}"))
            with torch.no_grad():
                exported(inputs)
                seconds, _ = timed(lambda model=exported: model(inputs), repeats=7)  # bound now, not at call
            units = [s[0] for s in exported.meta["layer_shapes"]]
            add(
                f"exported model at density {density}",
                seconds,
                None,
                f"speed-up x{dense_seconds / seconds:.1f} over dense; units {units}, "
                f"{exported.meta['n_weights_kept']} weights, {len(exported.input_index)} inputs",
            )


DRAWS_HEADER = "## Cheaper sampled draws"
DRAW_SAMPLES = 8  # two whole batched groups


def bench_draws(model: BayesianMLP, data, repeats: int = 3) -> str:
    """Seconds per draw of each path for bma and mpm on the test set, interleaved; the probe's choice."""
    inputs = as_inputs(model, data.x_test)
    rows = []
    for mode in ("bma", "mpm"):
        plan = make_plan(model, mode, DRAW_SAMPLES, None, None)
        with torch.no_grad():
            masks = None if mode == "bma" else model.keep_masks(plan.threshold)
            paths = [*candidates(masks is not None), DrawPath.BATCHED]
            times: dict = {path: [] for path in paths}
            outputs = {}
            for _ in range(repeats):
                for path in paths:
                    start = time.process_time()  # CPU seconds: the work, whatever the load (one thread)
                    outputs[path], _ = sampled_forward(model, plan, inputs, 0, masks, None, path=path)
                    times[path].append((time.process_time() - start) / DRAW_SAMPLES)
            forget_paths(model)
            probe = model.sample_weights(1, 0, masks=masks)
            key = path_key(model, plan.threshold, inputs, masks, None)
            start = time.process_time()
            chosen, _ = probe_path(key, probe, masks, model.activation, lambda net: run_network(net, inputs))
            probe_seconds = time.process_time() - start
        plain = statistics.median(times[DrawPath.PLAIN])
        for path in paths:
            seconds = statistics.median(times[path])
            difference = float((outputs[path] - outputs[DrawPath.PLAIN]).abs().max())
            note = f"chosen by the probe ({probe_seconds * 1000:.0f} ms)" if path is chosen else ""
            rows.append(
                (mode, path.value, f"{seconds * 1000:.0f} ms", f"x{plain / seconds:.2f}", f"{difference:.1e}", note)
            )
    table = "| mode | path | CPU time per draw (median) | speed-up over plain | max abs difference from plain "
    table += "| note |\n"
    table += "|---|---|---|---|---|---|\n" + "\n".join(f"| {' | '.join(row)} |" for row in rows) + "\n"
    return table


def draws_section(data, names: list[str], repeats: int) -> str:
    parts = [
        f"{DRAWS_HEADER}\n\n`python -m benchmarks.predict_bench --only draws`: R = {DRAW_SAMPLES} draws on the "
        f"{data.n_test} test images (network outputs, no metrics), each path of core.predict.draw_paths in "
        f"turn, {repeats} rounds, median per draw of the process's CPU time (with one torch thread the work "
        f"done, whatever the load; wall time on these shared cores measures the scheduler); torch threads: "
        f"{torch.get_num_threads()}. `plain` is how "
        "every draw ran before (bma: the full dense matrices; mpm: the shared mask's compact network); "
        "`batched` is not chosen automatically (see core/predict/draw_paths.py). The probe runs one draw by "
        "every candidate (the chosen one's outputs are that draw's), once per (run, threshold, inputs).\n"
    ]
    for name in names:
        model, how = synthetic_model(name) if name in SYNTHETIC else trained_model(MODELS[name], data)
        load_before = os.getloadavg()[0]
        table = bench_draws(model, data, repeats)
        parts.append(
            f"### `{name}` model\n\n{how}. Load average before / after: {load_before:.1f} / "
            f"{os.getloadavg()[0]:.1f}.\n\n{table}"
        )
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default="sparse,dense-ish", help=f"of {', '.join([*MODELS, *SYNTHETIC])}")
    parser.add_argument("--only", choices=["draws"], default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_mnist()
    names = args.models.split(",")
    draws = draws_section(data, names, args.repeats)
    if args.only == "draws":
        old = RESULTS.read_text() if RESULTS.is_file() else ""
        kept = old.split(DRAWS_HEADER)[0].rstrip("\n")
        RESULTS.write_text((kept + "\n\n" if kept else "") + draws)
        print(draws)
        return
    sections = []
    for name in (name for name in names if name in MODELS):  # the synthetic ones are for the draws only
        model, how = trained_model(MODELS[name], data)
        with torch.no_grad():
            mpm_density = BayesianMLP.density(model.keep_masks())
        inclusion = ", ".join(f"{v:.3f}" for v in mean_inclusion(model))
        load_before = os.getloadavg()[0]
        rows: list = []
        bench_model(model, data, rows)
        table = "| what | median time | in dense forwards | target | note |\n|---|---|---|---|---|\n"
        table += "\n".join(f"| {' | '.join(row)} |" for row in rows) + "\n"
        sections.append(
            f"## `{name}` model\n\n{how}; density at the median probability model {mpm_density:.3f}, "
            f"mean inclusion per layer {inclusion}. Load average before / after: {load_before:.1f} / "
            f"{os.getloadavg()[0]:.1f}.\n\n{table}"
        )
    header = (
        f"# Prediction benchmarks\n\n{data.name}: {data.n_test} test images, 784-400-600-10 LBBNN. "
        f"torch threads: {torch.get_num_threads()}. The 2 cores are shared with other work: compare rows "
        "of one run, or the 'in dense forwards' column (time / the plain dense forward's time in the "
        "same run; that forward takes about 70 ms on idle cores). With another 2-thread job on the "
        "cores every small torch op waits for a descheduled thread, so paths made of many small ops "
        "(the sweep) suffer most.\n\n"
    )
    text = header + "\n".join(sections) + "\n" + draws
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
