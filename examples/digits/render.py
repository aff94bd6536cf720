"""The demo's task-native roles as PNGs: the input the model saw, and its predicted distribution."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

SCALE = 8  # 8×8 digits rendered at 64×64
BAR = 6


def input_png(pixels: np.ndarray) -> bytes:
    """``pixels`` in [0, 1], shape (8, 8), as a 64×64 grayscale PNG."""
    image = Image.fromarray(np.clip(pixels * 255.0, 0, 255).astype(np.uint8), mode="L")
    return _png(image.resize((8 * SCALE, 8 * SCALE), Image.Resampling.NEAREST))


def prediction_png(probabilities: np.ndarray, target: int) -> bytes:
    """Ten bars, one per class: the predicted class filled blue, the true class outlined green."""
    width, height = 10 * BAR + 4, 64
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    predicted = int(np.argmax(probabilities))
    for label, probability in enumerate(probabilities):
        left = 2 + label * BAR
        top = height - 2 - round(float(probability) * (height - 4))
        fill = (40, 90, 200) if label == predicted else (170, 170, 170)
        draw.rectangle((left, top, left + BAR - 2, height - 2), fill=fill)
        if label == target:
            draw.rectangle((left - 1, 1, left + BAR - 1, height - 1), outline=(20, 150, 40))
    return _png(image)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
