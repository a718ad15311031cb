"""PHONEME and UCI classification parsers on small synthetic files."""

from __future__ import annotations

import numpy as np
import pytest

from core.data import load_dataset
from core.data.tabular_parsing import read_arff, read_table_any
from core.errors import DataError


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _phoneme_text(n_per_class=4, official_split=True):
    header = ",".join(['"row.names"'] + [f'"x.{i}"' for i in range(1, 257)] + ['"g"', '"speaker"'])
    lines = [header]
    rng = np.random.default_rng(0)
    row = 1
    for label in ("aa", "ao", "dcl", "iy", "sh"):
        for k in range(n_per_class):
            part = "train" if (k % 4 != 3 or not official_split) else "test"
            speaker = f"{part}.dr1.mcpm0.sa1" if official_split else f"spk{k}"
            values = ",".join(f"{v:.3f}" for v in rng.normal(size=256))
            lines.append(f'"{row}",{values},"{label}","{speaker}"')
            row += 1
    return "\n".join(lines) + "\n"


def test_phoneme_parser_uses_official_speaker_split(tmp_path, isolated_data_env):
    _write(tmp_path / "phoneme" / "phoneme.data", _phoneme_text())
    ds = load_dataset("phoneme", data_dir=tmp_path)
    assert ds.source == "data-dir" and ds.input_shape == (256,)
    assert ds.class_names == ("aa", "ao", "dcl", "iy", "sh") and ds.n_classes == 5
    assert (ds.n_train, ds.n_test) == (15, 5)
    assert np.bincount(ds.y_test).tolist() == [1] * 5


def test_phoneme_without_official_split_gets_seeded_stratified_split(tmp_path, isolated_data_env):
    _write(tmp_path / "phoneme" / "phoneme.data", _phoneme_text(10, official_split=False))
    a = load_dataset("phoneme", data_dir=tmp_path, seed=0)
    b = load_dataset("phoneme", data_dir=tmp_path, seed=0)
    c = load_dataset("phoneme", data_dir=tmp_path, seed=1)
    assert (a.n_train, a.n_test) == (40, 10)
    assert np.bincount(a.y_test).tolist() == [2] * 5
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_phoneme_wrong_columns(tmp_path, isolated_data_env):
    _write(tmp_path / "phoneme" / "phoneme.data", "a,b\n1,2\n")
    with pytest.raises(DataError, match="phoneme.data"):
        load_dataset("phoneme", data_dir=tmp_path)


CRX_ROWS = [
    "b,30.83,0,u,g,w,v,1.25,t,t,01,f,g,00202,0,+",
    "a,58.67,4.46,u,g,q,h,3.04,t,t,06,f,g,00043,560,+",
    "?,24.50,0.5,u,g,q,h,1.5,t,f,0,f,g,00280,824,+",
    "b,27.83,1.54,u,g,w,v,3.75,t,t,05,t,g,00100,3,+",
    "b,20.17,5.625,u,g,w,v,1.71,t,f,0,f,s,00120,0,+",
    "b,32.08,4,u,g,m,v,2.5,t,f,0,t,g,00360,0,-",
    "b,33.17,1.04,u,g,r,h,6.5,t,f,0,t,g,00164,31285,-",
    "a,22.92,11.585,u,g,cc,v,0.04,t,f,0,f,g,00080,1349,-",
    "b,?,0.5,y,p,k,v,0.835,t,f,0,t,g,00320,0,-",
    "b,23.25,4,u,g,c,bb,0.25,t,f,0,t,g,?,0,-",
]


def test_credit_approval_missing_values_and_one_hot(tmp_path, isolated_data_env):
    _write(tmp_path / "credit-approval" / "crx.data", "\n".join(CRX_ROWS) + "\n")
    ds = load_dataset("credit-approval", data_dir=tmp_path)
    assert ds.class_names == ("+", "-") and (ds.n_train, ds.n_test) == (8, 2)
    assert np.bincount(ds.y_test).tolist() == [1, 1]
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    # 6 numeric columns + one-hot: A1 {?,a,b}=3, A4 {u,y}=2, A5 {g,p}=2, A6 7, A7 {bb,h,v}=3,
    # A9 {t}=1, A10 {t,f}=2, A12 {t,f}=2, A13 {g,s}=2  -> 6 + 24 = 30
    assert ds.in_features == 30 and ds.input_shape == (30,)
    one_hot_a1 = ds.x_train[:, 0:3]
    assert np.all(one_hot_a1.sum(axis=1) == 1)


