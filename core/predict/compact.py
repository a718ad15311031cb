"""Compact deterministic forward passes: dead units dropped, sparse layers as sparse matrices.

A masked network (per layer an augmented (out, in+1) weight, bias in the last
column, already multiplied by its boolean mask) is turned into a
`CompactNetwork` that computes the same outputs with less work:
- a hidden unit is dropped when it can reach no output (`useful_units`);
- a hidden unit that does not depend on the input is a constant: its value
  act(bias + folded constants) is folded into the next layer's biases and the
  unit is dropped;
- input features with no kept weight into a kept unit are not gathered;
- a compact layer whose kept density is below `SPARSE_BELOW_DENSITY` is
  multiplied as a sparse CSR matrix, the others as dense matrices.

Activations run transposed, (features, n): a sparse (out, in) matrix times a
dense (in, n) block is what torch's sparse kernels do well, and the result is
the next layer's input without a copy. Weights may carry a leading draw
dimension (R, out, in+1) when all draws share one mask (mpm / prune with
sampled weights); those layers stay dense and run as one batched product, but
a single draw taken out (`CompactNetwork.draw`, how sampled predictions run
each draw) multiplies its layers below the crossover as sparse matrices too.

Input-skip networks (a layer reading the previous layer's units and then the inputs, see
core.predict.structure.skip_layers) keep the gathered inputs and append them below the
previous layer's activations before each skipping layer; their gathered inputs are those any
kept unit of any layer reads.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import torch
from torch import Tensor, nn

from core.predict.structure import input_dependence, skip_layers, useful_units

# Below this fraction of kept weights in a compact layer the sparse product is
# faster than the dense one: CSR @ (in, 10000) against a dense addmm on 2 cores, float32 and
# float64, 400x785 and 600x400 blocks, crossed over between 5% and 10% kept.
SPARSE_BELOW_DENSITY = 0.06


class LayerFormat(str, Enum):
    DENSE = "dense"
    SPARSE = "sparse"


def choose_format(kept: int, numel: int, sparse_below: float | None = None) -> LayerFormat:
    """SPARSE below the crossover density (default: the module's SPARSE_BELOW_DENSITY, read at call time)."""
    sparse_below = SPARSE_BELOW_DENSITY if sparse_below is None else sparse_below
    if numel == 0 or kept >= sparse_below * numel:
        return LayerFormat.DENSE
    return LayerFormat.SPARSE


@dataclass
class CompactLayer:
    """out = weight @ h + bias for transposed activations h (in, n) or (R, in, n)."""

    weight: Tensor  # (out, in) dense or sparse CSR, or (R, out, in) dense
    bias: Tensor  # (out, 1) or (R, out, 1)
    format: LayerFormat
    # The format of one draw's (out, in) matrix: per-draw weights (R, out, in) stay dense as a
    # batch, a draw taken out alone is sparse when its kept density is below the crossover.
    draw_format: LayerFormat = LayerFormat.DENSE

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape[-2:])

    @property
    def n_draws(self) -> int | None:
        return self.weight.shape[0] if self.weight.dim() == 3 else None

    def apply(self, h: Tensor) -> Tensor:
        if self.format is LayerFormat.SPARSE:
            if h.dim() == 3:  # one draw's activations from a dense per-draw layer before it: (1, in, n)
                h = h[0]
            return torch.addmm(self.bias, self.weight, h)
        if self.weight.dim() == 2:
            return (
                torch.addmm(self.bias, self.weight, h)
                if h.dim() == 2
                else torch.baddbmm(self.bias, self.weight.expand(h.shape[0], -1, -1), h)
            )
        if h.dim() == 2:  # R draws on one shared input: a single (R*out, in) @ (in, n) product
            draws, out, fan_in = self.weight.shape
            stacked = torch.addmm(self.bias.reshape(draws * out, 1), self.weight.reshape(draws * out, fan_in), h)
            return stacked.view(draws, out, h.shape[1])
        return torch.baddbmm(self.bias, self.weight, h)

    def draws(self, start: int, stop: int) -> "CompactLayer":
        if self.weight.dim() != 3:
            return self
        return CompactLayer(self.weight[start:stop], self.bias[start:stop], self.format, self.draw_format)

    def detached_copy(self) -> "CompactLayer":
        """Per-draw weights in freshly allocated (aligned) memory, as a sparse (out, in) matrix when the
        layer holds one draw whose draw_format is sparse; shared 2-D layers as they are."""
        if self.weight.dim() != 3:
            return self
        if self.draw_format is LayerFormat.SPARSE and self.weight.shape[0] == 1:
            return CompactLayer(to_format(self.weight[0], LayerFormat.SPARSE), self.bias[0].clone(), LayerFormat.SPARSE)
        return CompactLayer(self.weight.clone(), self.bias.clone(), self.format, self.draw_format)


