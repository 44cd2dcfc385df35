"""The layered qora.holo: the options dataclass, the api's geometry functions, tables made once, the
CPU/CUDA seam and the kernel launchers (all without a GPU)."""

import dataclasses
import re
import types

import numpy as np
import pytest

from qora import holo
from qora.holo import api
from qora.holo import phantoms as P
from qora.holo import reference as R
from qora.holo.options import ReconstructionOptions


def test_options_are_frozen_and_keep_their_defaults():
    o = ReconstructionOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.method = "tv"
    assert (o.approximation, o.method, o.iterations, o.r2c, o.mapping, o.fgp) == ("rytov", "gp", 50, True, "gather",
                                                                                   "fused")
    changed = o.replace(method="tv", iterations=7)
    assert (changed.method, changed.iterations, o.method) == ("tv", 7, "gp")
    assert changed.to_dict()["iterations"] == 7 and set(changed.to_dict()) == set(ReconstructionOptions.names())
    with pytest.raises(TypeError, match="unknown reconstruction options"):
        o.replace(iteration=3)


@pytest.mark.parametrize("field, value", [
    ("approximation", "mie"), ("method", "fista"), ("iterations", 0), ("iterations", 2.5), ("r2c", "yes"),
    ("tv_weight", -1e-3), ("tv_weight", float("nan")), ("tv_inner", -1), ("oversample", 0.5),
    ("mapping", "nearest"), ("fgp", "tiled"), ("upload_parts", 0),
])
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValueError, match=field):
        ReconstructionOptions(**{field: value})
    with pytest.raises(ValueError, match=field):
        ReconstructionOptions().replace(**{field: value})


def test_tv_needs_a_positive_weight_and_plain_needs_no_iterations():
    with pytest.raises(ValueError, match="tv_weight"):
        ReconstructionOptions(method="tv", tv_weight=0.0)
    assert ReconstructionOptions(method="gp", tv_weight=0.0).tv_weight == 0.0
    assert ReconstructionOptions(method="plain", iterations=0).iterations == 0


def test_geometry_from_backgrounds_recovers_the_carrier_and_the_illuminations():
    g = R.geometry(32)
    hp = g.pixel / 2
    big = 2 * g.n
    df = 1 / (big * hp)
    carrier = R.carrier(big, hp)  # on the bins (an off-bin carrier tilts the background fields themselves)
    bg = P.holograms(np.ones((g.count, big, big)), g, carrier, hologram_pixel=hp)
    found, sideband = holo.geometry_from_backgrounds(bg, wavelength=g.wavelength, medium_index=g.medium_index,
                                                     pixel=g.pixel, na_detection=g.na_detection)
    assert np.all(np.abs(sideband + carrier) / df < 0.05)
    assert found.n == g.n and found.count == g.count and found.geometry == "scan"
    assert (found.wavelength, found.medium_index, found.pixel, found.na_detection) == (
        g.wavelength, g.medium_index, g.pixel, g.na_detection)
    np.testing.assert_allclose(found.illuminations, g.illuminations, atol=1e-6)
    with pytest.raises(ValueError, match="backgrounds"):
        holo.geometry_from_backgrounds(bg[0], wavelength=0.5, medium_index=1.33, pixel=0.1, na_detection=1.0)


def test_rotation_geometry_and_angles():
    np.testing.assert_allclose(holo.parse_angles("0:360:4"), np.deg2rad([0, 90, 180, 270]))
    with pytest.raises(ValueError, match="START:STOP:COUNT"):
        holo.parse_angles("0:360")
    optics = dict(wavelength=R.WAVELENGTH, medium_index=R.MEDIUM_INDEX, pixel=R.PIXEL, na_detection=R.NA_DETECTION,
                  n=32)
    g = holo.rotation_geometry("0:360:6", 6, **optics)
    assert g.geometry == "rotation" and g.count == 6
    np.testing.assert_allclose(g.angles, np.deg2rad(np.arange(0, 360, 60)))
    with pytest.raises(ValueError, match="5 angles for 6 holograms"):
        holo.rotation_geometry(np.zeros(5), 6, **optics)
    assert holo.field_size(256, 0.05, 0.1) == 128


