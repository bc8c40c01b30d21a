"""What an artifact file is and whether River accepts it: the file name, the type by
extension *and* content, and the checks each type must pass before anything is stored.

The client's file name is display text only. It never becomes a path: storage names
are generated (``services``). A type is accepted only when the extension is on the
allow-list *and* the bytes look like that type. Text must be UTF-8 without NUL bytes,
JSON must parse, and a spreadsheet must be a zip archive whose expanded size, entry
count and XML stay within limits (zip bombs, entity expansion). Every refusal is an
``InvalidInput`` naming the field the file came in.
"""

from __future__ import annotations

import codecs
import json
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

from rivercore.errors import InvalidInput

NAME_MAX = 200
CHUNK = 64 * 1024
XLSX_MAX_ENTRIES = 5_000


@dataclass(frozen=True)
class FileType:
    kind: str  # Artifact.Kind value
    content_type: str
    extension: str

    @property
    def is_text(self) -> bool:
        return self.kind != "xlsx"

    @property
    def is_tabular(self) -> bool:
        return self.kind in {"csv", "tsv", "xlsx"}


XLSX_CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
TYPES: dict[str, FileType] = {
    ".csv": FileType("csv", "text/csv", ".csv"),
    ".tsv": FileType("tsv", "text/tab-separated-values", ".tsv"),
    ".xlsx": FileType("xlsx", XLSX_CONTENT_TYPE, ".xlsx"),
    ".json": FileType("json", "application/json", ".json"),
    ".txt": FileType("text", "text/plain", ".txt"),
    ".md": FileType("markdown", "text/markdown", ".md"),
    ".markdown": FileType("markdown", "text/markdown", ".md"),
}
ALLOWED_EXTENSIONS = ", ".join(sorted(TYPES))

