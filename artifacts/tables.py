"""Tabular files imported into a SQLite database an agent can query.

One database file per artifact version, one table per CSV/TSV file or per worksheet.
The first row names the columns; names become plain SQL identifiers (ASCII letters,
digits and ``_``, lower case, deduplicated, never a keyword), so an agent can write
``SELECT region, SUM(amount) FROM sales GROUP BY region`` without quoting. Each column
gets the narrowest type that holds every value: INTEGER, REAL or TEXT (empty cells are
NULL). Two passes over the rows, the first to size and type the table, the second to
insert; neither holds the file in memory.

Limits: at most MAX_COLUMNS columns, ``max_rows`` data rows per table, MAX_SHEETS
worksheets and MAX_CELL_CHARS per cell; beyond any of them the file is refused. The
whole import is bounded too: MAX_TOTAL_CHARS characters of cell text (a workbook's shared
strings let a small file repeat one long cell in every row) and IMPORT_SECONDS of wall
time for both passes; past either the file is refused, never half imported.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import re
import sqlite3
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import sqlglot
from sqlglot import exp

from artifacts.files import FileType, refused
from rivercore.errors import InvalidInput

MAX_COLUMNS = 200
MAX_SHEETS = 20
MAX_CELL_CHARS = 32_768
EXCEL_MAX_ROWS = 1_048_576  # rows a worksheet can have at all (gaps included)
IDENTIFIER_MAX = 63
BATCH = 1_000
_INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]{0,17})")
_DIGITS = re.compile(r"[+-]?[0-9]+")
# No leading zeros (a zip code or an account number is text) and no digits-only values
# (too long for INTEGER: text, not a rounded REAL).
_REAL = re.compile(r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
INT64 = 2**63 - 1
MAX_TOTAL_CHARS = 100_000_000
IMPORT_SECONDS = 60.0

Rows = Callable[[], Iterator[list[Any]]]  # a fresh pass over a table's rows


@dataclass
class TableSpec:
    name: str
    columns: list[str]
    types: list[str]
    rows: int


@dataclass
class _Shape:
    width: int = 0
    rows: int = 0
    types: list[str | None] = field(default_factory=list)  # None: no value seen yet


# --- names -----------------------------------------------------------------------------------


def _sqlite_reads(sql: str) -> bool:
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(sql).fetchall()
        return True
    except sqlite3.Error:
        return False
    finally:
        connection.close()


def _plain_column(name: str) -> bool:
    """sqlglot (the guard) and SQLite both read ``name`` unquoted as this column."""
    try:
        tree = sqlglot.parse_one(f"SELECT {name} FROM t", read="sqlite")
    except sqlglot.errors.SqlglotError:
        return False
    first = tree.expressions[0] if tree.expressions else None
    if not (isinstance(first, exp.Column) and first.name == name and not first.table):
        return False
    return _sqlite_reads(f'SELECT {name} FROM (SELECT 1 AS "{name}")')


def _plain_table(name: str) -> bool:
    try:
        tree = sqlglot.parse_one(f"SELECT x FROM {name}", read="sqlite")
    except sqlglot.errors.SqlglotError:
        return False
    table = tree.find(exp.Table)
    if not (isinstance(table, exp.Table) and table.name == name and not table.db):
        return False
    return _sqlite_reads(f'WITH "{name}" AS (SELECT 1 AS x) SELECT x FROM {name}')


def identifier(raw: Any, *, fallback: str, taken: set[str], table: bool = False) -> str:
    """A plain, unused SQL identifier for a header cell, sheet or file name.

    Accents are folded (``Région`` -> ``region``), anything else outside ``[a-z0-9_]``
    becomes ``_``; an empty result takes ``fallback``. A leading digit gets a prefix, and
    a word SQL reads as a keyword (``order``, ``select``) gets a trailing ``_``."""
    text = unicodedata.normalize("NFKD", str(raw if raw is not None else "")).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()[:IDENTIFIER_MAX] or fallback
    if text[0].isdigit():
        text = ("t_" if table else "c_") + text
    if text.startswith("sqlite_"):
        text = "t_" + text
    text = text[:IDENTIFIER_MAX]
    if not (_plain_table(text) if table else _plain_column(text)):
        text = text[: IDENTIFIER_MAX - 1] + "_"
    base, counter = text, 2
    while text in taken:
        suffix = f"_{counter}"
        text = base[: IDENTIFIER_MAX - len(suffix)] + suffix
        counter += 1
    taken.add(text)
    return text


# --- values ----------------------------------------------------------------------------------


def _normal(value: Any) -> Any:
    """A cell as None, int, float or str (dates as ISO text, booleans as 0/1)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
        return value or None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -INT64 - 1 <= value <= INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return str(value)


