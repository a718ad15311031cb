"""Process settings for CPU training, shared by train() and the benchmarks.

They are process-wide knobs of the CPU, not of a model, so they live in one
place and the benchmark's plain MLP gets exactly what the families get.

Tried and left out: keeping freed memory in the heap (glibc mallopt) removes
the ~600 minor page faults of each LBBNN step on 784-400-600-10, but in six
interleaved process pairs the steps were no faster (median 1.05x slower):
the step is bound by memory traffic, and reused blocks are as cold as fresh
pages.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def flush_denormals():
    """Treat subnormal floats as zero on the CPU while training.

    Spike-and-slab training drives many quantities (inclusion probabilities of
    pruned weights, their gradients and Adam's second moments) towards zero;
    once they turn subnormal, x86 arithmetic on them is up to ~100x slower.
    Measured on full MNIST, 784-400-600-10: LBBNN's second epoch took 297 s
    without this and 13 s with it. The values involved are below 1e-38, so
    flushing them changes no result that matters. The flag is process-wide and
    torch has no getter for it, so it is set back to torch's default (off).
    """
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)
