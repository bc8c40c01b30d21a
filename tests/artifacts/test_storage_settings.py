"""The artifacts storage alias: the filesystem by default, S3-compatible by configuration,
and a misconfigured store stops startup naming the variable (never echoing a secret)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from riverapp.env import artifact_storage_config

ROOT = Path(__file__).resolve().parents[2]
S3_VARIABLES = ("RIVER_ARTIFACT_S3_BUCKET", "RIVER_ARTIFACT_S3_ENDPOINT_URL", "RIVER_ARTIFACT_S3_REGION",
                "RIVER_ARTIFACT_S3_ACCESS_KEY_ID", "RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY", "RIVER_ARTIFACT_S3_PREFIX",
                "RIVER_ARTIFACT_S3_ADDRESSING_STYLE")


@pytest.fixture
def s3_env(monkeypatch):
    for name in S3_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_default_is_a_private_directory(tmp_path):
    config = artifact_storage_config("filesystem", directory=tmp_path, debug=False)
    assert config == {"BACKEND": "django.core.files.storage.FileSystemStorage",
                      "OPTIONS": {"location": str(tmp_path), "file_permissions_mode": 0o600,
                                  "directory_permissions_mode": 0o700}}


def test_an_s3_store_is_configured_from_its_variables(s3_env, tmp_path):
    s3_env.setenv("RIVER_ARTIFACT_S3_BUCKET", "river-artifacts")
    s3_env.setenv("RIVER_ARTIFACT_S3_ENDPOINT_URL", "https://minio.internal:9000")
    s3_env.setenv("RIVER_ARTIFACT_S3_REGION", "eu-west-1")
    s3_env.setenv("RIVER_ARTIFACT_S3_ACCESS_KEY_ID", "AKIAEXAMPLE")
    s3_env.setenv("RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY", "not-a-real-secret")
    s3_env.setenv("RIVER_ARTIFACT_S3_ADDRESSING_STYLE", "path")
    config = artifact_storage_config("s3", directory=tmp_path, debug=False)
    assert config["BACKEND"] == "storages.backends.s3.S3Storage"
    assert config["OPTIONS"] == {
        "bucket_name": "river-artifacts", "default_acl": None, "file_overwrite": False, "querystring_auth": True,
        "signature_version": "s3v4", "endpoint_url": "https://minio.internal:9000", "region_name": "eu-west-1",
        "access_key": "AKIAEXAMPLE", "secret_key": "not-a-real-secret", "location": "artifacts",
        "addressing_style": "path"}
    from storages.backends.s3 import S3Storage

    storage = S3Storage(**config["OPTIONS"])  # builds offline; the first call would reach the endpoint
    assert storage.bucket_name == "river-artifacts" and storage.location == "artifacts"


@pytest.mark.parametrize("variables, named", [
    ({}, "RIVER_ARTIFACT_S3_BUCKET must be set"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "Bad_Bucket"}, "RIVER_ARTIFACT_S3_BUCKET must be a bucket name"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_ENDPOINT_URL": "ftp://x"},
     "RIVER_ARTIFACT_S3_ENDPOINT_URL"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_ENDPOINT_URL": "http://minio:9000"},
     "must use https://"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_ACCESS_KEY_ID": "AKIAEXAMPLE"},
     "RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY must be set too"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY": "hunter2-secret"},
     "RIVER_ARTIFACT_S3_ACCESS_KEY_ID must be set too"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_PREFIX": "a/../b"}, "RIVER_ARTIFACT_S3_PREFIX"),
    ({"RIVER_ARTIFACT_S3_BUCKET": "ok-bucket", "RIVER_ARTIFACT_S3_ADDRESSING_STYLE": "sideways"},
     "RIVER_ARTIFACT_S3_ADDRESSING_STYLE"),
])
def test_a_misconfigured_s3_store_names_the_variable(s3_env, tmp_path, variables, named):
    for name, value in variables.items():
        s3_env.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=named.replace(".", r"\.")) as caught:
        artifact_storage_config("s3", directory=tmp_path, debug=False)
    assert "hunter2" not in str(caught.value)


def test_credentials_in_the_endpoint_url_are_refused_without_echoing_them(s3_env, tmp_path):
    s3_env.setenv("RIVER_ARTIFACT_S3_BUCKET", "ok-bucket")
    s3_env.setenv("RIVER_ARTIFACT_S3_ENDPOINT_URL", "https://key:hunter2@minio.internal")
    with pytest.raises(ImproperlyConfigured, match="without credentials") as caught:
        artifact_storage_config("s3", directory=tmp_path, debug=True)
    assert "hunter2" not in str(caught.value)


def test_river_refuses_to_start_with_an_s3_store_and_no_bucket():
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", *S3_VARIABLES}}
    env.update({"DEBUG": "true", "RIVER_ARTIFACT_STORAGE": "s3"})
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "RIVER_ARTIFACT_S3_BUCKET must be set" in result.stderr
