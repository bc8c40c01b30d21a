"""Receiving an uploaded file without trusting its size: counted while it arrives.

Django's default handlers keep a file in memory up to 2.5 MB and then on disk, whatever
its size. ``BoundedUploadHandler`` spools it (memory up to SPOOL_MEMORY_BYTES, then a
temporary file) and stops keeping it as soon as it passes the limit: the rest of that
part is read and dropped, and the view answers 413. A body without a Content-Length
(chunked) is therefore bounded too; the HTTP edge already refused a declared length
above the upload path's limit (common.edge.body_limit).
"""

from __future__ import annotations

import tempfile

from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile

SPOOL_MEMORY_BYTES = 1024 * 1024


class BoundedUploadHandler(FileUploadHandler):
    def __init__(self, request=None, *, max_bytes: int):
        super().__init__(request)
        self.max_bytes = max_bytes
        self.too_large = False
        self.file_parts = 0
        self._spool = None
        self._received = 0

    def new_file(self, *args, **kwargs):
        super().new_file(*args, **kwargs)
        self.file_parts += 1
        self._received = 0
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)

    def receive_data_chunk(self, raw_data, start):
        self._received += len(raw_data)
        if self._received > self.max_bytes:
            self.too_large = True
            self._discard()
            raise SkipFile
        self._spool.write(raw_data)
        return None

    def file_complete(self, file_size):
        if self._spool is None:
            return None
        self._spool.seek(0)
        return UploadedFile(file=self._spool, name=self.file_name, content_type=self.content_type,
                            size=file_size, charset=self.charset)

    def upload_interrupted(self):
        self._discard()

    def _discard(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
