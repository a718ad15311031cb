"""Pure chart builders: numpy arrays in, Altair charts (and the frames behind them) out, by topic.

Nothing here imports Streamlit or torch, so every figure is testable on its own. Each chart has a
`*_frame` function that computes the DataFrame it draws; tests assert on those frames and on
`chart.to_dict()`. Charts stay small (a few thousand rows at most): large weight matrices are drawn
as block aggregates, histograms are binned here, not in the browser.

Callers use `charts.<name>`; the topics: style (sizes, colours), histograms, matrices, curves,
predictions, playback, conv (conv-filter masks).
"""

from __future__ import annotations

from dashboard.charts.conv import conv_filter_charts, filter_density_frame, filter_pattern_frame  # noqa: F401
from dashboard.charts.curves import (  # noqa: F401
    PICK,
    compare_curves,
    compare_ecdf,
    family_colour_scale,
    history_frame,
    metric_vs_density,
    metric_vs_samples,
    picked_threshold,
    summary_over_seeds,
    sweep_frame,
    training_curves,
    with_current_point,
)
from dashboard.charts.datasets import stable_dataset_names  # noqa: F401
from dashboard.charts.histograms import (  # noqa: F401
    THRESHOLD_DATASET,
    histogram_frame,
    histogram_range,
    inline_datasets,
    prior_chart,
    statistic_histogram,
    threshold_rule,
    with_threshold_rules,
)
from dashboard.charts.matrices import (  # noqa: F401
    MASK_STATE_COLOURS,
    MASK_STATES,
    _block_edges,
    block_frame,
    density_frame,
    kept_per_input_frame,
    kept_per_input_image,
    mask_difference,
    mask_difference_frame,
    mask_heatmap,
    network_graph,
    network_graph_frames,
    receptive_field_frame,
    receptive_fields,
    weight_heatmap,
)
from dashboard.charts.playback import (  # noqa: F401
    MAX_CURVE_EPOCHS,
    density_over_epochs,
    density_over_epochs_frame,
    snapshot_histogram_frame,
    snapshot_histograms,
)
from dashboard.charts.predictions import (  # noqa: F401
    class_probability_bars,
    class_probability_frame,
    decision_surface,
    ecdf_frame,
    entropy_ecdf,
    quantile_bands,
    reference_layers,
    regression_bands,
    regression_frame,
    surface_frame,
)
from dashboard.charts.style import (  # noqa: F401
    CHART_WIDTH,
    CLASS_COLOURS,
    FAMILY_COLOURS,
    FIXED_SIZE,
    GRADIENT_LEGEND,
    HISTOGRAMS_PER_ROW,
    MAX_HEATMAP_CELLS,
    OTHER_FAMILY_COLOUR,
    REFERENCE_COLOUR,
    family_colour,
    family_key,
    layer_label,
    run_key,
)
