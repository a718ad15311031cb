"""What the server processes behind one `python -m dashboard.serve` share about trainings: files in
the folder the proxy made for them ($BNN_SERVE_DIR). No Streamlit, no torch here.

- The training slots are lock files (`slot-0` .. `slot-{n-1}`, and `lane` for the short lane), each
  held with fcntl.flock by the process whose training uses it, for as long as it trains. The kernel
  drops a dead process's locks, so a killed server process never keeps a slot. The holder writes
  "long" or "short" into its slot, so that every process can tell when every slot runs a long
  training (the short lane opens then, as in one process).
- Each process publishes its queue (running and waiting jobs, each waiting job's turn) as one JSON
  file (`queue-<k>.json`, replaced whole). The others read it to take turns machine-wide (a freed slot
  goes to the job whose turn it is across every process), to count places and times in the queue,
  and for the teacher's list; a process's `alive-<k>` lock, held for its life, tells a live file from
  a dead process's leftover.
- The teacher's Cancel of another process's job is a request file (`cancel-<k>-<job id>`) that the
  owning process acts on at its next poll.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

READ_TTL = 0.5  # seconds the others' published queues are reused (every open page asks each second)
HEARTBEAT_SECONDS = 5.0  # a process rewrites its queue at least this often, changed or not
# A queue not rewritten for this long is a hung process's: its waiting jobs take no turn from the others.
STALE_SECONDS = 30.0
ALIVE_WAIT_SECONDS = 30.0  # a restarted process waits this long for its predecessor's alive lock


@dataclass(frozen=True)
class RemoteJob:
    """Another process's job as it published it."""

    process: int
    job_id: int
    who: str
    label: str
    status: str  # a WorkerStatus value
    seconds: float | None  # its estimate (waiting) or what it has left (running); None: unknown
    lane: bool  # running in the short lane
    turn: tuple[int, float] | None  # waiting: (rank, since when, wall clock); None while running
    finished_epochs: int
    total_epochs: int
    stale: bool = False  # its process has not rewritten its queue for STALE_SECONDS


class Slot:
    """One held slot (a lock file's descriptor); `release` frees it (also done by the process's end)."""

    def __init__(self, fd: int, name: str):
        self.fd, self.name = fd, name

    def release(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


class SharedQueue:
    """One server process's side of the shared folder."""

    def __init__(self, folder: str | Path, slots: int, process: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.slots = int(slots)
        self.process = int(process)
        self._lock = threading.Lock()
        self._others: tuple[float, list[RemoteJob]] = (-1.0, [])
        self._published: tuple[float, list[dict[str, Any]] | None] = (-1.0, None)
        # Held for this process's life: readers of queue-<k>.json know it is current while they cannot take it.
        self._alive = os.open(self.folder / f"alive-{self.process}", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + ALIVE_WAIT_SECONDS
        while True:  # held by a previous process k only while it still ends
            try:
                fcntl.flock(self._alive, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:  # never hang a page: the others then ignore this queue
                    log.warning("server process %d: its alive lock stays held; the others ignore its queue", process)
                    break
                time.sleep(0.1)

    # --- slots -----------------------------------------------------------------------------------
    def acquire(self, long: bool, lane: bool = False) -> Slot | None:
        """A free slot (the lane when `lane`), marked long or short; None when every one is held."""
        for name in ["lane"] if lane else [f"slot-{i}" for i in range(self.slots)]:
            fd = os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"long" if long else b"short", 0)
            return Slot(fd, name)
        return None

    def every_slot_long(self) -> bool:
        """Whether every slot is held by a long training, machine-wide (the short lane's condition)."""
        for i in range(self.slots):
            fd = os.open(self.folder / f"slot-{i}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # held: by what?
                    if os.pread(fd, 8, 0) != b"long":
                        return False
                else:  # free
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return False
            finally:
                os.close(fd)
        return True

    def lane_busy(self) -> bool:
        """Whether some process runs a training in the short lane."""
        slot = self.acquire(long=False, lane=True)
        if slot is None:
            return True
        slot.release()
        return False

    # --- the published queues --------------------------------------------------------------------
    def publish(self, jobs: list[dict[str, Any]]) -> None:
        """Replace this process's published queue (RemoteJob fields but `process`); an unchanged queue is
        rewritten only as a heartbeat."""
        written, last = self._published
        if jobs == last and time.monotonic() - written < HEARTBEAT_SECONDS:
            return
        self._published = (time.monotonic(), jobs)
        path = self.folder / f"queue-{self.process}.json"
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps({"process": self.process, "written": time.time(), "jobs": jobs}))
        os.replace(temporary, path)

    def others(self) -> list[RemoteJob]:
        """The other live processes' jobs (re-read at most every READ_TTL seconds)."""
        with self._lock:
            read_at, jobs = self._others
            if time.monotonic() - read_at < READ_TTL:
                return jobs
        jobs = []
        for path in sorted(self.folder.glob("queue-*.json")):
            try:
                process = int(path.stem.split("-", 1)[1])
            except ValueError:
                continue
            if process == self.process or not self._is_alive(process):
                continue
            try:
                published = json.loads(path.read_text())
                stale = time.time() - float(published["written"]) > STALE_SECONDS
                for job in published["jobs"]:
                    turn = job.get("turn")
                    jobs.append(
                        RemoteJob(
                            process=process,
                            job_id=int(job["job_id"]),
                            who=str(job["who"]),
                            label=str(job["label"]),
                            status=str(job["status"]),
                            seconds=None if job["seconds"] is None else float(job["seconds"]),
                            lane=bool(job["lane"]),
                            turn=None if turn is None else (int(turn[0]), float(turn[1])),
                            finished_epochs=int(job["finished_epochs"]),
                            total_epochs=int(job["total_epochs"]),
                            stale=stale,
                        )
                    )
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                log.warning("unreadable queue file of server process %d; its jobs are not shown", process)
        with self._lock:
            self._others = (time.monotonic(), jobs)
        return jobs

    def _is_alive(self, process: int) -> bool:
        """Whether server process `process` holds its alive lock (a dead one's files are leftovers)."""
        path = self.folder / f"alive-{process}"
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    # --- the teacher's cancels of other processes' jobs ----------------------------------------------
    def ask_cancel(self, process: int, job_id: int) -> None:
        (self.folder / f"cancel-{int(process)}-{int(job_id)}").touch()

    def cancels(self) -> list[int]:
        """Job ids the teacher asked this process to cancel (each request is taken once)."""
        ids = []
        for path in self.folder.glob(f"cancel-{self.process}-*"):
            try:
                ids.append(int(path.name.rsplit("-", 1)[1]))
                path.unlink()
            except (ValueError, OSError):
                continue
        return ids

    def close(self) -> None:
        try:
            (self.folder / f"queue-{self.process}.json").unlink(missing_ok=True)
        finally:
            os.close(self._alive)
