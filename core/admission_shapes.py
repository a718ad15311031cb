"""The layers a training builds, as core.cost_model counts them: conv blocks and lbbnn-flow's flows too.

A fully connected network is its layer widths. A conv block (RunConfig.conv; core/models/conv_network.py)
is its family's layer with fan-in C k k, applied at every output position of its image: its weights are
few, but each example keeps channels x H x W outputs for the backward pass (the mean and variance paths
of the local reparameterisation, the sample, the activation; then the pooled map the next layer reads).
`lbbnn-flow` (core/models/lbbnn_flow.py) adds to each layer of fan-in d two coupling flows of K layers of
H hidden units (q's and the reverse model's) and five d-vectors; q's flow runs once per example.

Measured with what autograd keeps for backward (saved-tensor hooks, tests/test_cost_conv_flow.py), per
example on mnist-small: a conv block keeps 4.5 floats per output position and channel (lbbnn, bnn,
sparse-vd; fnn 1.5); lbbnn-flow keeps about 3 d + K (3 d + H) floats per layer beyond LBBNN's.
The cost model counts the activations with their gradients: ACTIVATION_FLOATS_PER_UNIT (8) per unit,
conv positions included, and 6 d + K (9 d + 2 H) floats per flow layer; against peak memory of real
steps the estimates are 1.2-1.9 x (benchmarks/results/admission_conv_flow.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

FLOW_FAMILY = "lbbnn-flow"
FLOW_STATE_OF = "lbbnn"  # the flow layer's own weights are LBBNN's (core.models.lbbnn_flow subclasses it)
# Per example and layer of fan-in d, with their gradients: the multipliers' draw and the products with
# them (3 d kept for backward), and per coupling of q's flow about 3 d + H kept (the kept half, the moved
# half's scale and shift, exp, the tanh layer). Calibrated on peak memory
# (benchmarks/results/admission_conv_flow.md): backward's transients through a chain of couplings
# take more than twice the kept floats, so a coupling is counted at 9 per input.
FLOW_FLOATS_PER_INPUT = 6
FLOW_FLOATS_PER_COUPLING_INPUT = 9
FLOW_FLOATS_PER_HIDDEN = 2


@dataclass(frozen=True)
class LayerCount:
    """One layer as built: fan-in (conv: C k k), fan-out (conv: filters), and output positions per
    example (conv: H x W before pooling; 1 for a dense layer)."""

    fan_in: int
    fan_out: int
    positions: int = 1
    pooled: int = 0  # values per example after the 2 x 2 max-pool (conv blocks; what the next layer reads)

    @property
    def weights(self) -> int:
        return (self.fan_in + 1) * self.fan_out

    @property
    def units(self) -> int:
        """Values per example the layer's forward keeps: its outputs at every position, and the pooled map."""
        return self.fan_out * self.positions + self.pooled


def conv_geometry(config: Any) -> Any:
    """The conv body's ConvGeometry of a RunConfig with conv blocks, else None."""
    if not getattr(config, "conv", ()):
        return None
    from core.models.conv_network import ConvGeometry

    return ConvGeometry.of(config.conv_fields()["image_shape"], config.conv)


def model_layers(config: Any, widths: Sequence[int]) -> list[LayerCount]:
    """Every layer of the network `config` builds, given core.cost_model.layer_widths (inputs, hidden
    widths, outputs): the conv blocks first, whose last pooled map is the first dense layer's fan-in."""
    geometry = conv_geometry(config)
    if geometry is None:
        return [LayerCount(int(a), int(b)) for a, b in zip(widths, widths[1:])]
    _, height, width = geometry.image_shape
    layers = []
    for c, o, k, pooled_height, pooled_width in geometry.blocks:
        # a valid k x k convolution's output, before the pool (its h x w is the pooled map's)
        layers.append(LayerCount(c * k * k, o, (height - k + 1) * (width - k + 1), o * pooled_height * pooled_width))
        height, width = pooled_height, pooled_width
    dense = [geometry.flat_features, *widths[1:]]
    return layers + [LayerCount(int(a), int(b)) for a, b in zip(dense, dense[1:])]


def flow_options(config: Any) -> tuple[int, int] | None:
    """(flow_length K, flow_hidden H) of an lbbnn-flow config, else None."""
    if str(config.family) != FLOW_FAMILY:
        return None
    from core.models.lbbnn_flow import LBBNNFlowOptions

    given = dict(config.family_options)
    return (
        int(given.get("flow_length", LBBNNFlowOptions.flow_length)),
        int(given.get("flow_hidden", LBBNNFlowOptions.flow_hidden)),
    )


def flow_state(config: Any, layers: Sequence[LayerCount]) -> tuple[int, int]:
    """(parameters, buffers) the flows add, in floats: per layer of fan-in d, z's mean and scale and the
    reverse model's c, b1, b2 (5 d), and 2 K couplings of (3 H d + H + 2 d) parameters and a d-mask."""
    flow = flow_options(config)
    if flow is None:
        return 0, 0
    length, hidden = flow
    parameters = sum(
        5 * layer.fan_in + 2 * length * (3 * hidden * layer.fan_in + hidden + 2 * layer.fan_in) for layer in layers
    )
    buffers = sum(2 * length * layer.fan_in for layer in layers)
    return parameters, buffers


def flow_activity(config: Any, layers: Sequence[LayerCount]) -> tuple[int, int]:
    """Per example of a training step: (floats the flows keep, with their gradients; the multiply-adds
    they add: per coupling of q's flow three products of d x H, and a third product with the weights)."""
    flow = flow_options(config)
    if flow is None:
        return 0, 0
    length, hidden = flow
    floats = sum(
        FLOW_FLOATS_PER_INPUT * layer.fan_in
        + length * (FLOW_FLOATS_PER_COUPLING_INPUT * layer.fan_in + FLOW_FLOATS_PER_HIDDEN * hidden)
        for layer in layers
    )
    # the moment match given z takes three products with the weights where LBBNN's takes two
    return floats, sum(3 * length * hidden * layer.fan_in + layer.weights for layer in layers)
