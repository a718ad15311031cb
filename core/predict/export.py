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
shapes, which layers also read the gathered inputs (`input_skip`), metrics).
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
from core.models.likelihoods import HeteroscedasticGaussian, make_likelihood
from core.models.network import ACTIVATIONS, BayesianMLP
from core.predict.compact import CompactLayer, CompactNetwork, choose_format, compact_network, to_format
from core.predict.engine import check_threshold, resolve_model
from core.jsonable import jsonable
from core.predict.structure import active_masks, layer_densities, overall_density

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"


def compact_layers(model: BayesianMLP, threshold: float) -> tuple[Tensor, list[Tensor], list[Tensor], list[Tensor]]:
    """(input index, compact weights, folded biases, kept masks) of the pruned mean network.

    The same compaction the mpm-mean prediction runs (core.predict.compact), forced
    dense so the exported file stores plain (out, in) blocks; exact zeros are not stored.
    """
    masks = model.keep_masks(threshold)
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

    def __init__(self, input_index: Tensor, weights: list[Tensor], biases: list[Tensor], activation: str,
                 likelihood: str, noise_std: float | None = None, skip: list[bool] | None = None):
        super().__init__()
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
                layers.append(CompactLayer(to_format(weight, layer_format), getattr(self, f"bias_{i}").unsqueeze(1),
                                           layer_format))
            self._network = CompactNetwork(self.input_index, layers, self.activation, int(self.input_index.numel()),
                                           skip=self.skip)
            self._network_key = key
        return self._network

    @torch.no_grad()
    def predict(self, x: Any) -> Tensor | tuple[Tensor, Tensor]:
        """Class probabilities (n, K), or (mean, std) for regression (standardised units)."""
        out = self(torch.as_tensor(x, dtype=torch.float32))
        if self.likelihood.task == "classification":
            return self.likelihood.probabilities(out)
        return self.likelihood.mean_and_std(out)


def export_pruned(model_or_run: Any, threshold: float | None, path: str | Path,
                  metrics: dict[str, Any] | None = None) -> Path:
    """Write the pruned mean network at `threshold` (default: the family's) to directory `path`."""
    model = resolve_model(model_or_run)
    threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    with torch.no_grad():
        masks = model.keep_masks(threshold)
        active = active_masks(masks)
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
        "n_weights_kept": int(sum(int(m.sum()) for m in kept)),
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
    except OSError as exc:  # a read-only or full disk: one line, not a traceback
        raise RunStoreError(f"export: cannot write {exc.filename or directory} ({exc.strerror or exc}); "
                            f"choose a writable folder with free space for --out") from None
    return directory


def load_exported(path: str | Path) -> ExportedMLP:
    directory = Path(path)
    meta_path, weights_path = directory / META_FILE, directory / WEIGHTS_FILE
    if not meta_path.is_file() or not weights_path.is_file():
        raise PredictionError(f"export: {directory} does not hold {META_FILE} and {WEIGHTS_FILE}")
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise PredictionError(f"export: {directory} has format version {meta.get('format_version')!r}, "
                              f"this version reads {FORMAT_VERSION}")
    tensors = load_file(str(weights_path))
    weights, biases = [], []
    for i, shape in enumerate(meta["layer_shapes"]):
        dense = torch.zeros(shape[0] * shape[1], dtype=torch.float32)
        dense[tensors[f"layer_{i}.indices"].long()] = tensors[f"layer_{i}.values"]
        weights.append(dense.reshape(shape))
        biases.append(tensors[f"layer_{i}.bias"])
    module = ExportedMLP(tensors["input_index"], weights, biases, meta["activation"], meta["likelihood"],
                         meta.get("noise_std"), meta.get("input_skip"))
    module.meta = meta
    return module.eval()
