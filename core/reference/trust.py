"""When a NUTS reference may be called the truth: R-hat <= 1.01 and a minimum effective sample size
>= 400 (Vehtari et al. 2021's recommendations, stricter than the warnings core.reference.posterior
attaches to any run); otherwise it is drawn with a warning and never quoted as truth."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.predict.metrics.calibration import gap_ratio

TRUST_RHAT, TRUST_ESS = 1.01, 400.0


def reference_warning(diagnostics: dict[str, Any]) -> str | None:
    """Why a NUTS reference is not to be trusted (R-hat > TRUST_RHAT or ESS < TRUST_ESS, or none
    recorded), or None when it passes both."""
    rhat = diagnostics.get("function_rhat_max")
    ess = diagnostics.get("function_ess_min")
    noise_rhat, noise_ess = diagnostics.get("noise_rhat"), diagnostics.get("noise_ess")
    rhat = max([v for v in (rhat, noise_rhat) if v is not None], default=None)
    ess = min([v for v in (ess, noise_ess) if v is not None], default=None)
    failed = []
    if rhat is None or not math.isfinite(rhat) or rhat > TRUST_RHAT:
        failed.append(f"R-hat {'?' if rhat is None else f'{rhat:.3f}'} > {TRUST_RHAT}")
    if ess is None or not math.isfinite(ess) or ess < TRUST_ESS:
        failed.append(f"ESS {'?' if ess is None else f'{ess:.0f}'} < {TRUST_ESS:.0f}")
    return f"not converged ({', '.join(failed)}): not the truth" if failed else None


def architecture(hidden: Sequence[int], in_features: int = 1) -> str:
    return "-".join(str(w) for w in (in_features, *hidden, 1))


def reference_function_band(run: Any, x: np.ndarray) -> dict[str, Any] | None:
    """The cached NUTS reference of the run's data (as reference_bands finds it): mean and sd of its
    function draws on x (original units), its gap ratio, architecture and trust; None when none."""
    from core.reference.bands import cached_reference

    found = cached_reference(run)
    if found is None:
        return None
    ref_id, posterior = found
    dataset = run.dataset()
    means, _ = posterior.predictive(x)
    sd = means.std(axis=0)
    diagnostics = dict(posterior.diagnostics)
    return {
        "mean": means.mean(axis=0),
        "sd": sd,
        "gap_ratio": gap_ratio(x, dataset.x_train, sd),
        "reference_id": ref_id,
        "hidden": list(posterior.config.hidden),
        "architecture": architecture(posterior.config.hidden, dataset.in_features),
        "draws": posterior.n_samples,
        "diagnostics": diagnostics,
        "warning": reference_warning(diagnostics),
    }
