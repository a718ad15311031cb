"""Which cached run to draw beside another: the gap lesson's mean-field / non-factorised pairs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NON_FACTORISED_FAMILY = "laplace"


def partner_run_id(rows: Sequence[dict[str, Any]], run: Any, non_factorised: bool) -> str | None:
    """A cached run of the same dataset to draw beside `run`: of the non-factorised family (or, with
    False, of a mean-field one), the same seed first, then the newest. None when there is none."""

    def wanted(row: dict[str, Any]) -> bool:
        if row.get("status", "ok") != "ok" or row.get("dataset") != run.config.dataset:
            return False
        if row.get("run_id") == getattr(run, "run_id", None):
            return False
        is_nf = row.get("method") == NON_FACTORISED_FAMILY
        return is_nf if non_factorised else (not is_nf and row.get("method") != "fnn")

    candidates = [r for r in rows if wanted(r)]
    if not candidates:
        return None
    same_seed = [r for r in candidates if (r.get("config") or {}).get("seed") == run.config.seed]
    return str((same_seed or candidates)[-1]["run_id"])


def non_factorised_config(run: Any) -> Any:
    """The `laplace` run offered beside `run`: same dataset, split and seed, the family's defaults."""
    from core.runs.config import RunConfig

    config = run.config
    return RunConfig.from_dict(
        {
            "dataset": config.dataset,
            "split": config.split,
            "dataset_params": dict(config.dataset_params or {}),
            "data_seed": config.data_seed,
            "method": NON_FACTORISED_FAMILY,
            "seed": config.seed,
        }
    )