def activate_(activation: nn.Module, h: Tensor) -> Tensor:
    """The activation, in place where torch has an in-place form (saves a copy of h)."""
    if type(activation) is nn.ReLU:
        return h.clamp_min_(0)
    return activation(h)


@dataclass
class CompactNetwork:
    """Gather `input_index` of x, then the compact layers; outputs (n, out) or (R, n, out)."""

    input_index: Tensor | None  # None: every input feature is used
    layers: list[CompactLayer]
    activation: nn.Module
    n_inputs: int
    disconnected: bool | None = None  # no output depends on the input (None: not worked out)
    skip: tuple[bool, ...] = ()  # per layer: does it also read the gathered inputs (input skip)? () none

    @property
    def n_draws(self) -> int | None:
        return next((layer.n_draws for layer in self.layers if layer.n_draws is not None), None)

    @property
    def units(self) -> list[int]:
        return [layer.shape[0] for layer in self.layers]

    def draws(self, start: int, stop: int) -> "CompactNetwork":
        return CompactNetwork(
            self.input_index,
            [layer.draws(start, stop) for layer in self.layers],
            self.activation,
            self.n_inputs,
            self.disconnected,
            self.skip,
        )

    def draw(self, index: int) -> "CompactNetwork":
        """Draw `index` alone (a network of one draw): run by itself, its products have the same
        shapes whichever draws shared its chunk, so its outputs do not depend on them. Its tensors
        are copied out of the chunk: a slice starts at an offset that depends on the draw's place in
        the chunk, and MKL's kernels may sum in another order for another alignment (seen: 3e-8
        with 2 threads)."""
        part = self.draws(index, index + 1)
        return CompactNetwork(
            part.input_index,
            [layer.detached_copy() for layer in part.layers],
            part.activation,
            part.n_inputs,
            part.disconnected,
            part.skip,
        )

    def gather_inputs(self, x: Tensor) -> Tensor:
        """x (n, d) -> the used features, transposed (k, n)."""
        if self.input_index is None:
            return x.T
        return gathered_inputs(x, self.input_index)

    def forward_transposed(self, h: Tensor) -> Tensor:
        """Gathered inputs (k, n) -> outputs (out, n) or (R, out, n)."""
        last = len(self.layers) - 1
        inputs = h
        for i, layer in enumerate(self.layers):
            if i < len(self.skip) and self.skip[i]:
                h = torch.cat([h, inputs.expand(h.shape[:-2] + inputs.shape[-2:])], dim=-2)
            h = layer.apply(h)
            if i < last:
                h = activate_(self.activation, h)
        if h.dim() == 2 and self.n_draws is not None:  # no layer left to broadcast the draws
            h = h.unsqueeze(0).expand(self.n_draws, -1, -1)
        return h

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward_transposed(self.gather_inputs(x)).transpose(-1, -2)