# Leading bytes of formats that are never text (a renamed binary).
_BINARY_MAGIC = (
    b"PK\x03\x04", b"PK\x05\x06", b"%PDF-", b"\x89PNG", b"\xff\xd8\xff", b"\x7fELF", b"\x1f\x8b",
    b"\xfd7zXZ", b"7z\xbc\xaf", b"\xd0\xcf\x11\xe0", b"SQLite format 3\x00", b"\xca\xfe\xba\xbe",
    b"\xcf\xfa\xed\xfe", b"\x00asm",
)
# How an XML part can begin: a byte-order mark (UTF-8, UTF-16, UTF-32) or, after white
# space, '<' in a one-byte or two-byte encoding.
_XML_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def refused(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", details={field: [message]})


def name_clean(raw: str | None, *, field: str = "file") -> str:
    """The client's file name as safe display text: the last path component, no control
    or format characters (a right-to-left override could disguise an extension), NFC,
    at most NAME_MAX characters with the extension kept. Never used as a path."""
    text = unicodedata.normalize("NFC", str(raw or ""))
    text = re.split(r"[/\\]", text)[-1]
    text = "".join(ch for ch in text if unicodedata.category(ch) not in {"Cc", "Cf", "Cs", "Co", "Cn"})
    text = " ".join(text.split()).strip(" .")
    if not text:
        raise refused(field, "the file needs a name with an extension, such as sales.csv")
    stem, dot, extension = text.rpartition(".")
    if not dot:
        raise refused(field, f"the file name has no extension; allowed: {ALLOWED_EXTENSIONS}")
    stem = stem.strip(" .") or "upload"
    extension = extension[:20]
    return f"{stem[: NAME_MAX - len(extension) - 1]}.{extension}"


def type_for(name: str, *, field: str = "file") -> FileType:
    extension = "." + name.rpartition(".")[2].lower()
    found = TYPES.get(extension)
    if found is None:
        raise refused(field, f"files of type {extension[:21]!r} are not accepted; allowed: {ALLOWED_EXTENSIONS}")
    return found


def content_check(file_type: FileType, stream: BinaryIO, *, field: str = "file",
                  xlsx_max_uncompressed: int) -> None:
    """Refuse content that is not what its extension says. Text kinds are decoded whole
    (streamed, UTF-8 with an optional BOM) and JSON parsed; a spreadsheet's archive is
    checked without being expanded into memory. The stream is left at its start."""
    stream.seek(0)
    head = stream.read(16)
    stream.seek(0)
    if not head:
        raise refused(field, "the file is empty")
    if file_type.kind == "xlsx":
        if not head.startswith(b"PK\x03\x04"):
            raise refused(field, "the content is not a spreadsheet (an .xlsx file is a zip archive)")
        _xlsx_archive_check(stream, field=field, max_uncompressed=xlsx_max_uncompressed)
        stream.seek(0)
        return
    if head.startswith(_BINARY_MAGIC):
        raise refused(field, f"the content is a binary file, not {file_type.kind} text")
    text = _utf8_text(stream, field=field, keep=file_type.kind == "json")
    if file_type.kind == "json":
        try:
            json.loads(text)
        except RecursionError:
            raise refused(field, "the JSON is nested too deeply") from None
        except ValueError as exc:
            where = f" (line {exc.lineno}, column {exc.colno})" if hasattr(exc, "lineno") else ""
            raise refused(field, f"the content is not valid JSON{where}") from None
    stream.seek(0)


def _utf8_text(stream: BinaryIO, *, field: str, keep: bool) -> str:
    """Decode the whole stream as UTF-8 (BOM allowed), chunk by chunk; NUL bytes and
    invalid sequences are refused with the line they are on. Returns the text when
    ``keep`` (JSON needs it), else an empty string."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    parts: list[str] = []
    line = 1
    while True:
        chunk = stream.read(CHUNK)
        final = not chunk
        try:
            text = decoder.decode(chunk, final=final)
        except UnicodeDecodeError:
            raise refused(field, f"the content is not UTF-8 text (near line {line})") from None
        if "\x00" in text:
            line += text[: text.index("\x00")].count("\n")
            raise refused(field, f"the content contains NUL bytes (line {line}); it is not text")
        line += text.count("\n")
        if keep:
            parts.append(text)
        if final:
            break
    stream.seek(0)
    return "".join(parts)


def _xlsx_archive_check(stream: BinaryIO, *, field: str, max_uncompressed: int) -> None:
    """A workbook must be a readable zip with the parts of a spreadsheet, no macros, no
    encryption, at most XLSX_MAX_ENTRIES entries and at most ``max_uncompressed`` bytes
    once expanded (counted while reading, not taken from the headers). Every part that is
    XML (by name or by its first bytes) is parsed with defusedxml in the encoding it
    declares, UTF-16 included: a DTD, an entity declaration or an external reference is
    refused (a real workbook never has one), and so is malformed XML."""
    try:
        archive = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        raise refused(field, "the spreadsheet is not a readable zip archive (corrupt or truncated)") from None
    with archive:
        entries = archive.infolist()
        if len(entries) > XLSX_MAX_ENTRIES:
            raise refused(field, f"the spreadsheet archive has more than {XLSX_MAX_ENTRIES} entries")
        names = {entry.filename for entry in entries}
        if "[Content_Types].xml" not in names or "xl/workbook.xml" not in names:
            raise refused(field, "the archive is not an Excel workbook (no xl/workbook.xml)")
        if any(name.lower().endswith("vbaproject.bin") for name in names):
            raise refused(field, "workbooks with macros are not accepted")
        if any(entry.flag_bits & 0x1 for entry in entries):
            raise refused(field, "encrypted workbooks are not accepted")
        if sum(entry.file_size for entry in entries) > max_uncompressed:
            raise refused(field, f"the spreadsheet expands to more than {max_uncompressed} bytes")
        expanded = 0
        for entry in entries:
            parser = None
            try:
                with archive.open(entry) as member:
                    first = True
                    while True:
                        chunk = member.read(CHUNK)
                        if not chunk:
                            break
                        expanded += len(chunk)
                        if expanded > max_uncompressed:
                            raise refused(field, f"the spreadsheet expands to more than {max_uncompressed} bytes")
                        if first and _looks_like_xml(entry.filename, chunk):
                            parser = _xml_parser()
                        first = False
                        if parser is not None:
                            _xml_feed(parser, chunk, field=field, part=entry.filename)
                if parser is not None:
                    _xml_feed(parser, None, field=field, part=entry.filename)
            except InvalidInput:
                raise
            except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError):
                raise refused(field, "the spreadsheet is corrupt (an entry cannot be read)") from None


def _looks_like_xml(name: str, head: bytes) -> bool:
    """Whether a workbook part is (or may be read as) XML: by its name, or by content
    that starts like XML in any encoding (a part's name does not decide how it is read)."""
    if name.lower().endswith((".xml", ".rels", ".vml")):
        return True
    return head.startswith(_XML_BOMS) or head.lstrip(b" \t\r\n\x00").startswith(b"<")


class _Discard:
    """A parser target that keeps nothing: the part is parsed to be judged, not read."""

    def close(self) -> None:
        return None


def _xml_parser():
    from defusedxml.ElementTree import DefusedXMLParser

    parser = DefusedXMLParser(target=_Discard(), forbid_dtd=True, forbid_entities=True, forbid_external=True)
    # The pure-Python parser routes every tag it has no handler for through a Python
    # default handler; nothing here needs it (the DTD and entity handlers that refuse
    # stay), and without it expat judges a 20 MB part about four times faster.
    parser.parser.DefaultHandlerExpand = None
    return parser


def _xml_feed(parser, chunk: bytes | None, *, field: str, part: str) -> None:
    """Feed one chunk (None: the end) to a defusedxml parser, which decodes the part in
    the encoding it declares (UTF-16 included) and refuses any DTD, entity declaration
    or external reference; malformed XML is refused too."""
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException

    try:
        if chunk is None:
            parser.close()
        else:
            parser.feed(chunk)
    except DefusedXmlException:
        raise refused(field, f"the spreadsheet's XML ({part[:100]}) declares a DTD or entities, "
                             "which a workbook never needs") from None
    except (ParseError, ValueError, LookupError):
        raise refused(field, f"the spreadsheet cannot be read: {part[:100]} is not well-formed XML "
                             "(or is in an encoding XML parsers do not know)") from None
