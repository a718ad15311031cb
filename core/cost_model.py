"""The cost model: what a request costs before anything is allocated, memory (bytes) and time (seconds).

Every request that allocates in proportion to what a user typed (a training, a playground fit, a
generated dataset, a prediction over an input set with R draws) is costed here from its sizes
alone, and admitted or refused against the limits of core.admission (`admit_*`, raising
AdmissionError with what would fit). Nothing here builds a model or a dataset: widths, counts and a family's
per-weight state are enough.

The model (checked against measurement by benchmarks/admission_model.py, whose table is
benchmarks/results/admission_model.md) counts:

- a model's state: the family's tensors per weight and per unit (parameters and buffers, exactly
  as built: tests/test_cost.py counts a built model against `state_floats`);
- a training: the state, Adam's gradient and two moments per parameter, the weight-sized
  temporaries of one step (a family's means, variances and KL terms, kept for the backward
  pass), the activations of a minibatch (a conv block's at every output position, and
  lbbnn-flow's flows: core/admission_shapes.py, checked against what autograd keeps by
  tests/test_cost_conv_flow.py), the dataset's arrays, and what the training process
  adds around the loop (snapshots, the stored sweep); a scale head (train.scale_head) as its two
  stages: the homoscedastic first stage's whole training, unless that run is stored, then the head's
  epochs (`training_cost`'s first_stage_stored; core.runs.training.first_stage_stored looks it up);
- a dataset: its arrays and the generator's temporaries;
- a prediction: R x inputs x outputs per draw (kept by the page cache, copied by the metrics),
  the chunked activations (core.predict.engine bounds one chunk) and the drawn weights.

Time is work divided by the speed of this machine, measured once per process by `measure_speed`
(a timed matrix product and an elementwise pass on one thread): `Cost.seconds` are CPU seconds of
one core, and `Cost.wall_seconds()` multiplies them by the current load per core, so a loaded
server shows longer waits. A running training's time left follows its measured epochs
(`remaining_seconds`).

Limits (core.admission) are registered settings (core.settings): the dashboard reads them with
secrets.toml as the fallback (`server_limits`); the command line limits only memory, to half the machine
(`command_line_limits`); the generators bound their counts of points themselves
(BNN_MAX_GENERATED_POINTS, core.data.params.point_count).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from core.admission_shapes import FLOW_FAMILY, FLOW_STATE_OF, LayerCount, flow_activity, flow_state, model_layers

BYTES_PER_FLOAT = 4
MB = 2**20


# --- the machine's speed ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Speed:
    """Measured rates of this process: float multiply-adds per second in a matrix product the size
    of a training step's, elements per second of an elementwise pass, and seconds per tiny
    operation (recorded, not used by the model: it read 1.4 or 2.5-3.4 microseconds from one process
    to the next on the benchmark machine, and the trainings did not follow it)."""

    matmul_flops: float
    elements_per_second: float
    seconds_per_op: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Speed":
        return cls(float(values["matmul_flops"]), float(values["elements_per_second"]), float(values["seconds_per_op"]))


def measure_speed(repeats: int = 15) -> Speed:
    """Times small representative work (about 0.1 s): each part's fastest of `repeats` single runs.

    The fastest run is the core's own speed: on the shared benchmark machine at load 4-9 on 2 cores,
    timing batches of runs gave elementwise rates from 0.9e8 to 7.7e8 per second (a batch is
    preempted), while the trainings' CPU seconds varied by 15%. Contention is the load factor's
    business (load_factor), not the probe's."""
    import torch

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(100, 512, generator=generator)
    b = torch.randn(512, 512, generator=generator)
    v = torch.randn(2**20, generator=generator)
    tiny = torch.randn(16, generator=generator)

    def fastest(work, count: int = 1) -> float:
        best = math.inf
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(count):
                work()
            best = min(best, (time.perf_counter() - started) / count)
        return max(best, 1e-9)

    # On one thread: the estimates are single-core CPU seconds (a classroom server computes on one
    # thread per request, BNN_COMPUTE_THREADS). With PyTorch's two threads on the loaded benchmark
    # machine an elementwise pass was timed 30 x slower than on one.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        matmul_seconds = fastest(lambda: a @ b)
        element_seconds = fastest(lambda: torch.sigmoid(v).mul_(v))
        op_seconds = fastest(lambda: tiny.add(tiny), 50)
    finally:
        torch.set_num_threads(previous)
    return Speed(
        matmul_flops=2 * 100 * 512 * 512 / matmul_seconds,
        elements_per_second=v.numel() / element_seconds,
        seconds_per_op=op_seconds,
    )


