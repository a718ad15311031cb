"""The pruned network as ONNX: compacted dense layers of the active units, mean weights.

`write_onnx` adds `model.onnx` beside an export (core.predict.export): the same compaction
(core.predict.export.compact_layers, i.e. core.predict.compact), written as a plain torch module
(gather the used inputs, then nn.Linear layers and the activation, then the likelihood's head) and
traced by torch.onnx.export. The TorchScript exporter (dynamo=False) is used: it needs neither
onnxscript nor torch.export, so it works offline with torch 2.11 to 2.13 and `onnx` alone; the graph
holds Gather, Gemm, the activation and Softmax / Sigmoid only.

Graph: input "x" (n, features) float32, n dynamic; outputs "probabilities" (n, K) for
classification, "mean" and "std" (n,) in standardised target units for regression: what
ExportedMLP.predict and the `prune` / mean-weights prediction give (checked by `max_difference`).

onnx and onnxruntime are the optional extra `export` (pip install -e '.[export]').
"""

from __future__ import annotations

import io
import json
import tempfile
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.errors import PredictionError, RunStoreError
from core.models.likelihoods import Bernoulli, HeteroscedasticGaussian
from core.models.network import ACTIVATIONS, BayesianMLP
from core.predict.engine import check_threshold, predict, resolve_model
from core.predict.export import META_FILE, README_FILE, compact_layers, compact_skip, readme_text

ONNX_FILE = "model.onnx"
CHECK_ATOL = 1e-5  # onnxruntime against the project's prediction (float32 sums in another order)
OPSET = 17
FORMATS = ("safetensors", "onnx")
INSTALL_HINT = "pip install -e '.[export]' (onnx, onnxruntime)"


class _Gather(nn.Module):
    def __init__(self, index: Tensor):
        super().__init__()
        self.register_buffer("index", index.long().cpu())

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], -1).index_select(1, self.index)


class _Constant(nn.Module):
    """A disconnected network's output: the same vector for every input (no empty matrix in the graph,
    which onnxruntime refuses)."""

    def __init__(self, value: Tensor):
        super().__init__()
        self.register_buffer("value", value.float().cpu().reshape(1, -1))

    def forward(self, x: Tensor) -> Tensor:
        return self.value.expand(x.shape[0], -1)


class _Head(nn.Module):
    """The likelihood's prediction from the network output (ExportedMLP.predict's, per likelihood)."""

    def __init__(self, likelihood: nn.Module):
        super().__init__()
        self.kind = (
            "bernoulli"
            if isinstance(likelihood, Bernoulli)
            else "heteroscedastic"
            if isinstance(likelihood, HeteroscedasticGaussian)
            else "gaussian"
            if likelihood.task == "regression"
            else "categorical"
        )
        self.floor = getattr(likelihood, "std_floor", 0.0)
        noise = float(likelihood.log_noise_std.detach().exp()) if self.kind == "gaussian" else 0.0
        self.register_buffer("noise_std", torch.tensor(noise, dtype=torch.float32))

    def forward(self, out: Tensor):
        if self.kind == "categorical":
            return torch.softmax(out, dim=-1)
        if self.kind == "bernoulli":
            p1 = torch.sigmoid(out)
            return torch.cat([1 - p1, p1], dim=-1)
        if self.kind == "heteroscedastic":
            return out[:, 0], nn.functional.softplus(out[:, 1]) + self.floor
        mean = out[:, 0]
        return mean, self.noise_std.expand_as(mean)


class _SkipMLP(nn.Module):
    """Layers after the first also read the gathered inputs (input skip), appended after the units."""

    def __init__(self, gather: _Gather, linears: list[nn.Linear], activation: nn.Module, skip: list[bool], head: _Head):
        super().__init__()
        self.gather, self.linears, self.activation, self.head = gather, nn.ModuleList(linears), activation, head
        self.skip = tuple(skip)

    def forward(self, x: Tensor):
        inputs = self.gather(x)
        h = inputs
        for i, linear in enumerate(self.linears):
            if self.skip[i]:
                h = torch.cat([h, inputs], dim=1)
            h = linear(h)
            if i < len(self.linears) - 1:
                h = self.activation(h)
        return self.head(h)


def _linear(weight: Tensor, bias: Tensor) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        layer.weight.copy_(weight.float().cpu())
        layer.bias.copy_(bias.float().cpu())
    return layer


def plain_module(model: BayesianMLP, threshold: float | None) -> nn.Module:
    """The pruned mean network at `threshold` (None: every weight, the dense mean network) as a plain
    torch module of dense layers: only the active units with threshold, all units without."""
    with torch.no_grad():
        if threshold is None:
            weights = model.conditional_mean_weights()  # every weight kept, at its conditional mean
            index = torch.arange(model.layers[0].in_features)
            layers = [(w[:, :-1], w[:, -1]) for w in weights]
        else:
            index, compact, biases, _ = compact_layers(model, threshold)
            layers = list(zip(compact, biases))
    head = _Head(model.likelihood)
    if index.numel() == 0:  # disconnected: no input reaches an output, the output is the folded last bias
        return nn.Sequential(_Constant(layers[-1][1]), head).eval()
    activation = ACTIVATIONS[model.config.activation]()
    linears = [_linear(w, b) for w, b in layers]
    gather = _Gather(index)
    skip = compact_skip(model)
    if any(skip):
        return _SkipMLP(gather, linears, activation, skip, head).eval()
    parts: list[nn.Module] = [gather]
    for i, linear in enumerate(linears):
        parts += [linear] if i == len(linears) - 1 else [linear, activation]
    return nn.Sequential(*parts, head).eval()