def _type_of(value: Any) -> str:
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "REAL"
    if _DIGITS.fullmatch(value):
        return "INTEGER" if _INTEGER.fullmatch(value) else "TEXT"
    if _REAL.fullmatch(value) and math.isfinite(float(value)):
        return "REAL"
    return "TEXT"


def _wider(current: str | None, seen: str) -> str:
    if current is None or current == seen:
        return seen
    if {current, seen} == {"INTEGER", "REAL"}:
        return "REAL"
    return "TEXT"


def _as(column_type: str, value: Any) -> Any:
    if value is None:
        return None
    if column_type == "INTEGER":
        return int(value)
    if column_type == "REAL":
        return float(value)
    return value if isinstance(value, str) else str(value)


def _trimmed(row: Iterable[Any]) -> list[Any]:
    cells = [_normal(value) for value in row]
    while cells and cells[-1] is None:
        cells.pop()
    return cells


# --- readers ---------------------------------------------------------------------------------


def _csv_delimiter(first_line: bytes) -> str:
    """The one of , ; tab | that the header line uses most (outside quotes); a header
    with none of them is a one-column file."""
    text = re.sub(r'"[^"]*"', "", first_line.decode("utf-8-sig", errors="replace"))
    counts = {delimiter: text.count(delimiter) for delimiter in (",", ";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def csv_tables(*, stream: BinaryIO, file_type: FileType, stem: str, field_name: str) -> list[tuple[str, Rows]]:
    """One table: rows of a UTF-8 CSV (the header line's delimiter, of , ; tab |) or TSV."""
    delimiter = "\t" if file_type.kind == "tsv" else _csv_delimiter(stream.readline(64 * 1024))
    stream.seek(0)

    def rows() -> Iterator[list[Any]]:
        stream.seek(0)
        text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
        reader = csv.reader(text, csv.excel, delimiter=delimiter)
        try:
            yield from reader
        except csv.Error as exc:
            raise refused(field_name, f"the CSV cannot be read near line {reader.line_num}: {exc}") from None
        except UnicodeDecodeError:
            raise refused(field_name, f"the content is not UTF-8 text (near line {reader.line_num})") from None
        finally:
            text.detach()

    return [(stem, rows)]


def xlsx_tables(*, stream: BinaryIO, field_name: str) -> list[tuple[str, Rows]]:
    """One table per worksheet (chart sheets have none), read with openpyxl in read-only
    mode: values (formulas' cached results), never external links. Cells right of
    column MAX_COLUMNS + 1 are not read; a value there refuses the file."""
    import openpyxl  # imported here: only spreadsheet uploads pay for it

    stream.seek(0)
    try:
        book = openpyxl.load_workbook(stream, read_only=True, data_only=True, keep_links=False)
    except Exception:  # noqa: BLE001 - openpyxl raises many types on a malformed workbook
        raise refused(field_name, "the spreadsheet cannot be read (corrupt or not an .xlsx workbook)") from None
    sheets = list(book.worksheets)
    if len(sheets) > MAX_SHEETS:
        raise refused(field_name, f"the workbook has more than {MAX_SHEETS} worksheets")

    def reader(sheet) -> Rows:
        def rows() -> Iterator[list[Any]]:
            sheet.reset_dimensions()  # the file's own <dimension> may be wrong, or huge
            scanned = 0
            try:
                for row in sheet.iter_rows(max_col=MAX_COLUMNS + 1, values_only=True):
                    scanned += 1
                    if scanned > EXCEL_MAX_ROWS:
                        raise refused(field_name, f"worksheet {sheet.title!r} has more rows than Excel allows")
                    if row.count(None) != len(row):  # C-speed: gaps between rows come as empty tuples
                        yield list(row)
            except InvalidInput:
                raise
            except Exception:  # noqa: BLE001 - malformed sheet XML surfaces while iterating
                raise refused(field_name, f"worksheet {sheet.title!r} cannot be read (corrupt XML)") from None

        return rows

    return [(sheet.title, reader(sheet)) for sheet in sheets]


# --- import ----------------------------------------------------------------------------------


class _Budget:
    """Cell characters and wall time left for one file's import (both passes)."""

    def __init__(self, *, field_name: str):
        self.field_name = field_name
        self.chars = MAX_TOTAL_CHARS
        self.deadline = time.monotonic() + IMPORT_SECONDS
        self.rows = 0

    def row(self) -> None:
        self.rows += 1
        if self.rows % 1_000 == 0 and time.monotonic() > self.deadline:
            raise refused(self.field_name, f"the file takes longer than {IMPORT_SECONDS:.0f} s to import; "
                                           "split it into smaller files")

    def text(self, value: str) -> None:
        self.chars -= len(value)
        if self.chars < 0:
            raise refused(self.field_name, f"the file's cells hold more than {MAX_TOTAL_CHARS} characters in all")


def _shape(rows: Rows, *, label: str, max_rows: int, field_name: str,
           budget: _Budget | None = None) -> tuple[list[Any], _Shape] | None:
    """First pass: the header, the width, the data row count and each column's type.
    None for a table with no cell at all."""
    budget = budget or _Budget(field_name=field_name)
    header: list[Any] | None = None
    shape = _Shape()
    for raw in rows():
        budget.row()
        cells = _trimmed(raw)
        if not cells:
            continue
        if len(cells) > MAX_COLUMNS:
            raise refused(field_name, f"{label} has more than {MAX_COLUMNS} columns")
        if header is None:
            header = cells
            shape.width = len(cells)
            shape.types = [None] * shape.width
            continue
        shape.rows += 1
        if shape.rows > max_rows:
            raise refused(field_name, f"{label} has more than {max_rows} rows")
        if len(cells) > shape.width:
            shape.types += [None] * (len(cells) - shape.width)
            shape.width = len(cells)
        for index, value in enumerate(cells):
            if value is None:
                continue
            if isinstance(value, str):
                if len(value) > MAX_CELL_CHARS:
                    raise refused(field_name, f"{label}, row {shape.rows + 1}: a cell is longer than "
                                              f"{MAX_CELL_CHARS} characters")
                budget.text(value)
            shape.types[index] = _wider(shape.types[index], _type_of(value))
    if header is None:
        return None
    return header, shape


def sqlite_import(*, path: Path, tables: list[tuple[str, Rows]], max_rows: int, field_name: str) -> list[TableSpec]:
    """Write ``tables`` into a new SQLite file at ``path``; the caller deletes it on error.
    A file with no table holding any cell is refused."""
    specs: list[TableSpec] = []
    taken: set[str] = set()
    budget = _Budget(field_name=field_name)
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=OFF")
        connection.execute("PRAGMA synchronous=OFF")
        for position, (label, rows) in enumerate(tables, start=1):
            shaped = _shape(rows, label=f"table {label!r}", max_rows=max_rows, field_name=field_name,
                            budget=budget)
            if shaped is None:
                continue
            header, shape = shaped
            name = identifier(label, fallback=f"sheet_{position}", taken=taken, table=True)
            used: set[str] = set()
            columns = [
                identifier(header[i] if i < len(header) else None, fallback=f"column_{i + 1}", taken=used)
                for i in range(shape.width)
            ]
            types = [kind or "TEXT" for kind in shape.types]
            definition = ", ".join(f'"{c}" {t}' for c, t in zip(columns, types, strict=True))
            connection.execute(f'CREATE TABLE "{name}" ({definition})')
            insert = f'INSERT INTO "{name}" VALUES ({", ".join("?" * shape.width)})'
            batch: list[list[Any]] = []
            seen_header = False
            for raw in rows():
                budget.row()
                cells = _trimmed(raw)
                if not cells:
                    continue
                if not seen_header:
                    seen_header = True
                    continue
                cells += [None] * (shape.width - len(cells))
                batch.append([_as(types[i], value) for i, value in enumerate(cells)])
                if len(batch) >= BATCH:
                    connection.executemany(insert, batch)
                    batch.clear()
            if batch:
                connection.executemany(insert, batch)
            connection.commit()
            specs.append(TableSpec(name=name, columns=columns, types=types, rows=shape.rows))
    finally:
        connection.close()
    if not specs:
        raise refused(field_name, "the file holds no table (every row is empty)")
    return specs
