"""Renders are read as whole PNGs and compared as a viewer shows them.

Pillow's decoder is lenient: a render whose image data held 2 of its 64 rows decoded with the other 62
black, and a corrupt IDAT chunk (a fatal error by the PNG specification) decoded without a word, while a
bad CRC on a harmless tEXt chunk failed ``capsule.vis_decode``. :func:`runaudit.renders.check_whole_png`
reads the bytes as the specification does. And ``collapse.vis_identical`` compared ``convert("L")``
thumbnails, which drop alpha: 400 renders transparent everywhere (400 blank pictures) "differed".

The good files are built with Pillow where it writes them, and by hand where it does not (Pillow writes no
Adam7-interlaced PNG): each hand-built file is first shown to decode in Pillow to the pixels it encodes.
"""

from __future__ import annotations

import io
import struct
import zlib
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpu_time import least_cpu_seconds
from PIL import Image, PngImagePlugin

from runaudit.renders import PNG_READ_STEP, PngHeader, RenderDamaged, check_whole_png

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Adam7 passes (first column, first row, column step, row step), written out here as the specification
# gives them, not imported: the test is an independent reading.
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
RNG = np.random.default_rng(7)


# -- building PNGs ------------------------------------------------------------------------------------


def chunk(kind: bytes, data: bytes, crc: int | None = None) -> bytes:
    """One chunk: its length, type, data and CRC (the right one unless ``crc`` is given)."""
    checksum = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", checksum)


def chunks_of(png: bytes) -> list[tuple[bytes, bytes]]:
    """The (type, data) of each chunk of a well-formed ``png``."""
    assert png.startswith(SIGNATURE)
    found, position = [], len(SIGNATURE)
    while position < len(png):
        (length,) = struct.unpack(">I", png[position : position + 4])
        kind = png[position + 4 : position + 8]
        found.append((kind, png[position + 8 : position + 8 + length]))
        position += 12 + length
    return found


def assembled(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return SIGNATURE + b"".join(chunk(kind, data) for kind, data in chunks)


def pillow_png(image: Image.Image, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **options)
    return buffer.getvalue()


def ihdr(width: int, height: int, bit_depth: int, colour_type: int, interlace: int) -> bytes:
    return struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, interlace)


def adam7_png(pixels: np.ndarray, bit_depth: int, colour_type: int) -> bytes:
    """``pixels`` (rows × columns [× channels], one sample per value) as an Adam7-interlaced PNG, every
    scanline unfiltered: seven sub-images, a pass with no pixel holding no scanline."""
    height, width = pixels.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    scanlines = []
    for first_column, first_row, column_step, row_step in ADAM7:
        sub_image = pixels[first_row::row_step, first_column::column_step]
        if sub_image.size == 0:
            continue
        scanlines += [b"\x00" + row.astype(dtype).tobytes() for row in sub_image]
    return assembled(
        [
            (b"IHDR", ihdr(width, height, bit_depth, colour_type, 1)),
            (b"IDAT", zlib.compress(b"".join(scanlines))),
            (b"IEND", b""),
        ]
    )


def damage_message(png: bytes) -> str:
    """What :func:`check_whole_png` says of ``png``: ``""`` when it is whole."""
    try:
        check_whole_png(io.BytesIO(png))
    except RenderDamaged as exc:
        return str(exc)
    return ""


def short_of_rows(png: bytes, rows_kept: int) -> bytes:
    """``png`` re-encoded with only its first ``rows_kept`` rows of image data, its IHDR still declaring
    every row: the file Pillow decoded with the missing rows black."""
    image = Image.open(io.BytesIO(png))
    kept = chunks_of(pillow_png(image.crop((0, 0, image.width, rows_kept))))
    header = bytearray(kept[0][1])
    header[4:8] = struct.pack(">I", image.height)
    return assembled([(b"IHDR", bytes(header)), *kept[1:]])


def with_flipped_idat_crc(png: bytes) -> bytes:
    """``png`` with one bit of its last IDAT chunk's CRC flipped."""
    damaged = bytearray(png)
    crc_at = png.rindex(b"IEND") - 8  # the 4 CRC bytes before IEND's length
    damaged[crc_at] ^= 0x80
    return bytes(damaged)


GRADIENT = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) % 251).astype(np.uint8)


