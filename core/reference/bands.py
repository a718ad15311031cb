"""The cached NUTS reference's regression bands on given inputs, beside the collapsed predictive's
(core.predict.bands)."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.predict.bands import BAND_LEVELS
from core.reference.store import ReferenceStore


def cached_reference(run: Any) -> tuple[str, Any] | None:
    """(id, posterior) of the cached NUTS reference on the run's exact data (same widths preferred), or
    None when no reference is cached for this dataset."""
    store = ReferenceStore()
    ref_id = store.find_for_dataset(run.dataset().fingerprint, hidden=tuple(run.config.hidden))
    return None if ref_id is None else (ref_id, store.read(ref_id))


def reference_bands(run: Any, x: np.ndarray) -> dict[str, Any] | None:
    """The cached NUTS reference on the run's exact data (same widths preferred): its mean and 5% / 95%
    quantiles on x, id and diagnostics; None when no reference is cached for this dataset."""
    found = cached_reference(run)
    if found is None:
        return None
    ref_id, posterior = found
    bands = posterior.bands(x, BAND_LEVELS)
    return {
        "mean": bands["mean"],
        "low": bands[f"q{BAND_LEVELS[0]:g}"],
        "high": bands[f"q{BAND_LEVELS[1]:g}"],
        "reference_id": ref_id,
        "hidden": list(posterior.config.hidden),
        "draws": posterior.n_samples,
        "diagnostics": dict(posterior.diagnostics),
    }