def output_names(model: BayesianMLP) -> list[str]:
    return ["probabilities"] if model.likelihood.task == "classification" else ["mean", "std"]


def onnx_bytes(model: BayesianMLP, threshold: float | None) -> bytes:
    if model.geometry is not None:
        raise PredictionError(
            "export --format onnx: writes fully connected networks only; this run has "
            "convolutional blocks (conv): use the safetensors export"
        )
    """The ONNX graph of plain_module(model, threshold), batch size dynamic."""
    module = plain_module(model, threshold)
    names = output_names(model)
    example = torch.zeros(1, model.layers[0].in_features)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of the dynamo one (which needs onnxscript);
        # it is the one that works offline on every torch this project supports.
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                module,
                (example,),
                buffer,
                dynamo=False,
                opset_version=OPSET,
                input_names=["x"],
                output_names=names,
                dynamic_axes={name: {0: "n"} for name in ["x", *names]},
            )
        except ModuleNotFoundError as exc:
            raise PredictionError(f"export --format onnx needs {exc.name}: {INSTALL_HINT}") from None
    return buffer.getvalue()


def write_onnx(model_or_run: Any, threshold: float | None, folder: str | Path) -> Path:
    """Add model.onnx (and the README's onnxruntime part) to an export folder written by export_pruned."""
    model = resolve_model(model_or_run)
    threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    folder = Path(folder)
    if not (folder / META_FILE).is_file():
        raise PredictionError(f"export: {folder} holds no {META_FILE}; write the export first (export_pruned)")
    data = onnx_bytes(model, threshold)
    meta = json.loads((folder / META_FILE).read_text())
    try:
        (folder / ONNX_FILE).write_bytes(data)
        (folder / README_FILE).write_text(readme_text(meta, onnx=True))
    except OSError as exc:
        raise RunStoreError(
            f"export: cannot write {exc.filename or folder} ({exc.strerror or exc}); "
            f"choose a writable folder with free space for --out"
        ) from None
    return folder / ONNX_FILE


def session(source: str | Path | bytes, threads: int | None = None):
    """An onnxruntime session on a file or bytes (threads: intra-op threads, None: onnxruntime's choice)."""
    try:
        import onnxruntime as ort
    except ModuleNotFoundError:
        raise PredictionError(f"onnxruntime is not installed: {INSTALL_HINT}") from None
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = int(threads)
    source = str(source) if isinstance(source, Path) else source
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def run_onnx(source: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    """The graph's outputs by name on inputs x (n, ...) (source: a file, bytes or a session)."""
    sess = source if hasattr(source, "run") else session(source)
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(x), -1))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {"x": x})))


def max_difference(source: Any, prediction: Any, x: np.ndarray) -> float:
    """Largest |onnxruntime - prediction| over the outputs, `prediction` a core.predict Prediction on x
    (probabilities, or mean and the per-draw std of its single draw)."""
    outputs = run_onnx(source, x)
    if "probabilities" in outputs:
        return float(np.max(np.abs(outputs["probabilities"] - prediction.probs)))
    return float(
        max(
            np.max(np.abs(outputs["mean"] - prediction.mean)),
            np.max(np.abs(outputs["std"] - prediction.std_per_draw[0])),
        )
    )


def verify(model_or_run: Any, source: Any, x: Any, threshold: float) -> float:
    """onnxruntime's outputs on x against the project's `prune` / mean-weights prediction at `threshold`:
    the largest difference, or PredictionError when it exceeds CHECK_ATOL."""
    model = resolve_model(model_or_run)
    x = np.asarray(x, dtype=np.float32)
    difference = max_difference(source, predict(model, x, "prune", threshold=threshold, weights="mean"), x)
    if not difference <= CHECK_ATOL:
        raise PredictionError(
            f"export: the ONNX graph differs from the project's prediction by {difference:.3g} "
            f"(more than {CHECK_ATOL:g}) on {len(x)} inputs"
        )
    return difference


def time_session(sess: Any, x: np.ndarray, repeats: int) -> float:
    """Median seconds of one pass over x (after one warm-up pass)."""
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(x), -1))
    sess.run(None, {"x": x})
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def export_zip(run: Any, threshold: float, format: str = "safetensors") -> bytes:
    """What `python -m core export RUN --threshold T --out DIR [--format onnx]` writes (Run.export, plus
    model.onnx for onnx), as a zip of DIR's files."""
    if format not in FORMATS:
        raise PredictionError(f"format: use {' or '.join(FORMATS)}, got {format!r}")
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as folder:
        path, _ = run.export(float(threshold), folder)
        if format == "onnx":
            write_onnx(run.model, float(threshold), path)
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(Path(path).iterdir()):
                archive.write(file, arcname=file.name)
    return buffer.getvalue()
