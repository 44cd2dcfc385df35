"""Writes the tutorial notebooks from the cells below. Edit the cells here, then run
`python docs/tutorials/build_notebooks.py` to rewrite the tracked notebooks from them. `make docs` runs
`build_notebooks.py --execute --site build/docs`: a copy of docs/ in build/ (git-ignored) with each notebook
run in a temporary folder (its files go there, not into the checkout) and written with its outputs, which the
documentation site is built from; no tracked file changes. `tests/test_tutorials.py` runs them in `make test`."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent


def md(text):
    return new_markdown_cell(text.strip("\n"))


def code(text):
    return new_code_cell(text.strip("\n"))


SHOW = '''
from IPython.display import Image, display
'''

PHASE = [
    md("""
# CDI from a diffraction pattern: `qora.phase`

A coherent diffraction pattern records only the intensity |F(q)|^2 of the object's Fourier transform.
Phase retrieval finds a complex object whose transform has the measured amplitude and which is zero
outside a support. This notebook goes from a pattern file to a figure of the reconstruction, and says
at each step what you choose and why.

It simulates a measurement first (a 64 x 64 triangle with Poisson noise, 10^7 photons), so that the
result can be compared with the truth. With your own data, start at step 2 with your file.
"""),
    code('''
import numpy as np
from qora.phase import analysis, objects, reconstruct
from qora.phase import plot_result, read_result, write_pattern, write_result
from qora.io.patterns import load_pattern
''' + SHOW),
    md("""
## 1. A pattern on disk

`objects.simulate` returns the object and its far-field intensity, with the zero frequency at the
centre of the array (as a detector records it, and as CXI files store it). `write_pattern` writes a
CXI file that any CDI tool can read.
"""),
    code('''
truth, intensity = objects.simulate("triangle", 64, photons=1e7, seed=1)
write_pattern("triangle.cxi", intensity, truth=truth)
print(intensity.shape, f"{intensity.sum():.3g} photons")
'''),
    md("""
## 2. Read it and reconstruct

`load_pattern` reads CXI/HDF5, npy/npz, TIFF and EDF, with a mask where the file has one (unmeasured
pixels are left free, not forced to zero). `reconstruct` runs the default recipe (HIO with shrinkwrap,
then ER) from an autocorrelation support, from several random starts, and keeps the best by its
Fourier error. The choices that matter:

