"""The column chunks a parquet footer declares, read from its Thrift bytes without pyarrow's metadata objects.

pyarrow builds a column chunk's metadata object on request (``RowGroupMetaData.column``) and validates it
there; a footer whose size statistics hold a level histogram of the wrong length makes that constructor
throw a C++ exception that nothing converts, and the process aborts: no verdict, no report, from a
one-byte change to a results table. The reading paths (``read_table``) raise an ordinary error on the same
file. So the sizes the readers' memory bound needs, and the leaf columns' paths a reader selects columns
by, are read here, from the footer as written
(FileMetaData in Thrift's compact protocol, parquet-format's ``parquet.thrift``), and anything malformed
is a :class:`FooterError`, never a crash.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

MAGIC = b"PAR1"
FOOTER_CAP = 8 << 20  # bytes of Thrift metadata (a results table's is a few KB); past it, refused unparsed
NESTING_CAP = 64  # structs and containers inside one another: FileMetaData needs 6
# parquet.thrift's Type enum, by the names pyarrow gives them.
PHYSICAL_TYPES = (
    "BOOLEAN",
    "INT32",
    "INT64",
    "INT96",
    "FLOAT",
    "DOUBLE",
    "BYTE_ARRAY",
    "FIXED_LEN_BYTE_ARRAY",
)
# Thrift field ids (parquet.thrift): FileMetaData.num_rows and row_groups, RowGroup.columns and num_rows,
# ColumnChunk.meta_data, and ColumnMetaData.type, num_values, total_uncompressed_size.
FILE_ROWS, ROW_GROUPS, COLUMNS, GROUP_ROWS, META_DATA, TYPE, NUM_VALUES, UNCOMPRESSED = 3, 4, 1, 3, 3, 1, 5, 6
# FileMetaData.schema (the schema tree, depth first, the root first) and SchemaElement's name and num_children.
SCHEMA, ELEMENT_NAME, NUM_CHILDREN = 2, 4, 5
# ColumnMetaData's total_compressed_size, data_page_offset and dictionary_page_offset; PageHeader's
# uncompressed_page_size and compressed_page_size, and its headers of a data page and of a version 2 data
# page, each with the page's num_values first (a dictionary page's entries are no values of the column).
COMPRESSED, DATA_PAGE_AT, DICTIONARY_PAGE_AT = 7, 9, 11
PAGE_UNCOMPRESSED, PAGE_COMPRESSED, DATA_PAGE, DATA_PAGE_V2 = 2, 3, 5, 8
PAGE_HEADER_CAP = 16 << 20  # bytes of one page header (statistics included); a real one is under 1 KB
PAGES_CAP = 100_000  # pages in one file: a 1.5 GiB table in 1 MiB pages has ~1,500
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class FooterError(ValueError):
    """The file's footer is not parquet metadata this reader can follow; the message says where."""


@dataclass(frozen=True)
class Chunk:
    """One column chunk of one row group, as its footer declares it."""

    physical_type: str
    num_values: int
    total_uncompressed_size: int


def footer_columns(handle: BinaryIO) -> tuple[list[Chunk], list[tuple[str, ...]]]:
    """:func:`column_chunks` and the path of each leaf column (:func:`_leaf_paths`), from one parse of the
    footer of the seekable parquet file ``handle``."""
    metadata, start = _metadata(handle)
    return _chunks(metadata, handle, start), _leaf_paths(metadata)


def column_chunks(handle: BinaryIO) -> list[Chunk]:
    """Every column chunk the footer of the seekable parquet file ``handle`` declares (:func:`_chunks`)."""
    metadata, start = _metadata(handle)
    return _chunks(metadata, handle, start)


