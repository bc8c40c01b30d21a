"""Cells of the CSV files River lets people download (query results, the audit trail).

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` (and, in some,
a tab or carriage return) as a formula, so text from a data source, a model or a person
could call out of the reader's machine. Such text gets a leading apostrophe; numbers stay
numbers (``-5`` is a value). Anything that is not text or a number is written as JSON,
never as Python's repr."""

from __future__ import annotations

import json

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return "'" + text if text.startswith(FORMULA_STARTS) else text
