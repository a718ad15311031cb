"""Names, list_datasets and the `datasets` CLI command."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.data import DATASET_NAMES, list_datasets, load_dataset
from core.errors import DataError

REQUIRED = [
    "toy-sine-gaps",
    "toy-cubic",
    "toy-hetero",
    "two-moons",
    "two-spirals",
    "mnist",
    "fashion-mnist",
    "kmnist",
    "mnist-small",
    "fashion-mnist-small",
    "phoneme",
    "uci-boston",
    "uci-concrete",
    "uci-energy",
    "uci-kin8nm",
    "uci-naval",
    "uci-power",
    "uci-protein",
    "uci-wine",
    "uci-yacht",
    "credit-approval",
    "bank-marketing",
    "adult",
    "dry-beans",
    "pistachio",
    "raisins",
]
UCI9 = [n for n in REQUIRED if n.startswith("uci-")]


def test_names_are_the_contract():
    assert list(DATASET_NAMES) == REQUIRED


def test_unknown_name_suggests_close_matches():
    with pytest.raises(DataError) as info:
        load_dataset("fashion-mnst")
    message = str(info.value)
    assert "Did you mean fashion-mnist" in message and "uci-yacht" in message


def test_list_without_data_dir(isolated_data_env):
    infos = {i.name: i for i in list_datasets()}
    assert infos["mnist-small"].availability == "bundled"
    assert infos["fashion-mnist-small"].n_train == 10000
    assert infos["two-spirals"].availability == "generated"
    assert infos["mnist"].availability == "unavailable"  # offline in tests
    assert "train-images-idx3-ubyte.gz" in infos["mnist"].detail
    assert infos["uci-protein"].splits == 5 and infos["uci-boston"].splits == 20
    assert all(infos[n].availability == "unavailable" for n in UCI9)


def test_list_with_data_dir(data_dir, isolated_data_env):
    infos = {i.name: i for i in list_datasets(data_dir)}
    for name in ["mnist", "fashion-mnist"] + UCI9:
        assert infos[name].availability == "data-dir", name
        assert str(data_dir) in infos[name].detail
    assert infos["kmnist"].availability == "unavailable"


def _run_cli(capsys, *argv):
    code = main(["datasets", *argv])
    out = capsys.readouterr().out
    return code, out


def test_cli_json_lists_all_names(capsys, isolated_data_env):
    code, out = _run_cli(capsys, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == REQUIRED
    by_name = {r["name"]: r for r in rows}
    assert by_name["mnist-small"]["availability"] == "bundled"
    assert by_name["mnist"]["input_shape"] == [28, 28]


def test_cli_table_with_data_dir(capsys, data_dir, isolated_data_env):
    code, out = _run_cli(capsys, "--data-dir", str(data_dir))
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "bundled" in lines["mnist-small"]
    for name in ["mnist", "fashion-mnist"] + UCI9:
        assert "data-dir" in lines[name], name
