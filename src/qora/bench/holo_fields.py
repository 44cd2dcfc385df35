"""``qora bench holo-fields``: the field stages of a QPI or field-series workflow, on the CPU or the GPU.

- ``qpi/200x210/<filter>`` (CPU): :func:`qora.holo.fields.quantitative_phase` of a hologram the size of
  the real one in ../shared/data/holo (200 x 210, padded to 216 inside), per filter shape, full sampling;
- ``crop/64x256x256/<filter>``: the sideband crop of 64 holograms of 256^2 to 128^2 fields (the CUDA
  field stage on the GPU: the filter's weights are its table, so every shape should cost the same);
- ``propagate/120x128x128``: one angular-spectrum propagation of a 120-field series;
- ``autofocus/256x256`` and ``autofocus/120x128x128_common``: an autofocus (amplitude variance, the
  default interval of +-10 um in half-wavelength steps, then golden section) of one field and of a
  series with one common distance;
- ``background/1024x1024/poly2``: the second-order background fit on a frame and its removal.

Device arrays stay on the device (the GPU run times CuPy arrays in and out, synchronised).
"""

from __future__ import annotations

import numpy as np

from qora.backend import resolve
from qora.bench.common import BenchResult

__all__ = ["run"]

OPTICS = dict(wavelength=0.633, medium_index=1.335, pixel=0.107)


def _timed(be, fn, repeat: int = 3) -> float:
    """The median of ``repeat`` runs, ms, after one warm-up run (CUDA events on the device, the host clock
    on the CPU: :meth:`qora.backend.Backend.timer`)."""
    fn()
    be.synchronize()
    times = []
    for _ in range(repeat):
        with be.timer() as t:
            fn()
        times.append(t.ms)
    return float(np.median(times))


def _hologram(shape, rng):
    m, n = shape
    y, x = np.meshgrid(np.arange(m) - m / 2, np.arange(n) - n / 2, indexing="ij")
    phase = 4.0 * np.exp(-(x**2 + y**2) / (2 * (min(m, n) / 6) ** 2))
    carrier = np.exp(2j * np.pi * (0.2 * y + 0.12 * x))
    holo = np.abs(carrier + np.exp(1j * phase)) ** 2 + 0.02 * rng.normal(size=shape)
    return holo, np.abs(carrier + 1) ** 2 + 0.02 * rng.normal(size=shape)


def _series(count, n, rng):
    x = (np.arange(n) - n // 2) * OPTICS["pixel"]
    y, x = np.meshgrid(x, x, indexing="ij")
    bump = np.exp(-(x**2 + y**2) / 4.0)
    return np.exp(1j * (2.0 + 0.1 * rng.random((count, 1, 1))) * bump)


def run(*, backend="auto", write=True, echo=print) -> BenchResult:
    from qora import holo
    from qora.holo import background as B
    from qora.holo import fields as F
    from qora.holo import refocus as RF
    from qora.holo import FILTERS

    be = resolve(backend)
    xp = be.xp
    name = "holo-fields" if be.is_cuda else "holo-fields-cpu"
    result = BenchResult(name, be.name, be.device_facts().as_dict())
    echo(f"{be.name}: {result.device['name']}")
    rng = np.random.default_rng(0)
    if not be.is_cuda:
        holo_img, bg = _hologram((200, 210), rng)
        for f in FILTERS:
            ms = _timed(be, lambda: F.quantitative_phase(holo_img, bg, n=216, filter=f))
            result.add(f"qpi/200x210/{f.replace(' ', '_')}", ms=ms)
    holos = np.stack([_hologram((256, 256), rng)[0] for _ in range(64)])
    sideband = F.find_sideband(holos[0], 0.05)
    for f in FILTERS:
        ms = _timed(be, lambda: holo.extract_fields(holos, sideband, hologram_pixel=0.05, n=128, pupil_frequency=2.0,
                                                    filter=f, backend=be.name))
        result.add(f"crop/64x256x256/{f.replace(' ', '_')}", ms=ms)
    series = xp.asarray(_series(120, 128, rng))
    result.add("propagate/120x128x128", ms=_timed(be, lambda: RF.propagate(series, 1.5, **OPTICS)))
    one = xp.asarray(_series(1, 256, rng)[0])
    result.add("autofocus/256x256", ms=_timed(be, lambda: RF.autofocus(one, **OPTICS), repeat=1))
    result.add("autofocus/120x128x128_common",
               ms=_timed(be, lambda: RF.autofocus(series, common=True, **OPTICS), repeat=1))
    y, x = np.meshgrid(np.linspace(-1, 1, 1024), np.linspace(-1, 1, 1024), indexing="ij")
    phase = xp.asarray(np.exp(-(x**2 + y**2) / 0.1) + 0.3 * x - 0.2 * y + 0.1 * x * y)
    result.add("background/1024x1024/poly2", ms=_timed(be, lambda: B.correct_background(phase, profile="poly2")))
    if write:
        path = result.write()
        echo(f"result written to {path}")
    echo(result.table())
    return result
