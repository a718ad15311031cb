"""Checksums and downloads: temp file then rename, never silently overwrite.

Downloads are disabled with BNN_OFFLINE=1 and time out after a few seconds
so that an offline machine gets a clear DataError quickly.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from core.data.locations import DATA_DIR_ENV, OFFLINE_ENV, is_offline
from core.errors import DataError

CONNECT_TIMEOUT_S = 3.0
USER_AGENT = "bnn-explorer/0.1 (dataset download)"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: its local name, where to get it, its checksum.

    `zip_member` set means the URL is a zip archive and the file is the first
    member whose name ends with it.
    """

    name: str
    urls: tuple[str, ...]
    md5: str | None = None
    zip_member: str | None = None


def md5_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5(path: str | Path, expected: str) -> None:
    """Raise DataError naming the file when its md5 is not `expected`."""
    actual = md5_file(path)
    if actual.lower() != expected.lower():
        raise DataError(
            f"checksum mismatch for {path}: md5 {actual}, expected {expected}. "
            "The file is corrupt or a different version: delete it and download it again "
            "(or replace it with the official file)"
        )


def read_md5sums(path: str | Path) -> dict[str, str]:
    """Parse an `md5sum`-style listing ("<hex>  <relative path>") into {path: md5}."""
    sums = {}
    for line in Path(path).read_text().splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


# A machine without internet is offline too, not only one with BNN_OFFLINE=1: listings and the
# dashboard's form must not promise a download that cannot happen. One short connection attempt,
# remembered for a minute.
PROBE_HOSTS = (("ossci-datasets.s3.amazonaws.com", 443), ("archive.ics.uci.edu", 443))
PROBE_TIMEOUT_S = 1.5
PROBE_TTL_S = 60.0
_probe_cache: dict[str, tuple[float, str | None]] = {}


def network_reason() -> str | None:
    """Why the dataset hosts cannot be reached (no DNS, no route), or None when one answers."""
    import socket
    import time

    now = time.monotonic()
    cached = _probe_cache.get("probe")
    if cached is not None and now - cached[0] < PROBE_TTL_S:
        return cached[1]
    problems = []
    for host, port in PROBE_HOSTS:
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
                reason = None
                break
        except OSError as exc:
            problems.append(f"{host}: {exc.strerror or exc}")
    else:
        reason = f"this machine is offline ({problems[0]})"
    _probe_cache["probe"] = (now, reason)
    return reason


def offline_reason() -> str | None:
    """Why downloading is impossible right now, or None when it may be tried."""
    if is_offline():
        return f"downloads are disabled ({OFFLINE_ENV}=1)"
    return network_reason()


def fetch(remote: RemoteFile, folder: Path, *, what: str) -> Path:
    """Download `remote` into `folder` and verify it; return the local path.

    An existing file is kept when its checksum matches and reported otherwise:
    we never overwrite a user's file silently.
    """
    target = folder / remote.name
    if target.exists():
        if remote.md5:
            verify_md5(target, remote.md5)
        return target
    reason = offline_reason()
    if reason:
        raise DataError(f"cannot download {what}: {reason}")
    folder.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in remote.urls:
        try:
            downloaded = _download_to_temp(url, folder)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            errors.append(f"{url}: {getattr(exc, 'reason', exc)}")
            continue
        try:
            if remote.zip_member:
                extracted = _extract_member(downloaded, remote.zip_member, folder, url)
                downloaded.unlink(missing_ok=True)
                downloaded = extracted
            if remote.md5:
                verify_md5(downloaded, remote.md5)
            else:
                print(
                    f"note: no published checksum for {remote.name}; md5 of the download is {md5_file(downloaded)}",
                    file=sys.stderr,
                )
            if target.exists():  # appeared meanwhile (another process): keep theirs
                downloaded.unlink(missing_ok=True)
            else:
                os.replace(downloaded, target)
            return target
        except BaseException:
            downloaded.unlink(missing_ok=True)
            raise
    raise DataError(f"could not download {what} ({'; '.join(errors)})")


def _download_to_temp(url: str, folder: Path) -> Path:
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    handle, temp_name = tempfile.mkstemp(prefix=".download-", suffix=".part", dir=folder)
    temp_path = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT_S) as response:
            print(f"downloading {url}", file=sys.stderr)
            shutil.copyfileobj(response, out, length=1 << 20)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise
    return temp_path


def _extract_member(archive: Path, member_suffix: str, folder: Path, url: str) -> Path:
    try:
        with zipfile.ZipFile(archive) as zipped:
            names = zipped.namelist()
            for name in names:
                if name.lower().endswith(member_suffix.lower()) and "__MACOSX" not in name:
                    handle, temp_name = tempfile.mkstemp(prefix=".extract-", suffix=".part", dir=folder)
                    with os.fdopen(handle, "wb") as out, zipped.open(name) as member:
                        shutil.copyfileobj(member, out)
                    return Path(temp_name)
    except zipfile.BadZipFile as exc:
        raise DataError(f"the download from {url} is not a valid zip archive") from exc
    raise DataError(
        f"the archive from {url} has no file ending in {member_suffix!r} (it holds: {', '.join(names[:10])})"
    )


def missing_files_message(
    what: str, folder_name: str, file_names: list[str], data_dir: Path | None, *, extra: str = ""
) -> str:
    """The DataError text for absent files: which files, which folder, BNN_DATA_DIR."""
    files = ", ".join(file_names)
    if data_dir is not None:
        where = f"{data_dir / folder_name}/ (data dir {data_dir}; change it with {DATA_DIR_ENV} or --data-dir)"
    else:
        where = (
            f"<data dir>/{folder_name}/ and set {DATA_DIR_ENV}=<data dir> (or pass --data-dir); no data dir is set now"
        )
    message = f"{what} is not available: put the files {files} in {where}"
    return message + (f". {extra}" if extra else "")
