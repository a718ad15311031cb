"""dashboard/charts/sparsity.py: the data drawn is read back from each Plotly figure and compared with
core's arrays (masks, active paths by a brute-force path search, densities, explanations)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from core.models.network import BayesianMLP, ModelConfig
from core.predict.structure import active_masks, layer_densities, overall_density, skip_layers
from core.runs.run import Run
from core.runs.sparsity_views import active_path_densities
from dashboard.charts import sparsity
from tests.test_active_paths import brute_force

D = 6


def small_run(skip: bool, seed: int = 3, hidden=(8, 5)) -> Run:
    torch.manual_seed(seed)
    options = {"input_skip": True} if skip else {}
    return Run.of(BayesianMLP(ModelConfig(D, 3, hidden=hidden, family="lbbnn", family_options=options)))


def random_structure(skip: bool, seed: int, density: float = 0.35, widths=(D, 7, 5, 3)):
    """Random kept masks (numpy) and core's active masks of them."""
    rng = np.random.default_rng(seed)
    masks = []
    for layer, (w_in, w_out) in enumerate(zip(widths[:-1], widths[1:])):
        fan_in = w_in + (widths[0] if skip and layer > 0 else 0)
        masks.append(rng.random((w_out, fan_in + 1)) < density)
    active = [m.numpy() for m in active_masks([torch.from_numpy(m) for m in masks])]
    return masks, active


@pytest.mark.parametrize("skip,seed", itertools.product([False, True], range(4)))
def test_mask_figure_draws_every_weight_with_its_state_and_statistic(skip, seed):
    masks, active = random_structure(skip, seed)
    rng = np.random.default_rng(seed + 10)
    for mask, on_path in zip(masks, active):
        statistic = rng.random(mask.shape)
        figure = sparsity.mask_figure(statistic, mask, on_path, "layer")
        (heatmap,) = figure.data
        z = np.asarray(heatmap.z)
        assert z.shape == mask.shape  # full resolution: one cell per weight, no blocks
        np.testing.assert_array_equal(z == 0, ~mask & ~on_path)
        np.testing.assert_array_equal(z == 2, on_path)
        assert (on_path[:, :-1] <= mask[:, :-1]).all()  # only a bias (folded constants) is active unkept
        np.testing.assert_array_equal(z == 1, mask & ~on_path)
        np.testing.assert_allclose(np.asarray(heatmap.customdata), statistic, rtol=1e-6)
    # the case that gives the middle state its meaning occurs in these structures
    assert any((m & ~a).any() for m, a in zip(masks, active)) or seed


def test_the_skip_columns_are_marked_where_they_start():
    masks, active = random_structure(True, 0)
    width = masks[0].shape[0]  # layer 1 reads layer 0's units, then the D inputs
    figure = sparsity.mask_figure(np.zeros(masks[1].shape), masks[1], active[1], "layer", skip_from=width)
    (line,) = figure.layout.shapes
    assert line.x0 == line.x1 == width - 0.5
    assert not sparsity.mask_figure(np.zeros(masks[1].shape), masks[1], active[1], "layer").layout.shapes


def test_a_mask_and_a_statistic_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match="differ in shape"):
        sparsity.mask_figure(np.zeros((2, 3)), np.ones((2, 4), bool), np.ones((2, 4), bool), "x")


def edges_drawn(figure) -> dict[str, set]:
    """The figure's line segments mapped back to (column, unit) pairs through the node trace."""
    nodes = [t for t in figure.data if t.name == "unit"][0]
    where = {(round(x, 9), round(y, 9)): tuple(c) for x, y, c in zip(nodes.x, nodes.y, nodes.customdata)}
    drawn = {}
    for trace in figure.data:
        if trace.mode != "lines":
            continue
        xs, ys = list(trace.x), list(trace.y)
        segments = set()
        for start in range(0, len(xs), 3):
            a = where[(round(xs[start], 9), round(ys[start], 9))]
            b = where[(round(xs[start + 1], 9), round(ys[start + 1], 9))]
            segments.add((a, b))
        drawn[trace.name] = segments
    return drawn


@pytest.mark.parametrize("skip,seed", itertools.product([False, True], range(6)))
def test_the_graph_draws_exactly_the_edges_of_input_to_output_paths(skip, seed):
    masks, active = random_structure(skip, seed, density=0.3)
    assert sparsity.skip_flags(masks) == skip_layers([m.shape for m in masks])
    on_path, _ = brute_force(masks, skip)  # (layer, row, column) of every weight on a path
    expected = {"active weight": set(), "input-skip weight": set()}
    for layer, row, column in on_path:
        width = D if layer == 0 else masks[layer - 1].shape[0]
        if column < width:
            expected["active weight"].add(((layer, column), (layer + 1, row)))
        else:
            expected["input-skip weight"].add(((0, column - width), (layer + 1, row)))
    figure = sparsity.active_graph_figure(active)
    drawn = edges_drawn(figure)
    for name, edges in expected.items():
        assert drawn.get(name, set()) == edges, name
    if not skip:
        assert "input-skip weight" not in drawn
    # filled nodes: exactly the units and inputs on some path
    nodes = [t for t in figure.data if t.name == "unit"][0]
    filled = {tuple(c) for c, colour in zip(nodes.customdata, nodes.marker.color) if colour != "#ffffff"}
    assert filled == {node for edge in set().union(*expected.values()) for node in edge}


