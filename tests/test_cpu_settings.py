"""The process settings CPU training runs under (core/cpu_settings.py)."""

import threading

import pytest
import torch

from core.cpu_settings import enable_flush_denormals
from tests.support import subnormal


def test_flushing_stays_on_and_threads_started_afterwards_inherit_it():
    tiny = subnormal()
    if not enable_flush_denormals():
        pytest.skip("this CPU cannot flush denormals")
    assert float(tiny * 1.0) == 0.0
    enable_flush_denormals()  # a second call (every training makes one) changes nothing
    assert float(tiny * 1.0) == 0.0
    seen = []
    thread = threading.Thread(target=lambda: seen.append(float(tiny * 1.0)))
    thread.start()
    thread.join()
    assert seen == [0.0]


def test_the_flag_belongs_to_each_thread():
    """Why train() sets it itself: a thread that never had it (a Streamlit session's) does not flush."""
    tiny = subnormal()
    if not enable_flush_denormals():
        pytest.skip("this CPU cannot flush denormals")
    seen = []

    def without_then_with():
        torch.set_flush_denormal(False)
        seen.append(float(tiny * 1.0))
        enable_flush_denormals()
        seen.append(float(tiny * 1.0))

    thread = threading.Thread(target=without_then_with)
    thread.start()
    thread.join()
    assert seen[0] > 0.0 and seen[1] == 0.0
    assert float(tiny * 1.0) == 0.0  # switching it off there did not touch this thread
