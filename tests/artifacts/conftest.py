"""Artifact test fixtures: a store and a SQLite directory of the test's own, and helpers
to upload files and to see everything an upload could have left behind."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from artifacts.models import Artifact
from datasources.models import DataSource
from tenancy.models import Membership
from tenancy.permissions import Role

SALES_CSV = (
    b"Region,Amount,Units,Order Date\n"
    b"North,120.50,3,2024-01-05\n"
    b"South,80,2,2024-01-06\n"
    b"North,99.50,1,2024-02-01\n"
    b"East,200,5,2024-02-03\n"
)


@pytest.fixture
def artifact_dirs(tmp_path, settings):
    """(store directory, SQLite directory), both empty and private to the test."""
    store, sqlite = tmp_path / "store", tmp_path / "sqlite"
    store.mkdir()
    sqlite.mkdir()
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                      "OPTIONS": {"location": str(store), "file_permissions_mode": 0o600}},
    }
    settings.RIVER_SQLITE_DATA_DIR = sqlite
    return store, sqlite


@pytest.fixture
def viewer(workspace):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="viewer", password="pw-viewer")
    Membership.objects.create(workspace=workspace, user=user, role=Role.VIEWER)
    return user


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def nothing_stored(dirs) -> bool:
    store, sqlite = dirs
    return (not Artifact.objects.exists() and not DataSource.objects.exists()
            and files_under(store) == [] and files_under(sqlite) == [])


def upload(client, workspace, name: str, content: bytes, **extra):
    return client.post("/api/v1/artifacts/", {"workspace": workspace.pk,
                                              "file": SimpleUploadedFile(name, content), **extra},
                       format="multipart")


def xlsx_bytes(sheets: dict[str, list[list]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()
