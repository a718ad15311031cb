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

import torch


def enable_flush_denormals() -> bool:
    """Treat subnormal floats as zero on the CPU, from now on, in the calling thread.

    Spike-and-slab training drives many quantities (inclusion probabilities of
    pruned weights, their gradients and Adam's second moments) towards zero;
    once they turn subnormal, x86 arithmetic on them is up to ~100x slower.
    Measured on full MNIST, 784-400-600-10: LBBNN's second epoch took 297 s
    without this and 13 s with it. The values involved are below 1e-38, so
    flushing them changes no result that matters.

    The flag lives in each thread's floating-point control register; a thread
    inherits it from the thread that starts it, and so do the intra-op worker
    threads a thread starts at its first parallel operation. So it is set once
    when the training code is imported (covering the threads started after) and
    again at the start of every training (covering a training thread started by
    a thread that never had it, e.g. a Streamlit session's), and it is never
    turned off: turning it off at the end of one training slowed the trainings
    still running beside it by the factor above. Returns False where the CPU
    cannot flush.
    """
    return torch.set_flush_denormal(True)
