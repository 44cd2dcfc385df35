"""Figures for every engine, drawn on :class:`matplotlib.figure.Figure` objects.

No pyplot state and no ``matplotlib.use``: importing or plotting with Qora leaves a user's plotting
backend as it was (a notebook's inline backend, a desktop window), and figures are freed when their
last reference goes, with no global registry to close them from.
"""

from __future__ import annotations

__all__ = ["subplots", "save_png"]


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
