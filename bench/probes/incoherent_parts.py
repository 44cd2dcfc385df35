"""Where the default fit's incoherent part spends its time at full scale (issue 38): fit_incoherent's parts timed
one by one on ``qora bench ssb-full``'s dataset, from the columnar fit's values: the band's construction, each
thinned stage, the whole band's finish, one evaluation with derivatives and one value on the whole band, the
sections' objects, and the depth coherence on the device against the host's one-transform-per-pair loop it
replaced (median of 3 after a warm-up, device synchronised).

    python bench/probes/incoherent_parts.py /tmp/qora-ssb-full
"""

import sys
import time
from pathlib import Path

import numpy as np


def _host_coherence(band, objects, upsample=4):
    """The loop depth_coherence ran before 2026-12-04: one host FFT per neighbouring pair."""
    x = objects.get() if hasattr(objects, "get") else np.asarray(objects)
    sy, sx = band.scan_shape
    iy, ix = np.nonzero(band.keep)
    fy, fx = upsample * sy, upsample * sx
    rows = np.where(iy > sy // 2, iy + fy - sy, iy)
    peaks = []
    for k in range(x.shape[1] - 1):
        spectrum = np.zeros((fy, fx), np.complex128)
        spectrum[rows, ix] = np.conj(x[:, k]) * x[:, k + 1]
        norm = np.sqrt(np.sum(np.abs(x[:, k]) ** 2) * np.sum(np.abs(x[:, k + 1]) ** 2))
        peaks.append(float(np.fft.ifft2(spectrum).real.max() * fy * fx / norm))
    return float(np.mean(peaks))


def main(directory: str) -> None:
    import cupy

    from qora.bench.ssb_full import full_session
    from qora.ssb import depth
    from qora.ssb.identify import coarse_stride
    from qora.ssb.optimize import newton, newton_with_hessian

    session = full_session(Path(directory))
    columnar = session.fit(rotation=0.0, depth_model="columnar")["thick"]["parameters"]
    start = {n: columnar[n] for n in ("C10", "C12a", "C12b", "thickness")}
    m = depth.auto_sections(start["thickness"], session.wavelength, session.alpha_mrad)

    def timed(label, call, repeats=3):
        call()  # warm
        times = []
        for _ in range(repeats):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            out = call()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
        print(f"{label}: {1e3 * np.median(times):.1f} ms (of {', '.join(f'{1e3 * t:.1f}' for t in times)})",
              flush=True)
        return out

    timed("the whole fit_incoherent", lambda: depth.fit_incoherent(session, start, rotation=0.0))
    band = timed("IncoherentBand(...)", lambda: depth.IncoherentBand(session, tuple(start), sections=m, rotation=0.0))
    rows = depth.INCOHERENT_COARSE_ROWS
    strides = sorted({coarse_stride(band, rows // depth.FIRST_STAGE), coarse_stride(band, rows)}, reverse=True)
    values = dict(start)
    for i, stride in enumerate(strides):
        thin = timed(f"thinned({stride})", lambda: band.thinned(stride))
        early = {"tolerance": depth.FINISH_TOLERANCE} if i + 1 < len(strides) else {}
        stage_start = dict(values)
        values, _, hessian = timed(f"stage {i + 1} Newton ({thin.G.shape[0]} rows)",
                                   lambda: newton(thin, stage_start, iterations=60, **early))
        timed(f"  one evaluation with derivatives ({thin.G.shape[0]} rows)", lambda: thin.evaluate(values))
        timed(f"  one value ({thin.G.shape[0]} rows)", lambda: thin.evaluate(values, order=0))
    finish_start = dict(values)
    newton_values, newton_agreement, newton_hessian = timed(
        "the finish by Newton (whole band, before)",
        lambda: newton(band, finish_start, iterations=60, tolerance=depth.FINISH_TOLERANCE))
    counted = depth.IncoherentBand(session, tuple(start), sections=m, rotation=0.0)
    values, agreement, _ = timed("the finish by gradients and the thinned Hessian (now)",
                                 lambda: newton_with_hessian(counted, finish_start, hessian, iterations=60,
                                                             tolerance=depth.FINISH_TOLERANCE))
    print(f"  its passes (4 runs): {counted.passes}; against Newton's: C10 {values['C10'] - newton_values['C10']:+.2e} A,"
          f" thickness {values['thickness'] - newton_values['thickness']:+.2e} A, agreement "
          f"{agreement / newton_agreement - 1:+.2e} relative; the thinned Hessian against the whole band's: "
          f"{np.round(np.diag(hessian) / np.diag(newton_hessian) - 1, 4).tolist()} (diagonal, relative)", flush=True)
    timed("  one evaluation with derivatives (whole band)", lambda: band.evaluate(values))
    timed("  one evaluation with first derivatives (whole band)", lambda: band.evaluate(values, order=1))
    timed("  one value (whole band)", lambda: band.evaluate(values, order=0))
    band._last_sums = None
    objects = timed("section_objects (a pass of its own)", lambda: band.section_objects({**values, "C10": values["C10"]
                                                                                         + 1e-9}))
    device = timed("depth_coherence (device, batched)", lambda: depth.depth_coherence(band, objects))
    host = timed("depth_coherence (host loop, before)", lambda: _host_coherence(band, objects))
    print(f"coherence {device:.6f} (device) {host:.6f} (host); C10 {values['C10']:.3f} A, thickness "
          f"{values['thickness']:.2f} A, agreement {agreement:.8f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/qora-ssb-full")