_SPEED_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _probed_speed() -> Speed:
    return measure_speed()


def server_speed() -> Speed:
    """This process's measured speed, probed once (the first estimate pays about 0.1 s). One probe at a
    time: ten sessions opening at once each ran the probe (a py-spy dump of a 10-browser class), and the
    probe sets torch's thread count, which is the process's, so overlapping probes could restore each
    other's values and leave the server on one thread."""
    with _SPEED_LOCK:
        return _probed_speed()


def load_factor() -> float:
    """How much longer work takes now than on an idle machine: the 1-minute load average per core,
    at least 1. A rough guide only: on the shared benchmark machine (2 cores) trainings at load 4 took
    1.8-2.3 x their CPU seconds in one run, while in a later run at load 2.7-4 (the average still
    falling from an earlier peak) 24 of 28 cases had a core to themselves (1.0-1.1 x). The load
    averaged over a case read within 0.1 of the load at its start: the 1-minute average lags, so
    sampling it more often does not help; a running training's time left follows its measured epochs
    instead (remaining_seconds)."""
    import os

    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return max(1.0, load / max(1, os.cpu_count() or 1))


# --- what a request is made of ------------------------------------------------------------------------


@dataclass(frozen=True)
class DataShape:
    """A dataset's sizes, known before it is loaded (generated sets from their parameters)."""

    name: str
    task: str
    in_features: int
    outputs: int  # values a prediction keeps per input and draw: class probabilities, or a mean and an sd
    n_train: int | None  # None: known only once the file is read
    n_test: int | None
    n_grid: int = 0  # a 1-D set's plotting grid
    n_pool: int = 0  # toy-sine-gaps draws its training points from a pool of this size
    generated: bool = False
    n_classes: int | None = None


# The generators' parameters that are counts of points (each allocates arrays of that length).
COUNT_PARAMETERS = ("n", "n_test", "n_pool", "n_grid")


def dataset_shape(name: str, params: Mapping[str, Any] | None = None) -> DataShape:
    """Sizes of dataset `name` with generator `params`, without generating or reading anything.
    Counts that are not whole numbers are left to the generator's own validation (they are shown
    here as the defaults)."""
    from core.data import toy
    from core.data.registry import dataset_info

    info = dataset_info(name, params=dict(params or {}))  # params decide a stored table's shape
    outputs = int(info.n_classes) if info.n_classes else 2
    in_features = int(math.prod(info.input_shape)) if info.input_shape else 1
    if name not in toy.GENERATORS:
        return DataShape(name, info.task, in_features, outputs, info.n_train, info.n_test, n_classes=info.n_classes)
    values = {**toy.GENERATOR_DEFAULTS[name], **dict(params or {})}

    def count(key: str) -> int:
        value = values.get(key, 0)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float(toy.GENERATOR_DEFAULTS[name].get(key, 0))
        return int(number) if math.isfinite(number) and number > 0 else 0

    return DataShape(
        name,
        info.task,
        in_features,
        outputs,
        count("n"),
        count("n_test"),
        count("n_grid"),
        count("n_pool"),
        generated=True,
        n_classes=info.n_classes,
    )


