"""A run's active-path densities and one input's explanation as plain values (the app's panels)."""

from __future__ import annotations

from typing import Any


def active_path_densities(run: Any, threshold: float | None = None) -> dict[str, Any]:
    """The density at `threshold` raw and on active paths (the kept weights on some input-to-output
    path, Run.active_paths), overall and per layer."""
    from core.predict.structure import layer_densities, overall_density

    masks, active = run.masks(threshold), run.active_paths(threshold)
    return {"density": overall_density(masks), "active_density": overall_density(active),
            "layer_density": layer_densities(masks), "active_layer_density": layer_densities(active)}


def explainable(run: Any) -> bool:
    """Whether `run.explain` can explain this run's family (core.predict.explain.explainable)."""
    from core.predict.explain import explainable as model_explainable

    return model_explainable(run.model)


def explanation(run: Any, x: Any, threshold: float | None = None, samples: int = 100, seed: int = 0,
                output: int | None = None) -> dict[str, Any]:
    """One input's local explanation (Run.explain) as plain values: per feature the coefficient and
    contribution with their median and 95 % interval over posterior draws, the output explained,
    its value and the local intercept."""
    return run.explain(x, threshold=threshold, samples=samples, seed=seed, output=output).to_dict()