def _good_files() -> dict[str, bytes]:
    """Whole PNGs of every colour type, bit depths 1 to 16, palette, several IDAT chunks, interlaced."""
    rgb = RNG.integers(0, 256, (33, 17, 3), dtype=np.uint8)
    grey16 = RNG.integers(0, 1 << 16, (5, 3), dtype=np.uint16)
    several_idat = chunks_of(pillow_png(Image.fromarray(GRADIENT)))
    [(_, image_data)] = [item for item in several_idat if item[0] == b"IDAT"]
    split = [several_idat[0], *[(b"IDAT", image_data[i : i + 7]) for i in range(0, len(image_data), 7)]]
    return {
        "grey 8-bit": pillow_png(Image.fromarray(GRADIENT)),
        "grey 1-bit": pillow_png(Image.fromarray(GRADIENT > 100)),
        "grey 16-bit": pillow_png(Image.fromarray(grey16)),
        "rgb": pillow_png(Image.fromarray(rgb)),
        "rgba": pillow_png(Image.fromarray(RNG.integers(0, 256, (9, 4, 4), dtype=np.uint8))),
        "grey+alpha": pillow_png(Image.fromarray(GRADIENT).convert("LA")),
        "palette 8-bit": pillow_png(Image.fromarray(rgb).convert("P")),
        "palette 4-bit": pillow_png(Image.fromarray(GRADIENT % 16).convert("P"), bits=4),
        "palette with tRNS": pillow_png(Image.fromarray(GRADIENT).convert("P"), transparency=0),
        "with a tEXt chunk": pillow_png(Image.fromarray(GRADIENT), pnginfo=_text_info()),
        "IDAT in 7-byte chunks": assembled([*split, (b"IEND", b"")]),
        "interlaced rgb 17×33": adam7_png(rgb, 8, 2),
        "interlaced grey 16-bit 3×5": adam7_png(grey16, 16, 0),
        "interlaced grey+alpha 16-bit 9×2": adam7_png(
            RNG.integers(0, 1 << 16, (2, 9, 2), dtype=np.uint16), 16, 4
        ),
        "interlaced 1×1 (one pass)": adam7_png(np.array([[200]], dtype=np.uint8), 8, 0),
        "interlaced 64×64 grey": adam7_png(GRADIENT, 8, 0),
    }


def _text_info() -> PngImagePlugin.PngInfo:
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "a render")
    return info


GOOD_FILES = _good_files()


# -- unit tests of the byte-level check ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOOD_FILES))
def test_a_whole_png_passes_and_pillow_agrees(name: str) -> None:
    png = GOOD_FILES[name]
    Image.open(io.BytesIO(png)).load()  # a real PNG: Pillow decodes it
    assert damage_message(png) == ""


@pytest.mark.parametrize(
    ("pixels", "bit_depth", "colour_type"),
    [
        (RNG.integers(0, 256, (33, 17, 3), dtype=np.uint8), 8, 2),
        (RNG.integers(0, 1 << 16, (5, 3), dtype=np.uint16), 16, 0),
        (np.array([[9]], dtype=np.uint8), 8, 0),
        (GRADIENT, 8, 0),
    ],
)
def test_hand_built_interlaced_pngs_decode_in_pillow_to_their_pixels(
    pixels: np.ndarray, bit_depth: int, colour_type: int
) -> None:
    """The interlaced good files are real: Pillow reads them back pixel for pixel."""
    image = Image.open(io.BytesIO(adam7_png(pixels, bit_depth, colour_type)))
    assert np.array_equal(np.asarray(image), pixels)


@pytest.mark.parametrize(
    ("size", "bit_depth", "colour_type", "expected"),
    [
        ((64, 64), 8, 2, 64 * (1 + 64 * 3)),
        ((3, 5), 16, 0, 5 * (1 + 3 * 2)),
        ((10, 2), 1, 0, 2 * (1 + 2)),  # 10 pixels of 1 bit: two bytes a row
        ((1, 1), 8, 6, 1 + 4),
    ],
)
def test_the_image_data_size_of_a_plain_png(
    size: tuple[int, int], bit_depth: int, colour_type: int, expected: int
) -> None:
    assert PngHeader(*size, bit_depth, colour_type, interlaced=False).image_data_size == expected


def test_the_image_data_size_of_an_interlaced_png_is_its_seven_passes() -> None:
    # 1×1: only the first pass has a pixel. 8×8 grey: passes of 1×1, 1×1, 2×1, 2×2, 4×2, 4×4 and 8×4.
    assert PngHeader(1, 1, 8, 0, interlaced=True).image_data_size == 2
    passes = [(1, 1), (1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4)]
    assert PngHeader(8, 8, 8, 0, interlaced=True).image_data_size == sum(h * (1 + w) for w, h in passes)