def layer_widths(config: Any, shape: DataShape) -> list[int]:
    """Inputs, hidden widths and the network's outputs (the likelihood's count, as the model builds it)."""
    from core.models.likelihoods import make_likelihood

    outputs = make_likelihood(config.likelihood, dict(config.likelihood_options)).n_outputs(shape.n_classes)
    return [int(shape.in_features), *[int(h) for h in config.hidden], int(outputs)]


def n_weights(widths: Sequence[int]) -> int:
    """Weights and biases of a dense network with these layer widths (what model.n_weights() counts)."""
    return sum((int(a) + 1) * int(b) for a, b in zip(widths, widths[1:]))


# Each family's tensors per layer, as built (parameters, then buffers): per weight (bias included),
# per output unit, and a constant; horseshoe's hidden layers add per-unit scales. Counted from
# models built on the meta device; tests/test_cost.py checks them against built models.
@dataclass(frozen=True)
class LayerState:
    parameters_per_weight: int
    parameters_per_unit: int
    parameters_fixed: int
    buffers_per_weight: int
    buffers_per_unit: int
    buffers_fixed: int

    def parameters(self, fan_in: int, fan_out: int) -> int:
        return (
            self.parameters_per_weight * (fan_in + 1) * fan_out
            + self.parameters_per_unit * fan_out
            + self.parameters_fixed
        )

    def buffers(self, fan_in: int, fan_out: int) -> int:
        return self.buffers_per_weight * (fan_in + 1) * fan_out + self.buffers_per_unit * fan_out + self.buffers_fixed


FAMILY_STATE: dict[str, tuple[LayerState, LayerState]] = {  # (hidden layers, output layer)
    "lbbnn": (LayerState(3, 0, 6, 2, 0, 1),) * 2,
    "lbbnn-lfmvn": (LayerState(6, 0, 6, 2, 0, 2),) * 2,
    "bnn": (LayerState(2, 0, 0, 1, 0, 2),) * 2,
    "bnn-mixture": (LayerState(2, 0, 0, 1, 0, 4),) * 2,
    "variational-dense": (LayerState(2, 0, 0, 1, 0, 2),) * 2,
    "concrete-dropout": (LayerState(1, 0, 1, 1, 0, 2),) * 2,
    "horseshoe": (LayerState(2, 2, 4, 1, 1, 55), LayerState(2, 0, 2, 1, 0, 3)),
    "sparse-vd": (LayerState(2, 0, 0, 1, 0, 1),) * 2,
    "fnn": (LayerState(1, 0, 0, 1, 0, 1),) * 2,
}
LIKELIHOOD_FLOATS = 8  # the likelihood's few scalars (a Gaussian's noise scale and its prior)


def family_layers(family: str, widths: Sequence[int]) -> list[LayerState]:
    hidden, output = FAMILY_STATE.get(family, FAMILY_STATE["lbbnn-lfmvn"])
    return [output if index == len(widths) - 2 else hidden for index in range(len(widths) - 1)]


def state_floats(family: str, widths: Sequence[int]) -> tuple[int, int]:
    """(parameters, buffers) of a model of `family` with these layer widths, in floats. A family
    missing from the table is costed as the largest one."""
    layers = family_layers(family, widths)
    parameters = sum(layer.parameters(a, b) for layer, a, b in zip(layers, widths, widths[1:]))
    buffers = sum(layer.buffers(a, b) for layer, a, b in zip(layers, widths, widths[1:]))
    return parameters + LIKELIHOOD_FLOATS, buffers


def model_state(config: Any, layers: Sequence[LayerCount]) -> tuple[int, int]:
    """(parameters, buffers) in floats of the network `config` builds (its conv blocks and flows included)."""
    family = str(config.family)
    states = family_layers(FLOW_STATE_OF if family == FLOW_FAMILY else family, [0] * (len(layers) + 1))
    parameters = sum(state.parameters(layer.fan_in, layer.fan_out) for state, layer in zip(states, layers))
    buffers = sum(state.buffers(layer.fan_in, layer.fan_out) for state, layer in zip(states, layers))
    flow_parameters, flow_buffers = flow_state(config, layers)
    return parameters + flow_parameters + LIKELIHOOD_FLOATS, buffers + flow_buffers


