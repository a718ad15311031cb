"""The live playground's fit: a tiny network trained in a thread of the server process (beside the
training queue's worker, dashboard/worker.py, which trains runs in child processes), drawn while it
trains. Reaches core through dashboard/backend.py."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from core.errors import BNNError, TrainingCancelled
from dashboard import backend
from dashboard.surface import input_grid_2d, surface_arrays

if TYPE_CHECKING:
    from dashboard.backend import BayesianMLP, RunConfig

PLAYGROUND_SETS = ("toy-sine-gaps", "toy-cubic", "toy-hetero", "two-moons", "two-spirals")


def playground_defaults(dataset: str) -> dict[str, Any]:
    """What the playground starts from: the generator's own noise, and core's default widths and
    number of epochs for the set (the small-regression defaults fit the 1-D curves; with fewer
    units or steps the fit is a line, docs/why-lbbnn-over-prunes.md)."""
    config = backend.make_config({"dataset": dataset, "train": {"batch_size": 500}})
    return {
        "noise": backend.generator_noise(dataset),
        "hidden": list(config.hidden),
        "epochs": int(config.train.epochs),
    }


def playground_max_weights() -> int | None:
    """A class's server trains playground networks in its own process: BNN_PLAYGROUND_MAX_WEIGHTS."""
    return backend.admission_limits().playground_weights


def admit_playground(values: dict[str, Any]) -> RunConfig:
    """core.cost's admission of a playground fit, from the form's values alone (nothing is built):
    the config, or AdmissionError saying why not and what widths fit."""
    return backend.admit_fit(backend.make_config(values))


def playground_refusal(values: dict[str, Any]) -> str | None:
    """Why the playground refuses these values (core.cost's message), or None."""
    try:
        admit_playground(values)
    except BNNError as exc:
        return str(exc)
    return None


def kept_text(picture: dict) -> str:
    """How many connections the picture's masks keep: the graph alone looked the same at psi 0.135 and 0.03."""
    kept = int(sum(int(np.count_nonzero(mask)) for mask in picture["masks"]))
    total = int(sum(int(np.size(mask)) for mask in picture["masks"]))
    return (
        f"Kept at the default cut ({picture['default']:g}): {kept:,} of {total:,} connections "
        f"({kept / max(total, 1):.1%})."
    )