def test_image_data_holding_two_of_sixty_four_rows_is_refused() -> None:
    png = short_of_rows(GOOD_FILES["grey 8-bit"], rows_kept=2)
    assert np.asarray(Image.open(io.BytesIO(png)))[2:].max() == 0  # what Pillow made of it: black rows
    message = damage_message(png)
    assert "image data inflates to 130 bytes, not the 4,160 its IHDR implies" in message
    assert "64×64, colour type 0 at 8 bits, not interlaced" in message


def test_image_data_past_what_the_header_implies_is_refused() -> None:
    kept = chunks_of(GOOD_FILES["grey 8-bit"])
    header = bytearray(kept[0][1])
    header[4:8] = struct.pack(">I", 60)  # the header declares 60 rows, the data holds 64
    message = damage_message(assembled([(b"IHDR", bytes(header)), *kept[1:]]))
    assert "image data inflates past the 3,900 bytes its IHDR implies" in message


def test_an_interlaced_header_over_plain_image_data_is_refused() -> None:
    """A 64×64 image interlaced has 120 scanlines (8, 8, 8, 16, 16, 32 and 32 a pass), each with its filter
    byte: the 4,160 bytes of its plain data are too few. The header's interlace flag counts."""
    kept = chunks_of(GOOD_FILES["grey 8-bit"])
    header = ihdr(64, 64, 8, 0, 1)
    assert damage_message(assembled([(b"IHDR", header), *kept[1:]])) == (
        "image data inflates to 4,160 bytes, not the 4,216 its IHDR implies "
        "(64×64, colour type 0 at 8 bits, Adam7-interlaced)"
    )


def test_a_zlib_stream_cut_short_is_refused_even_with_a_right_crc() -> None:
    kept = chunks_of(GOOD_FILES["grey 8-bit"])
    [(_, image_data)] = [item for item in kept if item[0] == b"IDAT"]
    cut = [(kind, image_data[:-6] if kind == b"IDAT" else data) for kind, data in kept]
    assert "its zlib stream is cut off" in damage_message(assembled(cut))


def test_a_bomb_of_zeros_is_inflated_no_further_than_the_header_implies() -> None:
    """256 MiB of zeros compress to 256 KB: the check stops one byte past the 4,160 bytes the header
    implies instead of inflating them all."""
    zeros = zlib.compressobj(9)
    bomb = b"".join(zeros.compress(bytes(1 << 20)) for _ in range(256)) + zeros.flush()
    png = assembled([(b"IHDR", ihdr(64, 64, 8, 0, 0)), (b"IDAT", bomb), (b"IEND", b"")])
    assert "image data inflates past the 4,160 bytes" in damage_message(png)
    assert least_cpu_seconds(partial(damage_message, png), 0.5) < 0.5


def test_a_bad_crc_on_the_image_data_is_refused() -> None:
    message = damage_message(with_flipped_idat_crc(GOOD_FILES["rgb"]))
    assert message.startswith("the IDAT chunk at byte 33 has CRC ") and "its bytes give " in message


def test_a_bad_crc_on_an_ancillary_chunk_is_refused() -> None:
    kept = chunks_of(GOOD_FILES["grey 8-bit"])
    text = chunk(b"tEXt", b"Comment\x00hi", crc=0)
    png = SIGNATURE + chunk(*kept[0]) + text + b"".join(chunk(*item) for item in kept[1:])
    assert damage_message(png).startswith("the tEXt chunk at byte 33 has CRC 00000000, its bytes give ")


