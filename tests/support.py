"""Helpers shared by several test modules (import them as `from tests.support import ...`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch


def running_in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def unavailable(reason: str) -> None:
    """Skip a test whose data or dependency is missing; under CI=true fail it instead."""
    if running_in_ci():
        pytest.fail(f"{reason} (CI=true: a missing data folder or dependency is a failure, not a skip)")
    pytest.skip(reason)


def require_module(name: str, install: str):
    """The module `name` imported, or a skip naming `install` (a failure under CI=true, as for data):
    the suite's importorskip, which the no-importorskip rule can see (tests/test_suite_rules.py)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        unavailable(f"{name} is not installed: {install}")


def perturb(module: torch.nn.Module, seed: int, scale: float = 0.1) -> None:
    """Move every parameter of a model or layer away from its initial value (so a round trip or an
    equality cannot pass by accident), then refresh its closed-form auxiliaries."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    module.update_auxiliaries()


def full_data_dir() -> Path:
    """The folder with the full datasets ($BNN_DATA_DIR), or a skip (a failure under CI=true)."""
    value = os.environ.get("BNN_DATA_DIR", "").strip()
    if not value:
        unavailable("BNN_DATA_DIR not set: full datasets absent")
    path = Path(value)
    if not path.is_dir():
        unavailable(f"BNN_DATA_DIR={value} is not a directory: full datasets absent")
    return path


# (family, options): every family with its defaults plus the option variants
# that change the code path of the parameters, KL or estimator.
VARIANTS = [
    ("lbbnn", {}),
    ("lbbnn", {"slab": "student-t", "inclusion_prior": "beta-binomial", "estimator": "relaxed-bernoulli"}),
    ("lbbnn-lfmvn", {}),
    ("lbbnn-lfmvn", {"rank": 1, "estimator": "relaxed-bernoulli", "slab": "student-t"}),
    ("lbbnn-flow", {}),
    ("bnn", {}),
    ("bnn", {"estimator": "weight-sampling"}),
    ("bnn-mixture", {}),
    ("variational-dense", {}),
    ("concrete-dropout", {}),
    ("horseshoe", {}),
    ("horseshoe", {"prior": "horseshoe"}),
    ("horseshoe", {"variational_family": "structured"}),
    ("sparse-vd", {}),
    ("sparse-vd", {"estimator": "weight-sampling"}),
    ("fnn", {}),
    ("laplace", {}),
    ("laplace", {"prior_precision": 4.0, "tune_prior": False}),
    ("ensemble", {}),
    ("ensemble", {"members": 2, "prior_precision": 3.0}),
]
VARIANT_IDS = [f"{family}-{'-'.join(str(v) for v in options.values()) or 'default'}" for family, options in VARIANTS]


def subnormal() -> torch.Tensor:
    """A float32 subnormal (about 1e-40), made from its bits: converting 1e-40 from a double
    would itself be flushed to 0 in a thread that flushes."""
    return torch.tensor([71362], dtype=torch.int32).view(torch.float32)


def write_fake_reference(cache_dir, dataset, hidden=(8,)) -> str:
    """A stored reference with prior draws of the weights (what the store and the page read)."""
    from core.reference import ReferenceConfig, ReferencePosterior, ReferenceStore, reference_id
    from core.reference.posterior import layer_shapes

    config = ReferenceConfig(dataset=dataset.name, hidden=hidden, samples=50, chains=1)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(50, *shape)) for shape in layer_shapes(config, dataset.in_features)]
    posterior = ReferencePosterior(
        config=config,
        weights=weights,
        log_noise=np.full(50, np.log(0.1)),
        diagnostics={
            "function_rhat_max": 1.01,
            "function_ess_min": 40.0,
            "warnings": ["few effective samples: ESS 40 < 100"],
        },
        dataset_fingerprint=dataset.fingerprint,
        reference_id=reference_id(config, dataset.fingerprint),
    )
    ReferenceStore(cache_dir).write(posterior)
    return posterior.reference_id


def clear_dashboard_caches() -> None:
    """Empty the dashboard's process-wide caches (Streamlit's, the run list, the draws), so no test
    sees another test's store or entries."""
    import streamlit as st

    from dashboard import backend, cache

    st.cache_data.clear()
    st.cache_resource.clear()
    cache.cached_run_list.clear()
    backend.clear_draws()
