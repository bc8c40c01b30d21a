"""The admin lists artifacts read-only and deletes through the service (files go too)."""

from __future__ import annotations

import pytest

from artifacts.models import Artifact
from datasources.models import DataSource
from tests.artifacts.conftest import SALES_CSV, files_under, upload

pytestmark = pytest.mark.django_db


def test_the_admin_deletes_the_row_its_data_source_and_files(admin_client, api_client_for, owner, workspace,
                                                            artifact_dirs, django_capture_on_commit_callbacks):
    store, sqlite = artifact_dirs
    artifact = upload(api_client_for(owner), workspace, "sales.csv", SALES_CSV).json()
    assert admin_client.get("/admin/artifacts/artifact/").status_code == 200
    assert admin_client.get("/admin/artifacts/artifact/add/").status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"/admin/artifacts/artifact/{artifact['id']}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Artifact.objects.exists() and not DataSource.objects.exists()
    assert files_under(store) == [] and files_under(sqlite) == []
