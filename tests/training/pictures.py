"""Checks that a written plot is a real picture, not just a file with the right magic bytes.

from tests.training.pictures import assert_picture
"""

from __future__ import annotations

from pathlib import Path


def assert_picture(path: str | Path, min_width: int = 400, min_height: int = 250) -> tuple[int, int]:
    """The file is a PNG at least this many pixels wide and high, with something drawn on it.

    A blank canvas is one flat colour; a plot has axes, labels and lines: some
    share of its pixels are dark, most are the light background.

    Returns:
        (width, height) in pixels.
    """
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG", f"{path} is a {image.format}, not a PNG"
        width, height = image.size
        grey = np.asarray(image.convert("L"), dtype=float)
    assert width >= min_width and height >= min_height, f"{path} is only {width}×{height} pixels"
    assert grey.std() > 5, f"{path} is blank (pixel standard deviation {grey.std():.2f})"
    ink = float((grey < 160).mean())
    assert 0.002 < ink < 0.5, f"{path}: {ink:.1%} of the pixels are dark; a plot has some ink on a light page"
    return width, height
