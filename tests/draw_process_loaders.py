"""Run loaders for tests/test_draw_process.py: module-level, so that a spawned draw process can import them."""

from __future__ import annotations

import os
import time

from tests.test_draw_cache import classification_run

CRASH_FILE_VARIABLE = "BNN_TEST_DRAW_CRASH_FILE"  # while this file exists, a child loading a run dies
SLOW_VARIABLE = "BNN_TEST_DRAW_SLOW_SECONDS"  # each draw in a child after its first takes at least this long
BUSY_VARIABLE = "BNN_TEST_DRAW_BUSY"  # with SLOW_VARIABLE: the wait spends CPU (a loop), not a sleep
LOADS_VARIABLE = "BNN_TEST_DRAW_LOADS_FILE"  # a file: each run a child loads, one line


def load_tiny(run_id: str):
    """The test's run `run_id` ("3": classification_run(seed=3)), built again: the same fingerprint."""
    crash = os.environ.get(CRASH_FILE_VARIABLE)
    if crash and os.path.exists(crash):
        os._exit(3)  # a crash, not an exception: the server sees its pipe close
    seconds = float(os.environ.get(SLOW_VARIABLE, "0") or 0)
    if seconds:
        import core.predict.engine as engine

        real = engine.sampled_forward
        if not getattr(real, "slowed", False):

            def slow(*args, **kwargs):
                if os.environ.get(BUSY_VARIABLE):
                    end = time.thread_time() + seconds
                    while time.thread_time() < end:
                        pass
                else:
                    time.sleep(seconds)
                return real(*args, **kwargs)

            slow.slowed = True
            engine.sampled_forward = slow
    loads = os.environ.get(LOADS_VARIABLE)
    if loads:
        with open(loads, "a") as record:
            record.write(run_id + "\n")
    return classification_run(seed=int(run_id))
