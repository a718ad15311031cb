"""The process settings CPU training runs under (core/cpu_settings.py)."""

import pytest
import torch

from core.cpu_settings import flush_denormals


def test_flush_denormals_flushes_inside_and_restores_after():
    tiny = torch.tensor([1e-40])  # subnormal in float32
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush denormals")
    with flush_denormals():
        assert float(tiny * 1.0) == 0.0
    assert float(tiny * 1.0) > 0.0