def test_a_bad_crc_deep_in_a_render_past_one_read_step_is_refused() -> None:
    """A render larger than one read step is walked from the file in pieces, not read whole."""
    noise = RNG.integers(0, 256, (700, 700, 3), dtype=np.uint8)
    png = pillow_png(Image.fromarray(noise))
    assert len(png) > PNG_READ_STEP
    assert damage_message(png) == ""
    assert "has CRC" in damage_message(with_flipped_idat_crc(png))
    assert "the file ends inside the IDAT chunk at byte " in damage_message(png[: len(png) // 2])


def test_a_png_without_its_iend_chunk_is_refused() -> None:
    png = GOOD_FILES["rgb"]
    assert damage_message(png[:-12]) == f"the file ends at byte {len(png) - 12:,} without an IEND chunk"
    assert "the file ends inside the CRC of the IEND chunk" in damage_message(png[:-2])


def test_bytes_after_the_iend_chunk_are_refused() -> None:
    """Decided: refused. No render writer puts bytes after IEND, a viewer shows none of them, and a second
    image appended to the first makes a render that shows one picture and carries another."""
    png = GOOD_FILES["rgb"]
    assert damage_message(png + png) == (
        f"{len(png):,} byte(s) follow the IEND chunk that ends the image at byte {len(png):,}"
    )
    assert damage_message(png + b"\x00") != ""


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (
            [(b"tEXt", b"a\x00b"), (b"IHDR", ihdr(1, 1, 8, 0, 0))],
            "the first chunk is the tEXt chunk at byte 8",
        ),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 0)), (b"IEND", b"")], "comes before any IDAT chunk"),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 0)), (b"IHDR", ihdr(1, 1, 8, 0, 0))], "is a second one"),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 0)), (b"ZZZZ", b"")], "critical (upper-case first letter)"),
        (
            [(b"IHDR", ihdr(1, 1, 8, 3, 0)), (b"IDAT", zlib.compress(b"\x00\x00"))],
            "the PLTE chunk colour type 3",
        ),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 0)), (b"PLTE", b"\x00" * 3)], "is in a greyscale image"),
        ([(b"IHDR", ihdr(1, 1, 3, 2, 0))], "colour type 2 at 3 bits, not a PNG pairing"),
        ([(b"IHDR", ihdr(0, 1, 8, 0, 0))], "declares 0×1 pixels"),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 2))], "interlace 2"),
        ([(b"IHDR", b"\x00" * 12)], "the IHDR chunk at byte 8 holds 12 bytes, not 13"),
        ([(b"IHDR", ihdr(1, 1, 8, 3, 0)), (b"PLTE", b"\x00" * 4)], "holds 4 bytes, not 1 to 256 RGB entries"),
        ([(b"IHDR", ihdr(1, 1, 8, 0, 0)), (b"\x00DAT", b"")], "has a type that is not four letters"),
        (
            [
                (b"IHDR", ihdr(1, 2, 8, 0, 0)),
                (b"IDAT", zlib.compress(b"\x00\x00\x00\x00")[:4]),
                (b"tEXt", b"a\x00b"),
                (b"IDAT", zlib.compress(b"\x00\x00\x00\x00")[4:]),
            ],
            "is separated from the IDAT chunks before it",
        ),
    ],
)
def test_chunks_out_of_place_are_refused(chunks: list[tuple[bytes, bytes]], expected: str) -> None:
    assert expected in damage_message(assembled(chunks))


def test_another_format_is_refused() -> None:
    jpeg = io.BytesIO()
    Image.fromarray(GRADIENT).save(jpeg, format="JPEG")
    assert damage_message(jpeg.getvalue()) == "the file does not start with the PNG signature"


