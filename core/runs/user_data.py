"""A user's own table as the app handles it (the Train page's upload), and what a run's data is.

The upload is the command line's `train --data FILE` with the file's bytes instead of its path: the
same size limit ($BNN_MAX_TABLE_MB, checked on the upload's size before its bytes are read), the same
parser, the same checks and messages, and the same content-addressed store (core.data.user_table).

Compare puts only runs of one data identity on a page: two targets of one table, or two tables, are
different problems, and their metrics are not comparable.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from core.data import user_table

TASKS = user_table.TASKS
MISSING_CHOICES = user_table.MISSING_CHOICES
store_table = user_table.store_table  # the command line's store: checked first, nothing half-stored
is_table_name = user_table.is_table_name


# A table's default length of training: core.train.default_epochs (about DEFAULT_STEPS steps, at least
# 5 epochs) but at most this many rows through the network (rows x epochs), at least one epoch. A
# 40,000-row training split then trains 3 epochs (1,200 steps of 100) instead of 8, the step
# budget's floor (benchmarks/results/user_table_time.md); the epochs box overrides it. Only runs on
# user tables (all made after the upload existed) get it: no other run's id changes.
TABLE_ROW_PASSES = 100_000


def default_epochs(n_train: int, batch_size: int) -> int:
    """The default epochs of a run on a user table of n_train training rows."""
    from core.train import default_epochs as step_default

    return max(1, min(step_default(n_train, batch_size), math.ceil(TABLE_ROW_PASSES / max(1, int(n_train)))))


def check_upload_size(size: int, name: str) -> None:
    """The command line's size refusal, on an upload's announced size (its bytes not read yet)."""
    user_table.check_size(int(size), name)


def max_upload_mb() -> float:
    return user_table.max_bytes() / 1_000_000


def table_header(data: bytes, name: str) -> dict[str, Any]:
    """The uploaded table's columns, rows and content hash (InputError: the command line's message)."""
    table, sha = user_table.parsed_table(data, name)
    return {"columns": list(table.names), "rows": table.n_rows, "sha256": sha, "name": user_table.table_name(sha)}


def inferred_task(data: bytes, name: str, target: str) -> str:
    """The task the command line infers for `target` of this table (classification or regression)."""
    table, _ = user_table.parsed_table(data, name)
    return user_table.infer_task(table.columns[table.names.index(target)])


def data_identity(dataset: str, params: Mapping[str, Any] | None) -> tuple[str, str]:
    """What a run's data is, as (key, label): the dataset with its options (the key is the dataset's
    name when it has none). Two targets of one table, or two tables, are different data; a table is
    labelled by its file name and target."""
    params = dict(params or {})
    key = json.dumps([dataset, params], sort_keys=True, default=str) if params else str(dataset)
    if user_table.is_table_name(dataset) and params.get("target") is not None:
        files = {stored.name: stored.original_name for stored in user_table.list_tables()}
        task = f", {params['task']}" if params.get("task") else ""
        return key, f"{files.get(dataset, dataset)}: target {params['target']}{task} ({dataset})"
    shown = ", ".join(f"{name}={value}" for name, value in sorted(params.items()))
    return key, f"{dataset} ({shown})" if shown else dataset


def table_info(name: str, params: Mapping[str, Any], original_name: str) -> dict[str, Any]:
    """What the Train form shows of a stored table with its options (as dataset_table's rows)."""
    info = user_table.table_info(name, params).to_dict()
    info["detail"] = f"your table {original_name}"
    return info


def table_defaults(name: str, params: Mapping[str, Any], batch_size: int) -> dict[str, Any]:
    """The hidden widths, epochs and KL weight a run on the table gets when the form leaves them to core."""
    from core.runs.config import RunConfig

    config = RunConfig.from_dict(
        {"dataset": name, "dataset_params": dict(params), "train": {"batch_size": int(batch_size)}},
    )
    return {"hidden": config.hidden, "epochs": config.train.epochs, "kl_weight": config.train.kl_weight}
