"""Cheaper sampled draws: the ways sampled networks can be run, and which one to use.

Sampled modes (bma with sampled structures, mpm / prune with sampled weights) run R networks.
Exact ways to run them (`DrawPath`):

- `plain`: each draw alone. bma: through its full dense matrices; a shared mask (mpm, prune):
  through the mask's compact network (core.predict.compact: dead units dropped, constants
  folded, a layer below the sparse crossover as a CSR matrix).
- `active`: each draw alone, compacted to its own active units: the units of *that draw's*
  sampled structure with no kept input or output dropped, constants folded, the dense matrices
  compacted, a layer below the sparse crossover (`SPARSE_BELOW_DENSITY`) multiplied as a
  sparse matrix. (With a shared mask every draw's structure is the mask's: `plain` is this.)
- `active-dense`: as `active`, every layer dense: where the sparse kernel is slower than the
  crossover says on this machine, at this load, for this network.
- `batched`: `GROUP` draws at a time in one product per layer, compacted to the union of the
  group's structures (bma) or to the shared mask: (GROUP*out, in) @ (in, n) for the first layer,
  a batched product after it. Groups are aligned at multiples of GROUP (draws 0-3, 4-7, ...), so
  a draw's output never depends on R; asked for draws that end inside a group, the whole group
  is computed. Not chosen automatically: core.predict.draw_cache computes one draw at a time
  and promises to sample only the new ones, and a batched group would sample (and compute) up
  to GROUP-1 draws past R. Ask for it by name (`sampled_forward(..., path="batched")`) where
  whole groups are wanted (benchmarks/results/predict.md says what it buys).

Equality. Every path computes the same sums of the same products; it drops only terms that are
exactly zero, but the remaining terms may be added in another order (a compacted or sparse
product, a batched one), so the paths agree to float rounding (tested to 1e-6 relative to the
plain path on random networks, with and without input skips: tests/test_cheaper_draws.py), not
bit for bit; where a draw has nothing to drop, `active` multiplies the same matrices in the same
order as `plain` and their outputs are equal bit for bit (tested too). Within one path draw r's
output depends only on (seed, r), the inputs and the path.
That keeps core.predict.draw_cache's promise (R draws equal `predict` with R, bit for bit) as
long as both use the same path, which `remember_path` guarantees in one process: the first
choice made for a (network, structure kind, threshold, inputs' shape, batch_size) is kept, the
network named by its `fingerprint` so that a reloaded copy of a run shares its choice. In
another process the probe may choose another path: predictions then agree to 1e-6, not bit for bit.

Choice: the engine times each candidate (`probe_costs`) on the first draw it computes, on all the
inputs (building the draw's network and running it), keeps the cheapest and uses its outputs
for that draw: the probe costs the other candidates' runs of one draw, once per `path_key`.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import OrderedDict
from enum import Enum
from typing import Callable, Hashable, Iterator, Sequence

import torch
from torch import Tensor, nn

from core.predict.compact import CompactNetwork, compact_network, dense_network

GROUP = 4  # draws batched into one product; groups start at multiples of GROUP
KEPT_CHOICES = 256  # choices remembered (least recently used dropped first)
# Another path is chosen over `plain` only when its probe was this much cheaper: one timing of one
# draw is noisy, and on networks with little to drop the paths' real costs differ by less (the
# draws benchmark: within 5-15% on a dense-ish network, 30-50% apart where the draws are sparse).
SWITCH_MARGIN = 0.15


class DrawPath(str, Enum):
    PLAIN = "plain"
    ACTIVE = "active"
    ACTIVE_DENSE = "active-dense"
    BATCHED = "batched"


def candidates(shared_mask: bool) -> list[DrawPath]:
    """The paths the probe times (each draw alone, see the module docstring): with a shared mask
    `active` is `plain`."""
    if shared_mask:
        return [DrawPath.PLAIN, DrawPath.ACTIVE_DENSE]
    return [DrawPath.PLAIN, DrawPath.ACTIVE, DrawPath.ACTIVE_DENSE]


def group_size(path: DrawPath) -> int:
    return GROUP if path is DrawPath.BATCHED else 1


def masked_network(weights: Sequence[Tensor], masks: Sequence[Tensor], activation: nn.Module) -> CompactNetwork:
    """The compact network (dead units dropped, sparse layers sparse) of weights zero outside `masks`."""
    if all(bool(mask.all()) for mask in masks):  # nothing to drop (e.g. the posterior-mean network)
        network = dense_network(weights, activation)
        network.disconnected = False
        return network
    return compact_network(weights, masks, activation)


def draw_networks(
    path: DrawPath,
    weights: Sequence[Tensor],
    masks: Sequence[Tensor] | None,
    activation: nn.Module,
) -> Iterator[CompactNetwork]:
    """Networks that run the draws `weights` (count, out, in+1) per layer, in order: one network per
    draw (plain, active), or one per group (batched; `weights` then hold whole aligned groups).
    Made one at a time: a draw's copy of its weights lives only while it runs."""
    count = weights[0].shape[0]
    if path is DrawPath.PLAIN:
        network = dense_network(weights, activation) if masks is None else masked_network(weights, masks, activation)
        yield from (network.draw(index) for index in range(count))
    elif path in (DrawPath.ACTIVE, DrawPath.ACTIVE_DENSE):
        sparse_below = 0.0 if path is DrawPath.ACTIVE_DENSE else None
        if masks is not None:  # every draw's structure is the shared mask's
            network = compact_network(weights, masks, activation, sparse_below=sparse_below)
            yield from (network.draw(index) for index in range(count))
            return
        for index in range(count):
            # A draw's own structure: its sampled weights are zero exactly where its indicators are 0.
            draw = [w[index] for w in weights]
            yield compact_network(draw, [w != 0 for w in draw], activation, sparse_below=sparse_below)
    else:
        for start in range(0, count, GROUP):
            # Fresh copies: a slice's memory offset depends on its place in the chunk (see CompactNetwork.draw).
            group = [w[start : start + GROUP].clone() for w in weights]
            structure = [(w != 0).any(dim=0) for w in group] if masks is None else masks
            yield masked_network(group, structure, activation)


