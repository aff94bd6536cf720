"""Opening a test's renders, as every audit that decodes them must: PNG only, and within a pixel bound.

Pillow refuses an image past its decompression-bomb limit (about 179 M pixels) but decodes anything below
it: 400 renders of 9000×9000 grey pixels, 78 KB each, cost ``capsule.vis_decode`` and
``collapse.vis_identical`` 90 s and 125 s. A render is a picture of one sample for a person to look at
(docs/capsule.md §7); the bound below is far above any such picture and refuses the size before a pixel is
decoded. Any other format under a ``.png`` name is refused the same way (JPEG, GIF and TIFF open in Pillow
too, and the similarity probe judged renders the decode audit had failed).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
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
