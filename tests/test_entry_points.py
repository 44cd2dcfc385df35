"""Issue 41's one shape: every public entry point of the three engines takes an options type (a validated
dataclass) and returns a result type, and the API reference lists both beside it (docs/api/<engine>.md).
A new entry point joins ENTRY_POINTS; a test planted with a bare signature shows the check can fail."""

import dataclasses
import inspect
from pathlib import Path

import pytest

import qora.holo as holo
import qora.phase as phase
import qora.ssb as ssb
import qora.ssb.live as live

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api"

# (engine, the entry point, its options type, its result type)
ENTRY_POINTS = [
    ("phase", phase.reconstruct, phase.PhaseOptions, phase.PhaseResult),
    ("holo", holo.reconstruct, holo.ReconstructionOptions, holo.OdtResult),
    ("holo", holo.reconstruct_holograms, holo.ReconstructionOptions, holo.OdtResult),
    ("holo", holo.reconstruct_stack, holo.ReconstructionOptions, holo.OdtResult),  # or a BpmOptions
    ("holo", holo.field_series_volume, holo.ReconstructionOptions, holo.OdtResult),
    ("holo", holo.bpm_reconstruct, holo.BpmOptions, holo.OdtResult),
    ("holo", holo.Pipeline.__init__, holo.ReconstructionOptions, None),
    ("holo", holo.Pipeline.process, None, holo.OdtResult),
    ("ssb", ssb.fit, ssb.FitOptions, ssb.FitResult),
    ("ssb", ssb.Session.fit, None, None),  # the method forwards to ssb.fit: checked below
    ("ssb", ssb.Session.reconstruct, None, None),  # its types in the docstring: checked below
    ("ssb", live.run_live, live.LiveOptions, live.LiveResult),
]


def shape_of(function) -> tuple[str | None, str]:
    """(the ``options`` parameter's annotation or None, the return annotation) as text."""
    signature = inspect.signature(function)
    options = signature.parameters.get("options")
    text = lambda a: a if isinstance(a, str) else getattr(a, "__name__", str(a))  # noqa: E731
    return (None if options is None else text(options.annotation)), text(signature.return_annotation)


@pytest.mark.parametrize("engine, function, options, result", ENTRY_POINTS,
                         ids=[f"{e}.{f.__qualname__}" for e, f, *_ in ENTRY_POINTS])
def test_each_entry_point_has_an_options_and_a_result_type(engine, function, options, result):
    annotated_options, annotated_result = shape_of(function)
    if options is not None:
        assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen
        assert annotated_options is not None and options.__name__ in annotated_options
    if result is not None:
        assert dataclasses.is_dataclass(result) and result.__name__ in annotated_result
    page = (DOCS / f"{engine}.md").read_text()
    for kind in (options, result):
        if kind is not None:
            assert f"`{kind.__name__}`" in page, f"docs/api/{engine}.md does not list {kind.__name__}"


def test_the_session_methods_take_the_fit_options():
    for method in (ssb.Session.fit, ssb.Session.reconstruct):
        assert "options" in inspect.signature(method).parameters
    assert "FitImages" in ssb.Session.reconstruct.__doc__ and "`FitImages`" in (DOCS / "ssb.md").read_text()


def test_the_check_fails_on_a_bare_signature():
    def bare(data, *, iterations=10):
        return {}

    assert shape_of(bare) == (None, "_empty")


def test_every_result_type_saves_and_loads_itself(tmp_path):
    """One protocol for the three engines' results: ``result.save(path)`` and ``type(result).load(path)``."""
    import numpy as np

    from qora.holo import reference as R

    intensity = phase.objects.box_intensity((32, 32), 8)
    p = phase.reconstruct(intensity, recipe="HIO**10 ER**5", backend="cpu")
    back = phase.PhaseResult.load(p.save(tmp_path / "p.cxi"))
    np.testing.assert_array_equal(back.object, p.object)
    g = R.geometry(16)
    ratio = 1 + holo.born_ratio([holo.Sphere(radius=0.6, index=1.36)], g)
    h = holo.reconstruct(ratio, g, iterations=3, complex_index=True, backend="cpu")
    h.info["loss"] = list(np.linspace(0, 1, 5000))  # a long record: past an HDF5 attribute's 64 KiB
    loaded = holo.OdtResult.load(h.save(tmp_path / "h.h5"))
    np.testing.assert_array_equal(loaded.index, h.index)
    np.testing.assert_array_equal(loaded.absorption, h.absorption.astype(np.float32))
    np.testing.assert_array_equal(loaded.geometry.illuminations, h.geometry.illuminations)
    assert (loaded.geometry.n, loaded.geometry.pixel, loaded.geometry.axis) == (g.n, g.pixel, g.axis)
    assert loaded.method == h.method and len(loaded.info["loss"]) == 5000
    for result_type in (phase.PhaseResult, holo.OdtResult, ssb.FitResult):
        assert callable(getattr(result_type, "load")) and callable(getattr(result_type, "save"))
