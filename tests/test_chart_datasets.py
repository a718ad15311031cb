"""Stable dataset names (charts.stable_dataset_names) and the current point as data: a chart whose rows
change keeps its spec, so Streamlit's browser side swaps the data instead of drawing a new chart."""

from __future__ import annotations

import copy
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import charts


def _views(spec, datasets=None):
    """Each view's rows in the spec's walk order, named datasets read through."""
    datasets = spec.get("datasets", {}) if datasets is None else datasets
    found = []

    def walk(node):
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict):
                undefined = ("undefined", data)
                found.append(data["values"] if "values" in data else datasets.get(data.get("name"), undefined))
            for key, value in node.items():
                if key not in ("datasets", "data"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec)
    return found


def _without_datasets(spec):
    return json.dumps({key: value for key, value in spec.items() if key != "datasets"}, sort_keys=True)


rows = st.lists(
    st.fixed_dictionaries({"x": st.floats(-1e6, 1e6, allow_subnormal=False), "y": st.integers(-5, 5)}), max_size=4
)
names = st.text("abcdef0123456789-", min_size=1, max_size=12)


@st.composite
def layered_specs(draw):
    """An Altair-like layered spec: views reading named datasets (some shared, some undefined), inline
    values, and datasets nothing reads."""
    defined = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    datasets = {name: draw(rows) for name in defined}
    unused = draw(st.lists(names.filter(lambda n: n not in datasets), max_size=2, unique=True))
    for name in unused:
        datasets[name] = draw(rows)
    layers = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["named", "inline", "undefined", "inherit"]))
        layer = {"mark": draw(st.sampled_from(["line", "point", "rule"]))}
        if kind == "named":
            layer["data"] = {"name": draw(st.sampled_from(defined))}
        elif kind == "inline":
            layer["data"] = {"values": draw(rows)}
        elif kind == "undefined":
            layer["data"] = {"name": "not-defined-here"}
        layers.append(layer)
    spec = {"layer": layers, "datasets": datasets}
    if draw(st.booleans()):
        spec["data"] = {"name": draw(st.sampled_from(defined))}
    return spec


@settings(max_examples=200, deadline=None)
@given(layered_specs())
def test_renaming_keeps_what_every_view_draws_and_leaves_the_input_alone(spec):
    kept = copy.deepcopy(spec)
    out = charts.stable_dataset_names(spec)
    assert spec == kept
    assert _views(out) == _views(spec)
    # every dataset survives (renamed or not), and the names the spec reads are data-0, data-1, ... in order
    assert sorted(map(json.dumps, out["datasets"].values())) == sorted(map(json.dumps, spec["datasets"].values()))
    read = []  # a view's own data comes before its layers'
    for view in [out, *out["layer"]]:
        name = view.get("data", {}).get("name")
        if name in out["datasets"] and name not in read:
            read.append(name)
    assert read == [f"data-{i}" for i in range(len(read))]
    assert set(out["datasets"]) == {f"data-{i}" for i in range(len(spec["datasets"]))}


@settings(max_examples=200, deadline=None)
@given(layered_specs(), st.data())
def test_two_specs_differing_in_names_and_rows_only_get_the_same_spec(spec, data):
    """Altair names a dataset by a hash of its rows: new rows, new names. Renamed, the specs agree."""
    renames = {name: f"hash-{i}-{data.draw(names)}" for i, name in enumerate(spec["datasets"])}

    def renamed(node):
        if isinstance(node, dict):
            out = {key: renamed(value) for key, value in node.items() if key != "datasets"}
            if isinstance(node.get("data"), dict) and node["data"].get("name") in renames:
                out["data"] = {"name": renames[node["data"]["name"]]}
            return out
        if isinstance(node, list):
            return [renamed(item) for item in node]
        return node

    other = renamed(spec)
    other["datasets"] = {renames[name]: data.draw(rows) for name in spec["datasets"]}
    assert _without_datasets(charts.stable_dataset_names(other)) == _without_datasets(charts.stable_dataset_names(spec))


def test_a_spec_without_datasets_is_returned_as_it_is():
    spec = {"mark": "point", "data": {"values": [{"x": 1}]}}
    assert charts.stable_dataset_names(spec) == spec