def probe_costs(
    paths: Sequence[DrawPath],
    weights: Sequence[Tensor],
    masks: Sequence[Tensor] | None,
    activation: nn.Module,
    run: Callable[[CompactNetwork], Tensor],
    clock: Callable[[], float] | None = None,
) -> tuple[dict[DrawPath, float], dict[DrawPath, Tensor]]:
    """Seconds each path takes to build and `run` (a network -> its outputs) the draw `weights` (one
    draw, (1, out, in+1) per layer) on all the inputs, and its outputs. All the inputs: a sparse
    product's cost per input grows with their number (a CSR row's reads of a (in, n) block leave
    the cache), so a probe on a few inputs favours it. The chosen path's outputs are the draw's.
    `clock`: this thread's CPU time with one torch thread (the work, whatever the load on the
    cores, where wall time measures the scheduler), else wall time (the workers' time is not this
    thread's)."""
    if clock is None:
        clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    costs, outputs = {}, {}
    for path in paths:
        start = clock()
        outputs[path] = torch.cat([run(network) for network in draw_networks(path, weights, masks, activation)])
        costs[path] = clock() - start
    return costs, outputs


_choices: OrderedDict = OrderedDict()  # (network fingerprint, ...) -> DrawPath, least recently used first
_lock = threading.Lock()


_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (versions, fingerprint)