def test_bank_marketing_semicolon_quoted(tmp_path, isolated_data_env):
    header = '"age";"job";"marital";"balance";"y"'
    rows = [
        f'{20 + i};"{"admin." if i % 2 else "blue-collar"}";"married";{i * 100};"{"yes" if i % 3 == 0 else "no"}"'
        for i in range(30)
    ]
    _write(tmp_path / "bank-marketing" / "bank-full.csv", "\n".join([header] + rows) + "\n")
    ds = load_dataset("bank-marketing", data_dir=tmp_path)
    assert ds.class_names == ("no", "yes") and ds.n_train + ds.n_test == 30
    assert ds.in_features == 2 + 2 + 1  # age, balance, job one-hot (2), marital (1)
    assert np.bincount(ds.y_test).tolist() == [4, 2]


def test_adult_official_split_and_label_dots(tmp_path, isolated_data_env):
    row = (
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, "
        "White, Male, 2174, 0, 40, United-States, {}"
    )
    train = "\n".join(row.format("<=50K" if i % 2 else ">50K") for i in range(6)) + "\n\n"
    test = "|1x3 Cross validator\n" + "\n".join(row.format("<=50K." if i % 2 else ">50K.") for i in range(4)) + "\n"
    _write(tmp_path / "adult" / "adult.data", train)
    _write(tmp_path / "adult" / "adult.test", test)
    ds = load_dataset("adult", data_dir=tmp_path)
    assert (ds.n_train, ds.n_test) == (6, 4)
    assert ds.class_names == ("<=50K", ">50K")


ARFF = """% comment
@RELATION raisin
@ATTRIBUTE Area INTEGER
@ATTRIBUTE 'Major Axis' REAL
@ATTRIBUTE Class {Kecimen,Besni}

@DATA
{rows}
"""


def test_arff_and_csv_class_tables(tmp_path, isolated_data_env):
    rows = "\n".join(f"{1000 + i},{i * 0.5},{'Kecimen' if i < 10 else 'Besni'}" for i in range(20))
    path = _write(tmp_path / "raisins" / "Raisin_Dataset.arff", ARFF.replace("{rows}", rows))
    table = read_arff(path)
    assert table.names == ["Area", "Major Axis", "Class"] and len(table.rows) == 20
    ds = load_dataset("raisins", data_dir=tmp_path)
    assert ds.input_shape == (2,) and ds.class_names == ("Besni", "Kecimen")
    assert np.bincount(ds.y_test).tolist() == [2, 2]
    csv_path = _write(
        tmp_path / "x" / "pistachio.csv",
        "A;B;Class\n" + "\n".join(f"{i};{i * 2};{'K' if i % 2 else 'S'}" for i in range(10)) + "\n",
    )
    assert read_table_any(csv_path).names == ["A", "B", "Class"]


def test_excel_only_file_asks_for_csv_export(tmp_path, isolated_data_env):
    _write(tmp_path / "dry-beans" / "Dry_Bean_Dataset.xlsx", "not really excel")
    with pytest.raises(DataError, match=r"export.*CSV.*dry-beans\.csv"):
        load_dataset("dry-beans", data_dir=tmp_path)


def test_wrong_class_count_is_reported(tmp_path, isolated_data_env):
    rows = "\n".join(f"{i},{i},{'A' if i % 3 else 'B'}" for i in range(12))
    _write(tmp_path / "dry-beans" / "dry-beans.csv", "a,b,Class\n" + rows + "\n")
    with pytest.raises(DataError, match="expected 7 classes"):
        load_dataset("dry-beans", data_dir=tmp_path)


def test_ragged_row_names_file_and_row(tmp_path):
    path = _write(tmp_path / "bad.csv", "a,b,Class\n1,2,X\n1,X\n")
    with pytest.raises(DataError, match=r"bad\.csv: row 3"):
        read_table_any(path)


@pytest.mark.parametrize(
    "name, file_name",
    [
        ("phoneme", "phoneme.data"),
        ("credit-approval", "crx.data"),
        ("bank-marketing", "bank-full.csv"),
        ("adult", "adult.test"),
        ("dry-beans", "Dry_Bean_Dataset.arff"),
        ("pistachio", "Pistachio_16_Features_Dataset.arff"),
        ("raisins", "Raisin_Dataset.arff"),
    ],
)
def test_offline_download_only_sets_explain_what_to_do(name, file_name, isolated_data_env):
    with pytest.raises(DataError) as info:
        load_dataset(name)
    message = str(info.value)
    assert file_name in message and f"{name}/" in message
    assert "BNN_DATA_DIR" in message and "BNN_OFFLINE" in message
