"""Opening a test's renders, as every audit that decodes them must: PNG only, and within a pixel bound.

Pillow refuses an image past its decompression-bomb limit (about 179 M pixels) but decodes anything below
it: 400 renders of 9000×9000 grey pixels, 78 KB each, cost ``capsule.vis_decode`` and
``collapse.vis_identical`` 90 s and 125 s. A render is a picture of one sample for a person to look at
(docs/capsule.md §7); the bound below is far above any such picture and refuses the size before a pixel is
decoded. Any other format under a ``.png`` name is refused the same way (JPEG, GIF and TIFF open in Pillow
too, and the similarity probe judged renders the decode audit had failed).

Pillow's decoder is lenient where a viewer is not: it fills the rows of a short image-data stream with black
and never checks the CRC of an IDAT chunk, so a render holding 2 of its 64 rows, or one whose image data
is corrupt, decoded without a word. :func:`check_whole_png` reads the bytes as the PNG specification does
(ISO/IEC 15948, §5 and §11), before Pillow is trusted with the pixels.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

RENDER_PIXELS_CAP = 4096 * 4096
# Pixels of one side: a PNG decodes row by row, and a 1 × 16,777,216 render (within the area bound) took
# 0.5 s of CPU each, 400 of them minutes in each audit that decodes them.
RENDER_SIDE_CAP = 16384
# Bytes of a render file: its pixel bound at 16-bit RGBA, stored without compression. Pillow reads every
# ancillary chunk whole before the header is known to it, and keeps the private ones: an 8×8 render
# carrying chunks of 1 GiB each (a sparse file, 16 KB on disk) held 3.4 GB.
RENDER_BYTES_CAP = RENDER_PIXELS_CAP * 8


# Pixels the renders of one test may hold in all, for each audit that decodes them: 400 renders each at
# the area bound (4096×4096 16-bit RGBA, 130 KB on disk) kept the two audits 265 s. This budget is 1,024
# renders of 1024×1024 or 256 of 2048×2048; at worst (16-bit RGBA) about 20 s of decoding per audit.
RENDERS_PIXELS_BUDGET = 1 << 30


class RenderRefused(ValueError):
    """A render past :data:`RENDER_PIXELS_CAP`, :data:`RENDER_SIDE_CAP` or :data:`RENDER_BYTES_CAP`; the
    message gives its size."""


class RendersPastBudget(RenderRefused):
    """The renders of one test hold more pixels in all than :data:`RENDERS_PIXELS_BUDGET`."""


class RenderBudget:
    """What is left of :data:`RENDERS_PIXELS_BUDGET` for the renders of one test, in one audit."""

    def __init__(self) -> None:
        self.left = RENDERS_PIXELS_BUDGET

    def spend(self, pixels: int) -> None:
        if pixels > self.left:
            raise RendersPastBudget(
                f"the renders of one test hold more than the {RENDERS_PIXELS_BUDGET:,} pixels in all that an "
                "audit decodes (docs/capsule.md §7)"
            )
        self.left -= pixels


@contextmanager
def opened_render(handle: IO[bytes], budget: RenderBudget) -> Iterator[Image.Image]:
    """The PNG ``handle`` holds, opened (its header read, no pixel decoded), checked against the bounds and
    its pixels taken from the test's ``budget``."""
    from PIL import Image  # deferred: only the audits that decode renders pay for Pillow

    size = os.fstat(handle.fileno()).st_size
    if size > RENDER_BYTES_CAP:
        raise RenderRefused(
            f"{size:,} bytes, past the {RENDER_BYTES_CAP:,} a render of at most {RENDER_PIXELS_CAP:,} pixels needs "
            "(docs/capsule.md §7)"
        )
    with Image.open(handle, formats=["PNG"]) as image:
        width, height = image.size
        if width * height > RENDER_PIXELS_CAP:
            raise RenderRefused(
                f"{width}×{height} pixels, past the {RENDER_PIXELS_CAP:,} a render may hold (docs/capsule.md §7)"
            )
        if max(width, height) > RENDER_SIDE_CAP:
            raise RenderRefused(
                f"{width}×{height} pixels, a side past the {RENDER_SIDE_CAP:,} a render may have (docs/capsule.md §7)"
            )
        budget.spend(width * height)
        yield image


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The chunks a decoder must understand (ISO/IEC 15948 §5.4): an unknown one with the critical bit set (an
# upper-case first letter) makes an image the decoder "cannot safely interpret"; Pillow skips it silently.
PNG_CRITICAL_CHUNKS = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})
# Channels of each colour type, and the bit depths it allows (§11.2.2).
PNG_COLOUR_TYPES: dict[int, tuple[int, frozenset[int]]] = {
    0: (1, frozenset({1, 2, 4, 8, 16})),  # greyscale
    2: (3, frozenset({8, 16})),  # truecolour
    3: (1, frozenset({1, 2, 4, 8})),  # indexed (palette)
    4: (2, frozenset({8, 16})),  # greyscale with alpha
    6: (4, frozenset({8, 16})),  # truecolour with alpha
}
PNG_PALETTE_NEEDED = 3  # the colour type whose pixels index a PLTE chunk
PNG_PALETTE_FORBIDDEN = frozenset({0, 4})  # greyscale types: a PLTE chunk is an error (§11.2.3)
# Adam7 passes: first column, first row, column step, row step (§8.2).
ADAM7_PASSES = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)
PNG_LENGTH_CAP = (1 << 31) - 1  # §5.3 and §11.2.2: a chunk length, a width and a height are at most 2^31 - 1
# Bytes read, and bytes inflated, at a time: a render (within RENDER_BYTES_CAP where opened_render opened
# it) is walked in steps of this, never held whole, and its inflated image data is counted, never kept.
PNG_READ_STEP = 1 << 20


