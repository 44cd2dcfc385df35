"""The notebook widget of a Session, driven through its model as the page drives it: a slider moves,
the kernel redraws the same image the viewer would send."""

import numpy as np
import pytest

from qora.plot import png
from qora.ssb import Aberrations, Session, amorphous_slices, simulate
from qora.ssb.sliders import SSB_SLIDERS, slider_parameters


@pytest.fixture(scope="module")
def session():
    phase = amorphous_slices((48, 48), 0.2, seed=3)
    scan = simulate(phase, pixel=0.2, stride=2, window=32, kv=300, alpha_mrad=20, aberrations=Aberrations(C10=150.0),
                    seed=3)
    return Session(scan.data, kv=300, alpha_mrad=20, scan_step=scan.scan_step, backend="cpu")


def _decoded(data):
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)))


def test_a_slider_change_redraws_the_sessions_preview(session):
    w = session.widget(Aberrations(C10=150.0))
    assert set(w.sliders) == set(SSB_SLIDERS) and w.values["C10"] == 150.0
    expected, _, _ = png(session.preview(slider_parameters(w.values)))
    assert w.image == expected and w.status.startswith("phase ")
    first = w.image
    w.values = {**w.values, "C10": 100.0}  # what the page's input event sets
    moved, _, _ = png(session.preview(slider_parameters(w.values)))
    assert w.image == moved and w.image != first
    assert _decoded(w.image).shape == session.scan_shape


def test_a_refused_value_keeps_the_image_and_says_why(session):
    w = session.widget()
    before = w.image
    w.values = {**w.values, "C10": 5000.0}
    assert w.image == before and w.status.startswith("Error: C10 must be in [-1000, 1000]")


def test_the_widget_is_an_anywidget_with_its_front_end():
    import anywidget

    from qora.widgets import _widget_class

    cls = _widget_class()
    assert issubclass(cls, anywidget.AnyWidget)
    for trait in ("sliders", "values", "image", "status"):
        assert f'"{trait}"' in cls._esm or f"change:{trait}" in cls._esm
