"""What changed between two versions of an agent, in a shape a page can show.

Texts (goal, instructions, system prompt) are compared line by line; tools as sets;
everything else (levels, run limits, approval rules, notifications, data sources) as
one row per setting with its old and new value in words.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field

from agents.models import AgentVersion

TEXT_FIELDS = (("goal", "Goal"), ("instructions", "Instructions"), ("system_prompt", "System prompt"))
CONTEXT_LINES = 3


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "same" or "gap" (lines left out between changes)
    text: str


@dataclass(frozen=True)
class TextDiff:
    label: str
    lines: list[DiffLine]


@dataclass(frozen=True)
class SettingChange:
    label: str
    old: str
    new: str


@dataclass
class VersionDiff:
    old: AgentVersion
    new: AgentVersion
    texts: list[TextDiff] = field(default_factory=list)
    tools_added: list[str] = field(default_factory=list)
    tools_removed: list[str] = field(default_factory=list)
    settings: list[SettingChange] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.texts or self.tools_added or self.tools_removed or self.settings)


def _text_lines(old: str, new: str) -> list[DiffLine]:
    lines: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        if lines:
            lines.append(DiffLine("gap", "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(DiffLine("same", text) for text in matcher.a[i1:i2])
                continue
            lines.extend(DiffLine("del", text) for text in matcher.a[i1:i2])
            lines.extend(DiffLine("add", text) for text in matcher.b[j1:j2])
    return lines


def _flat(prefix: str, value) -> dict[str, object]:
    if isinstance(value, dict):
        flat: dict[str, object] = {}
        for key, inner in value.items():
            flat.update(_flat(f"{prefix} › {key.replace('_', ' ')}", inner))
        return flat
    return {prefix: value}


def _words(value) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return ", ".join(str(item).replace("_", " ") for item in value)
    if isinstance(value, str):
        text = value.replace("_", " ")
        return text[:1].upper() + text[1:]
    if isinstance(value, bool | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _settings(version: AgentVersion, source_names: dict[int, str]) -> dict[str, object]:
    values: dict[str, object] = {
        "Action level": version.action_level,
        "Governance level": version.governance_level,
        "Data sources": sorted(source_names.get(pk, f"#{pk}") for pk in _source_ids(version)),
    }
    values.update(_flat("Run limits", version.model_settings.model_dump(mode="json")))
    values.update(_flat("Approval rules", version.rules.model_dump(mode="json")))
    values.update(_flat("Notifications", dict(version.notification_config or {})))
    return values


def _source_ids(version: AgentVersion) -> list[int]:
    return [source.pk for source in version.data_sources.all()]


def version_diff(*, old: AgentVersion, new: AgentVersion) -> VersionDiff:
    """``old`` and ``new`` should come with their data sources prefetched."""
    diff = VersionDiff(old=old, new=new)
    for name, label in TEXT_FIELDS:
        before, after = getattr(old, name) or "", getattr(new, name) or ""
        if before != after:
            diff.texts.append(TextDiff(label, _text_lines(before, after)))
    old_tools, new_tools = set(old.tools or []), set(new.tools or [])
    diff.tools_added = sorted(new_tools - old_tools)
    diff.tools_removed = sorted(old_tools - new_tools)
    names = {source.pk: source.name for version in (old, new) for source in version.data_sources.all()}
    before, after = _settings(old, names), _settings(new, names)
    for label in dict.fromkeys([*before, *after]):
        if before.get(label) != after.get(label):
            diff.settings.append(SettingChange(label, _words(before.get(label)), _words(after.get(label))))
    return diff
