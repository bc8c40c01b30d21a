"""Bad and oversized files are refused with a 4xx naming the field, and leave nothing
behind: no artifact row, no stored file, no table file, no data source."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from tests.artifacts.conftest import SALES_CSV, nothing_stored, upload, xlsx_bytes

pytestmark = pytest.mark.django_db


def refused(response, status: int = 400, field: str = "file") -> str:
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert field in error["details"], error
    return " ".join(error["details"][field])


def _workbook_parts(extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    parts = {}
    with zipfile.ZipFile(io.BytesIO(xlsx_bytes({"Data": [["a"], [1]]}))) as source:
        for name in source.namelist():
            parts[name] = source.read(name)
    parts.update(extra or {})
    return parts


def _zip(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return out.getvalue()


def test_an_oversized_file_is_413_and_nothing_is_stored(api_client_for, owner, workspace, artifact_dirs, settings):
    settings.RIVER_ARTIFACT_MAX_BYTES = 2048
    message = refused(upload(api_client_for(owner), workspace, "big.csv", b"a,b\n" + b"1,2\n" * 1000), 413)
    assert "2048 bytes" in message
    assert nothing_stored(artifact_dirs)


def test_a_body_declared_larger_than_the_upload_limit_is_413_before_it_is_read(api_client_for, owner, workspace,
                                                                              artifact_dirs):
    with override_settings(RIVER_UPLOAD_BODY_LIMITS={"/api/v1/artifacts/": 4096}):
        response = upload(api_client_for(owner), workspace, "big.txt", b"x" * 10_000)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert nothing_stored(artifact_dirs)


def test_the_upload_path_may_exceed_the_ordinary_body_limit(api_client_for, owner, workspace, artifact_dirs,
                                                           settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096  # every other request: at most 4 KB
    settings.RIVER_UPLOAD_BODY_LIMITS = {"/api/v1/artifacts/": settings.RIVER_ARTIFACT_MAX_BYTES + 65536}
    response = upload(api_client_for(owner), workspace, "bigger.txt", b"y" * 100_000)
    assert response.status_code == 201
    assert response.json()["size"] == 100_000


def test_the_size_is_counted_as_the_file_arrives(owner, workspace, artifact_dirs, settings):
    """The handler stops keeping the file at the limit, whatever Content-Length says."""
    from artifacts.uploads import BoundedUploadHandler

    handler = BoundedUploadHandler(max_bytes=10)
    handler.new_file("file", "a.txt", "text/plain", None)
    handler.receive_data_chunk(b"12345", 0)
    from django.core.files.uploadhandler import SkipFile

    with pytest.raises(SkipFile):
        handler.receive_data_chunk(b"678901", 5)
    assert handler.too_large and handler._spool is None


@pytest.mark.parametrize("filename", ["..", "../..", "", "/"])
def test_a_part_whose_file_name_is_only_a_path_is_no_file(api_client_for, owner, workspace, artifact_dirs, filename):
    boundary = "river-test-boundary"
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="workspace"\r\n\r\n{workspace.pk}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            f"Content-Type: text/plain\r\n\r\nsecret\r\n--{boundary}--\r\n").encode()
    response = api_client_for(owner).generic("POST", "/api/v1/artifacts/", body,
                                             content_type=f"multipart/form-data; boundary={boundary}")
    refused(response)
    assert nothing_stored(artifact_dirs)


def test_two_files_in_one_request_are_refused(api_client_for, owner, workspace, artifact_dirs):
    response = api_client_for(owner).post(
        "/api/v1/artifacts/",
        {"workspace": workspace.pk, "file": [SimpleUploadedFile("a.txt", b"a"), SimpleUploadedFile("b.txt", b"b")]},
        format="multipart")
    refused(response)
    assert nothing_stored(artifact_dirs)


@pytest.mark.parametrize("name, content, expected", [
    ("run.exe", b"MZ\x90\x00", "not accepted"),
    ("page.html", b"<html></html>", "not accepted"),
    ("noextension", b"text", "no extension"),
    (" . . ", b"text", "needs a name"),
    ("empty.txt", b"", "empty"),
    ("latin1.csv", "name,city\nJosé,Málaga\n".encode("latin-1"), "not UTF-8"),
    ("nul.txt", b"hello\x00world", "NUL"),
    ("image.txt", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "binary"),
    ("zip.csv", _zip({"a.txt": b"x"}), "binary"),
    ("broken.json", b'{"a": 1,', "not valid JSON"),
    ("deep.json", b"[" * 100_000 + b"]" * 100_000, "JSON"),
    ("quote.csv", b'a,b\n"unterminated,2\n' + b"x" * 200_000 + b"\n", "CSV"),
    ("nothing.csv", b"\n\n,,\n", "no table"),
    ("text.xlsx", b"just text, not a workbook", "zip archive"),
    ("truncated.xlsx", xlsx_bytes({"S": [["a"], [1]]})[:300], "not a readable zip"),
    ("notexcel.xlsx", _zip({"hello.txt": b"hi"}), "not an Excel workbook"),
    ("macro.xlsx", _zip(_workbook_parts({"xl/vbaProject.bin": b"\x00"})), "macros"),
    ("garbage.xlsx", _zip(_workbook_parts({"xl/workbook.xml": b"<not really xml"})), "cannot be read"),
    ("entities.xlsx", _zip(_workbook_parts({
        "xl/sharedStrings.xml": b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><sst>&a;</sst>'})),
     "DTD or entities"),
])
def test_malformed_files_are_refused_naming_the_field(api_client_for, owner, workspace, artifact_dirs, name, content,
                                                      expected):
    message = refused(upload(api_client_for(owner), workspace, name, content))
    assert expected in message, message
    assert nothing_stored(artifact_dirs)


def test_a_zip_bomb_workbook_is_refused(api_client_for, owner, workspace, artifact_dirs, settings):
    settings.RIVER_ARTIFACT_XLSX_MAX_UNCOMPRESSED_BYTES = 1024 * 1024
    bomb = _zip(_workbook_parts({"xl/media/padding.bin": b"\x00" * (8 * 1024 * 1024)}))
    assert len(bomb) < 64 * 1024  # small on the wire, 8 MB expanded
    message = refused(upload(api_client_for(owner), workspace, "bomb.xlsx", bomb))
    assert "expands to more than" in message
    assert nothing_stored(artifact_dirs)


def test_a_workbook_whose_headers_understate_its_size_is_refused(api_client_for, owner, workspace, artifact_dirs,
                                                                settings):
    """A zip whose headers claim a small entry expands no further than the claim (the
    rest fails its checksum), so a lying header cannot pass the expansion limit."""
    settings.RIVER_ARTIFACT_XLSX_MAX_UNCOMPRESSED_BYTES = 1024 * 1024
    data = bytearray(_zip(_workbook_parts({"xl/media/padding.bin": b"\x00" * (8 * 1024 * 1024)})))
    name = b"xl/media/padding.bin"
    for signature, size_offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local header, central directory
        at = 0
        while (at := data.find(signature, at)) != -1:
            name_at = at + (30 if signature == b"PK\x03\x04" else 46)
            if data[name_at:name_at + len(name)] == name:
                struct.pack_into("<I", data, at + size_offset, 100)
            at += 4
    message = refused(upload(api_client_for(owner), workspace, "liar.xlsx", bytes(data)))
    assert "corrupt" in message
    assert nothing_stored(artifact_dirs)


def test_too_many_rows_or_columns_are_refused(api_client_for, owner, workspace, artifact_dirs, settings):
    settings.RIVER_ARTIFACT_MAX_ROWS = 3
    client = api_client_for(owner)
    assert "more than 3 rows" in refused(upload(client, workspace, "rows.csv", SALES_CSV))
    wide = ",".join(f"c{i}" for i in range(201)).encode() + b"\n" + b",".join(b"1" for _ in range(201)) + b"\n"
    assert "more than 200 columns" in refused(upload(client, workspace, "wide.csv", wide))
    sheet_rows = [["a"]] + [[i] for i in range(10)]
    assert "more than 3 rows" in refused(upload(client, workspace, "rows.xlsx", xlsx_bytes({"S": sheet_rows})))
    assert nothing_stored(artifact_dirs)


def test_a_failure_after_the_file_was_stored_removes_it(api_client_for, owner, workspace, artifact_dirs,
                                                       monkeypatch):
    """The last step (registering the data source) fails: the stored file, the table file
    and the row all go."""
    from artifacts import services

    def broken(**kwargs):
        raise RuntimeError("discovery failed")

    monkeypatch.setattr(services, "data_source_discover", broken)
    client = api_client_for(owner)
    client.raise_request_exception = False
    response = upload(client, workspace, "sales.csv", SALES_CSV)
    assert response.status_code == 500
    assert nothing_stored(artifact_dirs)


def test_an_unavailable_store_is_503_and_nothing_is_stored(api_client_for, owner, workspace, artifact_dirs,
                                                          monkeypatch):
    from django.core.files.storage import FileSystemStorage

    def full_disk(self, name, content, max_length=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileSystemStorage, "save", full_disk)
    response = upload(api_client_for(owner), workspace, "sales.csv", SALES_CSV)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "artifact_storage_unavailable"
    assert nothing_stored(artifact_dirs)
