"""What a tool's output may be by the time the model and the journal see it.

Two rules, applied where the engine turns a tool's output into an observation:

- **Size.** One observation is at most the workspace's ``observation_byte_limit``
  bytes of JSON (default 64 KB). A larger one is cut and says so: a query result
  keeps its first rows (``truncated: true`` and a ``note``), anything else keeps a
  prefix of its JSON text. A 40 MB result reaches neither the prompt nor a journal row.
- **Storable text.** NUL characters and lone surrogates are escaped (rivercore.text),
  since PostgreSQL refuses them and the journal write would otherwise fail on every
  retry.
"""

from __future__ import annotations

import json
from typing import Any

from rivercore.text import json_storable

DEFAULT_OBSERVATION_BYTES = 65_536
MAX_OBSERVATION_BYTES = 1_048_576
_MARGIN = 256  # room for the note and flags added when cutting


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str, sort_keys=True).encode("utf-8", "surrogatepass"))


def observation_byte_limit(attributes: dict[str, Any] | None) -> int:
    """The limit carried in the run's user context (set from the workspace)."""
    raw = (attributes or {}).get("observation_byte_limit")
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return min(raw, MAX_OBSERVATION_BYTES)
    return DEFAULT_OBSERVATION_BYTES


def _cut_rows(result: dict[str, Any], limit: int) -> dict[str, Any]:
    rows = list(result.get("rows") or [])
    kept: list[Any] = []
    base = {**result, "rows": [], "truncated": True}
    size = json_bytes(base) + _MARGIN
    for row in rows:
        row_size = json_bytes(row) + 1
        if size + row_size > limit:
            break
        kept.append(row)
        size += row_size
    note = (
        f"Only the first {len(kept)} of {len(rows)} rows are shown: the observation is cut at {limit} bytes "
        "(observation byte limit)."
    )
    return {**result, "rows": kept, "total_rows": len(kept), "truncated": True, "note": note}


def observation_fit(result: Any, *, limit: int) -> Any:
    """``result`` made storable and cut to at most ``limit`` bytes of JSON."""
    result = json_storable(result)
    size = json_bytes(result)
    if size <= limit:
        return result
    if isinstance(result, dict) and isinstance(result.get("rows"), list):
        cut = _cut_rows(result, limit)
        if json_bytes(cut) <= limit:
            return cut
    text = json.dumps(result, ensure_ascii=False, default=str, sort_keys=True)
    budget = max(limit - _MARGIN, 0)
    preview = text.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")
    return {
        "cut": True,
        "original_bytes": size,
        "preview": preview,
        "note": f"The tool's output was {size} bytes; only the first {budget} bytes are shown "
        f"(observation byte limit {limit}).",
    }
