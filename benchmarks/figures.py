"""Matplotlib set-up shared by the benchmark scripts (headless, one style, PNG out)."""

from __future__ import annotations

from pathlib import Path


def subplots(ncols: int = 1, size: tuple[float, float] = (6, 4)):
    """(figure, axes) on the headless Agg backend; axes is a list when ncols > 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=size)


def save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
