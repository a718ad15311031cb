"""Named datasets of Vega-Lite specs, for the browser's sake.

Streamlit's browser side draws a chart anew (Vega-Lite compiled, the view built and rendered) whenever
its spec changes, and only swaps the data in place when the spec without its named datasets stays the
same. Altair names each dataset by a hash of its rows, so new numbers meant a new spec and a new chart
on every slider move.
"""

from __future__ import annotations

from typing import Any, Mapping


def stable_dataset_names(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with its named datasets renamed by the order in which the spec first uses them
    ("data-0", "data-1", ...; datasets nothing reads after them), so that two charts differing only in
    their rows have equal specs apart from the datasets. A name the spec reads but does not define stays.
    The input is not changed."""
    datasets = spec.get("datasets")
    if not isinstance(datasets, Mapping) or not datasets:
        return dict(spec)
    renamed: dict[str, str] = {}

    def collect(node: Any) -> None:
        if isinstance(node, Mapping):
            data = node.get("data")
            if isinstance(data, Mapping) and data.get("name") in datasets and data["name"] not in renamed:
                renamed[data["name"]] = f"data-{len(renamed)}"
            for key, value in node.items():
                if key != "datasets":
                    collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(spec)
    for name in datasets:  # datasets nothing reads are numbered after the others (no name can clash)
        renamed.setdefault(name, f"data-{len(renamed)}")

    def rename(node: Any) -> Any:
        if isinstance(node, Mapping):
            out = {key: rename(value) for key, value in node.items() if key != "datasets"}
            data = node.get("data")
            if isinstance(data, Mapping) and data.get("name") in renamed:
                out["data"] = {**data, "name": renamed[data["name"]]}
            return out
        if isinstance(node, list):
            return [rename(item) for item in node]
        return node

    out = rename(spec)
    out["datasets"] = {renamed[name]: rows for name, rows in datasets.items()}
    return out
