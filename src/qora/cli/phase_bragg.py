"""``qora phase bragg``: a Bragg rocking scan from its raw frames to the strain map (qora.phase.bragg_strain)."""

from __future__ import annotations

from pathlib import Path

import click

from qora.cli.options import backend_option


def _bin(text: str) -> tuple:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: three positive integers like 1,2,2", param_hint="--bin") from None
    if len(values) != 3 or min(values) < 1:
        raise click.BadParameter(f"{text!r}: three positive integers like 1,2,2", param_hint="--bin")
    return values


@click.command("bragg")
@click.argument("frames", type=click.Path(exists=True, path_type=Path))
@click.option("--spec", "spec", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The beamline's SPEC file (34-ID-C: FRAMES is then the scan's folder of TIFF frames).")
@click.option("--sample", default=None, help="ID01: the sample's name in the BLISS file (when it holds several).")
@click.option("--scan", type=click.IntRange(min=0), required=True, help="The scan's number in the SPEC file.")
@click.option("--dark", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Dark frame (TIFF, the detector's full size): pixels above 1 count are masked.")
@click.option("--white", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="White field (TIFF, the detector's full size): the frames are divided by it; pixels under 100 "
              "are masked.")
@click.option("--roi", nargs=2, type=click.IntRange(min=0), default=(0, 0), show_default=True,
              help="The frames' first row and column on the detector (where dark and white are cut).")
@click.option("--bin", "binning", default="1,1,1", show_default=True,
              help="Binning of (frames, rows, cols) before phasing; 1,2,2 halves the detector's axes (a quarter of "
              "the voxels: the CPU's choice).")
@click.option("--threshold", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Counts at or under it are set to 0 (the detector's noise floor; after the white field).")
@click.option("--keep", type=click.FloatRange(0, 1, min_open=True), default=0.995, show_default=True,
              help="The box about the counts' centre of mass holds this fraction of them along each axis.")
@click.option("--starts", type=click.IntRange(1, 1000), default=4, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@backend_option(help="Where the phasing runs (auto: the GPU where there is one).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="Result .h5 file.")
@click.option("--vti", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The modulus, support and strain on the orthogonal grid as a VTK file for ParaView.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNG: modulus, strain and displacement on the three central lab planes.")
@click.option("--hkl", nargs=3, type=int, default=None,
              help="The reflection's Miller indices (with --lattice): the lattice strain against its spacing and the "
                   "crystal frame in the result.")
@click.option("--lattice", default=None,
              help="The crystal's lattice: a (A, cubic) or a,b,c,alpha,beta,gamma (A, degrees); with --hkl.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def bragg_cmd(frames, spec, sample, scan, dark, white, roi, binning, threshold, keep, starts, seed, backend, out,
              vti, plot, hkl, lattice, quiet) -> None:
    """A Bragg rocking scan from its raw frames to the strain along its reflection, on an orthogonal lab grid
    (docs/phase.md, "Bragg rocking scans"). FRAMES: an APS 34-ID-C scan's folder of TIFF frames (with --spec), or an
    ESRF ID01 BLISS file (.h5)."""
    import numpy as np
    import tifffile

    from qora.io.validate import outputs_apart
    from qora.phase import bragg_strain, plot_bragg, read_34idc, read_id01, write_vti
    from qora.progress import tqdm_progress

    factors = _bin(binning)
    if (hkl is None) != (lattice is None):
        raise click.UsageError("--hkl and --lattice name the reflection together: give both or neither")
    if lattice is not None:
        try:
            lattice = [float(v) for v in lattice.split(",")]
        except ValueError:
            raise click.BadParameter(f"a or a,b,c,alpha,beta,gamma, got {lattice!r}", param_hint="--lattice") from None
    outputs_apart([p for p in (out, vti, plot) if p is not None], [p for p in (frames, spec, dark, white) if p])
    if frames.is_dir():
        if spec is None:
            raise click.BadParameter("a folder of frames (34-ID-C) needs its SPEC file", param_hint="--spec")
        stack, geometry = read_34idc(frames, spec, scan, roi=roi)
    else:
        if spec is not None:
            raise click.BadParameter("an ID01 BLISS file holds its own metadata: no SPEC file", param_hint="--spec")
        stack, geometry = read_id01(frames, scan, sample=sample)
    window = (slice(roi[0], roi[0] + stack.shape[1]), slice(roi[1], roi[1] + stack.shape[2]))
    dark_frame, white_frame = (None if p is None else tifffile.imread(p)[window] for p in (dark, white))
    click.echo(f"scan {scan}: {stack.shape[0]} frames of {stack.shape[1]} x {stack.shape[2]}, "
               f"{geometry.energy_ev / 1e3:g} keV, {geometry.distance_m:g} m, rocking {geometry.rocking} by "
               f"{geometry.step_deg:g} deg")
    with tqdm_progress(disable=quiet) as bar:
        result = bragg_strain(stack, geometry, dark=dark_frame, white=white_frame, bin=factors, starts=starts,
                              seed=seed, backend=backend, progress=bar, threshold=threshold, keep=keep, hkl=hkl,
                              lattice=lattice)
    result.save(out)
    s = result.summary()
    click.echo(f"box {result.steps['box']['size']} at {list(result.window)}; Fourier error {s['fourier_error']:.4f}; "
               f"d = {s['d_spacing_a']:.4f} A; orthogonal voxel {s['voxel_nm']:.1f} nm, grid {s['lab_shape']}; "
               f"strain {s['strain_mean']:.2e} +- {s['strain_std']:.2e} over the support; wrote {out}")
    if result.crystal is not None:
        c = result.crystal
        click.echo(f"({''.join(map(str, c['hkl']))}): d_ref {c['d_ref_a']:.4f} A, lattice strain "
                   f"{c['lattice_strain']:+.2e} (the map's mean is 0 by the ramp's removal: add it for the absolute "
                   "strain); the crystal frame is in the result (its turn about G a convention)")
    agreement = result.phasing.agreement
    if agreement:
        click.echo(("warning: " if agreement["reproducible"] is False else "") + agreement["message"])
    if vti is not None:
        finite = {name: np.where(np.isfinite(a), a, 0.0) for name, a in (("strain", result.strain),
                                                                         ("displacement_a", result.displacement))}
        write_vti(vti, {"modulus": np.abs(result.lab), "support": result.lab_support * 1.0, **finite},
                  voxel=result.voxel, origin=result.origin)
        click.echo(f"wrote {vti}")
    if plot is not None:
        click.echo(f"wrote {plot_bragg(plot, result)}")
