"""The dashboard's caching machinery, apart from what is cached (dashboard/cache.py):

- `per_run`: st.cache_data for a function of a run id, keyed by the run's generation too, so that
  forgetting a run (`next_generation`) drops that run's entries and no other;
- `prediction_key`: a prediction's arguments in one canonical form, so settings that compute the
  same numbers share one entry;
- `once_at_a_time`: concurrent callers of one missing entry wait for the first instead of all
  computing it;
- `PREDICTIONS`: the pages' prediction arrays, bounded by bytes ($BNN_PREDICTION_CACHE_MB).
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

import streamlit as st

from dashboard import backend
from dashboard.bounded_cache import BoundedCache


def _prediction_cache_bytes() -> int:
    from dashboard.settings import prediction_cache_bytes

    return prediction_cache_bytes()


def spinning(text: Any, compute: Callable, *args: Any, **kwargs: Any) -> Any:
    """compute(*args, **kwargs) under st.spinner(text) when `text` is a message."""
    if isinstance(text, str) and text:
        with st.spinner(text):
            return compute(*args, **kwargs)
    return compute(*args, **kwargs)


# The pages' prediction arrays, bounded by bytes (st.cache_data bounds entries by count only).
PREDICTIONS = BoundedCache(_prediction_cache_bytes(), ttl=3600)
# Derived entries live at most this long unused-or-not (seconds): a class moves on.
DERIVED_TTL = 3600

_generation_lock = threading.Lock()
_generations: dict[str, int] = {}  # run id -> times it was forgotten


def generation(run_id: str) -> int:
    with _generation_lock:
        return _generations.get(run_id, 0)


def next_generation(run_id: str) -> None:
    """Make every per_run entry of `run_id` a miss from now on (the old entries age out)."""
    with _generation_lock:
        _generations[run_id] = _generations.get(run_id, 0) + 1


# Streamlit's caches do not make concurrent callers of one missing entry wait for each
# other: 30 sessions opening a page at once would all compute (or load) the same thing.
# One lock per entry being computed lets the first compute it and the rest read it.
_inflight_lock = threading.Lock()
_inflight: dict[tuple, threading.Lock] = {}


def once_at_a_time(key: tuple, compute: Callable[[], Any]) -> Any:
    with _inflight_lock:
        lock = _inflight.setdefault(key, threading.Lock())
    try:
        with lock:
            return compute()
    finally:
        with _inflight_lock:
            if _inflight.get(key) is lock and not lock.locked():
                del _inflight[key]


def prediction_key(
    mode: str, samples: int, threshold: float | None, seed: int, weights: str | None = None
) -> dict[str, Any]:
    """The arguments of a prediction in one canonical form, so that settings which compute the same
    numbers share one cache entry (and one computation):

    - prune with the kept weights' means is mpm-mean at that threshold, and prune with sampled
      weights is mpm at that threshold (core.predict runs the same network and the same draws);
    - a mode that draws nothing (mean, mpm-mean) ignores R and the seed: R = 1, seed 0;
    - a mode without a threshold (bma, mean) has threshold None.
    """
    same = backend.same_numbers_mode(mode, weights)
    draws = backend.mode_draws_samples(same)
    return {
        "mode": same,
        "samples": int(samples) if draws else 1,
        "seed": int(seed) if draws else 0,
        "threshold": float(threshold) if backend.uses_threshold(same) and threshold is not None else None,
        "weights": None,
    }


def per_run(canonical_prediction: bool = False, bounded: BoundedCache | None = None, **cache_options: Any) -> Callable:
    """st.cache_data for a function whose first argument is a run id, keyed by the run's
    generation too, so that forget_run(run_id) drops that run's entries and no other.

    canonical_prediction: the function takes (mode, samples, threshold, seed, weights) among its
    arguments; they are put in `prediction_key`'s form before the lookup.
    bounded: keep the values in this byte-bounded cache instead of st.cache_data (large arrays)."""

    def decorate(compute: Callable) -> Callable:
        def entry(run_id: str, run_generation: int, *args: Any, **kwargs: Any) -> Any:
            return compute(run_id, *args, **kwargs)

        # st.cache_data tells functions apart by module and qualified name (the source is the same here).
        entry.__name__ = compute.__name__
        entry.__qualname__ = f"{compute.__qualname__}.per_run"
        entry.__module__ = compute.__module__
        cached = st.cache_data(**cache_options)(entry)
        signature = inspect.signature(compute)

        def lookup(run_id: str, *args: Any, **kwargs: Any) -> Any:
            if canonical_prediction:
                bound = signature.bind(run_id, *args, **kwargs)
                bound.apply_defaults()
                values = bound.arguments
                values.update(
                    prediction_key(
                        values["mode"], values["samples"], values["threshold"], values["seed"], values.get("weights")
                    )
                )
                args, kwargs = tuple(values.values())[1:], {}
            run_generation = generation(run_id)
            key = (entry.__qualname__, run_id, run_generation, args, tuple(sorted(kwargs.items())))
            if bounded is not None:
                return once_at_a_time(
                    key,
                    lambda: bounded.get_or_compute(
                        key, lambda: spinning(cache_options.get("show_spinner"), compute, run_id, *args, **kwargs)
                    ),
                )
            return once_at_a_time(key, lambda: cached(run_id, run_generation, *args, **kwargs))

        lookup.__name__, lookup.__doc__, lookup.__wrapped__ = compute.__name__, compute.__doc__, compute
        lookup.clear = cached.clear if bounded is None else bounded.clear
        return lookup

    return decorate