# --- costs --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """Bytes a request adds to the process that serves it, and its CPU seconds on an idle core of
    this machine (`wall_seconds()` scales them by the current load)."""

    bytes: int
    seconds: float
    weights: int = 0
    epochs: int = 0

    def wall_seconds(self, factor: float | None = None) -> float:
        return self.seconds * (load_factor() if factor is None else factor)


# Calibration: benchmarks/results/admission_model.md (peak resident set added; one PyTorch thread).
# A training process adds, per weight, about 46-47 floats for lbbnn and bnn and 39 for horseshoe
# between 1 and 9 million weights (the state, Adam's gradient and two moments, a step's weight-sized
# temporaries, and after the loop the stored sweep's masked copies and safetensors' serialised state),
# and 69-92 MB whatever the size below 41,000 weights, but about 110-130 MB extrapolated from the
# large ones (allocator arenas). 100 MB + 55 floats per weight is within 1.0-1.5 x of every
# measured training; a family with more state (4 floats per parameter with Adam, 1 per buffer)
# than lbbnn's is given 41 floats per weight on top of its state.
TRAINING_FIXED_BYTES = 100 * MB
TRAINING_FLOATS_PER_WEIGHT = 55
TRAINING_FLOATS_BEYOND_STATE = 41
# Activations of a minibatch: per example and unit, the pre-activation's mean and variance, the
# sample and the activation, and their gradients.
ACTIVATION_FLOATS_PER_UNIT = 8
# Generated data, per value of a point (its features and target): numpy's float64 draws, noise,
# concatenation and shuffled copy, and the float32 arrays the Dataset keeps. Measured 14-18 bytes
# over two runs (two-moons and toy-hetero with 1,000,000 + 1,000,000 points); toy-sine-gaps' pool is
# one float64 draw per point, filtered (13-16 MB with 200,000 points from a pool of 1,000,000). CPU
# per point, in elementwise passes of the probe, read in three runs (load 2-10): two-moons' and
# two-spirals' trig, noise and permutation 270-350 (0.70-0.84 s for 2,000,000 points), toy-hetero's
# 83-145 (0.23-0.33 s), toy-sine-gaps' 28-53 per point of its pool (0.04-0.07 s for 1,000,000 +
# 200,000): these short runs vary with the machine's load by up to 1.9 x.
DATASET_BYTES_PER_VALUE = 20
POOL_BYTES_PER_POINT = 10
GENERATOR_PASSES_PER_POINT = {
    "two-moons": 380,
    "two-spirals": 380,
    "toy-hetero": 150,
    "toy-cubic": 150,
    "toy-sine-gaps": 40,
}
# A prediction and the page's metrics of it, per value of R x inputs x outputs: the outputs, the
# probabilities, the page cache's copy and the metrics' float64 copies: measured 24-26 bytes for
# classification (R x inputs = 1 and 10 million on two-moons); regression keeps a mean and an sd per
# draw, 34 bytes (toy-hetero, 200,000 inputs, R = 50).
PREDICTION_BYTES_PER_VALUE = {"classification": 30, "regression": 40}
PREDICTION_FIXED_BYTES = 16 * MB
# Its CPU, besides each draw's forward pass (below), per value: classification's probabilities,
# per-draw accuracies and copies, regression's quantiles of the mixture over draws; both slower once
# the values no longer fit the cache (the cache term below). lbbnn 16-16 on two-moons, quiet run at
# load 3-4: 2,000,000 values (10,000 inputs at R = 100, 100,000 at R = 10) 0.23-0.24 s, 20 million
# (100,000 at R = 100, 1,000,000 at R = 10) 2.8-3.0 s, about 110-120 passes per value with the
# forward pass; bnn 64-64 on toy-hetero, 200,000 inputs at R = 50: 60-71 s, 2,000-2,600 passes per
# value. Per input, whatever R, the metrics over the test set: 0.3 s more for 1,000,000 inputs at
# R = 10 than for 100,000 at R = 100 (the same values and forward work). A run beside other work at
# load 7-12 read up to 1.4 x these.
PREDICTION_PASSES_PER_VALUE = {"classification": 45, "regression": 2200}  # x the cache term
PREDICTION_PASSES_PER_INPUT = 200
# Each draw's forward pass: the products, and per input and unit a few elementwise passes (the
# pre-activation's mean and variance, the sample, the activation).
PREDICTION_PASSES_PER_UNIT = 4
# Time, in the units the speed probe measures (elementwise passes, multiply-adds). The tiny-operation
# probe read either 1.4 or 2.5-3.4 microseconds from one process to the next on the benchmark
# machine while the trainings' CPU seconds did not follow it, so the fixed and per-step overheads
# are counted in elementwise passes, the steadier reading (7-9 x 10^8 per second).
#
# A training process spends about 2.1 s of CPU whatever the size: the first training step's set-up
# (a first train() call took 1.9-2.7 s more than a second one in the same process, at 41,000 and
# 1 million weights), the run store and the evaluations' fixed work (200-200 nets, 10 epochs on
# two-moons: 2.6 s in all, each of the three families). Counted with a little margin: 2.4 s at the
# probe's usual 7.5 x 10^8 passes per second.
TRAINING_FIXED_PASSES = 1.8e9
# Per step: the multiply-adds (mean and variance products forward, twice that backward), about 30
# elementwise passes over the weights (sampling, the KL and its gradient, Adam), about 40 per example
# and unit (the activations' means, variances, samples and their gradients: lbbnn 100-100 on
# toy-hetero with 100,000 points, 200 steps of 500, took 6.8 ms a step where its weights' share is
# 1.5 ms), and PyTorch's dispatch per layer, which differs by family (16-16 nets on two-moons, 300
# steps of 60 epochs, against 200-200 nets' 50 steps of 10 epochs, in two runs: lbbnn 0.4-1.3 ms per
# layer and step, bnn 0.1-0.4, horseshoe 1.5-1.8, whose prior adds per-unit scales).
MATMULS_PER_STEP = 6
ELEMENTWISE_PASSES_PER_STEP = 30
STEP_PASSES_PER_ACTIVATION = 40
DISPATCH_PASSES_PER_LAYER_STEP = {"lbbnn": 0.9e6, "bnn": 0.4e6, "horseshoe": 1.8e6}
# Per epoch: the KL of each layer and the training snapshot (a histogram of the family's statistic):
# 120-190 passes over the weights (1 million weights, 2 epochs with and without snapshots) and
# about 0.5 ms per layer (lbbnn 64-64 on toy-sine-gaps: 300 epochs of one step each, 3.2-4.1 s).
EPOCH_PASSES_PER_WEIGHT = 200
EPOCH_PASSES_PER_LAYER = 0.4e6
# After the loop, the final evaluations (5 modes, 22 draws), the summaries (R = 10 and the stored
# sweep's masked copies) and the saved state, per weight by family: timed alone at 1 million weights
# (1000-1000 on two-moons, final_metrics + final_summaries) lbbnn 2,800, bnn 2,550, horseshoe 3,300
# passes. The whole trainings agree: 1000-1000 for 2 epochs took 6.5, 5.5 and 6.7 s of CPU, 3000-3000
# (9 million weights) for 1 epoch 52, 40 and 51 s, most of it this work, slower per weight there
# (the cache term below). The old single constant (4,600, fitted at 9 million weights on the
# dearest family) overestimated the 1000-1000 trainings 1.6 x. A family not measured is costed as
# the dearest.
PASSES_AFTER_TRAINING = {"lbbnn": 2800, "bnn": 2300, "horseshoe": 3000}
# Passes over weight-sized arrays slow down once those no longer fit the processor's cache (32 MiB
# of L3 on the benchmark machine; the probe's vector, 4 MB, fits): the after-loop work cost 1.2-1.7 x
# as much per weight at 9 million weights (3000-3000 nets, 36 MB per float32 copy) as at 1 million
# (4 MB). The per-weight passes of a training are scaled by 1 + this x (weights x 4 bytes / the
# cache, at most 1): 1.05 at 1 million weights, 1.4 from 8.4 million.
CACHE_BYTES = 32 * MB
BEYOND_CACHE_SLOWDOWN = 0.5
# Building a model draws its initial values: 4.4-5.5 passes per float of the family's state (lbbnn,
# 5 floats per weight: 1.08 s for 36 million weights; horseshoe, 3 floats: 0.29 s for 16 million; the
# single 25 passes per weight made horseshoe's 2 x its measured time).
BUILD_PASSES_PER_STATE_FLOAT = 6
# The stored sweep predicts the test set at this many thresholds.
SWEEP_THRESHOLDS = 30


def _by_family(table: Mapping[str, float], family: str) -> float:
    """A family's measured constant; the dearest measured one for a family not measured."""
    return table.get(family, max(table.values()))


