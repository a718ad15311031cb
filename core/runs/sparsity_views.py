"""A run's active-path densities, the input columns it still reads and one input's explanation as
plain values (the app's panels)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def active_path_densities(run: Any, threshold: float | None = None) -> dict[str, Any]:
    """The density at `threshold` raw and on active paths (the kept weights on some input-to-output
    path, Run.active_paths), overall and per layer."""
    from core.predict.structure import layer_densities, overall_density

    masks, active = run.masks(threshold), run.active_paths(threshold)
    return {
        "density": overall_density(masks),
        "active_density": overall_density(active),
        "layer_density": layer_densities(masks),
        "active_layer_density": layer_densities(active),
    }


def inputs_read(masks: Sequence[Any], n_inputs: int) -> np.ndarray:
    """Per input unit, whether some weight of `masks` (per layer (out, in + 1)) leaves it: the first
    layer's columns and, in an input-skip network, the skip columns of the later layers (they follow
    the previous layer's units, core.predict.structure)."""
    from core.predict.structure import skip_layers

    arrays = [np.asarray(mask, dtype=bool) for mask in masks]
    read = np.zeros(n_inputs, dtype=bool)
    for index, (mask, skip) in enumerate(zip(arrays, skip_layers([m.shape for m in arrays]))):
        if index == 0:
            read |= mask[:, :n_inputs].any(axis=0)
        elif skip:
            read |= mask[:, -1 - n_inputs : -1].any(axis=0)
    return read


def source_column(feature: str, columns: Sequence[str] | None = None) -> str:
    """The column an input unit comes from: itself, or `column` for a one-hot unit `column=level`.
    With the table's header the longest matching column name wins (a name may hold '='); without it
    the name is cut at its first '='."""
    if columns:
        matches = [c for c in columns if feature == c or feature.startswith(f"{c}=")]
        if matches:
            return max(matches, key=len)
    return feature.split("=", 1)[0]


def group_columns(
    feature_names: Sequence[str],
    read: np.ndarray,
    kept: np.ndarray,
    columns: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Per source column, in the inputs' order: its units, how many are read on an active path
    (`read`) and how many have a kept weight at all (`kept`), and the one-hot levels read."""
    groups: dict[str, dict[str, Any]] = {}
    for index, feature in enumerate(feature_names):
        column = source_column(feature, columns)
        group = groups.setdefault(
            column, {"column": column, "units": 0, "read_units": 0, "kept_units": 0, "levels_read": []}
        )
        group["units"] += 1
        group["read_units"] += int(read[index])
        group["kept_units"] += int(kept[index])
        if read[index] and feature != column:
            group["levels_read"].append(feature[len(column) + 1 :])
    for group in groups.values():
        group["read"] = group["read_units"] > 0
    return list(groups.values())


def input_columns(run: Any, threshold: float | None = None) -> list[dict[str, Any]] | None:
    """The input columns of a tabular run (a user table, a UCI set) by name, each with whether the
    network pruned at `threshold` still reads it: some kept weight on an active path
    (Run.active_paths) leaves one of its input units. Inputs without names are numbered; None for
    image runs."""
    from core.data import user_table

    dataset = run.dataset()
    names = getattr(dataset, "feature_names", None)
    if not names:  # unnamed flat inputs (the UCI sets' files have no header): numbered from 1
        shape = tuple(getattr(dataset, "input_shape", None) or ())
        if len(shape) != 1:
            return None
        names = tuple(f"input {index + 1}" for index in range(shape[0]))
    columns = user_table.stored_columns(run.config.dataset) if user_table.is_table_name(run.config.dataset) else None
    read = inputs_read(run.active_paths(threshold), len(names))
    kept = inputs_read(run.masks(threshold), len(names))
    return group_columns(names, read, kept, columns)


def explainable(run: Any) -> bool:
    """Whether `run.explain` can explain this run's family (core.predict.explain.explainable)."""
    from core.predict.explain import explainable as model_explainable

    return model_explainable(run.model)


def explanation(
    run: Any,
    x: Any,
    threshold: float | None = None,
    samples: int = 100,
    seed: int = 0,
    output: int | None = None,
) -> dict[str, Any]:
    """One input's local explanation (Run.explain) as plain values: per feature the coefficient and
    contribution with their median and 95 % interval over posterior draws, the output explained,
    its value and the local intercept."""
    return run.explain(x, threshold=threshold, samples=samples, seed=seed, output=output).to_dict()
