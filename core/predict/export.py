"""Export a pruned network: only the kept weights, dead hidden units removed.

At threshold t the exported net computes exactly the `mpm-mean` / `prune`
(weights="mean") prediction of the model at t, and holds only the active weights
(those on an input-to-output path, core.predict.structure.active_masks):
- a hidden unit is kept if it depends on the input and can reach an output
  (core.predict.structure);
- a hidden unit that does not depend on the input is a constant: its value is
  folded into the biases of the next layer, then it is dropped;
- input features with no kept weight into a kept unit are dropped (the module
  gathers the features it uses).

Files: `<dir>/model.safetensors` (per layer the kept weights as flat indices
into the compact matrix plus values, the folded bias; the input index) and
`<dir>/model.json` (model config, threshold, density raw and on active paths, per-layer
shapes, which layers also read the gathered inputs (`input_skip`), metrics) and `<dir>/README.md`
(how to load it with plain PyTorch, and with onnxruntime when `model.onnx` is there:
core.predict.onnx_export).

Kept weights are counted two ways, both over weights and biases as the density is (`kept_counts`):
raw (every entry the threshold keeps, what the Pruning page's density counts) and on active paths
(the entries on an input-to-output path: what the export holds; a kept weight off every path
changes no prediction, so it is left out).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch import Tensor, nn

from core.errors import PredictionError, RunStoreError
from core.jsonable import jsonable
from core.models.conv_network import ConvGeometry, conv_forward
from core.models.likelihoods import HeteroscedasticGaussian, make_likelihood
from core.models.network import ACTIVATIONS, BayesianMLP
from core.predict.compact import CompactLayer, CompactNetwork, choose_format, compact_network, to_format
from core.predict.engine import check_threshold, resolve_model
from core.predict.structure import active_masks, layer_densities, network_active_masks, overall_density

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"
README_FILE = "README.md"


def kept_counts(masks: list[Tensor], active: list[Tensor] | None = None) -> dict[str, int]:
    """Kept entries (weights and biases) at these masks: raw, on active paths, and of the dense net.

    The one count the Pruning page and the export both show (raw / density * total = raw). `active`: the
    active entries where known (a conv network's, core.predict.structure.network_active_masks)."""
    active = active_masks(masks) if active is None else active
    return {
        "raw": sum(int(torch.count_nonzero(m)) for m in masks),
        "active": sum(int(torch.count_nonzero(m)) for m in active),
        "total": sum(int(m.numel()) for m in masks),
    }


def kept_counts_at(model_or_run: Any, threshold: float | None) -> dict[str, int]:
    """kept_counts of a model (or run) pruned at `threshold` (default: the family's)."""
    model = resolve_model(model_or_run)
    threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    with torch.no_grad():
        masks = model.keep_masks(threshold)
        return kept_counts(masks, network_active_masks(model, masks))


def compact_layers(model: BayesianMLP, threshold: float) -> tuple[Tensor, list[Tensor], list[Tensor], list[Tensor]]:
    """(input index, compact weights, folded biases, kept masks) of the pruned mean network.

    The same compaction the mpm-mean prediction runs (core.predict.compact), forced
    dense so the exported file stores plain (out, in) blocks; exact zeros are not stored.
    """
    masks = model.keep_masks(threshold)
    if model.geometry is not None:  # conv: every layer as it is (flattened filters), no unit dropped
        kept_weights = model.conditional_mean_weights(masks)
        weights, biases = [w[:, :-1] for w in kept_weights], [w[:, -1] for w in kept_weights]
        index = torch.arange(model.config.in_features, device=masks[0].device)
        return index, weights, biases, [weight != 0 for weight in weights]
    network = compact_network(model.conditional_mean_weights(masks), masks, model.activation, sparse_below=0.0)
    input_index = network.input_index
    if input_index is None:
        input_index = torch.arange(network.n_inputs, device=masks[0].device)
    weights = [layer.weight for layer in network.layers]
    biases = [layer.bias.squeeze(-1) for layer in network.layers]
    return input_index, weights, biases, [weight != 0 for weight in weights]


def compact_skip(model: BayesianMLP) -> list[bool]:
    """Per compact layer, whether it also reads the gathered inputs (the model's input_skip)."""
    return [model.input_skip and index > 0 for index in range(len(model.layers))]


class ExportedMLP(nn.Module):
    """A small deterministic MLP: gather used inputs, then compact layers (sparse ones as sparse matrices)."""

    def __init__(
        self,
        input_index: Tensor,
        weights: list[Tensor],
        biases: list[Tensor],
        activation: str,
        likelihood: str,
        noise_std: float | None = None,
        skip: list[bool] | None = None,
        geometry: ConvGeometry | None = None,
    ):
        super().__init__()
        self.geometry = geometry  # conv blocks first (core.models.conv_network); None: a compact MLP
        self.skip = tuple(bool(flag) for flag in skip) if skip and any(skip) else ()
        self.register_buffer("input_index", input_index.long())
        for i, (w, b) in enumerate(zip(weights, biases)):
            self.register_buffer(f"weight_{i}", w.float().contiguous())
            self.register_buffer(f"bias_{i}", b.float().contiguous())
        self.n_layers = len(weights)
        self.activation = ACTIVATIONS[activation]()
        self.likelihood = make_likelihood(likelihood)
        if noise_std is not None:
            self.likelihood.log_noise_std.data.fill_(float(noise_std)).log_()
        self.likelihood.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        if self.geometry is not None:
            weights = [
                torch.cat([getattr(self, f"weight_{i}"), getattr(self, f"bias_{i}").unsqueeze(1)], dim=1)
                for i in range(self.n_layers)
            ]
            return conv_forward(x.reshape(x.shape[0], -1), weights, self.geometry, self.activation)
        return self.network(x.reshape(x.shape[0], -1))

    @property
    def network(self) -> CompactNetwork:
        """The compact forward (sparse layers as sparse matrices), rebuilt when the buffers move."""
        weights = [getattr(self, f"weight_{i}") for i in range(self.n_layers)]
        key = tuple((w.data_ptr(), w.device, w.dtype) for w in weights)
        if getattr(self, "_network_key", None) != key:
            layers = []
            for i, weight in enumerate(weights):
                layer_format = choose_format(int(torch.count_nonzero(weight)), weight.numel())
                layers.append(
                    CompactLayer(to_format(weight, layer_format), getattr(self, f"bias_{i}").unsqueeze(1), layer_format)
                )
            self._network = CompactNetwork(
                self.input_index, layers, self.activation, int(self.input_index.numel()), skip=self.skip
            )
            self._network_key = key
        return self._network

    @torch.no_grad()
    def predict(self, x: Any) -> Tensor | tuple[Tensor, Tensor]:
        """Class probabilities (n, K), or (mean, std) for regression (standardised units)."""
        out = self(torch.as_tensor(x, dtype=torch.float32))
        if self.likelihood.task == "classification":
            return self.likelihood.probabilities(out)
        return self.likelihood.mean_and_std(out)


def export_pruned(
    model_or_run: Any, threshold: float | None, path: str | Path, metrics: dict[str, Any] | None = None
) -> Path:
    """Write the pruned mean network at `threshold` (default: the family's) to directory `path`."""
    model = resolve_model(model_or_run)
    threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    with torch.no_grad():
        masks = model.keep_masks(threshold)
        active = network_active_masks(model, masks)
        counts = kept_counts(masks, active)
        input_index, weights, biases, kept = compact_layers(model, threshold)
        tensors = {"input_index": input_index.cpu().contiguous()}
        shapes = []
        for i, (w, b, m) in enumerate(zip(weights, biases, kept)):
            flat = m.reshape(-1).nonzero().squeeze(1)
            tensors[f"layer_{i}.indices"] = flat.to(torch.int32).cpu().contiguous()
            tensors[f"layer_{i}.values"] = w.reshape(-1)[flat].cpu().contiguous()
            tensors[f"layer_{i}.bias"] = b.cpu().contiguous()
            shapes.append(list(w.shape))
        noise_std = None
        if model.likelihood.task == "regression" and not isinstance(model.likelihood, HeteroscedasticGaussian):
            noise_std = float(model.likelihood.log_noise_std.exp())
    directory = Path(path)
    meta = {
        "format_version": FORMAT_VERSION,
        "config": dataclasses.asdict(model.config),
        "family": model.family,
        "statistic": model.spec.name,
        "threshold": threshold,
        "density": overall_density(masks),
        "layer_density": layer_densities(masks),
        "active_density": overall_density(active),
        "active_layer_density": layer_densities(active),
        "input_skip": compact_skip(model),
        # stored weight values (biases apart; an exactly-zero mean is not stored)
        "n_weights_kept": int(sum(int(m.sum()) for m in kept)),
        "kept_raw": counts["raw"],
        "kept_active": counts["active"],
        "n_weights_dense": model.n_weights(),
        "layer_shapes": shapes,
        "activation": model.config.activation,
        "likelihood": model.config.likelihood,
        "noise_std": noise_std,
        "metrics": metrics or {},
    }
    weights_bytes = save(tensors)
    meta_text = json.dumps(jsonable(meta), indent=2)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / WEIGHTS_FILE).write_bytes(weights_bytes)
        (directory / META_FILE).write_text(meta_text)
        (directory / README_FILE).write_text(readme_text(meta, onnx=False))
    except OSError as exc:  # a read-only or full disk: one line, not a traceback
        raise RunStoreError(
            f"export: cannot write {exc.filename or directory} ({exc.strerror or exc}); "
            f"choose a writable folder with free space for --out"
        ) from None
    return directory