def _beyond_cache(floats: int) -> float:
    """How much slower a pass over arrays of `floats` float32 values is than the probe's in-cache pass."""
    return 1.0 + BEYOND_CACHE_SLOWDOWN * min(1.0, floats * BYTES_PER_FLOAT / CACHE_BYTES)


def _widest(shape: DataShape, layers: Sequence[LayerCount]) -> int:
    """The most values one input holds at once in a forward pass (a layer's outputs at every position)."""
    return max(int(shape.in_features), *(layer.fan_out * layer.positions for layer in layers))


def _train_epochs(config: Any, n_train: int) -> int:
    return int(config.train.resolved(max(1, n_train)).total_epochs())


def model_build_cost(config: Any, shape: DataShape, speed: Speed | None = None) -> Cost:
    """Building the model: its state, and its initial draws (one weight-sized temporary)."""
    speed = speed or server_speed()
    layers = model_layers(config, layer_widths(config, shape))
    parameters, buffers = model_state(config, layers)
    weights = sum(layer.weights for layer in layers)
    return Cost(
        int((parameters + buffers + weights) * BYTES_PER_FLOAT),
        BUILD_PASSES_PER_STATE_FLOAT * (parameters + buffers) / speed.elements_per_second,
        weights=weights,
    )


def dataset_cost(
    name: str, params: Mapping[str, Any] | None = None, shape: DataShape | None = None, speed: Speed | None = None
) -> Cost:
    """Generating (or reading) a dataset: its arrays and the generator's temporaries."""
    shape = shape or dataset_shape(name, params)
    points = (shape.n_train or 0) + (shape.n_test or 0) + shape.n_grid
    values = points * (shape.in_features + 1)
    speed = speed or server_speed()
    passes = GENERATOR_PASSES_PER_POINT.get(shape.name, 420) * (points + shape.n_pool)
    return Cost(
        int(values * DATASET_BYTES_PER_VALUE + shape.n_pool * POOL_BYTES_PER_POINT), passes / speed.elements_per_second
    )