def test_the_graph_refuses_a_layer_past_its_limit():
    wide = [np.ones((sparsity.MAX_GRAPH_UNITS + 1, 3), bool), np.ones((2, sparsity.MAX_GRAPH_UNITS + 2), bool)]
    with pytest.raises(ValueError, match=f"at most {sparsity.MAX_GRAPH_UNITS} units"):
        sparsity.active_graph_figure(wide)
    sparsity.active_graph_figure(
        [np.ones((sparsity.MAX_GRAPH_UNITS, 3), bool), np.ones((2, sparsity.MAX_GRAPH_UNITS + 1), bool)]
    )


@pytest.mark.parametrize("skip,threshold", itertools.product([False, True], [0.3, 0.6]))
def test_reaching_pixels_are_the_features_with_an_active_path(skip, threshold):
    run = small_run(skip)
    active = [m.numpy() for m in run.active_paths(threshold)]
    figure = sparsity.reaching_pixels_figure(active, (2, 3))
    z = np.asarray(figure.data[0].z)
    assert z.shape == (2, 3)
    # counts: the active weights leaving each input, through the first layer and the skip columns
    expected = active[0][:, :D].sum(axis=0)
    for layer, flag in enumerate(skip_layers([m.shape for m in active])):
        if flag:
            width = active[layer - 1].shape[0]
            expected = expected + active[layer][:, width : width + D].sum(axis=0)
    np.testing.assert_array_equal(z.ravel(), expected)
    # a pixel reaches an output exactly when explain (core) finds it on an active path
    explained = run.explain(np.ones(D), threshold=threshold, samples=2)
    np.testing.assert_array_equal(z.ravel() > 0, explained.active_features)


@pytest.mark.parametrize("skip", [False, True])
def test_density_frame_is_core_densities_raw_and_on_active_paths(skip):
    run = small_run(skip)
    densities = active_path_densities(run, 0.5)
    frame = sparsity.density_comparison_frame(densities, ["a", "b", "c"])
    masks, active = run.masks(0.5), run.active_paths(0.5)
    np.testing.assert_allclose(frame["density"], list(layer_densities(masks)) + [overall_density(masks)])
    np.testing.assert_allclose(frame["active-path density"], list(layer_densities(active)) + [overall_density(active)])
    assert (frame["active-path density"] <= frame["density"] + 1e-12).all()


def quantiles(values: np.ndarray, level: float = 0.95):
    tail = (1 - level) / 2
    return np.quantile(values, [tail, 0.5, 1 - tail], axis=0)


@pytest.mark.parametrize("top_k", [None, 3])
def test_explanation_bars_are_the_top_medians_with_their_intervals(top_k):
    run = small_run(True, seed=4)
    x = np.random.default_rng(2).normal(size=D)
    explained = run.explain(x, threshold=0.4, samples=50, seed=1)
    low, median, high = quantiles(explained.contributions)  # core's per-draw arrays, summarised here
    names = [f"feature {j}" for j in range(D)]
    figure = sparsity.explanation_bars(explained.to_dict()["features"], top_k=top_k, names=names)
    (bars,) = figure.data
    order = np.argsort(-np.abs(median), kind="stable")[: top_k or D]
    assert list(bars.y) == [names[j] for j in order]
    np.testing.assert_allclose(np.asarray(bars.x), median[order], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.asarray(bars.x) + np.asarray(bars.error_x.array), high[order], atol=1e-9)
    np.testing.assert_allclose(np.asarray(bars.x) - np.asarray(bars.error_x.arrayminus), low[order], atol=1e-9)
    assert (np.asarray(bars.error_x.array) >= 0).all() and (np.asarray(bars.error_x.arrayminus) >= 0).all()


def test_explanation_heatmap_puts_each_median_on_its_pixel():
    run = small_run(False, seed=6)
    x = np.random.default_rng(3).normal(size=D)
    explained = run.explain(x, threshold=0.4, samples=40, seed=2)
    low, median, high = quantiles(explained.contributions)
    figure = sparsity.explanation_heatmap(explained.to_dict()["features"], (2, 3))
    (heatmap,) = figure.data
    np.testing.assert_allclose(np.asarray(heatmap.z), median.reshape(2, 3), atol=1e-12)
    interval = np.asarray(heatmap.customdata)
    np.testing.assert_allclose(interval[..., 0], low.reshape(2, 3), atol=1e-12)
    np.testing.assert_allclose(interval[..., 1], high.reshape(2, 3), atol=1e-12)
    assert heatmap.zmin == -heatmap.zmax == -np.abs(median).max()  # symmetric: white is 0