def fingerprint(model: nn.Module) -> tuple:
    """What identifies the network a model computes: the sum of every floating tensor of its state, in
    float64. Two copies of one run (a reloaded run, a bundled one) share it, and so share the path
    choice: their predictions stay equal bit for bit. Summed again only when a tensor of the state
    was written (its version counter moved) or replaced, not on every draw."""
    # The versions from the tensors themselves: state_dict() would build a detached copy of every entry
    # on each call, and the Pruning page asks on every run and poll.
    versions = tuple((t.data_ptr(), t._version) for t in itertools.chain(model.parameters(), model.buffers()))
    with _lock:
        kept = _fingerprints.get(model)
    if kept is not None and kept[0] == versions:
        return kept[1]
    state = model.state_dict()
    value = tuple(
        (name, tuple(t.shape), float(t.sum(dtype=torch.float64))) for name, t in state.items() if t.is_floating_point()
    )
    with _lock:
        _fingerprints[model] = (versions, value)
    return value


def remembered_path(key: Hashable) -> DrawPath | None:
    with _lock:
        if key not in _choices:
            return None
        _choices.move_to_end(key)
        return _choices[key]


def remember_path(key: Hashable, path: DrawPath) -> DrawPath:
    """Keep `path` for `key` unless a path is kept already (then that one: the first choice stays)."""
    with _lock:
        chosen = _choices.setdefault(key, path)
        _choices.move_to_end(key)
        while len(_choices) > KEPT_CHOICES:
            _choices.popitem(last=False)
        return chosen


def forget_paths(model: nn.Module | None = None) -> None:
    """Drop the kept choices (of one model's network, or all): the next prediction probes again."""
    mine = None if model is None else fingerprint(model)  # outside the lock: fingerprint takes it
    with _lock:
        if mine is None:
            _choices.clear()
            return
        for key in [key for key in _choices if key[0] == mine]:
            del _choices[key]


def path_key(
    model: nn.Module, threshold: float | None, x: Tensor, masks: Sequence[Tensor] | None, batch_size: int | None
) -> tuple:
    """What a path choice is kept for: (network `fingerprint`, structure kind, threshold, inputs' shape, batch_size)."""
    return shape_key(model, threshold, tuple(x.shape), masks, batch_size)


def shape_key(
    model: nn.Module, threshold: float | None, shape: tuple, masks: Sequence[Tensor] | None, batch_size: int | None
) -> tuple:
    """`path_key` from the inputs' shape (n, features) alone."""
    return (fingerprint(model), masks is None, threshold, tuple(shape), batch_size)


def chosen_path(
    model: nn.Module,
    threshold: float | None,
    x: Tensor,
    masks: Sequence[Tensor] | None,
    batch_size: int | None,
) -> DrawPath | None:
    """The path a BayesianMLP's sampled draws run by, kept for their `path_key` (so that every later
    draw of the same prediction, and of a copy of the model, runs the same way); None while none is
    kept (`probe_path` chooses one). Families without sampled structures draw dense networks:
    nothing to compact, no probe (`plain`)."""
    if masks is None and not any(getattr(layer, "has_structure", False) for layer in model.layers):
        return DrawPath.PLAIN
    return remembered_path(path_key(model, threshold, x, masks, batch_size))


def probe_path(
    key: Hashable,
    weights: Sequence[Tensor],
    masks: Sequence[Tensor] | None,
    activation: nn.Module,
    run: Callable[[CompactNetwork], Tensor],
) -> tuple[DrawPath, Tensor]:
    """Time every candidate on the draw `weights` (`probe_costs`), keep the cheapest for `key` (`plain`
    unless another is `SWITCH_MARGIN` cheaper; or the path kept already: the first choice stays) and
    return it with the draw's outputs by it."""
    costs, outputs = probe_costs(candidates(masks is not None), weights, masks, activation, run)
    cheapest = min(costs, key=costs.get)
    if costs[cheapest] > (1 - SWITCH_MARGIN) * costs[DrawPath.PLAIN]:  # within one timing's noise: stay plain
        cheapest = DrawPath.PLAIN
    path = remember_path(key, cheapest)
    if path not in outputs:
        outputs[path] = torch.cat([run(network) for network in draw_networks(path, weights, masks, activation)])
    return path, outputs[path]