def _scale_head(config: Any) -> dict[str, Any] | None:
    """The config's scale head table (TrainConfig.scale_head), None without one."""
    return getattr(getattr(config, "train", None), "scale_head", None)


def training_cost(
    config: Any, shape: DataShape, speed: Speed | None = None, *, first_stage_stored: bool = False
) -> Cost:
    """A training in the training process: model, optimiser, activations, data, and what follows it.

    A scale head (train.scale_head) trains in two stages, one after the other in that process: its
    homoscedastic first stage (config.mean_stage(), a run of its own, trained whole with its final
    evaluations and stored sweep) unless `first_stage_stored`, then the head's E epochs on the loaded first
    stage, each epoch costed as one of the whole network (its forward pass is; the frozen mean path's
    backward is less), with the head's own evaluations. Memory is the larger stage's: the first stage's
    model stays loaded beside the head's training."""
    speed = speed or server_speed()
    head = _scale_head(config)
    if head is None:
        return _one_training_cost(config, shape, speed, None)
    first = config.mean_stage()
    loaded = model_build_cost(first, shape, speed).bytes  # the first stage's model beside the head's training
    second = _one_training_cost(config, shape, speed, int(head["epochs"]))
    second = Cost(second.bytes + loaded, second.seconds, weights=second.weights, epochs=second.epochs)
    if first_stage_stored:
        return second
    whole = _one_training_cost(first, shape, speed, None)
    return Cost(
        max(whole.bytes, second.bytes),
        whole.seconds + second.seconds,
        weights=max(whole.weights, second.weights),
        epochs=whole.epochs + second.epochs,
    )


