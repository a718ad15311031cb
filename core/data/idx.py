"""Reader and writer for the IDX format of MNIST-style files.

Layout: 2 zero bytes, a type byte (0x08 = uint8), a rank byte, then one
big-endian uint32 per dimension, then the data. Files may be gzipped; that is
detected by the gzip magic bytes, not the file name.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from core.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
IMAGES_MAGIC = 0x00000803  # uint8, rank 3 (n, rows, cols)
LABELS_MAGIC = 0x00000801  # uint8, rank 1 (n,)


def read_idx_bytes(path: str | Path) -> bytes:
    """Raw (decompressed) bytes of an IDX file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read IDX file {path}: {exc.strerror or exc}") from exc
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(
                f"{path} is a corrupt or truncated gzip file ({exc}); delete it and download it again"
            ) from exc
    return raw


def read_idx(path: str | Path, expected_magic: int | None = None) -> np.ndarray:
    """Parse an IDX file into a (read-only) uint8 array shaped as its header says.

    Raises DataError (naming the file) for a wrong magic number or when the
    data size does not match the header.
    """
    path = Path(path)
    data = read_idx_bytes(path)
    if len(data) < 4:
        raise DataError(f"{path} is too short to be an IDX file ({len(data)} bytes)")
    (magic,) = struct.unpack(">I", data[:4])
    if expected_magic is not None and magic != expected_magic:
        raise DataError(
            f"{path} has IDX magic number 0x{magic:08x}, expected 0x{expected_magic:08x}; "
            "is it the right file (images vs labels) and not corrupt?"
        )
    if magic >> 16 != 0 or (magic >> 8) & 0xFF != 0x08:
        raise DataError(f"{path} has magic number 0x{magic:08x}, which is not an unsigned-byte IDX file")
    rank = magic & 0xFF
    header_size = 4 + 4 * rank
    if rank == 0 or len(data) < header_size:
        raise DataError(f"{path} has a truncated or invalid IDX header (rank {rank})")
    shape = struct.unpack(f">{rank}I", data[4:header_size])
    expected_size = int(np.prod(shape, dtype=np.int64))
    actual_size = len(data) - header_size
    if actual_size != expected_size:
        raise DataError(
            f"{path} holds {actual_size} data bytes but its header {tuple(shape)} says "
            f"{expected_size}; the file is truncated or corrupt: delete it and fetch it again"
        )
    # Read-only view on the decoded bytes: no copy of the 47 MB MNIST training images.
    return np.frombuffer(data, dtype=np.uint8, offset=header_size).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray, *, compress: bool | None = None) -> Path:
    """Write a uint8 array as IDX (gzipped when `compress` or the name ends in .gz)."""
    path = Path(path)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    magic = 0x00000800 | array.ndim
    payload = struct.pack(f">I{array.ndim}I", magic, *array.shape) + array.tobytes()
    if compress is None:
        compress = path.suffix == ".gz"
    path.write_bytes(gzip.compress(payload, compresslevel=6) if compress else payload)
    return path