def _chunks(metadata: dict[int, Any], handle: BinaryIO, start: int) -> list[Chunk]:
    """Every column chunk the footer ``metadata`` (at byte ``start`` of ``handle``) declares, row group by
    row group.

    The counts a memory bound rests on must agree with the one a reader decodes by, each row group's own
    ``num_rows``: a 2 KB file whose footer said 718 rows, and 718 values in each column chunk, held one
    row group of 30 million rows, and pyarrow decoded all of them (3.3 GB). The row groups must add up to
    the file's rows, and no column chunk may hold fewer values than its row group has rows (a row is at
    least one value, a null or an empty list included).
    """
    pages = _PageWalk(handle, start)
    chunks = []
    grouped = 0
    for group in _field(metadata, ROW_GROUPS, list):
        rows = _field(_as(group, dict), GROUP_ROWS, int)
        grouped += rows
        for column in _field(_as(group, dict), COLUMNS, list):
            meta = _field(_as(column, dict), META_DATA, dict)
            kind = _field(meta, TYPE, int)
            if not 0 <= kind < len(PHYSICAL_TYPES):
                raise FooterError(f"a column chunk has physical type {kind}, which parquet does not define")
            chunk = Chunk(
                PHYSICAL_TYPES[kind], _field(meta, NUM_VALUES, int), _field(meta, UNCOMPRESSED, int)
            )
            if chunk.num_values < rows:
                raise FooterError(
                    f"a column chunk says {chunk.num_values} values in a row group of {rows} rows; every row "
                    "holds at least one"
                )
            pages.check(meta, chunk)
            chunks.append(chunk)
    if grouped != (rows := _field(metadata, FILE_ROWS, int)):
        raise FooterError(f"its row groups hold {grouped} rows, but the file says {rows}")
    return chunks


class _PageWalk:
    """The page headers of each column chunk, read in turn from the file before any page is decoded.

    A reader decodes the values each page header counts, whatever the footer says: a 10 KB table whose
    footer gave a list column 718 values held 430 million in one dictionary-encoded page, and pyarrow
    decoded them all (1.7 GB of floats, a session at 4.9 GB). The values the data pages count and the bytes
    every page inflates to may not exceed what the footer declares for the chunk, on which the readers'
    memory bound rests.
    """

    def __init__(self, handle: BinaryIO, footer_at: int) -> None:
        self.handle, self.footer_at, self.walked = handle, footer_at, 0

    def check(self, meta: dict[int, Any], chunk: Chunk) -> None:
        at = _field(meta, DATA_PAGE_AT, int)
        dictionary_at = meta.get(DICTIONARY_PAGE_AT)
        if isinstance(dictionary_at, int) and not isinstance(dictionary_at, bool) and 0 < dictionary_at < at:
            at = dictionary_at
        end = at + _field(meta, COMPRESSED, int)
        if not 4 <= at <= end <= self.footer_at:
            raise FooterError(f"a column chunk spans bytes {at} to {end}, outside the file's data")
        values = inflated = 0
        while at < end:
            self.walked += 1
            if self.walked > PAGES_CAP:
                raise FooterError(f"it holds more than {PAGES_CAP} pages")
            header, length = self._header(at, end)
            sizes = [_field(header, PAGE_COMPRESSED, int), _field(header, PAGE_UNCOMPRESSED, int)]
            counts = [
                _field(_field(header, kind, dict), 1, int)
                for kind in (DATA_PAGE, DATA_PAGE_V2)
                if kind in header
            ]
            if min(sizes + counts) < 0:
                raise FooterError("a page header holds a negative size or count")
            inflated += sizes[1]
            values += sum(counts)
            at += length + sizes[0]
        if at != end:
            raise FooterError(f"a column chunk's pages run past its end (byte {at}, not {end})")
        if values > chunk.num_values or inflated > chunk.total_uncompressed_size:
            raise FooterError(
                f"a column chunk's pages hold {values} values in {inflated} bytes, but its footer says "
                f"{chunk.num_values} values in {chunk.total_uncompressed_size}: a reader decodes what the pages hold"
            )

    def _header(self, at: int, end: int) -> tuple[dict[int, Any], int]:
        """The page header at byte ``at`` and its length, read in a window that grows as it needs to."""
        window = 4096
        while True:
            self.handle.seek(at)
            data = self.handle.read(min(window, end - at))
            reader = _Reader(data)
            try:
                return reader.struct(0), reader.at
            except FooterError:
                if len(data) < window or window >= PAGE_HEADER_CAP:
                    raise
                window *= 16