def test_the_cpu_pipeline_makes_its_mapping_tables_once(counted_plans):
    g = R.geometry(32)
    pipe = holo.Pipeline(g, sideband=(1.0, 1.0), hologram_pixel=g.pixel / 2, hologram_n=64, backend="cpu",
                         oversample=1.5)
    assert counted_plans == [pipe.mapping.geometry.n] and pipe.mapping.geometry.n > g.n
    assert pipe._engine.mapping is pipe.mapping and pipe._engine.crop is pipe.crop


def test_the_cuda_pipeline_gets_the_tables_the_api_made_once(counted_plans, monkeypatch):
    """The api makes the crop and the mapping once and hands them to the CUDA Pipeline (a stand-in
    here: the real one needs a GPU; test_holo_cuda checks it asks for no tables of its own)."""
    from qora.holo import cuda_pipeline

    received = []

    class StandIn:
        def __init__(self, geometry, crop, mapping, options):
            received.append((crop, mapping, options))

    monkeypatch.setattr(cuda_pipeline, "CudaPipeline", StandIn)
    monkeypatch.setattr(api, "resolve", lambda backend: types.SimpleNamespace(is_cuda=True, name="cuda"))
    g = R.geometry(32)
    options = ReconstructionOptions(method="tv", mapping="scatter")
    pipe = holo.Pipeline(g, sideband=(1.0, 1.0), hologram_pixel=g.pixel / 2, hologram_n=64, options=options,
                         backend="cuda")
    assert len(counted_plans) == 1 and len(received) == 1
    crop, mapping, got = received[0]
    assert crop is pipe.crop and mapping is pipe.mapping and got is options and isinstance(pipe.cuda, StandIn)


def test_cuda_only_keywords_on_the_cpu_are_an_error():
    g = R.geometry(16)
    ratio = np.ones((g.count, g.n, g.n), complex)
    with pytest.raises(TypeError, match="CUDA backend only"):
        holo.reconstruct(ratio, g, backend="cpu", fgp="cube")


def test_every_kernel_has_one_launcher():
    from importlib.resources import files

    from qora.holo import kernels as K

    source = files("qora.holo").joinpath("kernels", "holo.cu").read_text()
    names = set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", source))
    launchers = {n for n in dir(K) if not n.startswith("_") and callable(getattr(K, n))} - {
        "kernel", "blocks", "get_kernel", "grid_limit", "multiprocessors"}
    assert len(names) > 30 and names == launchers
    for name in names:
        assert "Reference:" in getattr(K, name).__doc__, name


def test_cpu_modules_never_import_cuda_modules_and_there_is_no_cycle():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("qora")
    cuda = {"qora.holo.cuda_stages", "qora.holo.cuda_solver", "qora.holo.cuda_pipeline", "qora.holo.bpm_cuda",
            "qora.holo.bpm_rotation_cuda", "qora.holo.bpm_fused", "qora.holo.bpm_resident", "qora.holo.gp_fused",
            "qora.holo.kernels",
            "qora.holo.kernels.rotate", "qora.holo.gridding_cuda"}
    mods = {m for m in graph.modules if m.startswith("qora.holo.")}
    assert cuda <= mods
    cpu = mods - cuda - {"qora.holo.api"}
    for low in cpu:
        for leaf in cuda:
            assert graph.find_shortest_chain(importer=low, imported=leaf) is None, (low, leaf)
    for a in mods | {"qora.holo"}:
        for b in mods:
            if a < b and graph.find_shortest_chain(importer=a, imported=b):
                assert graph.find_shortest_chain(importer=b, imported=a) is None, (a, b)
