"""What a request costs before anything is allocated: memory (bytes) and time (seconds). The
estimate model lives in core.cost_model, the limits and refusals in core.admission; this module
re-exports both under the name every caller uses.

Every request that allocates in proportion to what a user typed (a training, a playground fit, a
generated dataset, a prediction over an input set with R draws) is costed here from its sizes
alone, and admitted or refused against the limits below (`admit_*`, raising AdmissionError with
what would fit). Nothing here builds a model or a dataset: widths, counts and a family's
per-weight state are enough.

The model (checked against measurement by benchmarks/admission_model.py, whose table is
benchmarks/results/admission_model.md) counts:

- a model's state: the family's tensors per weight and per unit (parameters and buffers, exactly
  as built: tests/test_cost.py counts a built model against `state_floats`);
- a training: the state, Adam's gradient and two moments per parameter, the weight-sized
  temporaries of one step (a family's means, variances and KL terms, kept for the backward
  pass), the activations of a minibatch, the dataset's arrays, and what the training process
  adds around the loop (snapshots, the stored sweep);
- a dataset: its arrays and the generator's temporaries;
- a prediction: R x inputs x outputs per draw (kept by the page cache, copied by the metrics),
  the chunked activations (core.predict.engine bounds one chunk) and the drawn weights.

Time is work divided by the speed of this machine, measured once per process by `measure_speed`
(a timed matrix product and an elementwise pass on one thread): `Cost.seconds` are CPU seconds of
one core, and `Cost.wall_seconds()` multiplies them by the current load per core, so a loaded
server shows longer waits. A running training's time left follows its measured epochs
(`remaining_seconds`).

Limits are registered settings (core.settings): the dashboard reads them with secrets.toml as the
fallback (`server_limits`); the command line limits only memory, to half the machine
(`command_line_limits`); the generators bound their counts of points themselves
(BNN_MAX_GENERATED_POINTS, core.data.params.point_count).
"""

# The estimate model (core.cost_model) and the limits and refusals (core.admission), under the
# name every caller uses: `from core import cost` and `from core.cost import ...` keep working.
from __future__ import annotations

from core.admission import (  # noqa: F401
    MAX_GENERATED_POINTS,
    MAX_PREDICTION_SECONDS,
    MAX_PREDICTION_VALUES,
    MAX_TRAINING_MINUTES,
    MAX_WEIGHTS,
    MEMORY_BUDGET,
    PLAYGROUND_MAX_WEIGHTS,
    AdmissionError,
    Limits,
    _fits_in_size,
    _round_widths,
    _widths_text,
    admit_dataset,
    admit_playground,
    admit_training,
    check_count,
    command_line_limits,
    largest_samples,
    max_generated_points,
    physical_memory_bytes,
    samples_message,
    server_limits,
    size_text,
    time_text,
    widths_that_fit,
)
from core.cost_model import (  # noqa: F401
    ACTIVATION_FLOATS_PER_UNIT,
    BEYOND_CACHE_SLOWDOWN,
    BUILD_PASSES_PER_STATE_FLOAT,
    BYTES_PER_FLOAT,
    CACHE_BYTES,
    COUNT_PARAMETERS,
    DATASET_BYTES_PER_VALUE,
    DISPATCH_PASSES_PER_LAYER_STEP,
    ELEMENTWISE_PASSES_PER_STEP,
    EPOCH_PASSES_PER_LAYER,
    EPOCH_PASSES_PER_WEIGHT,
    FAMILY_STATE,
    GENERATOR_PASSES_PER_POINT,
    LIKELIHOOD_FLOATS,
    MATMULS_PER_STEP,
    MB,
    PASSES_AFTER_TRAINING,
    POOL_BYTES_PER_POINT,
    PREDICTION_BYTES_PER_VALUE,
    PREDICTION_FIXED_BYTES,
    PREDICTION_PASSES_PER_INPUT,
    PREDICTION_PASSES_PER_UNIT,
    PREDICTION_PASSES_PER_VALUE,
    STEP_PASSES_PER_ACTIVATION,
    SWEEP_THRESHOLDS,
    TRAINING_FIXED_BYTES,
    TRAINING_FIXED_PASSES,
    TRAINING_FLOATS_BEYOND_STATE,
    TRAINING_FLOATS_PER_WEIGHT,
    Cost,
    DataShape,
    LayerState,
    Speed,
    _beyond_cache,
    _by_family,
    _train_epochs,
    dataset_cost,
    dataset_shape,
    estimate_seconds,
    family_layers,
    layer_widths,
    load_factor,
    measure_speed,
    model_build_cost,
    n_weights,
    prediction_cost,
    remaining_seconds,
    server_speed,
    state_floats,
    training_cost,
)