def _leaf_paths(metadata: dict[int, Any]) -> list[tuple[str, ...]]:
    """The path of each leaf column, from the root's children down, as the footer's schema tree declares
    it (the tree pyarrow's readers build theirs from). Names keep their dots: ``("m.acc",)`` is a column of
    its own, ``("m", "acc")`` the field ``acc`` of a column ``m``."""
    elements = _field(metadata, SCHEMA, list)
    if not elements:
        raise FooterError("its schema holds no root element")
    paths: list[tuple[str, ...]] = []
    # (the path of a group, how many of its children are still to come), from the root down
    open_groups: list[tuple[tuple[str, ...], int]] = [((), _children(_as(elements[0], dict)))]
    for element in elements[1:]:
        while open_groups and open_groups[-1][1] == 0:
            open_groups.pop()
        if not open_groups:
            raise FooterError("its schema holds more elements than its groups declare children")
        prefix, left = open_groups.pop()
        open_groups.append((prefix, left - 1))
        node = _as(element, dict)
        path = (*prefix, _field(node, ELEMENT_NAME, bytes).decode("utf-8", "replace"))
        if len(path) > NESTING_CAP:
            raise FooterError(f"its schema nests past {NESTING_CAP} levels")
        if children := _children(node):
            open_groups.append((path, children))
        else:
            paths.append(path)
    if any(left for _, left in open_groups):
        raise FooterError("its schema ends before every group's children")
    return paths


def _children(element: dict[int, Any]) -> int:
    count = element.get(NUM_CHILDREN, 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise FooterError("a schema element declares a number of children that is no count")
    return count


def _metadata(handle: BinaryIO) -> tuple[dict[int, Any], int]:
    """The footer's FileMetaData, parsed, and the byte it starts at."""
    size = handle.seek(0, 2)
    if size < 12:
        raise FooterError(f"{size} bytes is too short for a parquet file")
    handle.seek(size - 8)
    tail = handle.read(8)
    if tail[4:] != MAGIC:
        raise FooterError("it does not end with the parquet magic PAR1 (an encrypted footer ends with PARE)")
    length = struct.unpack("<I", tail[:4])[0]
    if length > min(FOOTER_CAP, size - 12):
        raise FooterError(f"its footer claims {length} bytes, past what the file or the reader's cap holds")
    handle.seek(size - 8 - length)
    return _Reader(handle.read(length)).struct(0), size - 8 - length


def _field(struct_: dict[int, Any], field: int, kind: type) -> Any:
    return _as(struct_.get(field), kind)


def _as(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise FooterError("a required field of its metadata is missing or of the wrong type")
    return value


class _Reader:
    """Thrift's compact protocol, just enough to walk any struct: fields are kept by id, values as Python."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise FooterError("its metadata ends inside a value")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise FooterError("its metadata holds a variable-length integer longer than 64 bits")

    def zigzag(self) -> int:
        raw = self.varint()
        return (raw >> 1) ^ -(raw & 1)

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise FooterError("its metadata ends inside a value")
        self.at += count
        return self.data[self.at - count : self.at]

    def value(self, kind: int, depth: int) -> Any:
        if kind in (_TRUE, _FALSE):  # in a container, a boolean is a byte of its own
            return self.byte() == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if kind == _BINARY:
            return self.take(self.varint())
        if kind in (_LIST, _SET):
            header = self.byte()
            count = header >> 4 if header >> 4 != 15 else self.varint()
            return [self.value(header & 0x0F, depth + 1) for _ in range(self._bounded(count))]
        if kind == _MAP:
            count = self._bounded(self.varint())
            types = self.byte() if count else 0
            return [
                (self.value(types >> 4, depth + 1), self.value(types & 0x0F, depth + 1)) for _ in range(count)
            ]
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise FooterError(f"its metadata holds a value of unknown Thrift type {kind}")

    def struct(self, depth: int) -> dict[int, Any]:
        if depth > NESTING_CAP:
            raise FooterError(f"its metadata nests past {NESTING_CAP} levels")
        fields: dict[int, Any] = {}
        last = 0
        while (header := self.byte()) != _STOP:
            kind, delta = header & 0x0F, header >> 4
            last = last + delta if delta else self.zigzag()
            fields[last] = kind == _TRUE if kind in (_TRUE, _FALSE) else self.value(kind, depth)
        return fields

    def _bounded(self, count: int) -> int:
        if count > len(self.data) - self.at:  # every element takes at least one byte
            raise FooterError(f"its metadata claims {count} elements in {len(self.data) - self.at} bytes")
        return count