def _one_training_cost(config: Any, shape: DataShape, speed: Speed, epochs: int | None) -> Cost:
    """One training of `config` with `epochs` epochs (None: every epoch of its phases)."""
    widths = layer_widths(config, shape)
    built = model_layers(config, widths)  # conv blocks and dense layers
    weights = sum(layer.weights for layer in built)
    parameters, buffers = model_state(config, built)
    flow_floats, flow_products = flow_activity(config, built)
    n_train = int(shape.n_train or 0)
    n_test = int(shape.n_test or 0)
    batch = min(int(config.train.batch_size), max(1, n_train))
    mc = int(getattr(config.train, "mc_samples", 1))
    # per example: the inputs, then every layer's outputs (a conv block's at every position, and its
    # pooled map), and what lbbnn-flow's flows keep
    units = int(shape.in_features) + sum(layer.units for layer in built)
    per_weight = max(
        TRAINING_FLOATS_PER_WEIGHT,
        math.ceil((4 * parameters + buffers) / max(1, weights)) + TRAINING_FLOATS_BEYOND_STATE,
    )
    floats = per_weight * weights + (ACTIVATION_FLOATS_PER_UNIT * units + flow_floats) * batch * mc
    data = (
        dataset_cost(shape.name, shape=shape, speed=speed)
        if shape.generated
        else Cost(int((n_train + n_test) * (shape.in_features + 1) * BYTES_PER_FLOAT * 2), 0.0)
    )
    # The stored sweep predicts the test set in chunks (core.predict.engine bounds one chunk).
    sweep_bytes = min(256 * MB, n_test * _widest(shape, built) * BYTES_PER_FLOAT * 2)
    memory = int(floats * BYTES_PER_FLOAT + data.bytes + sweep_bytes + TRAINING_FIXED_BYTES)

    epochs = (_train_epochs(config, n_train) if epochs is None else int(epochs)) if n_train else 0
    steps = epochs * math.ceil(n_train / batch) if n_train else 0
    layers = len(built)
    family = str(config.family)
    per_pass = weights * _beyond_cache(weights) / speed.elements_per_second  # one pass over the weights
    uses = sum(layer.weights * layer.positions for layer in built) + flow_products  # multiply-adds per example
    products = 2 * uses * batch * mc * MATMULS_PER_STEP / speed.matmul_flops
    dispatch = _by_family(DISPATCH_PASSES_PER_LAYER_STEP, family) * layers / speed.elements_per_second
    activations = STEP_PASSES_PER_ACTIVATION * batch * mc * (units + flow_floats) / speed.elements_per_second
    step = products + ELEMENTWISE_PASSES_PER_STEP * per_pass + activations + dispatch
    epoch = EPOCH_PASSES_PER_WEIGHT * per_pass + EPOCH_PASSES_PER_LAYER * layers / speed.elements_per_second
    after = (
        _by_family(PASSES_AFTER_TRAINING, family) * per_pass + SWEEP_THRESHOLDS * 2 * uses * n_test / speed.matmul_flops
    )
    seconds = TRAINING_FIXED_PASSES / speed.elements_per_second + steps * step + epochs * epoch + after + data.seconds
    return Cost(memory, seconds, weights=weights, epochs=epochs)