- `starts`: phase retrieval is not convex, so some starts stall; 4 to 16 starts and the best of them
  is the usual practice (compare the starts' errors below).
- `recipe`: e.g. `"HIO**400 ER**100"`; the default is documented in the phase guide.
- `backend`: `"cpu"` here; `"auto"` uses the GPU where there is one.
"""),
    code('''
measured, mask = load_pattern("triangle.cxi")
result = reconstruct(measured, mask=mask, starts=4, seed=0, backend="cpu")
print(f"best start {result.best} of {result.starts}; Fourier error {result.fourier_error:.3e}")
print("final errors of the starts:", np.round(result.final_errors, 4))
'''),
    md("""
## 3. How good is it?

Against the truth (only a simulation has one): the object error after removing the ambiguities that
the data cannot fix (a global phase, a translation and the twin image, the complex conjugate flipped
through the origin). The pattern's counts set the object's scale (its total |object|^2 equals the
photons), so the truth is scaled the same way first.
"""),
    code('''
scaled_truth = truth * np.sqrt(intensity.sum() / np.sum(np.abs(truth) ** 2))
error = analysis.object_error(result.object, scaled_truth)
print(f"object error after alignment: {error:.2e}")
'''),
    md("""
## 4. Save the result and make the figure

The result file is CXI with every start's error history; the figure shows amplitude, phase inside the
support, the support and the error curves of all starts (the best in red).
"""),
    code('''
write_result("triangle-result.cxi", result)
plot_result("triangle-result.png", result, title=f"triangle 64^2, best of 4 starts; object error {error:.1e}")
again = read_result("triangle-result.cxi")
assert np.allclose(again.object, result.object)
display(Image("triangle-result.png"))
'''),
]

HOLO = [
    md("""
# Refractive-index tomography from holograms: `qora.holo`

Off-axis holograms of a cell or a bead, recorded at many illumination angles, hold the complex
scattered field of each illumination. `qora.holo` extracts the fields, takes their Rytov phase, maps
each onto its Ewald cap in 3D Fourier space and fills the missing cone. This notebook simulates the
reference bead (3 um, n = 1.36 in water), reconstructs it twice and compares with the truth.
"""),
    code('''
import numpy as np
from qora import holo
from qora.holo import phantoms, reference
''' + SHOW),
    md("""
## 1. A hologram stack

`reference.geometry(n)` is the reference case: 532 nm, water (n = 1.333), a 1.2 NA objective and 49
illumination directions. `simulate_holograms` returns the holograms, the background holograms (no
sample) and the hologram pixel (um); the field is the exact partial-wave solution of the sphere, not
the reconstruction's own forward model.
"""),
    code('''
g = reference.geometry(64)
sphere = phantoms.Sphere(radius=1.5, index=1.36)
holograms, backgrounds, pixel = holo.simulate_holograms([sphere], g)
print(holograms.shape, f"hologram pixel {pixel} um, volume voxel {g.pixel:.3f} um")
'''),
    md("""
## 2. Fields, then the volume

The sideband is found on a background hologram; the field ratio u/u_in removes the illumination. Two
choices:

- `method`: `"gp"` (Gerchberg-Papoulis: the index is real and above the medium's) or `"tv"` (FISTA with
  a total-variation prior, for piecewise-constant objects); `"plain"` leaves the missing cone empty.
- `iterations`: 50 GP iterations converge on a bead; TV needs a weight `tv_weight`.
"""),
    code('''
sideband = holo.find_sideband(backgrounds[0], pixel)
kw = dict(hologram_pixel=pixel, n=g.n, pupil_frequency=g.pupil_frequency)
ratio = holo.field_ratio(holo.extract_fields(holograms, sideband, **kw),
                         holo.extract_fields(backgrounds, sideband, **kw))
plain = holo.reconstruct(ratio, g, method="plain").index
gp = holo.reconstruct(ratio, g, method="gp", iterations=50).index
truth = phantoms.render_spheres([sphere], g.n, g.pixel, g.medium_index, supersample=3)
for name, v in (("plain", plain), ("gp", gp)):
    print(f"{name:6} RMSE {np.sqrt(np.mean((v - truth) ** 2)):.2e}, peak index {v.max():.4f} (truth 1.36)")
'''),
    md("""
## 3. The figure and the file

Orthogonal slices and a profile along x; the x-z slice shows what the missing cone does (the bead is
elongated along z). The volume file records its voxel size in micrometres.
"""),
    code('''
holo.write_volume("bead.h5", gp, g)
holo.plot_volume("bead.png", gp, g, truth=truth, title="reference bead, Rytov + GP 50")
display(Image("bead.png"))
'''),
]

SSB = [
    md("""
# 4D-STEM phase images and aberrations: `qora.ssb`

A 4D-STEM scan records a diffraction pattern at every probe position. Single side band (SSB) and
parallax imaging turn the bright-field disk into a phase image of the specimen, and need the probe's
aberrations; `qora.ssb` can fit them from the data. This notebook simulates an amorphous film scanned
by a defocused probe, makes the images, and fits the defocus and astigmatism back.
"""),
    code('''
import numpy as np
from qora.ssb import Aberrations, Session, amorphous_slices, fit, simulate, plot_image
''' + SHOW),
    md("""
## 1. A simulated scan

300 kV, a 20 mrad probe with 150 A of defocus and 20 A of two-fold astigmatism, a 48 x 48 scan with
0.4 A steps. Real data come from `qora.ssb.load_data(path)` (Qora HDF5, npy, detector files).
"""),
    code('''
step, pixel = 0.4, 0.2
truth_ab = Aberrations(C10=150.0, C12=(20.0, 0.5))
phase = amorphous_slices((96, 96), pixel, seed=2)
scan = simulate(phase, pixel=pixel, stride=2, window=64, kv=300, alpha_mrad=20, aberrations=truth_ab, seed=2)
print(scan.data.shape, f"step {scan.scan_step} A")
'''),
    md("""
## 2. The session and its images

A `Session` fits the bright-field disk, keeps the bright-field pixels and prepares G(Q, k), the
Fourier transform over the scan, once. Images for any aberrations then cost little: `"ssb"` (single
side band) and `"parallax"` (tilt-corrected bright field). With the wrong aberrations the image blurs.
"""),
    code('''
session = Session(scan.data, kv=300, alpha_mrad=20, scan_step=scan.scan_step, backend="cpu")
good = session.image(truth_ab, "ssb")
wrong = session.image(Aberrations(C10=0.0), "ssb")
print(f"phase std: right aberrations {good.std():.3e} rad, C10 = 0: {wrong.std():.3e} rad")
'''),
    md("""
## 3. Fit the aberrations from the data

`fit` searches the defocus and astigmatism (and, with `tilt=True`, the thick-sample model's thickness
and tilt) by the agreement between G and the weak-phase model, then refines by Newton with exact
derivatives. It returns the fitted values with standard errors where the data determine them. The
scan's rotation against the detector is known here (0); with `rotation=None` it is fitted too, which
costs a cold start over the rotation as well.
"""),
    code('''
result = fit(session, rotation=0.0, tilt=False, seed=0)
branch = result.get("better", "standard")  # with tilt=True, the better of the standard and thick fits
best = result[branch]["parameters"]
c12 = np.hypot(best["C12a"], best["C12b"])
angle = 0.5 * np.arctan2(best["C12b"], best["C12a"])  # C12a, C12b = |C12| (cos 2 phi, sin 2 phi)
print(f"fitted C10 {best['C10']:.1f} A, C12 {c12:.1f} A at {angle:.3f} rad (truth: 150 A; 20 A at 0.5 rad)")
'''),
    md("""
## 4. The figure

The phase image with the fitted aberrations, and the aberration function chi over the aperture.
"""),
    code('''
from qora.ssb import parameters_to_aberrations

fitted = parameters_to_aberrations(best)
plot_image("film.png", session.image(fitted, "ssb"), scan_step=session.scan_step, title="SSB, fitted aberrations")
display(Image("film.png"))
'''),
]

SCALE = [
    md("""
# Many patterns on many workers: `qora.distributed`

Independent work (CDI patterns, holographic time points, shards of a 4D-STEM fit) maps over the
workers of a Dask cluster. On a laptop, `connect(workers=2)` starts a local cluster of two processes;
on a cluster, pass the scheduler's address. The results are the same as one process would give.
"""),
    code('''
import numpy as np
from qora.distributed import connect, reconstruct_many
from qora.phase import analysis, objects, reconstruct
'''),
    md("""
## Three patterns, two workers

Each with the default recipe and 4 starts, as in the CDI tutorial.

`reconstruct_many` takes arrays or file names; each pattern is a task, and a pattern that fails is
reported by name while the others finish.
"""),
    code('''
patterns, truths = [], []
for seed in (1, 2, 3):
    obj, intensity = objects.simulate("triangle", 64, photons=1e8, seed=seed)
    patterns.append(intensity)
    truths.append(obj)
with connect(workers=2) as client:
    report = reconstruct_many(patterns, client=client, starts=4, backend="cpu")
print(report.summary().splitlines()[0])
'''),
    md("""
## The same answer as one process

Each start draws its random phases from its seed and start number, whatever worker runs it.
"""),
    code('''
name = sorted(report.done)[0]
alone = reconstruct(patterns[0], starts=4, backend="cpu")
print(name, np.allclose(report.done[name].final_errors, alone.final_errors))
for (n, t), p in zip(zip(sorted(report.done), truths), patterns):
    scaled = t * np.sqrt(p.sum() / np.sum(np.abs(t) ** 2))  # the counts set the object's scale
    print(n, f"object error {analysis.object_error(report.done[n].object, scaled):.1e}")
'''),
]

NOTEBOOKS = {"phase": PHASE, "holo": HOLO, "ssb": SSB, "scale-out": SCALE}


def build(execute: bool, site: Path | None = None) -> None:
    """Write the notebooks from the cells: into this folder (the tracked sources, as they are on GitHub), or,
    with ``site``, into ``site``/tutorials inside a copy of the docs folder that the site is built from, so that
    executing them (``make docs``) never rewrites a tracked file (a clean checkout stays clean)."""
    import shutil
    import tempfile

    target = HERE
    if site is not None:
        site = Path(site)
        if site.exists():
            shutil.rmtree(site)
        shutil.copytree(HERE.parent, site, ignore=shutil.ignore_patterns("__pycache__"))
        target = site / HERE.name
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
        if execute:
            from nbclient import NotebookClient

            with tempfile.TemporaryDirectory() as where:
                NotebookClient(nb, timeout=600, kernel_name="python3",
                               resources={"metadata": {"path": where}}).execute()
        nbformat.write(nb, target / f"{name}.ipynb")
        print("wrote", target / f"{name}.ipynb", "(executed)" if execute else "")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--execute", action="store_true", help="run each notebook (in a temporary folder)")
    parser.add_argument("--site", type=Path, default=None,
                        help="write a copy of docs/ with the notebooks into this folder (make docs: build/docs)")
    args = parser.parse_args()
    build(execute=args.execute, site=args.site)
