"""Artifact tools: ``load_artifact`` reads a text file of the workspace, ``save_artifact``
writes one (an exported result, a chart spec, a report) as a new artifact version.

Both resolve artifacts inside the run's workspace only (``ctx.user.workspace_id``):
another workspace's id or name is ``not_found``, exactly like one that does not exist.
``load_artifact`` is a read (execution category, governed as a read); ``save_artifact``
writes, so the agent's action level and approval rules govern it like any write. A
saved CSV becomes a queryable table like an uploaded one. Spreadsheets are not read as
text: their tables are queried with ``execute_query``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, model_validator

from artifacts.errors import ArtifactStorageUnavailable
from artifacts.models import Artifact
from artifacts.selectors import artifact_get_by_name, artifact_get_in_workspace, artifact_read, artifact_ref
from artifacts.services import artifact_create_from_run, artifact_files_remove
from executions.tools.data import tool_db_call, tool_user, tool_workspace
from executions.tools.fenced import fenced_in_transaction
from rivercore.errors import NotFound
from rivercore.tools import Tool, ToolCategory, ToolContext, ToolError, ToolErrorKind, register
from rivercore.types.previews import EffectPreview, digest
from tenancy import permissions as perms

T = TypeVar("T")
LOAD_DEFAULT_CHARS = 20_000
LOAD_MAX_CHARS = 60_000


class LoadArtifactInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact_id: int | None = Field(default=None, description="ID of the artifact to read (or give name).")
    name: str | None = Field(default=None, min_length=1, max_length=200,
                             description="File name of the artifact; its latest version unless version is given.")
    version: int | None = Field(default=None, ge=1, description="With name: this version instead of the latest.")
    offset: int = Field(default=0, ge=0, description="Character to start reading at, to page through long files.")
    max_chars: int = Field(default=LOAD_DEFAULT_CHARS, ge=1, le=LOAD_MAX_CHARS,
                           description="Characters to return at most.")

    @model_validator(mode="after")
    def _one_reference(self) -> LoadArtifactInput:
        if (self.artifact_id is None) == (self.name is None):
            raise ValueError("give exactly one of artifact_id or name")
        if self.version is not None and self.name is None:
            raise ValueError("version goes with name")
        return self


class LoadArtifactOutput(BaseModel):
    artifact_id: int
    name: str
    version: int
    content_type: str
    size: int
    text: str
    offset: int
    returned_chars: int
    total_chars: int
    truncated: bool
    data_source_id: int | None = None
    table: str | None = None


def _call_store(fn: Callable[[], T]) -> T:
    """As ``_call``, with an unavailable artifact store reported as transient (retried)."""

    def guarded() -> T:
        try:
            return fn()
        except ArtifactStorageUnavailable as exc:
            raise ToolError(ToolErrorKind.TRANSIENT, exc.message) from None

    return tool_db_call(guarded)


def _artifact(ctx: ToolContext, *, artifact_id: int | None, name: str | None, version: int | None) -> Artifact:
    workspace_id = ctx.user.workspace_id
    if artifact_id is not None:
        return tool_db_call(lambda: artifact_get_in_workspace(workspace_id=workspace_id, artifact_id=artifact_id))
    return tool_db_call(lambda: artifact_get_by_name(workspace_id=workspace_id, name=name or "", version=version))


def load_artifact(ctx: ToolContext, args: LoadArtifactInput) -> LoadArtifactOutput:
    artifact = _artifact(ctx, artifact_id=args.artifact_id, name=args.name, version=args.version)
    if artifact.kind == Artifact.Kind.XLSX:
        where = (f" on data source {artifact.data_source_id} (tables: {', '.join(artifact.tables)})"
                 if artifact.data_source_id else "")
        raise ToolError(ToolErrorKind.VALIDATION,
                        f"Artifact {artifact.pk} is a spreadsheet, not text; query it with execute_query{where}.")
    raw = _call_store(lambda: artifact_read(artifact=artifact, max_bytes=settings.RIVER_ARTIFACT_MAX_BYTES))
    text = raw.decode("utf-8-sig", errors="replace")
    part = text[args.offset: args.offset + args.max_chars]
    return LoadArtifactOutput(
        **{key: value for key, value in artifact_ref(artifact).items() if key != "artifact_id"},
        artifact_id=artifact.pk, text=part, offset=args.offset, returned_chars=len(part), total_chars=len(text),
        truncated=args.offset + len(part) < len(text),
    )


class SaveArtifactInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200,
                      description="File name with its type: .csv, .tsv, .json, .txt or .md (e.g. 'top_customers.csv').")
    content: str = Field(min_length=1, description="The file's text. A CSV's first row names its columns.")


class SaveArtifactOutput(BaseModel):
    artifact_id: int
    name: str
    version: int
    size: int
    content_type: str
    data_source_id: int | None = None
    table: str | None = None
    message: str


DIFF_LINES_KEPT = 400


def save_artifact_preview(ctx: ToolContext, args: SaveArtifactInput) -> EffectPreview:
    """The file the call would save and its diff against the latest version of that
    name (issue 29 §1). The fingerprint covers the version it would replace, so a
    version saved meanwhile makes the preview stale."""
    try:
        previous = artifact_get_by_name(workspace_id=ctx.user.workspace_id, name=args.name)
    except NotFound:
        previous = None
    old = ""
    if previous is not None:
        raw = _call_store(lambda: artifact_read(artifact=previous, max_bytes=settings.RIVER_ARTIFACT_MAX_BYTES))
        old = raw.decode("utf-8-sig", errors="replace")
    lines = list(difflib.unified_diff(old.splitlines(), args.content.splitlines(), lineterm="",
                                      fromfile=f"{args.name} (version {previous.version})" if previous else "/dev/null",
                                      tofile=f"{args.name} (new version)"))
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    size = len(args.content.encode("utf-8", errors="replace"))
    if previous is None:
        summary = f"Creates {args.name} (version 1, {size} bytes, {added} lines)."
    else:
        summary = (f"Replaces {args.name} version {previous.version} with version {previous.version + 1}: "
                   f"+{added} −{removed} lines.")
    state = {"target": args.name, "previous_version": previous.version if previous else None,
             "previous": digest(old) if previous else None}
    return EffectPreview(
        kind="file", target=args.name, operation="save", previous_version=state["previous_version"],
        diff="\n".join(lines[:DIFF_LINES_KEPT]), truncated=len(lines) > DIFF_LINES_KEPT, summary=summary,
        fingerprint=digest({**state, "content": digest(args.content)}), index=[[args.name, digest(state)]])


def save_artifact(ctx: ToolContext, args: SaveArtifactInput) -> SaveArtifactOutput:
    if args.name.lower().endswith(".xlsx"):
        raise ToolError(ToolErrorKind.VALIDATION, "save_artifact writes text files; use .csv for a table.",
                        {"name": ["not .xlsx"]})
    workspace = tool_workspace(ctx)
    user = tool_user(ctx)
    created: list[Artifact] = []
    terms = ctx.extras.get("approved_effect") or {}

    def create(ctx: ToolContext, args: SaveArtifactInput) -> Artifact:
        fresh = save_artifact_preview(ctx, args) if terms.get("fingerprint") else None
        if fresh is not None and fresh.fingerprint != terms["fingerprint"]:
            # The engine pauses the call again with this fresh preview (rivercore.previews).
            raise ToolError(ToolErrorKind.FAILED, "Another version of the file was saved after the preview was "
                            "approved; nothing was saved.",
                            {"code": "preview_stale", "preview": fresh.model_dump(mode="json")})
        artifact = _call_store(lambda: artifact_create_from_run(
            workspace=workspace, execution_id=ctx.execution_id, created_by=user, name=args.name,
            content=args.content))
        created.append(artifact)
        return artifact

    try:
        artifact = fenced_in_transaction(create)(ctx, args)
    except BaseException:
        for artifact in created:  # its rows were rolled back (the fence closed): drop its files too
            artifact_files_remove(artifact=artifact)
        raise
    where = (f" Query it with execute_query on data source {artifact.data_source_id}, table {artifact.table}."
             if artifact.data_source_id else "")
    return SaveArtifactOutput(
        artifact_id=artifact.pk, name=artifact.name, version=artifact.version, size=artifact.size,
        content_type=artifact.content_type, data_source_id=artifact.data_source_id, table=artifact.table,
        message=f"Saved {artifact.name} as artifact {artifact.pk} (version {artifact.version}).{where}",
    )


LOAD_ARTIFACT = register(
    Tool(
        name="load_artifact",
        description="Read a text, CSV, JSON or Markdown file of this workspace (an upload or a saved artifact), "
                    "by artifact_id or name; long files page with offset.",
        category=ToolCategory.EXECUTION,
        input_model=LoadArtifactInput,
        output_model=LoadArtifactOutput,
        handler=load_artifact,
        permission=perms.WORKSPACE_VIEW,
        idempotent=True,
    )
)
SAVE_ARTIFACT = register(
    Tool(
        name="save_artifact",
        description="Save text as a file of this workspace (an export, a chart spec, a report): .csv, .tsv, .json, "
                    ".txt or .md. A saved CSV can be queried with execute_query.",
        category=ToolCategory.EXECUTION,
        input_model=SaveArtifactInput,
        output_model=SaveArtifactOutput,
        handler=save_artifact,
        permission=perms.AGENT_EXECUTE,
        writes=True,
        preview=save_artifact_preview,
    )
)
