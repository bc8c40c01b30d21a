"""Importing tables: plain column names an agent can write unquoted, the narrowest type
that holds every value, and each worksheet as its own table."""

from __future__ import annotations

import datetime as dt
import io
import sqlite3

import pytest

from artifacts import files, tables
from datasources.sqlguard import query_check
from rivercore.errors import InvalidInput
from tests.artifacts.conftest import xlsx_bytes


def _import(tmp_path, content: bytes, name: str = "data.csv"):
    file_type = files.type_for(name)
    stream = io.BytesIO(content)
    path = tmp_path / "t.sqlite3"
    if file_type.kind == "xlsx":
        sources = tables.xlsx_tables(stream=stream, field_name="file")
    else:
        sources = tables.csv_tables(stream=stream, file_type=file_type, stem=name.rpartition(".")[0],
                                    field_name="file")
    specs = tables.sqlite_import(path=path, tables=sources, max_rows=1000, field_name="file")
    return specs, sqlite3.connect(path)


@pytest.mark.parametrize("raw, expected", [
    ("Order Date", "order_date"),
    ("Région", "region"),
    ("  amount (€) ", "amount"),
    ("2024", "c_2024"),
    ("select", "select_"),
    ("when", "when_"),
    ("order", "order_"),
    ("group", "group_"),
    ("", "column_1"),
    ("数量", "column_1"),
    ("sqlite_master", "t_sqlite_master"),
    ("x" * 100, "x" * 63),
])
def test_column_names_become_plain_identifiers(raw, expected):
    assert tables.identifier(raw, fallback="column_1", taken=set()) == expected


def test_repeated_names_are_numbered():
    taken: set[str] = set()
    assert [tables.identifier(n, fallback="c", taken=taken) for n in ("Total", "total", "TOTAL ", "total_2")] == [
        "total", "total_2", "total_3", "total_2_2"]


def test_every_column_name_passes_the_sql_guard_unquoted(tmp_path):
    header = ["Order", "From", "Select", "Where", "Group", "Limit", "Table", "Index", "Key", "Value", "Date", "User"]
    content = (",".join(header) + "\n" + ",".join("1" for _ in header) + "\n").encode()
    [spec], _ = _import(tmp_path, content, "keywords.csv")
    sql = f"SELECT {', '.join(spec.columns)} FROM {spec.name}"
    verdict = query_check(sql=sql, dialect="sqlite", allowed_tables=[spec.name], schema_name=None)
    assert verdict.allowed, verdict.reason


def test_types_are_the_narrowest_that_hold_every_value(tmp_path):
    content = (
        b"id,price,zip,mixed,empty,big,flag\n"
        b"1,2.5,02139,7,,99999999999999999999,true\n"
        b"2,3,10001,x,,1,false\n"
        b"-3,1e3,,8.5,,2,\n"
    )
    [spec], db = _import(tmp_path, content)
    assert dict(zip(spec.columns, spec.types, strict=True)) == {
        "id": "INTEGER", "price": "REAL", "zip": "TEXT", "mixed": "TEXT", "empty": "TEXT", "big": "TEXT",
        "flag": "TEXT"}
    rows = db.execute(f"SELECT id, price, zip, mixed, empty, big FROM {spec.name} ORDER BY rowid").fetchall()
    assert rows == [(1, 2.5, "02139", "7", None, "99999999999999999999"), (2, 3.0, "10001", "x", None, "1"),
                    (-3, 1000.0, None, "8.5", None, "2")]
    assert db.execute(f"SELECT SUM(id), SUM(price) FROM {spec.name}").fetchone() == (0, 1005.5)


def test_the_delimiter_is_sniffed_and_short_rows_padded(tmp_path):
    content = b"name;amount;note\nA;1;first\nB;2\nC;3;third;extra\n"
    [spec], db = _import(tmp_path, content)
    assert spec.columns == ["name", "amount", "note", "column_4"]
    assert db.execute(f"SELECT name, amount, note, column_4 FROM {spec.name}").fetchall() == [
        ("A", 1, "first", None), ("B", 2, None, None), ("C", 3, "third", "extra")]


def test_a_tsv_and_a_bom_are_read(tmp_path):
    [spec], db = _import(tmp_path, "\ufeffcity\tpeople\nOslo\t700000\n".encode(), "cities.tsv")
    assert (spec.name, spec.columns) == ("cities", ["city", "people"])
    assert db.execute("SELECT people FROM cities").fetchone() == (700000,)


def test_each_worksheet_is_a_table(tmp_path):
    content = xlsx_bytes({
        "Q1 Sales": [["Region", "Amount", "When"], ["North", 10, dt.date(2024, 1, 2)], ["South", 2.5, None]],
        "Empty": [],
        "Targets": [[None, None], ["Region", "Target"], ["North", 12]],
    })
    specs, db = _import(tmp_path, content, "book.xlsx")
    assert [(s.name, s.columns, s.types, s.rows) for s in specs] == [
        ("q1_sales", ["region", "amount", "when_"], ["TEXT", "REAL", "TEXT"], 2),
        ("targets", ["region", "target"], ["TEXT", "INTEGER"], 1),
    ]
    assert db.execute("SELECT SUM(amount) FROM q1_sales").fetchone() == (12.5,)
    assert db.execute("SELECT when_ FROM q1_sales WHERE region = 'North'").fetchone() == ("2024-01-02T00:00:00",)


def test_a_value_beyond_the_last_readable_column_refuses_the_workbook(tmp_path):
    row = [None] * tables.MAX_COLUMNS + ["far right"]
    with pytest.raises(InvalidInput, match="more than 200 columns"):
        _import(tmp_path, xlsx_bytes({"S": [["a"], row]}), "wide.xlsx")


def test_a_sheet_claiming_a_huge_row_number_is_refused_quickly(tmp_path):
    """A row numbered past Excel's last row would make the reader yield a million empty
    rows first; the count stops it."""
    import zipfile

    source = io.BytesIO(xlsx_bytes({"S": [["a"], [1]]}))
    out = io.BytesIO()
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for name in old.namelist():
            data = old.read(name)
            if name == "xl/worksheets/sheet1.xml":
                data = data.replace(b'<row r="2"', b'<row r="99999999"').replace(b'r="A2"', b'r="A99999999"')
            new.writestr(name, data)
    with pytest.raises(InvalidInput, match="more rows than Excel allows"):
        _import(tmp_path, out.getvalue(), "gap.xlsx")