def test_the_handle_is_left_open_where_it_was(tmp_path: Path) -> None:
    """The audit hands the check the file it opened for Pillow: small renders (read whole) and large ones
    (walked through a buffer) leave it open at its position."""
    small = io.BytesIO(GOOD_FILES["rgb"])
    small.seek(21)
    check_whole_png(small)
    assert small.tell() == 21
    large = tmp_path / "large.png"
    empty_chunk = chunk(b"skIp", b"")
    kept = chunks_of(GOOD_FILES["grey 8-bit"])
    large.write_bytes(assembled(kept[:-1]) + empty_chunk * (PNG_READ_STEP // 12 + 1) + chunk(b"IEND", b""))
    with large.open("rb", buffering=0) as handle:
        handle.seek(21)
        check_whole_png(handle)
        assert not handle.closed and handle.tell() == 21


# -- end to end: the harness on a damaged copy of the demo project -------------------------------------


def _renders(capsule: Path, condition: str, role: str) -> list[Path]:
    return sorted((capsule / "test" / "main" / "vis" / condition / role).glob("*.png"))


def _only(outcome: Any, audit: str) -> dict[str, Any]:
    """The one verdict ``audit`` gave."""
    found: list[dict[str, Any]] = outcome.find(audit)
    assert len(found) == 1, found
    return found[0]


def test_renders_short_of_rows_or_with_a_corrupt_idat_fail_decode_and_whole_unusual_ones_pass(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """Renders holding 2 of their 64 rows, and renders with a bad IDAT CRC, passed ``capsule.vis_decode``
    (and the teardown answer was yes). Whole interlaced, 16-bit and palette renders still pass."""
    short = _renders(capsule_dir, "clean", "prediction")[:3]
    for render in short:
        render.write_bytes(short_of_rows(render.read_bytes(), rows_kept=2))
    corrupt = _renders(capsule_dir, "noise", "prediction")[:3]
    for render in corrupt:
        render.write_bytes(with_flipped_idat_crc(render.read_bytes()))
    unusual = _renders(capsule_dir, "clean", "input")[:3]
    for render, encode in zip(
        unusual,
        (
            lambda grey: adam7_png(grey, 8, 0),
            lambda grey: pillow_png(Image.fromarray(grey.astype(np.uint16) * 257)),
            lambda grey: pillow_png(Image.fromarray(grey).convert("RGB").convert("P")),
        ),
        strict=True,
    ):
        render.write_bytes(encode(np.asarray(Image.open(render).convert("L"))))
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode")
    decode = _only(outcome, "capsule.vis_decode")
    assert decode["verdict"] == "failed", decode["message"]
    renders = len(list((capsule_dir / "test" / "main" / "vis").glob("*/*/*.png")))
    assert decode["message"].startswith(
        f"run demo: 6 of {renders} PNG(s) under test/main/vis do not decode: "
    )
    assert "\n" not in decode["message"]
    broken = decode["evidence"]["broken"]
    assert [line.split(" (")[0] for line in broken] == [
        str(render.relative_to(capsule_dir)) for render in short + corrupt
    ], broken
    assert all(
        "(RenderDamaged: image data inflates to 386 bytes, not the 12,352" in line for line in broken[:3]
    )
    assert all("(RenderDamaged: the IDAT chunk at byte 33 has CRC " in line for line in broken[3:])


def test_renders_transparent_everywhere_are_disclosed_as_blank_identical_pictures(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """Every render replaced by an RGBA one whose alpha is 0 everywhere (the picture still under it): a
    viewer shows only blank images, yet ``collapse.vis_identical`` said the renders differ."""
    renders = sorted((capsule_dir / "test" / "main" / "vis").glob("*/*/*.png"))
    for render in renders:
        picture = np.asarray(Image.open(render).convert("RGB"))
        alpha = np.zeros(picture.shape[:2], dtype=np.uint8)
        render.write_bytes(pillow_png(Image.fromarray(np.dstack([picture, alpha]))))
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode or vis_identical")
    assert _only(outcome, "capsule.vis_decode")["verdict"] == "passed"  # whole PNGs, only invisible
    identical = _only(outcome, "collapse.vis_identical")
    assert identical["verdict"] == "disclosed", identical["message"]
    selected = len(_renders(capsule_dir, "clean", "input"))
    blank = f"(100% of {selected * (selected - 1) // 2} pairs; all blank, only the background shows)"
    assert identical["message"] == (
        f"run demo: test/main/vis: the selected samples render near-identically in clean/input {blank}, "
        f"clean/prediction {blank}, noise/input {blank}, noise/prediction {blank}: different inputs, the "
        "same picture"
    )


def test_palette_and_grey_renders_transparent_everywhere_are_blank_too(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """A palette render whose every entry is transparent through tRNS, and a grey one whose alpha is 0, show
    nothing either; the palette ones stopped the audit before (Pillow warned converting them to grey)."""
    for render in _renders(capsule_dir, "clean", "input"):
        palette = Image.open(render).convert("RGB").convert("P")
        render.write_bytes(pillow_png(palette, transparency=bytes(256)))
    for render in _renders(capsule_dir, "clean", "prediction"):
        grey = Image.open(render).convert("LA")
        grey.putalpha(0)
        render.write_bytes(pillow_png(grey))
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode or vis_identical")
    assert _only(outcome, "capsule.vis_decode")["verdict"] == "passed"
    identical = _only(outcome, "collapse.vis_identical")
    assert identical["verdict"] == "disclosed", identical["message"]
    message = identical["message"]
    selected = len(_renders(capsule_dir, "clean", "input"))
    blank = f"(100% of {selected * (selected - 1) // 2} pairs; all blank, only the background shows)"
    assert f"clean/input {blank}" in message and f"clean/prediction {blank}" in message
    assert "noise/" not in message
    assert identical["evidence"]["groups"]["noise/input"]["identical_pair_share"] < 0.1


def test_sixteen_bit_renders_are_compared_over_their_full_range(
    capsule_dir: Path, project: Path, run_audits: Any
) -> None:
    """16-bit grey renders whose values all lie above 255 (distinct pictures in any viewer) were clipped to
    white by ``convert("L")`` and disclosed as identical."""
    for render in _renders(capsule_dir, "clean", "input"):
        grey = np.asarray(Image.open(render).convert("L")).astype(np.uint16)
        render.write_bytes(pillow_png(Image.fromarray(grey * 200 + 1000)))
    outcome = run_audits(capsule_dir, project, "-k", "vis_decode or vis_identical")
    assert _only(outcome, "capsule.vis_decode")["verdict"] == "passed"
    identical = _only(outcome, "collapse.vis_identical")
    assert identical["verdict"] == "passed", identical["message"]
    assert identical["evidence"]["groups"]["clean/input"]["identical_pair_share"] < 0.1