def test_a_dataset_nothing_reads_is_numbered_after_the_others_even_if_it_had_a_positional_name():
    spec = {"layer": [{"data": {"name": "h1"}}], "datasets": {"data-0": [{"x": 2}], "h1": [{"x": 1}]}}
    assert charts.stable_dataset_names(spec) == {
        "layer": [{"data": {"name": "data-0"}}],
        "datasets": {"data-1": [{"x": 2}], "data-0": [{"x": 1}]},
    }


def _curve(current):
    thresholds = np.linspace(0, 1, 5)
    density = np.array([1.0, 0.5, 0.2, 0.1, 0.01])
    accuracy = np.array([0.98, 0.97, 0.95, 0.9, 0.3])
    return charts.metric_vs_density(thresholds, density, accuracy, "accuracy", current=current, selectable=True)


def test_a_threshold_move_changes_only_the_current_points_data():
    base = _curve((1.0, 0.98)).to_dict()
    one = charts.with_current_point(base, (0.5, 0.97))
    two = charts.with_current_point(base, (0.1, 0.9))
    assert _without_datasets(one) == _without_datasets(two)
    assert one["datasets"][charts.curves.CURRENT_DATASET] == [{"density": 0.5, "value": 0.97}]
    assert two["datasets"][charts.curves.CURRENT_DATASET] == [{"density": 0.1, "value": 0.9}]
    # the rows the spec was drawn with at (1.0, 0.98) are not shipped any more: only the curve's and the point's
    assert len(one["datasets"]) == len(base["datasets"])
    assert [{"density": 1.0, "value": 0.98}] not in one["datasets"].values()


def test_accuracy_vs_r_for_more_draws_keeps_its_spec_once_renamed():
    """Altair's hash names differ between R = 3 and R = 5; the renamed specs do not."""
    three = charts.metric_vs_samples([1, 2, 3], [0.9, 0.91, 0.92], "accuracy").to_dict()
    five = charts.metric_vs_samples([1, 2, 3, 4, 5], [0.9, 0.91, 0.92, 0.925, 0.93], "accuracy").to_dict()
    assert _without_datasets(three) != _without_datasets(five)
    assert _without_datasets(charts.stable_dataset_names(three)) == _without_datasets(charts.stable_dataset_names(five))
    assert _views(charts.stable_dataset_names(five)) == _views(five)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"density": st.floats(0, 1, allow_subnormal=False), "value": st.floats(-1e9, 1e9, allow_subnormal=False)}
        ),
        max_size=20,
    )
)
def test_small_datasets_of_rows_ship_as_the_same_table_in_arrow_form(rows):
    """with_small_rows_shipped (a threshold's rule, the current point): the rows become Arrow bytes that read
    back as the same rows; more rows than SMALL_ROWS, bytes already, and the input are left alone."""
    import pyarrow as pa

    from dashboard import cache, cache_charts  # cache first: it is what imports cache_charts

    big = [{"x": float(i)} for i in range(cache_charts.SMALL_ROWS + 1)]
    spec = {"layer": [{"data": {"name": "a"}}, {"data": {"name": "b"}}], "datasets": {"a": rows, "b": big, "c": b"x"}}
    kept = copy.deepcopy(spec)
    out = cache.with_small_rows_shipped(spec)
    assert spec == kept
    assert out["datasets"]["b"] is big and out["datasets"]["c"] == b"x"
    if len(rows) <= cache_charts.SMALL_ROWS:
        assert isinstance(out["datasets"]["a"], bytes)
        if rows:  # an empty list has no columns to read back
            assert pa.ipc.open_stream(out["datasets"]["a"]).read_all().to_pylist() == rows
    else:
        assert out["datasets"]["a"] == rows
    assert {key: value for key, value in out.items() if key != "datasets"} == {
        key: value for key, value in spec.items() if key != "datasets"
    }


def test_rows_that_cannot_be_a_cache_key_are_left_for_streamlit_to_convert():
    from dashboard import cache

    rows = [{"x": [1, 2]}]  # a list value: not hashable
    assert cache.with_small_rows_shipped({"datasets": {"a": rows}})["datasets"]["a"] is rows