def prediction_cost(config: Any, shape: DataShape, n_inputs: int, samples: int, speed: Speed | None = None) -> Cost:
    """Predicting `n_inputs` inputs with R = `samples` draws, and the page's metrics of it."""
    speed = speed or server_speed()
    built = model_layers(config, layer_widths(config, shape))
    weights = sum(layer.weights for layer in built)
    uses = sum(layer.weights * layer.positions for layer in built)  # multiply-adds per input and draw
    widest = _widest(shape, built)
    units = int(shape.in_features) + sum(layer.units for layer in built)
    samples, n_inputs = max(1, int(samples)), max(0, int(n_inputs))
    values = samples * n_inputs * shape.outputs
    # Each draw runs its forward pass alone (core.predict.engine): one draw's activations, at most the
    # engine's chunk budget; the weights of a chunk of draws are drawn together.
    activations = min(256 * MB, n_inputs * widest * BYTES_PER_FLOAT)
    drawn = min(samples, max(1, 256 * MB // max(1, n_inputs * widest * BYTES_PER_FLOAT * 2))) * weights
    task = "regression" if str(getattr(shape.task, "value", shape.task)) == "regression" else "classification"
    memory = int(
        values * PREDICTION_BYTES_PER_VALUE[task] + activations + drawn * BYTES_PER_FLOAT * 4 + PREDICTION_FIXED_BYTES
    )
    seconds = (
        samples
        * (
            2 * uses * n_inputs / speed.matmul_flops
            + 10 * weights / speed.elements_per_second
            + n_inputs * units * PREDICTION_PASSES_PER_UNIT / speed.elements_per_second
        )
        + (values * PREDICTION_PASSES_PER_VALUE[task] * _beyond_cache(values) + n_inputs * PREDICTION_PASSES_PER_INPUT)
        / speed.elements_per_second
    )
    return Cost(memory, seconds, weights=weights)


def estimate_seconds(
    config: Any,
    shape: DataShape | None = None,
    speed: Speed | None = None,
    loaded: bool = True,
    *,
    first_stage_stored: bool = False,
) -> float:
    """Seconds a training of `config` is expected to take on this machine now (its measured speed,
    times the current load when `loaded`): what a queue shows as the time ahead of a run. A scale head's
    first stage counts whole unless `first_stage_stored` (training_cost)."""
    shape = shape or dataset_shape(config.dataset, config.dataset_params)
    cost = training_cost(config, shape, speed, first_stage_stored=first_stage_stored)
    return cost.wall_seconds() if loaded else cost.seconds


def remaining_seconds(
    epoch_seconds: Sequence[float],
    total_epochs: int,
    estimated_seconds: float | None = None,
    elapsed: float = 0.0,
    recent: int = 5,
) -> float | None:
    """Seconds a running training has left. Before its first epoch: the estimate less the time
    spent (None without an estimate). After: the measured seconds per epoch (the mean of the last
    `recent` epochs, so a slowdown from new load shows within a few epochs) x the epochs left."""
    done = len(epoch_seconds)
    left = max(0, int(total_epochs) - done)
    if done == 0:
        return None if estimated_seconds is None else max(0.0, float(estimated_seconds) - float(elapsed))
    window = [float(s) for s in epoch_seconds[-max(1, int(recent)) :]]
    return sum(window) / len(window) * left