def load_exported(path: str | Path) -> ExportedMLP:
    directory = Path(path)
    meta_path, weights_path = directory / META_FILE, directory / WEIGHTS_FILE
    if not meta_path.is_file() or not weights_path.is_file():
        raise PredictionError(f"export: {directory} does not hold {META_FILE} and {WEIGHTS_FILE}")
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise PredictionError(
            f"export: {directory} has format version {meta.get('format_version')!r}, "
            f"this version reads {FORMAT_VERSION}"
        )
    tensors = load_file(str(weights_path))
    weights, biases = [], []
    for i, shape in enumerate(meta["layer_shapes"]):
        dense = torch.zeros(shape[0] * shape[1], dtype=torch.float32)
        dense[tensors[f"layer_{i}.indices"].long()] = tensors[f"layer_{i}.values"]
        weights.append(dense.reshape(shape))
        biases.append(tensors[f"layer_{i}.bias"])
    module = ExportedMLP(
        tensors["input_index"],
        weights,
        biases,
        meta["activation"],
        meta["likelihood"],
        meta.get("noise_std"),
        meta.get("input_skip"),
        _geometry(meta),
    )
    module.meta = meta
    return module.eval()


def _geometry(meta: dict[str, Any]) -> ConvGeometry | None:
    config = meta.get("config") or {}
    return ConvGeometry.of(config["image_shape"], config["conv"]) if config.get("conv") else None


