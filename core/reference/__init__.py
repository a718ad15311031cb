"""Reference posteriors for small regression nets by NUTS (Pyro, optional: requirements-reference.txt).

from core.reference import default_config, compute_reference
posterior, from_cache = compute_reference(default_config("toy-cubic"))
posterior.bands(dataset.x_grid)        # mean, q0.05, q0.95 in original units
"""

from core.reference.posterior import (
    REQUIREMENTS_FILE,
    PyroMissingError,
    ReferenceConfig,
    ReferencePosterior,
    default_config,
    diagnostic_warnings,
    require_pyro,
    run_nuts,
)
from core.reference.store import ReferenceStore, ReferenceStoreError, compute_reference, load_reference, reference_id

__all__ = [
    "REQUIREMENTS_FILE",
    "PyroMissingError",
    "ReferenceConfig",
    "ReferencePosterior",
    "ReferenceStore",
    "ReferenceStoreError",
    "compute_reference",
    "default_config",
    "diagnostic_warnings",
    "load_reference",
    "reference_id",
    "require_pyro",
    "run_nuts",
]
