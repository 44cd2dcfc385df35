"""Issue 37 follow-up on cohere's preparation of the 34-ID-C scan (bragg_crop_probe.py, QORA_BRAGG_PREP=cohere):
the Fourier error's noise floor, the support's stability over the threshold-0.1 stages, and fixed-support
refinements (long ER, ML, psf) from the object that search found.

    PYTHONPATH=src python bench/probes/bragg_floor_probe.py prep SCAN.tar.xz OUT_DIR
    PYTHONPATH=src python bench/probes/bragg_floor_probe.py search OUT_DIR [RECIPE_NAME] [SEED]
    PYTHONPATH=src python bench/probes/bragg_floor_probe.py floor OUT_DIR [SEARCH_TAG]
    PYTHONPATH=src python bench/probes/bragg_floor_probe.py refine OUT_DIR SEARCH_TAG RECIPE [RECIPE ...]

prep: the crop (cohere_prepared) and, in the same geometry, the whitefield scale s = 1e5 / white per voxel (the
prepared value is s x raw counts; 0 where cohere zeroes the pixel or the voxel is padding).
search: one CPU start of a bragg_crop_probe recipe name ("stages-0.1", "default", "cohere", ...), recording the
support size after every shrinkwrap update; saves the object and support (engine layout) to OUT_DIR/search-TAG.npz.
floor: the metric sqrt(sum (sqrt(I) - sqrt(T))^2 / sum I) for T the searched object's |F x|^2 (the truth) and I
drawn as cohere's preparation would make it from Poisson counts of mean T / s (scaled by s, zeroed below the
threshold 2): exactly (the expectation over the Poisson pmf per voxel) and by draws; also the data-driven floor of
docs/phase.md (counts smoothed over 3^3 as the truth).
refine: each RECIPE run from the searched object with its support fixed (any stage without sw= keeps it);
QORA_GROW=k dilates that support by k voxels first, QORA_FREE=0.05 holds out that share of voxels and prints the
amplitude R on them (free R).
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bragg_crop_probe as bcp  # noqa: E402

THRESHOLD = bcp.COHERE_THRESHOLD


def prep(archive, out):
    import tarfile
    import tempfile

    import tifffile

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        frames = sorted(Path(tmp).glob("*_S0054/*.tif"))
        stack = np.stack([tifffile.imread(f) for f in frames], axis=-1).astype(np.float64)
        dark, white = (tifffile.imread(next(Path(tmp).rglob(n))).astype(np.float64) for n in ("dark.tif",
                                                                                             "whitefield.tif"))
    crop = bcp.cohere_prepared(stack, dark, white)
    # the same geometry for the scale and the raw counts
    w = np.where(white < 100, 1e20, white)[bcp.COHERE_ROI]
    s = np.where(dark[bcp.COHERE_ROI] > 1, 0.0, 1e5 / w)
    s = np.broadcast_to(s[..., None], stack.shape)
    raw = stack
    cut = tuple(slice(a, n - b) for (a, b), n in zip(bcp.COHERE_CROP, stack.shape))
    s, raw = s[cut], raw[cut]
    shape = crop.shape
    pads = []
    for arr in (s, raw):
        p = np.zeros(shape)
        p[tuple(slice(0, n) for n in arr.shape)] = arr
        pads.append(p)
    s, raw = pads
    # the roll cohere_prepared applied: find it from the crop itself
    prepared_unrolled = np.where(np.isfinite(raw * s) & (raw * s >= THRESHOLD), raw * s, 0.0)
    peak = np.unravel_index(int(prepared_unrolled.argmax()), shape)
    shift = [n // 2 - p for n, p in zip(shape, peak)]
    s, raw = (np.roll(a, shift, axis=(0, 1, 2)) for a in (s, raw))
    check = np.where(raw * s >= THRESHOLD, raw * s, 0.0)
    print(f"crop {shape}, sum {crop.sum():.4e}; rebuilt from raw x scale: max |diff| {np.abs(check - crop).max():.3g}")
    kept = crop > 0
    print(f"voxels kept {kept.mean():.3f}; raw counts in kept voxels {raw[kept].sum():.4e} of {raw.sum():.4e}; "
          f"scale over kept voxels: median {np.median(s[kept]):.3f}, range {s[kept].min():.3f}-{s[kept].max():.3f}")
    np.save(out / "crop.npy", crop)
    np.save(out / "scale.npy", s.astype(np.float32))
    np.save(out / "raw.npy", raw.astype(np.float32))


class SupportRecorder:
    """Wraps Solver._shrinkwrap to log (stage, update, iteration, support voxels) of start 0."""

    def __init__(self):
        from qora.phase import solver

        self.rows = []
        original = solver.Solver._shrinkwrap
        rows = self.rows

        def wrapped(self_, engine, stage, update, updates, iteration, ids):
            original(self_, engine, stage, update, updates, iteration, ids)
            rows.append((str(stage).split("(")[0], update, updates, int(iteration), int(engine.support[0].sum())))

        solver.Solver._shrinkwrap = wrapped


def search(out, name="stages-0.1", seed=0):
    from qora.phase.solver import Solver

    out = Path(out)
    crop = np.load(out / "crop.npy")
    rec = SupportRecorder()
    t0 = time.perf_counter()
    solver = Solver(crop, backend="cpu")
    recipe = bcp.named(name)
    result = solver.run(recipe=recipe, starts=1, seed=int(seed))
    seconds = time.perf_counter() - t0
    tag = f"{name}-s{seed}"
    errs = result.errors[:, 0]
    print(f"search {name} seed {seed}: ran {result.recipe}; final error {result.fourier_error:.4f}; "
          f"support {int(result.support.sum())}; coherence width {result.coherence_width}; {seconds:.0f} s")
    print("  error at iterations 1000/1200/1500:", [round(float(errs[i - 1]), 4) for i in (1000, 1200, 1500)
                                                     if i <= len(errs)])
    print("  support per shrinkwrap update (stage, update/updates, iteration, voxels):")
    for r in rec.rows:
        print(f"    {r[0]} {r[1] + 1}/{r[2]} it {r[3]}: {r[4]}")
    log = [e for e in result.support_log]
    print(f"  guarded updates: {log}")
    np.savez(out / f"search-{tag}.npz", x=result.object, support=result.support, errors=errs,
             sizes=np.array([r[4] for r in rec.rows]))


def _model_intensity(x):
    """|F x|^2 (unitary F) in detector layout (q = 0 at n//2)."""
    y = np.fft.fftn(x.astype(np.complex128), norm="ortho")
    return np.fft.fftshift(np.abs(y) ** 2)


def _metric(meas, model):
    return float(np.sqrt(np.sum((np.sqrt(meas) - np.sqrt(model)) ** 2) / np.sum(meas)))


def expected_floor(truth, s, draws=2, seed=1):
    """E[(sqrt(I) - sqrt(T))^2] summed and E[I] summed with I = s n 1{s n >= 2}, n ~ Poisson(T / s)."""
    from scipy.stats import poisson

    good = s > 0
    lam = np.where(good, truth / np.where(good, s, 1), 0.0)
    num = 0.0
    den = 0.0
    # vectorised over voxels, summed over n up to a safe cutoff per block of lambda
    lamv, sv, tv = lam[good].ravel(), s[good].ravel(), truth[good].ravel()
    order = np.argsort(lamv)
    lamv, sv, tv = lamv[order], sv[order], tv[order]
    edges = np.searchsorted(lamv, [1, 10, 100, 1000, 1e4, 1e5, np.inf])
    start = 0
    for end in edges:
        if end <= start:
            continue
        L, S, T = lamv[start:end], sv[start:end], tv[start:end]
        top = L.max()
        nmax = int(top + 10 * np.sqrt(top) + 20)
        lo = max(0, int(L.min() - 10 * np.sqrt(L.min()) - 20))
        ns = np.arange(lo, nmax + 1)
        for chunk in range(0, len(L), 20000):
            l, sc, t = L[chunk:chunk + 20000], S[chunk:chunk + 20000], T[chunk:chunk + 20000]
            p = poisson.pmf(ns[None, :], l[:, None])
            i = sc[:, None] * ns[None, :]
            i = np.where(i >= THRESHOLD, i, 0.0)
            num += float(np.sum(p * (np.sqrt(i) - np.sqrt(t[:, None])) ** 2))
            den += float(np.sum(p * i))
        start = end
    # voxels where s = 0 (zeroed pixels, padding): measured 0, the model puts T there
    num += float(truth[~good].sum())
    exact = np.sqrt(num / den)
    rng = np.random.default_rng(seed)
    sims = []
    for _ in range(draws):
        n = rng.poisson(lam)
        i = np.where(s * n >= THRESHOLD, s * n, 0.0)
        sims.append(_metric(i, truth))
    return exact, sims, float(truth[~good].sum() / den)


def floor(out, tag="stages-0.1-s0"):
    from scipy.ndimage import uniform_filter

    out = Path(out)
    crop, s, raw = (np.load(out / f"{n}.npy").astype(np.float64) for n in ("crop", "scale", "raw"))
    d = np.load(out / f"search-{tag}.npz")
    truth = _model_intensity(d["x"])
    t0 = time.perf_counter()
    print(f"model vs data metric (should be the search's final error): {_metric(crop, truth):.4f}")
    print(f"model total {truth.sum():.4e}, data total {crop.sum():.4e}")
    exact, sims, zeroed = expected_floor(truth, s)
    print(f"floor with the model as truth (Poisson in raw counts, scaled, threshold 2): exact {exact:.4f}, draws "
          f"{[round(v, 4) for v in sims]}; share of the numerator from voxels zeroed regardless (s = 0): "
          f"{zeroed:.4f} (of sum I)")
    # the same without the threshold: the pure Poisson part
    rng = np.random.default_rng(5)
    lam = np.where(s > 0, truth / np.where(s > 0, s, 1), 0.0)
    n = rng.poisson(lam)
    print(f"  without the threshold (draw): {_metric(s * n, truth):.4f}; threshold alone on the noise-free "
          f"truth: {_metric(np.where(truth >= THRESHOLD, truth, 0.0), truth):.4f}")
    # where the misfit of the actual reconstruction sits, by intensity band of the data
    bands = [0, THRESHOLD, 10, 100, 1e3, 1e4, 1e5, np.inf]
    num_total = np.sum((np.sqrt(crop) - np.sqrt(truth)) ** 2)
    noise = np.where(s * n >= THRESHOLD, s * n, 0.0)  # a draw with the model as truth
    print("  actual misfit / a noise draw's misfit (model as truth), by the truth's intensity band (T):")
    for lo, hi in zip(bands[:-1], bands[1:]):
        sel = (truth >= lo) & (truth < hi)
        act = np.sum((np.sqrt(crop[sel]) - np.sqrt(truth[sel])) ** 2)
        nz = np.sum((np.sqrt(noise[sel]) - np.sqrt(truth[sel])) ** 2)
        print(f"    T in [{lo:g}, {hi:g}): {sel.sum()} voxels, actual misfit^2 {act / crop.sum():.5f} "
              f"(share {act / num_total:.2f}), noise draw {nz / noise.sum():.5f}")
    # data-driven (docs/phase.md's method on the raw crop): truth = counts smoothed over 3^3
    lam_d = np.maximum(uniform_filter(crop, 3), 0.0)
    lam_raw = np.where(s > 0, lam_d / np.where(s > 0, s, 1), 0.0)
    n = rng.poisson(lam_raw)
    i = np.where(s * n >= THRESHOLD, s * n, 0.0)
    # the floor when the data also hold a diffuse background the coherent model cannot make: the truth T + B with
    # B the positive part of the residual smoothed over 6 voxels, the model T
    from scipy.ndimage import gaussian_filter

    B = np.maximum(gaussian_filter(crop - truth, 6), 0.0)
    n = rng.poisson(np.where(s > 0, (truth + B) / np.where(s > 0, s, 1), 0.0))
    print(f"floor with a diffuse background ({B.sum() / crop.sum():.4f} of the total) unmodelled: "
          f"{_metric(np.where(s * n >= THRESHOLD, s * n, 0.0), truth):.4f}")
    print(f"data-driven (smoothed data as truth, one draw): {_metric(i, lam_d):.4f}; {time.perf_counter() - t0:.0f} s")


def refine(out, tag, recipes):
    from qora.phase import solver as solver_mod
    from qora.phase.solver import Solver

    out = Path(out)
    crop = np.load(out / "crop.npy")
    d = np.load(out / f"search-{tag}.npz")
    x0, support = d["x"], d["support"].astype(bool)
    grow = int(os.environ.get("QORA_GROW", "0"))  # the support dilated by this many voxels (periodic), for comparison
    if grow:
        from scipy.ndimage import binary_dilation

        support = binary_dilation(np.fft.fftshift(support), iterations=grow)
        support = np.fft.ifftshift(support)

    def from_object(engine, seed, ids):
        engine.set_x(np.broadcast_to(x0, engine.x.shape))
        engine.x_written()

    solver_mod.fill_random_starts = from_object
    rec = SupportRecorder()
    free_fraction = float(os.environ.get("QORA_FREE", "0"))  # held-out share for a free amplitude R
    solver = Solver(crop, backend="cpu", free_fraction=free_fraction, seed=int(os.environ.get("QORA_FREE_SEED", "0")))
    for recipe in recipes:
        rec.rows.clear()
        t0 = time.perf_counter()
        result = solver.run(support=support, recipe=recipe, starts=1)
        seconds = time.perf_counter() - t0
        errs = result.errors[:, 0]
        marks = sorted({min(len(errs), k) for k in (1, 50, 100, 200, 300, 500, 1000, len(errs))})
        psf = ""
        if result.psf is not None:
            model = _model_intensity(result.object)
            k = np.fft.ifftshift(result.psf)
            blurred = np.maximum(np.fft.ifftn(np.fft.fftn(model) * np.fft.fftn(k)).real, 0.0)
            psf = (f"; psf peak {float(result.psf.max()):.3f}; error of the blurred model (K * |F x|^2) "
                   f"{_metric(crop, blurred):.4f}")
        print(f"refine from {tag}: {recipe}: final error {result.fourier_error:.4f}; support "
              f"{int(result.support.sum())} (start {int(support.sum())}); errors at {marks}: "
              f"{[round(float(errs[k - 1]), 4) for k in marks]}{psf}; shrinkwraps {len(rec.rows)}; {seconds:.0f} s",
              flush=True)
        if free_fraction:
            modulus = np.sqrt(_model_intensity(result.object))
            amp = np.sqrt(crop)
            r = {}
            for name, sel in (("fitted", ~solver.free), ("free", solver.free)):
                r[name] = float(np.sqrt(np.sum((modulus[sel] - amp[sel]) ** 2) / np.sum(amp[sel] ** 2)))
            print(f"  amplitude R on the fitted voxels {r['fitted']:.4f}, on the {solver.free.sum()} held-out "
                  f"voxels (free R) {r['free']:.4f}", flush=True)
        if rec.rows:
            print("  support per update:", [r[4] for r in rec.rows], flush=True)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "prep":
        prep(*rest)
    elif mode == "search":
        search(*rest)
    elif mode == "floor":
        floor(*rest)
    elif mode == "refine":
        refine(rest[0], rest[1], rest[2:])
    else:
        raise SystemExit(__doc__)
