"""The phase-result and holography-volume widgets, driven through their models as the page drives them:
each change redraws the plane the browser viewer would send for the same choice."""

import numpy as np
import pytest

from qora import holo
from qora.phase import objects, reconstruct
from qora.phase.display import result_png


@pytest.fixture(scope="module")
def result():
    _, intensity = objects.simulate("triangle", 32)
    return reconstruct(intensity, recipe="HIO**50 ER**20", starts=1, backend="cpu")


def test_the_phase_result_widget_shows_each_plane_as_the_viewer_does(result):
    w = result.widget()
    assert w.values == {"image": "amplitude"} and w.image == result_png(result, "amplitude")[0]
    w.values = {"image": "phase"}
    assert w.image == result_png(result, "phase")[0] and w.status.startswith("phase -3.14 to 3.14")
    w.values = {"image": "nonsense"}
    assert w.status.startswith("Error: image must be one of") and w.image == result_png(result, "phase")[0]


def test_a_3d_result_widget_has_a_plane_slider():
    from types import SimpleNamespace

    from qora.phase.display import result_widget

    obj = np.random.default_rng(0).normal(size=(6, 8, 8)) + 0j
    stand_in = SimpleNamespace(object=obj, support=np.ones(obj.shape, bool))  # what the widget reads of a result
    w = result_widget(stand_in)
    assert w.sliders["plane"]["max"] == 5 and w.values["plane"] == 3
    w.values = {"image": "amplitude", "plane": 1}
    assert w.image == result_png(stand_in, "amplitude", 1)[0]


def test_the_volume_widget_slices_along_every_axis():
    from qora.holo.display import plane_png, volume_plane

    g = holo.reference.geometry(32)
    volume = holo.render_spheres([holo.Sphere(radius=0.8, index=1.36)], g.n, g.pixel, g.medium_index)
    w = holo.volume_widget(volume, g)
    lo, hi = float(volume.min()), float(volume.max())
    assert w.image == plane_png(volume[16], lo, hi)[0] and w.status.startswith("z = +0.00 um")
    w.values = {**w.values, "axis": "x", "index": 10}
    assert w.image == plane_png(volume_plane(volume, 2, 10), lo, hi)[0]
    assert w.status.startswith(f"x = {(10 - 16) * g.pixel:+.2f} um")
    before = w.image
    w.values = {**w.values, "lo": hi, "hi": lo}  # an empty scale is refused, the image kept
    assert w.status.startswith("Error: lo must be below hi") and w.image == before
