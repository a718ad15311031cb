"""A machine without internet is reported offline, not only BNN_OFFLINE=1."""

from __future__ import annotations

import socket

import pytest

from core.data import download
from core.data.registry import dataset_info


class _Connection:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.delenv("BNN_OFFLINE", raising=False)
    monkeypatch.setattr(download, "_probe_cache", {})
    calls = []

    def install(reachable: bool):
        def connect(address, timeout=None):
            calls.append(address)
            if not reachable:
                raise socket.gaierror(-2, "Name or service not known")
            return _Connection()

        monkeypatch.setattr(socket, "create_connection", connect)

    install.calls = calls
    return install


def test_unreachable_hosts_make_downloadable_sets_unavailable(probe, tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    probe(False)
    info = dataset_info("mnist", data_dir=tmp_path)
    assert info.availability == "unavailable"
    assert "offline" in info.detail and "first use" not in info.detail
    assert "mnist/" in info.detail  # still says where to put the files
    # the answer is remembered: a listing does not probe once per dataset
    before = len(probe.calls)
    dataset_info("fashion-mnist", data_dir=tmp_path)
    assert len(probe.calls) == before


def test_reachable_hosts_offer_the_download(probe, tmp_path, monkeypatch):
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    probe(True)
    info = dataset_info("mnist", data_dir=tmp_path)
    assert info.availability == "download" and "first use" in info.detail


def test_fetch_refuses_at_once_when_offline(probe, tmp_path):
    from core.errors import DataError

    probe(False)
    remote = download.RemoteFile(name="x.gz", urls=("https://ossci-datasets.s3.amazonaws.com/x.gz",))
    with pytest.raises(DataError, match="offline"):
        download.fetch(remote, tmp_path, what="x")