class PlaygroundTraining:
    """Trains one small config in a thread of this process and keeps the latest picture.

    Every `every` epochs the training thread itself (between epochs, so nothing races the
    optimiser) predicts on the plotting grid with R posterior draws and reads the statistic: the
    page draws `snapshot()` while the training goes on. `cancel()` stops it within a minibatch.
    `start()` takes the untrained picture before it returns, so the page's first run draws it.
    `present()` (optional) tells whether the page's browser session is still there: a training
    whose session has been gone for ABANDONED_SECONDS stops (nothing keeps its result, and a
    class's closed tabs would otherwise go on taking the server's CPU).
    """

    ABANDONED_SECONDS = 2.0
    PRESENCE_CHECK_SECONDS = 0.5

    def __init__(
        self,
        values: dict[str, Any],
        every: int = 20,
        samples: int = 20,
        hold_seconds: float = 0.0,
        present: Callable[[], bool] | None = None,
    ):
        self.config = backend.make_config(values)
        self._values = dict(values)
        self.every = max(1, int(every))
        self.samples = int(samples)
        # The training waits (at most this long) for first_picture_drawn(): the page's first
        # picture is built without a training thread competing for the interpreter.
        self.hold_seconds = max(0.0, float(hold_seconds))
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._sent = threading.Event()
        self._drawn = threading.Event()
        self._snapshot: dict[str, Any] | None = None
        self.error: str | None = None
        self.done = False
        self.abandoned = False
        self.started: float | None = None
        self._present = present
        self._presence_checked = 0.0
        self._absent_since: float | None = None
        self._thread = threading.Thread(target=self._run, name="bnn-playground", daemon=True)

    def start(self) -> "PlaygroundTraining":
        """Builds the data, the model and its untrained picture here (milliseconds for these sizes),
        so that the caller can draw at once; then trains in the thread."""
        self.started = time.time()
        if self._guarded(self._prepare):
            self._thread.start()
        else:
            self.done = True
        return self

    def first_picture_sent(self) -> None:
        """The page has built and sent the first picture: the thread may warm up (see _train)."""
        self._sent.set()

    def first_picture_drawn(self) -> None:
        """The page has drawn a picture: the training may take the CPU now."""
        self._sent.set()
        self._drawn.set()

    def cancel(self) -> None:
        self._cancel.set()
        self._sent.set()
        self._drawn.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.ident is not None:  # never started when the preparation failed
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> dict[str, Any] | None:
        with self._lock:
            return self._snapshot

    def _guarded(self, step: Callable[[], None]) -> bool:
        """Runs step; a BNNError or a bug becomes self.error (a message for the page). True when it ran."""
        try:
            step()
            return True
        except TrainingCancelled:
            return False
        except BNNError as exc:
            self.error = str(exc)
        except Exception as exc:  # a bug: a message on the page, the traceback in the log
            logging.getLogger(__name__).exception("playground training failed")
            self.error = f"unexpected error ({type(exc).__name__}): {exc}"
        return False

    def _prepare(self) -> None:
        # Costed from the sizes before anything is built: building 12000-12000 first took the server
        # from 1.2 to 3.3 GB before the old size check refused it.
        admit_playground(self._values)
        dataset = self.config.load_dataset()
        model = backend.build_model(self.config, dataset)
        if dataset.in_features == 1:
            x_plot = dataset.x_grid
        else:
            x_plot = input_grid_2d(dataset.x_train, 40)[0]
        self._dataset, self._x_plot, self._model = dataset, x_plot, model
        self._total = self.config.train.total_epochs()
        self._take(model, 0)

    def _train(self) -> None:
        waited = time.monotonic()
        self._sent.wait(self.hold_seconds)
        # The first optimiser of a process imports much of torch (2-4 s on the class machine): done
        # while the browser draws the first picture, not after it.
        backend.warm_up_optimiser()
        self._drawn.wait(max(0.0, self.hold_seconds - (time.monotonic() - waited)))
        if self._cancel.is_set():
            return
        model, total = self._model, self._total

        def progress(record: dict) -> None:
            self._check_presence()
            epoch = int(record.get("epoch", 0))
            if epoch % self.every == 0 or epoch >= total:
                self._take(model, epoch, record)

        # (no per-epoch snapshots: the page draws the picture itself, and its epochs are short)
        backend.train_model(model, self._dataset, self.config, progress=progress, cancel=self._cancel)

    def _check_presence(self) -> None:
        """Cancel once the page's session has been gone ABANDONED_SECONDS (checked at most every
        PRESENCE_CHECK_SECONDS; a reconnect within the grace keeps the training)."""
        if self._present is None:
            return
        now = time.monotonic()
        if now - self._presence_checked < self.PRESENCE_CHECK_SECONDS:
            return
        self._presence_checked = now
        if self._present():
            self._absent_since = None
        elif self._absent_since is None:
            self._absent_since = now
        elif now - self._absent_since >= self.ABANDONED_SECONDS:
            self.abandoned = True
            self._cancel.set()

    def _run(self) -> None:
        try:
            self._guarded(self._train)
        finally:
            self.done = True

    def _take(self, model: BayesianMLP, epoch: int, record: dict | None = None) -> None:
        dataset = self._dataset
        prediction = backend.predict_model(model, self._x_plot, samples=self.samples)
        statistics = backend.native_statistics(model)
        spec = model.spec
        masks = backend.masks_at(statistics, float(spec.default_threshold), spec.keep_above)
        picture: dict[str, Any] = {
            "epoch": epoch,
            "total_epochs": self._total,
            "statistics": statistics,
            "statistic": str(spec.name),
            "default": float(spec.default_threshold),
            "masks": masks,
            "loss": None if record is None else record.get("loss"),
            "x_plot": self._x_plot,
        }
        if dataset.task == "regression":
            prediction = prediction.unstandardised(dataset.target_mean, dataset.target_std)
            picture.update(
                mean=np.asarray(prediction.mean),
                mean_per_draw=np.asarray(prediction.mean_per_draw),
                epistemic_std=np.sqrt(np.asarray(prediction.epistemic_variance)),
                total_std=np.sqrt(np.asarray(prediction.total_variance)),
            )
        else:
            picture.update(surface_arrays(np.asarray(prediction.probs_per_draw)))
        with self._lock:
            self._snapshot = picture