class RenderDamaged(ValueError):
    """A ``.png`` render whose bytes are not one whole PNG datastream: a bad CRC, chunks missing or out of
    order, or image data that does not inflate to exactly what its header implies; the message says which
    and where."""


@dataclass(frozen=True)
class PngHeader:
    """What an IHDR chunk declares (§11.2.2)."""

    width: int
    height: int
    bit_depth: int
    colour_type: int
    interlaced: bool

    @classmethod
    def parse(cls, data: bytes) -> PngHeader:
        """The IHDR chunk's ``data``, checked: :class:`RenderDamaged` for any value PNG does not define."""
        if len(data) != 13:
            raise RenderDamaged(f"the IHDR chunk holds {len(data)} bytes, not 13")
        width, height, bit_depth, colour_type, compression, filtering, interlace = struct.unpack(
            ">IIBBBBB", data
        )
        if not (1 <= width <= PNG_LENGTH_CAP and 1 <= height <= PNG_LENGTH_CAP):
            raise RenderDamaged(f"the IHDR declares {width}×{height} pixels; each side must be 1 to 2^31 - 1")
        if colour_type not in PNG_COLOUR_TYPES or bit_depth not in PNG_COLOUR_TYPES[colour_type][1]:
            raise RenderDamaged(
                f"the IHDR declares colour type {colour_type} at {bit_depth} bits, not a PNG pairing"
            )
        if compression or filtering or interlace not in (0, 1):
            raise RenderDamaged(
                f"the IHDR declares compression {compression}, filter {filtering} and interlace {interlace}; "
                "PNG defines 0, 0 and 0 or 1"
            )
        return cls(width, height, bit_depth, colour_type, bool(interlace))

    @property
    def image_data_size(self) -> int:
        """Bytes the image data inflates to: each scanline one filter byte and its pixels packed to whole
        bytes; an interlaced image is seven sub-images (Adam7), each of its own size, a pass with no pixel
        holding no scanline at all (§7.2, §8.2)."""
        bits_per_pixel = PNG_COLOUR_TYPES[self.colour_type][0] * self.bit_depth

        def scanlines(columns: int, rows: int) -> int:
            return rows * (1 + (columns * bits_per_pixel + 7) // 8) if columns and rows else 0

        if not self.interlaced:
            return scanlines(self.width, self.height)
        return sum(
            scanlines(
                max(0, -(-(self.width - first_column) // column_step)),
                max(0, -(-(self.height - first_row) // row_step)),
            )
            for first_column, first_row, column_step, row_step in ADAM7_PASSES
        )

    def __str__(self) -> str:
        layout = "Adam7-interlaced" if self.interlaced else "not interlaced"
        return (
            f"{self.width}×{self.height}, colour type {self.colour_type} at {self.bit_depth} bits, {layout}"
        )


class _ImageDataCounter:
    """Inflates the IDAT data of one PNG as it arrives and counts its bytes, never keeping them and never
    inflating more than one byte past what the header implies (a stream of zeros inflates 1,000-fold)."""

    def __init__(self, header: PngHeader) -> None:
        self.header = header
        self.expected = header.image_data_size
        self.inflated = 0
        self.inflater = zlib.decompressobj()

    def feed(self, data: bytes) -> None:
        """Inflate the next piece of IDAT data; :class:`RenderDamaged` if it is not zlib, inflates past what
        the header implies, or follows the end of the zlib stream."""
        if self.inflater.eof:
            raise RenderDamaged(f"{len(data):,} byte(s) of image data follow the end of its zlib stream")
        pending = data
        try:
            while True:
                step = min(PNG_READ_STEP, self.expected - self.inflated + 1)
                inflated = len(self.inflater.decompress(pending, step))
                self.inflated += inflated
                if self.inflated > self.expected:
                    raise RenderDamaged(
                        f"image data inflates past the {self.expected:,} bytes its IHDR implies ({self.header})"
                    )
                pending = self.inflater.unconsumed_tail
                if self.inflater.eof or (not pending and inflated < step):
                    break
        except zlib.error as exc:
            raise RenderDamaged(f"image data is not a whole zlib stream ({exc})") from None
        if self.inflater.unused_data:
            extra = len(self.inflater.unused_data)
            raise RenderDamaged(f"{extra:,} byte(s) of image data follow the end of its zlib stream")

    def finish(self) -> None:
        """:class:`RenderDamaged` unless the image data ended its zlib stream at exactly the implied size."""
        if self.inflated != self.expected or not self.inflater.eof:
            cut = "" if self.inflater.eof else " before its zlib stream is cut off"
            raise RenderDamaged(
                f"image data inflates to {self.inflated:,} bytes{cut}, not the {self.expected:,} its IHDR implies "
                f"({self.header})"
            )


def check_whole_png(handle: IO[bytes]) -> None:
    """Raise :class:`RenderDamaged` unless ``handle`` holds one whole PNG datastream from its first byte:
    the signature; every chunk's CRC right, critical or ancillary (§5.3); IHDR first and valid; a PLTE
    before the image data where the colour type needs one and none where it forbids one; the IDAT chunks
    consecutive; no critical chunk PNG does not define; IEND last; and the IDAT data inflating to exactly
    the bytes the header implies (§7.2, Adam7 passes each their own size).

    Bytes after IEND are refused too: no render writer puts any there, a viewer shows none of them, and a
    second image appended to the first is a render that says two things. Pillow checks none of this while
    decoding: it filled a short image with black and took a corrupt IDAT chunk.

    The walk reads :data:`PNG_READ_STEP` bytes at a time and is bounded by the file, which
    :func:`opened_render` holds to :data:`RENDER_BYTES_CAP`; inflation stops one byte past the implied
    size. The handle's position is restored, for a decoder reading it after.
    """
    start = handle.tell()
    try:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(0)
        if size <= PNG_READ_STEP:
            # Read in one call (the demo's renders are 230 bytes): chunk by chunk from the unbuffered file
            # took ten reads each, a third of this check's time.
            _walk_chunks(io.BytesIO(handle.read(size)))
        else:
            # Buffered, since a larger render may hold millions of small chunks, each three reads; detached
            # after, as closing the buffer would close the caller's file. The ignore: typeshed wants a
            # RawIOBase, and IO[bytes] is what callers hold (a FileIO from the reader, a BytesIO in tests).
            buffered = io.BufferedReader(handle)  # type: ignore[type-var]
            try:
                _walk_chunks(buffered)
            finally:
                buffered.detach()
    finally:
        handle.seek(start)


def _walk_chunks(handle: IO[bytes]) -> None:
    if handle.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
        raise RenderDamaged("the file does not start with the PNG signature")
    position = len(PNG_SIGNATURE)
    image_data: _ImageDataCounter | None = None
    # The types seen and the last one: a set, since a render may hold millions of empty chunks.
    seen: set[bytes] = set()
    previous = b""
    while previous != b"IEND":
        chunk_header = handle.read(8) or b""
        if len(chunk_header) < 8:
            ending = "inside a chunk header" if chunk_header else "without an IEND chunk"
            raise RenderDamaged(f"the file ends at byte {position + len(chunk_header):,} {ending}")
        length, kind = struct.unpack(">I4s", chunk_header)
        where = f"{_chunk_name(kind)} chunk at byte {position:,}"
        _check_placement(kind, length, where, seen, previous, image_data.header if image_data else None)
        checksum = zlib.crc32(kind)
        kept = b""  # the data of IHDR and PLTE (their lengths checked above); IDAT data streams through
        inflation_problem: RenderDamaged | None = None
        left = length
        while left:
            data = _read_exactly(handle, min(left, PNG_READ_STEP), f"the {where}")
            checksum = zlib.crc32(data, checksum)
            left -= len(data)
            if kind == b"IDAT" and image_data is not None and inflation_problem is None:
                try:
                    image_data.feed(data)
                except RenderDamaged as exc:  # said once the CRC is known: a corrupt chunk is named as such
                    inflation_problem = exc
            elif kind in (b"IHDR", b"PLTE"):
                kept += data
        (stored,) = struct.unpack(">I", _read_exactly(handle, 4, f"the CRC of the {where}"))
        if stored != checksum:
            raise RenderDamaged(f"the {where} has CRC {stored:08x}, its bytes give {checksum:08x}")
        if inflation_problem is not None:
            raise RenderDamaged(f"the {where}: {inflation_problem}")
        if kind == b"IHDR":
            image_data = _ImageDataCounter(PngHeader.parse(kept))
        seen.add(kind)
        previous = kind
        position += 12 + length
    assert image_data is not None  # IEND is only reached after IHDR and IDAT
    image_data.finish()
    if handle.read(1):
        extra = handle.seek(0, os.SEEK_END) - position
        raise RenderDamaged(
            f"{extra:,} byte(s) follow the IEND chunk that ends the image at byte {position:,}"
        )


def _check_placement(
    kind: bytes, length: int, where: str, seen: set[bytes], previous: bytes, header: PngHeader | None
) -> None:
    """Raise :class:`RenderDamaged` where a chunk of type ``kind`` and ``length`` bytes may not follow the
    chunks of the types ``seen``, the ``previous`` one last (§5.6), is a critical chunk a decoder cannot
    skip, or is an IHDR or PLTE of a length PNG does not allow (checked before their data is read)."""
    if not (kind.isascii() and kind.isalpha()):
        raise RenderDamaged(f"the {where} has a type that is not four letters")
    if length > PNG_LENGTH_CAP:
        raise RenderDamaged(f"the {where} declares {length:,} bytes, past the 2^31 - 1 a chunk may hold")
    if not seen and kind != b"IHDR":
        raise RenderDamaged(f"the first chunk is the {where}, not IHDR")
    if kind in (b"IHDR", b"PLTE") and kind in seen:
        raise RenderDamaged(f"the {where} is a second one")
    if kind == b"IHDR" and length != 13:
        raise RenderDamaged(f"the {where} holds {length:,} bytes, not 13")
    if kind == b"PLTE" and (length % 3 or not 3 <= length <= 3 * 256):
        raise RenderDamaged(f"the {where} holds {length:,} bytes, not 1 to 256 RGB entries")
    if kind[:1].isupper() and kind not in PNG_CRITICAL_CHUNKS:
        raise RenderDamaged(f"the {where} is critical (upper-case first letter) and not one PNG defines")
    if header is None:
        return
    if kind == b"PLTE" and header.colour_type in PNG_PALETTE_FORBIDDEN:
        raise RenderDamaged(f"the {where} is in a greyscale image (colour type {header.colour_type})")
    if kind == b"PLTE" and b"IDAT" in seen:
        raise RenderDamaged(f"the {where} comes after the image data")
    if kind == b"IDAT" and header.colour_type == PNG_PALETTE_NEEDED and b"PLTE" not in seen:
        raise RenderDamaged(f"the {where} comes before the PLTE chunk colour type 3 needs")
    if kind == b"IDAT" and b"IDAT" in seen and previous != b"IDAT":
        raise RenderDamaged(f"the {where} is separated from the IDAT chunks before it")
    if kind == b"IEND" and b"IDAT" not in seen:
        raise RenderDamaged(f"the {where} comes before any IDAT chunk: the image holds no image data")
    if kind == b"IEND" and length:
        raise RenderDamaged(f"the {where} holds {length:,} bytes, not 0")


def _chunk_name(kind: bytes) -> str:
    """A chunk type for a message: its four letters, or its bytes escaped when they are not letters."""
    return kind.decode("ascii") if kind.isascii() and kind.isalpha() else ascii(kind)


def _read_exactly(handle: IO[bytes], size: int, what: str) -> bytes:
    """``size`` bytes from ``handle``, or :class:`RenderDamaged` saying the file ends inside ``what``."""
    data = handle.read(size) or b""
    while len(data) < size:
        more = handle.read(size - len(data))
        if not more:
            raise RenderDamaged(f"the file ends inside {what} ({len(data):,} of its {size:,} bytes)")
        data += more
    return data