# The gathered inputs of the latest networks, kept: every draw of a plan with a shared mask (mpm, prune
# with sampled weights) gathers the same columns of the same inputs, a copy of 10,000 x ~700 floats that
# was about an eighth of a 784-400-600-10 draw's CPU (cProfile of DrawCache.extend at threshold 0.5).
GATHERED_KEPT = 2  # copies kept (the latest used)
GATHERED_MAX_BYTES = 64 * 2**20  # a larger copy is not kept (it would outlive its prediction)
_gathered: OrderedDict = OrderedDict()  # (id(x), x's version, shape, dtype, columns) -> (weakref to x, copy)
_gathered_lock = threading.Lock()
gathers = 0  # copies made (not kept ones): the tests count them


def gathered_inputs(x: Tensor, index: Tensor) -> Tensor:
    """x.index_select(1, index).T.contiguous(): the same values in the same layout (so the products on
    them sum alike, bit for bit), kept for the next network on the same x and columns. A kept copy is
    never written to (the layers make new activations); x is not held (a weak reference names it), and
    an in-place write to x changes its version, so the copy is made again."""
    global gathers
    if index.device.type != "cpu":  # no copy to the host for a key
        return x.index_select(1, index).T.contiguous()
    key = (id(x), x._version, tuple(x.shape), x.dtype, index.numpy().tobytes())
    with _gathered_lock:
        kept = _gathered.get(key)
        if kept is not None and kept[0]() is x:
            _gathered.move_to_end(key)
            return kept[1]
    # A row gather then one transpose copy: gathering rows of x.T reads x column-wise (slow).
    columns = x.index_select(1, index).T.contiguous()
    with _gathered_lock:
        gathers += 1
        for stale in [k for k, (ref, _) in _gathered.items() if ref() is None]:
            del _gathered[stale]
        if columns.numel() * columns.element_size() <= GATHERED_MAX_BYTES:
            _gathered[key] = (weakref.ref(x), columns)
            while len(_gathered) > GATHERED_KEPT:
                _gathered.popitem(last=False)
    return columns


def compact_network(
    weights: Sequence[Tensor],
    masks: Sequence[Tensor],
    activation: nn.Module,
    sparse_below: float | None = None,
    fold_constants: bool = True,
) -> CompactNetwork:
    """A CompactNetwork computing the network `weights` with every entry outside `masks` set to 0.

    masks: bool (out, in+1) per layer, shared by all draws when weights are (R, out, in+1);
    the weights may be masked already or not (only the kept entries are read).
    With fold_constants=False units that do not depend on the input are kept and
    computed (used where the inputs are themselves hidden units, some constant).
    """
    useful = useful_units(masks)
    depends = input_dependence(masks) if fold_constants else [torch.ones_like(u) for u in useful]
    keep = [d & u for d, u in zip(depends[:-1], useful[:-1])] + [torch.ones_like(useful[-1])]
    skip = skip_layers([mask.shape for mask in masks])
    first = masks[0]
    n_inputs = first.shape[1] - 1
    used_inputs = (first[:, :-1] & keep[0].unsqueeze(1)).any(dim=0)
    for index in range(1, len(masks)):
        if skip[index]:  # the inputs a skipping layer's kept units read are gathered too
            width = masks[index - 1].shape[-2]
            skipped = masks[index][:, width : width + n_inputs] & keep[index].unsqueeze(1)
            used_inputs = used_inputs | skipped.any(dim=0)
    columns = used_inputs.nonzero().squeeze(1)
    input_index = None if len(columns) == n_inputs else columns
    input_columns = columns
    batch = weights[0].shape[:-2]
    # Values of dropped constant units of the previous layer, folded into the biases (in float64).
    const_index = columns.new_zeros(0)
    const_value = torch.zeros(batch + (0,), dtype=torch.float64, device=first.device)
    layers = []
    for index, (weight, mask) in enumerate(zip(weights, masks)):
        bias = (weight[..., -1] * mask[:, -1]).double()
        if len(const_index):
            folded = (weight[..., const_index] * mask[:, const_index]).double()
            bias = bias + fold_constants_of(folded, const_value)
        rows = keep[index].nonzero().squeeze(1)
        if skip[index]:  # the gathered inputs' columns follow the previous layer's units
            columns = torch.cat([columns, masks[index - 1].shape[-2] + input_columns])
        block = (rows.unsqueeze(1), columns)  # one gather per tensor (fewer ops: each costs a thread sync)
        kept = mask[block]
        compact = weight[(...,) + block] * kept
        layer_format = choose_format(int(torch.count_nonzero(kept)), kept.numel(), sparse_below)
        draw_format = LayerFormat.DENSE
        if compact.dim() == 3:
            layer_format, draw_format = LayerFormat.DENSE, layer_format
        layers.append(
            CompactLayer(
                to_format(compact, layer_format),
                bias.index_select(-1, rows).to(weight.dtype).unsqueeze(-1).contiguous(),
                layer_format,
                draw_format,
            )
        )
        if index < len(weights) - 1:
            const_index = (~depends[index]).nonzero().squeeze(1)
            const_value = activation(bias.index_select(-1, const_index))
            columns = rows
    disconnected = not bool(depends[-1].any()) if fold_constants else None
    return CompactNetwork(input_index, layers, activation, n_inputs, disconnected, tuple(skip) if any(skip) else ())