def readme_text(meta: dict[str, Any], onnx: bool) -> str:
    """The README written beside an export: what it holds and how to load it outside this project."""
    task = "classification" if meta["likelihood"] in ("categorical", "bernoulli") else "regression"
    lines = [
        "# Pruned network",
        "",
        f"Family {meta['family']}, threshold {meta['threshold']:g} of its {meta['statistic']}: the mean weights of "
        f"the kept connections (the `prune` / mean-weights prediction), dead units removed.",
        f"Kept weights and biases: {meta['kept_raw']:,} of {meta['n_weights_dense']:,} raw (density "
        f"{meta['density']:.4f}), {meta['kept_active']:,} on input-to-output paths: the ones held here.",
        f"Layers (units, inputs read): {meta['layer_shapes']}; activation {meta['activation']}; "
        f"likelihood {meta['likelihood']} ({task}).",
        "",
        "Files: `model.safetensors` (per layer the kept weights as flat indices into the (units, inputs) matrix and "
        "values, the bias; `input_index`, the input features read), `model.json` (shapes, settings, test metrics)"
        + (", `model.onnx` (the same network as an ONNX graph)." if onnx else "."),
        "",
        "## Plain PyTorch (safetensors)",
        "",
        "```python",
        PYTORCH_SNIPPET.strip(),
        "```",
    ]
    if any(meta.get("input_skip") or []):
        lines += [
            "",
            "This network has input skips: layers after the first also read the gathered inputs, "
            "appended below the previous layer's units (`input_skip` in model.json).",
        ]
    if (meta.get("config") or {}).get("conv"):
        lines += [
            "",
            "This network starts with convolutional blocks (`conv`, `image_shape` in model.json's config): "
            "layer i < len(conv) holds its filters flattened, (filters, channels * k * k), each block a "
            "conv2d, the activation and a 2x2 max-pool; the snippet above reads fully connected layers "
            "only: `core.predict.export.load_exported` runs both.",
        ]
    if onnx:
        lines += ["", "## onnxruntime", "", "```python", ONNX_SNIPPET.strip(), "```"]
    lines += [
        "",
        "Regression outputs are in standardised target units (y = mean * target_std + target_mean, "
        "the training split's statistics).",
    ]
    return "\n".join(lines) + "\n"


# The snippets, here and in docs/export.md (tests/test_onnx_export.py runs this one on an export).
PYTORCH_SNIPPET = """
import json, torch
from safetensors.torch import load_file

meta, t = json.load(open("model.json")), load_file("model.safetensors")
acts = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "elu": torch.nn.functional.elu,
        "gelu": torch.nn.functional.gelu, "leaky-relu": torch.nn.functional.leaky_relu}
layers = []
for i, (rows, cols) in enumerate(meta["layer_shapes"]):
    w = torch.zeros(rows * cols)
    w[t[f"layer_{i}.indices"].long()] = t[f"layer_{i}.values"]
    layers.append((w.reshape(rows, cols), t[f"layer_{i}.bias"]))

def forward(x):  # x: (n, features) float32, flattened as the model was trained
    inputs = x.reshape(len(x), -1)[:, t["input_index"].long()]
    h = inputs
    for i, (w, b) in enumerate(layers):
        if meta["input_skip"][i]:
            h = torch.cat([h, inputs], dim=1)
        h = h @ w.T + b
        if i < len(layers) - 1:
            h = acts[meta["activation"]](h)
    return h  # logits (softmax for categorical), or the regression mean (and raw scale)
"""

ONNX_SNIPPET = """
import numpy as np
import onnxruntime as ort

session = ort.InferenceSession("model.onnx")
x = np.zeros((5, session.get_inputs()[0].shape[1]), dtype=np.float32)  # your inputs, flattened
outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
# classification: outputs["probabilities"] (n, K); regression: outputs["mean"], outputs["std"] (standardised)
"""
