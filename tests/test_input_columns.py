"""Which input columns a pruned tabular network still reads (core.runs.sparsity_views): against
hand-built masks, with one-hot units grouped back to their column, input-skip columns, and a
weight that is kept but on no input-to-output path."""

from __future__ import annotations

import numpy as np
import torch

from core.runs import sparsity_views as views

# Inputs: x1, color=red, color=blue, size=a=b (a column name holding '='), x2
FEATURES = ("x1", "color=red", "color=blue", "size=a=b", "x2")
HEADER = ("x1", "color", "size", "x2", "label")


def _masks(first: np.ndarray, second: np.ndarray) -> list[torch.Tensor]:
    return [torch.tensor(first, dtype=torch.bool), torch.tensor(second, dtype=torch.bool)]


def test_a_hand_built_mask_names_the_columns_read():
    # 3 hidden units reading 5 inputs (+ bias column); one output reading units 0 and 1.
    first = np.zeros((3, 6), dtype=bool)
    first[0, 0] = True  # x1 -> unit 0 (on a path)
    first[1, 2] = True  # color=blue -> unit 1 (on a path)
    first[2, 4] = True  # x2 -> unit 2, which no kept weight leaves: kept, but on no path
    second = np.zeros((1, 4), dtype=bool)
    second[0, 0] = second[0, 1] = True
    masks = _masks(first, second)
    from core.predict.structure import active_masks

    read = views.inputs_read(active_masks(masks), len(FEATURES))
    kept = views.inputs_read(masks, len(FEATURES))
    assert read.tolist() == [True, False, True, False, False]
    assert kept.tolist() == [True, False, True, False, True]
    groups = {g["column"]: g for g in views.group_columns(FEATURES, read, kept, HEADER)}
    assert list(groups) == ["x1", "color", "size", "x2"]  # the inputs' order, one row per source column
    assert groups["x1"]["read"] and groups["color"]["read"]
    assert groups["color"]["units"] == 2 and groups["color"]["read_units"] == 1
    assert groups["color"]["levels_read"] == ["blue"]
    assert not groups["size"]["read"] and groups["size"]["units"] == 1
    assert not groups["x2"]["read"] and groups["x2"]["kept_units"] == 1  # kept, but leads nowhere


def test_input_skip_columns_count_as_reading_the_input():
    # Layer 2 reads the 2 hidden units, then the 5 inputs again (input skip), then its bias.
    first = np.zeros((2, 6), dtype=bool)
    first[0, 0] = True
    second = np.zeros((1, 2 + 5 + 1), dtype=bool)
    second[0, 0] = True  # unit 0 -> output
    second[0, 2 + 3] = True  # skip weight from input 3 (size=a=b) -> output
    read = views.inputs_read(_masks(first, second), 5)
    assert read.tolist() == [True, False, False, True, False]


def test_source_columns_without_a_header_cut_at_the_first_equals_sign():
    assert views.source_column("color=red") == "color"
    assert views.source_column("x1") == "x1"
    assert views.source_column("size=a=b", HEADER) == "size"
    assert views.source_column("a=b=c", ("a", "a=b")) == "a=b"  # the longest matching column


def test_data_identity_separates_targets_and_tables(isolated_data_env):
    from core.runs.user_data import data_identity

    table = "table-0123456789abcdef"
    a = data_identity(table, {"target": "label", "missing": "refuse", "task": "classification"})
    b = data_identity(table, {"target": "amount", "missing": "refuse", "task": "regression"})
    c = data_identity("table-fedcba9876543210", {"target": "label", "missing": "refuse", "task": "classification"})
    assert len({a[0], b[0], c[0]}) == 3
    assert "target label" in a[1] and "target amount" in b[1]
    assert data_identity("two-moons", {}) == (data_identity("two-moons", None)[0], "two-moons")
    assert data_identity("toy-cubic", {"noise": 1})[0] != data_identity("toy-cubic", {"noise": 2})[0]


def test_unnamed_flat_inputs_are_numbered_and_images_get_none():
    class Run:
        def __init__(self, shape, masks):
            self.shape, self._masks = shape, masks
            self.config = type("Config", (), {"dataset": "toy"})()

        def dataset(self):
            return type("Data", (), {"feature_names": None, "input_shape": self.shape})()

        def masks(self, threshold=None):
            return self._masks

        def active_paths(self, threshold=None):
            from core.predict.structure import active_masks

            return active_masks(self._masks)

    first = torch.zeros((2, 4), dtype=torch.bool)
    first[0, 1] = True
    second = torch.ones((1, 3), dtype=torch.bool)
    rows = views.input_columns(Run((3,), [first, second]))
    assert [(r["column"], r["read"]) for r in rows] == [("input 1", False), ("input 2", True), ("input 3", False)]
    assert views.input_columns(Run((2, 2), [torch.ones((2, 5), dtype=torch.bool), second])) is None