def fold_constants_of(folded: Tensor, const_value: Tensor) -> Tensor:
    """folded (..., out, k) @ const_value (..., k): what constant units add to the next biases.
    Draws (a leading dimension) are folded one by one: a batched product may sum in another order
    than a single one, and a draw's network must not depend on the draws beside it."""
    if folded.dim() == 2:
        return (folded @ const_value.unsqueeze(-1)).squeeze(-1)
    return torch.stack([(f @ c.unsqueeze(-1)).squeeze(-1) for f, c in zip(folded, const_value)])


def to_format(matrix: Tensor, layer_format: LayerFormat) -> Tensor:
    if layer_format is LayerFormat.SPARSE:
        with quiet_sparse_beta():
            return matrix.to_sparse_csr()
    return matrix.contiguous()


def sparse_csr(crow: Tensor, col: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    with quiet_sparse_beta():
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


@contextmanager
def quiet_sparse_beta():
    """torch warns that sparse CSR is beta; the one product used here is tested against dense."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled")
        yield


def dense_network(weights: Sequence[Tensor], activation: nn.Module) -> CompactNetwork:
    """The network as it is (no masks known): dense layers on views of the augmented weights."""
    layers = [CompactLayer(w[..., :-1], w[..., -1:], LayerFormat.DENSE) for w in weights]
    skip = skip_layers([w.shape for w in weights])
    return CompactNetwork(None, layers, activation, weights[0].shape[-1] - 1, skip=tuple(skip) if any(skip) else ())


def run_chunked(network: CompactNetwork, x: Tensor, memory_budget: int, batch_size: int | None = None) -> Tensor:
    """Outputs (R, n, out), R = 1 for a single network, chunked over draws and inputs so that
    the activations of one chunk (two layers alive) stay below `memory_budget` bytes."""
    n_draws = network.n_draws or 1
    n = x.shape[0]
    widest = max([x.shape[1]] + network.units) + (x.shape[1] if network.skip else 0)
    per_item = 2 * widest * x.element_size()
    draw_chunk = max(1, min(n_draws, memory_budget // max(1, n * per_item)))
    input_chunk = n if draw_chunk * n * per_item <= memory_budget else max(1, memory_budget // (draw_chunk * per_item))
    if batch_size is not None:
        input_chunk = min(input_chunk, int(batch_size))
    if draw_chunk == n_draws and input_chunk >= n:
        out = network(x)
        return (out if out.dim() == 3 else out.unsqueeze(0)).contiguous()
    outputs = None
    for r in range(0, n_draws, draw_chunk):
        part = network.draws(r, r + draw_chunk) if network.n_draws else network
        for i in range(0, n, input_chunk):
            out = part(x[i : i + input_chunk])
            out = out if out.dim() == 3 else out.unsqueeze(0)
            if outputs is None:
                outputs = torch.empty((n_draws, n, out.shape[-1]), dtype=out.dtype, device=out.device)
            outputs[r : r + out.shape[0], i : i + out.shape[1]] = out
    return outputs
