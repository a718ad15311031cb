"""Training steps replayed as one CUDA graph (TrainConfig.cuda_graphs).

Why: on a GPU a step of these small nets is bound by kernel launches, not by arithmetic. On an H100 an
LBBNN step at batch 100 on full MNIST (784-400-600-10) took 4.3-4.8 ms, a plain MLP's 1.0-1.6 ms, and an
epoch at batch 100 took 2.6-2.9 s against 0.46-0.57 s at batch 500 (benchmarks/results/gpu_notes.md);
torch.compile of the layer kernels bought nothing measurable there. Captured once, a step's forward pass,
backward pass, fused Adam update and auxiliary updates are replayed by one launch from the host.

How: the step body reads its minibatch through a fixed index buffer (the rows of the training set it
gathers) and its KL scale from a one-element buffer, so a replay differs from the next only in what those
buffers hold. The first WARMUP_STEPS full batches of a phase run eagerly (on a side stream, as CUDA graphs
require: the optimiser's state and autograd's buffers are allocated there); the next is captured and
replayed, and so is every full batch after it. A batch of another size (the last, ragged one) runs
eagerly. The optimiser must be capturable (its step counts and learning rates on the device:
`train._adam(..., capturable=True)`), and the run's noise generator is registered with the graph, so a
replay advances that generator and no other: runs are reproducible and concurrent trainings in one
process do not share draws.

Where a step cannot be captured (a family whose step reads a value back to the host, say), the capture's
error is kept and the phase goes on eagerly: `ReplayedSteps.state` says which happened, and training
records it in each epoch's record ("cuda_graphs").
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

# Eager steps before the capture. PyTorch's guide to CUDA graphs warms up on a side stream for a few
# iterations so that lazily created state (here: Adam's moments, autograd's buffers) exists before capture.
WARMUP_STEPS = 3

# A capture refuses unsafe calls (a read back to the host, a cudaMalloc) made by this thread only. The default,
# "global", refuses them in every thread of the process, where the dashboard runs other sessions' trainings and
# predictions beside this one: a capture would make their calls fail.
CAPTURE_ERROR_MODE = "thread_local"

StepBody = Callable[[Tensor, Tensor | float], Tensor]  # (row index, KL scale) -> the step's data term, on the device


class CudaGraphBackend:
    """Warm-up and capture on a CUDA device (torch.cuda.CUDAGraph)."""

    def __init__(self, device: torch.device, generator: torch.Generator | None):
        if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
            from core.errors import ConfigError

            raise ConfigError(
                f"train.cuda_graphs: this PyTorch ({torch.__version__}) cannot register a run's own noise "
                "generator with a CUDA graph (CUDAGraph.register_generator_state); leave it off"
            )
        self.device = device
        self.generator = generator
        self.side_stream = torch.cuda.Stream(device)

    def warmup(self, body: Callable[[], Tensor]) -> Tensor:
        current = torch.cuda.current_stream(self.device)
        self.side_stream.wait_stream(current)
        with torch.cuda.stream(self.side_stream):
            out = body()
        current.wait_stream(self.side_stream)
        return out

    def capture(self, body: Callable[[], Tensor], like: Tensor) -> tuple[Callable[[], None], Tensor]:
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:  # the default generator is registered by the capture itself
            graph.register_generator_state(self.generator)
        with torch.cuda.graph(graph, capture_error_mode=CAPTURE_ERROR_MODE):
            out = body()
        return graph.replay, out

    def recover(self) -> None:
        """After a failed capture. The capture's start put the registered generators (the run's and the
        default one) in capture mode, and its failed end left them there: their next eager draw raised
        "Offset increment outside graph capture encountered unexpectedly" (lbbnn-lfmvn on an H100, before
        its Cholesky factor stopped syncing). An empty capture with the same generators ends that mode."""
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:
            graph.register_generator_state(self.generator)
        with torch.cuda.graph(graph, capture_error_mode=CAPTURE_ERROR_MODE):
            torch.zeros(1, device=self.device)  # an empty graph only draws a warning; one fill is no cost


class CallingBackend:
    """A stand-in for CUDA graphs on any device: "capture" keeps the body, a replay calls it again and
    writes its result into the captured output. It runs the same buffers and the same sequence of warm-up,
    capture and replay as the CUDA backend (tests/test_step_graphs.py runs it on the CPU)."""

    def warmup(self, body: Callable[[], Tensor]) -> Tensor:
        return body()

    def capture(self, body: Callable[[], Tensor], like: Tensor) -> tuple[Callable[[], None], Tensor]:
        out = torch.empty((), dtype=like.dtype, device=like.device)  # a capture runs nothing, as on CUDA

        def replay() -> None:
            out.copy_(body())

        return replay, out

    def recover(self) -> None:
        pass


# Devices whose training steps can be replayed (tests add "cpu", with CallingBackend from graph_backend).
CUDA_GRAPH_DEVICES = ("cuda",)


def graph_backend(device: torch.device, generator: torch.Generator | None):
    """The backend train.cuda_graphs replays with (tests put a CallingBackend in its place)."""
    return CudaGraphBackend(device, generator)


class ReplayedSteps:
    """Training steps on minibatches of `batch_size` rows: eager for the first WARMUP_STEPS full batches,
    then one captured graph replayed (see the module's docstring). Call with the rows' indices (a 1-D long
    tensor on the device) and the KL scale; returns the step's data term (a 0-d tensor on the device,
    valid until the next call: the caller adds it to a sum right away, on the same stream)."""

    def __init__(self, body: StepBody, batch_size: int, device: torch.device, backend):
        self.body = body
        self.batch_size = int(batch_size)
        self.backend = backend  # CudaGraphBackend, or CallingBackend in the tests
        self.index = torch.zeros(self.batch_size, dtype=torch.long, device=device)
        self.kl_scale = torch.zeros((), device=device)
        self._kl_scale_value: float | None = None
        self.warmup_left = WARMUP_STEPS
        self.replay: Callable[[], None] | None = None
        self.output: Tensor | None = None
        self.failure: str | None = None  # why the capture failed, if it did

    @property
    def state(self) -> str:
        """'replayed' once a graph is captured; 'eager: <why>' after a failed capture; else 'warming up'."""
        if self.failure is not None:
            return f"eager: {self.failure}"
        return "replayed" if self.replay is not None else "warming up"

    def __call__(self, index: Tensor, kl_scale: float) -> Tensor:
        if index.numel() != self.batch_size or self.failure is not None:
            return self.body(index, kl_scale)  # an eager step, as without graphs
        self.index.copy_(index)
        if self._kl_scale_value != kl_scale:  # changes once an epoch at most (annealing)
            self.kl_scale.fill_(kl_scale)
            self._kl_scale_value = kl_scale
        if self.replay is not None:
            self.replay()
            return self.output
        if self.warmup_left > 0:
            self.warmup_left -= 1
            return self.backend.warmup(self._step)
        try:
            self.replay, self.output = self.backend.capture(self._step, self.kl_scale)
        except RuntimeError as exc:  # a step that cannot be captured trains on eagerly
            self.failure = " ".join(str(exc).split())[:200] or type(exc).__name__
            self.backend.recover()
            return self.body(index, kl_scale)
        self.replay()  # capturing records the step; this replay takes it
        return self.output

    def _step(self) -> Tensor:
        return self.body(self.index, self.kl_scale)
