"""ReferenceStore: cached reference posteriors, one folder per reference id.

Layout of <cache>/references/<reference id>/ (the run store's conventions):
    samples.safetensors   weights per layer ("w0", "w1", ...) and "log_noise", float64
    reference.json        config, dataset name and fingerprint, diagnostics, seconds
    manifest.json         sha256 and size of both files; written LAST

Written in <references>/.tmp/ and renamed into place, under a per-id file lock;
nothing is ever unpickled. The id hashes the reference config with the
dataset fingerprint, so the same request on the same data finds its result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
from filelock import FileLock

from core.errors import RunStoreError
from core.reference.posterior import ReferenceConfig, ReferencePosterior, run_nuts, stderr_progress
from core.runs.config import normalise
from core.runs.store import _fsync_dir, _fsync_file, _write_json, default_cache_dir, sha256_file

SCHEMA_VERSION = 1
SAMPLES = "samples.safetensors"
META = "reference.json"
MANIFEST = "manifest.json"


class ReferenceStoreError(RunStoreError):
    """A cached reference is missing or corrupt."""


def reference_id(config: ReferenceConfig, dataset_fingerprint: str) -> str:
    # Optional fields left unset (None) stay out, so adding one keeps the ids of earlier references.
    values = {k: v for k, v in config.to_dict().items() if v is not None}
    text = json.dumps(normalise(values), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"bnn-reference\nschema={SCHEMA_VERSION}\ndata={dataset_fingerprint}\n{text}".encode())
    return digest.hexdigest()[:16]


class ReferenceStore:
    def __init__(self, cache_dir: str | Path | None = None):
        base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.root = base / "references"

    def path(self, ref_id: str) -> Path:
        return self.root / ref_id

    def lock(self, ref_id: str) -> FileLock:
        (self.root / ".locks").mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / ".locks" / f"{ref_id}.lock"))

    def exists(self, ref_id: str) -> bool:
        return (self.path(ref_id) / MANIFEST).is_file()

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def write(self, posterior: ReferencePosterior) -> Path:
        from safetensors.numpy import save_file

        ref_id = posterior.reference_id
        (self.root / ".tmp").mkdir(parents=True, exist_ok=True)
        temp = self.root / ".tmp" / f"{ref_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        temp.mkdir()
        try:
            arrays = {f"w{i}": np.ascontiguousarray(w, dtype=np.float64) for i, w in enumerate(posterior.weights)}
            arrays["log_noise"] = np.ascontiguousarray(posterior.log_noise, dtype=np.float64)
            save_file(arrays, str(temp / SAMPLES))
            _write_json(
                temp / META,
                {
                    "reference_id": ref_id,
                    "schema_version": SCHEMA_VERSION,
                    "config": posterior.config.to_dict(),
                    "dataset": posterior.config.dataset,
                    "dataset_fingerprint": posterior.dataset_fingerprint,
                    "target_mean": posterior.target_mean,
                    "target_std": posterior.target_std,
                    "diagnostics": posterior.diagnostics,
                    "seconds": posterior.seconds,
                    "created": time.time(),
                },
            )
            for name in (SAMPLES, META):
                _fsync_file(temp / name)
            files = {
                name: {"sha256": sha256_file(temp / name), "bytes": (temp / name).stat().st_size}
                for name in (SAMPLES, META)
            }
            _write_json(temp / MANIFEST, {"reference_id": ref_id, "files": files})
            _fsync_dir(temp)
            final = self.path(ref_id)
            if final.exists():
                trash = self.root / ".tmp" / f"{ref_id}.old.{uuid.uuid4().hex[:8]}"
                os.rename(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(temp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        return final

    def _fail(self, ref_id: str, what: str) -> ReferenceStoreError:
        return ReferenceStoreError(
            f"reference {ref_id}: {what}; delete {self.path(ref_id)} or run "
            f"`python -m core reference DATASET --force` to recompute it"
        )

    def read_meta(self, ref_id: str) -> dict[str, Any]:
        path = self.path(ref_id) / META
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._fail(ref_id, f"cannot parse {path} ({exc})") from None

    def read(self, ref_id: str) -> ReferencePosterior:
        """Verify both checksums, then parse; ReferenceStoreError naming the file on any problem."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = self.path(ref_id)
        if not (folder / MANIFEST).is_file():
            raise self._fail(ref_id, f"not in the store {self.root} (or incomplete)")
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            files = manifest["files"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise self._fail(ref_id, f"cannot parse {folder / MANIFEST} ({exc})") from None
        for name in (SAMPLES, META):
            entry = files.get(name) if isinstance(files, dict) else None
            if not (folder / name).is_file() or not isinstance(entry, dict):
                raise self._fail(ref_id, f"{folder / name} is missing")
            if sha256_file(folder / name) != entry.get("sha256"):
                raise self._fail(ref_id, f"{folder / name} does not match its checksum (corrupted or modified)")
        meta = self.read_meta(ref_id)
        try:
            arrays = load_file(str(folder / SAMPLES))
            config = ReferenceConfig.from_dict(meta["config"])
            layers = len(config.hidden) + 1
            return ReferencePosterior(
                config=config,
                weights=[arrays[f"w{i}"] for i in range(layers)],
                log_noise=arrays["log_noise"],
                diagnostics=dict(meta.get("diagnostics") or {}),
                dataset_fingerprint=str(meta["dataset_fingerprint"]),
                target_mean=float(meta.get("target_mean", 0.0)),
                target_std=float(meta.get("target_std", 1.0)),
                seconds=float(meta.get("seconds", 0.0)),
                reference_id=ref_id,
            )
        except (SafetensorError, OSError, KeyError, TypeError, ValueError) as exc:
            raise self._fail(ref_id, f"the stored files do not describe a reference ({exc})") from None

    def list(self) -> list[dict[str, Any]]:
        """reference.json of every complete reference (unparseable ones get status "corrupt")."""
        rows = []
        for ref_id in self.ids():
            if not self.exists(ref_id):
                continue
            try:
                meta = self.read_meta(ref_id)
                rows.append(dict(meta, reference_id=ref_id, status="ok"))
            except ReferenceStoreError as exc:
                rows.append({"reference_id": ref_id, "status": "corrupt", "error": str(exc)})
        return rows

    def find_for_dataset(
        self, fingerprint: str, hidden: tuple[int, ...] | None = None, prior: str = "gaussian"
    ) -> str | None:
        """The newest cached reference on this exact data (preferring the same widths), or None."""
        rows = [
            r
            for r in self.list()
            if r.get("status") == "ok"
            and r.get("dataset_fingerprint") == fingerprint
            and r.get("config", {}).get("prior") == prior
        ]
        if not rows:
            return None
        same = [r for r in rows if hidden is not None and tuple(r["config"].get("hidden", ())) == tuple(hidden)]
        best = max(
            same or rows,
            key=lambda r: (r["config"].get("samples", 0) * r["config"].get("chains", 1), r.get("created", 0.0)),
        )
        return str(best["reference_id"])


def compute_reference(
    config: ReferenceConfig,
    cache_dir: str | Path | None = None,
    force: bool = False,
    data_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = stderr_progress,
) -> tuple[ReferencePosterior, bool]:
    """The cached reference for `config`, else sample and store it. Returns (posterior, from_cache).

    A corrupt cached copy is reported through `progress` and recomputed.
    """
    dataset = config.load_dataset(data_dir)
    store = ReferenceStore(cache_dir)
    ref_id = reference_id(config, dataset.fingerprint)
    with store.lock(ref_id):
        if not force and store.path(ref_id).exists():
            try:
                return store.read(ref_id), True
            except ReferenceStoreError as exc:
                if progress is not None:
                    progress(f"warning: {exc}; recomputing")
        posterior = run_nuts(config, dataset, progress)
        posterior.reference_id = ref_id
        store.write(posterior)
    return posterior, False


def load_reference(ref_id: str, cache_dir: str | Path | None = None) -> ReferencePosterior:
    return ReferenceStore(cache_dir).read(ref_id)
