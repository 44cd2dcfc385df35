"""Figures for every engine, drawn on :class:`matplotlib.figure.Figure` objects, and the 8-bit PNG
images the viewer and the notebook widgets show (:func:`png`).

No pyplot state and no ``matplotlib.use``: importing or plotting with Qora leaves a user's plotting
backend as it was (a notebook's inline backend, a desktop window), and figures are freed when their
last reference goes, with no global registry to close them from.
"""

from __future__ import annotations

import io

import numpy as np

__all__ = ["subplots", "save_png", "to_uint8", "png", "import_in_background"]


def import_in_background():
    """Start importing matplotlib's figure and Agg canvas on a daemon thread; returns the thread.

    For a figure whose data come from compiled loops that release the GIL (Numba's ``nogil``): the
    import, about 0.3 s of Python on the two-core machine, then runs beside them instead of after them.
    :func:`subplots` imports the same modules; if the thread has not finished, Python's import lock
    makes it wait, so nothing is imported twice. (Started beside a fit, whose Python parts hold the
    GIL, it gained nothing: measured, docs/ssb-performance.md.)
    """
    import threading

    def load():
        from matplotlib import figure  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401

    thread = threading.Thread(target=load, name="qora-import-matplotlib", daemon=True)
    thread.start()
    return thread


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, **kwargs):
    """A new ``(Figure, axes)`` pair, as ``pyplot.subplots`` returns, without pyplot.

    The figure has an Agg canvas, so it can be saved without a display.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save_png(fig, path, *, dpi: int = 100) -> None:
    """Write ``fig`` as a PNG to ``path`` atomically (a temporary file renamed into place)."""
    from qora.io.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


def to_uint8(image, lo: float | None = None, hi: float | None = None) -> tuple[np.ndarray, float, float]:
    """Linear map of [lo, hi] (default the image's min and max) to 0..255, rounded, clipped; a
    constant image maps to 0. Returns ``(pixels, lo, hi)``."""
    image = np.asarray(image, np.float64)
    if not np.all(np.isfinite(image)):
        image = np.nan_to_num(image, nan=0.0, posinf=0.0, neginf=0.0)
    lo = float(image.min()) if lo is None else float(lo)
    hi = float(image.max()) if hi is None else float(hi)
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    return np.clip(np.rint((image - lo) * scale), 0, 255).astype(np.uint8), lo, hi


_LUTS: dict = {}


def _lut(cmap: str) -> np.ndarray:
    if cmap not in _LUTS:
        from matplotlib import colormaps

        _LUTS[cmap] = (colormaps[cmap](np.linspace(0, 1, 256))[:, :3] * 255).round().astype(np.uint8)
    return _LUTS[cmap]


def png(image, *, lo: float | None = None, hi: float | None = None, cmap: str = "gray") -> tuple[bytes, float, float]:
    """PNG bytes of a 2D real image (fast compression: the viewer and the notebook widgets send one
    per slider step) and
    the (lo, hi) range it was scaled to."""
    from PIL import Image

    pixels, lo, hi = to_uint8(image, lo, hi)
    if cmap != "gray":
        pixels = _lut(cmap)[pixels]
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue(), lo, hi
