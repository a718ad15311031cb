"""Telling runs apart in a list: the config fields in which runs of one dataset, family and widths
differ, a one-line label per run, and the key shared by runs that differ only by their seed."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

# Fields every label already names, or that say nothing to a reader.
_LABEL_SKIP = ("dataset", "method", "hidden")


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    else:
        out[prefix] = value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "-".join(map(str, value))
    return str(value)


def config_differences(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """For runs that share dataset, method and widths: the config fields whose values differ
    among them, as 'name=value, ...' per run id ('' for a run alone in its group)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        config = row.get("config") or {}
        key = (row.get("dataset"), row.get("method"), tuple(config.get("hidden") or row.get("hidden") or ()))
        groups.setdefault(key, []).append(row)
    result: dict[str, str] = {}
    for members in groups.values():
        flat = []
        for row in members:
            fields: dict[str, Any] = {}
            _flatten("", {k: v for k, v in (row.get("config") or {}).items() if k not in _LABEL_SKIP}, fields)
            flat.append(fields)
        keys = sorted(set().union(*flat)) if flat else []
        differing = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
        for row, fields in zip(members, flat):
            parts = [f"{k.split('.')[-1]}={_short(fields.get(k))}" for k in differing]
            result[row["run_id"]] = ", ".join(parts)
    return result


def run_labels(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """'lbbnn [100-100] on mnist-small, epochs=5, prior_inclusion=0.1 (ab12cd34)': what tells runs apart."""
    differences = config_differences(rows)
    labels = {}
    for row in rows:
        hidden = "-".join(str(h) for h in (row.get("hidden") or (row.get("config") or {}).get("hidden") or []))
        extra = differences.get(row["run_id"], "")
        labels[row["run_id"]] = (
            f"{row.get('method')} [{hidden}] on {row.get('dataset')}"
            f"{', ' + extra if extra else ''} ({row['run_id'][:8]})"
        )
    return labels


def setting_key(config_fields: Mapping[str, Any] | None) -> str:
    """Runs that differ only by their training seed share this key (medians over seeds)."""
    fields = {k: v for k, v in (config_fields or {}).items() if k not in ("seed", "device")}
    return json.dumps(fields, sort_keys=True, default=str)
