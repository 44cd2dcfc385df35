"""cohere-ui's own post-processing (beamline_visualization) of a phased 34-ID-C Bragg object, for issue 44.

Run by cohere's environment (cohere-core, cohere-beamlines, cohere-ui, pyvista, pandas, openpyxl,
xrayutilities), never by qora:

    /work/envs/cohere/bin/python bench/probes/bragg_cohere_strain.py OBJ.npy SUPPORT.npy SPEC SCAN \\
        --max-ind ROW COL FRAME [--axes tiff|qora] [--binning F,R,C] [--rampups 1] [--unwrap] [--raw-zeros] \\
        [--resolution min_deconv_res|NM] [--out-dir DIR] [--tag NAME]

OBJ.npy: the complex object in the frame of the scan's array, Qora's axis order (frame, TIFF row, TIFF col) and
Qora's transform convention (I = |F o|^2, F the forward DFT); SUPPORT.npy its support. ROW COL FRAME: the raw
scan's brightest voxel (cohere's preprocessing records it in preprocess.xlsx; cohere's geometry is taken there).

What it does, all by cohere's code: an experiment folder is written in a temporary directory (conf/config,
config_instr, config_data, config_disp by cohere_core.utilities.write_config; preprocessed_data/preprocess.xlsx;
results_phasing/image.npy and support.npy), the image being what cohere's phasing would save for this object:
conjugated (cohere's reciprocal space is ifft(image)), in cohere's array order (its ut.read_tif transposes each
TIFF: axes (TIFF col, TIFF row, frame); --axes qora puts the TIFF row first instead, the assignment Qora's
geometry made before commit aa8a4fe; since that commit Qora's 34-ID-C geometry, pixel_directions ("y-", "x+") for
the TIFF's (row, col), is cohere's: use --axes tiff for both, --axes qora only reproduces the old transposed
comparison), divided by its maximum and centred by cohere_core's dvc_utils.center_sync (the phase of the
array's middle voxel set to 0, the maximum and then the centre of mass rolled to the centre), as
cohere_core.controller.phasing.Rec.save_res does. Then cohere_ui.beamline_postprocess.handle_visualization runs
on it with cohere-ui's GUI defaults for the display features (displacement from "Q", strain, resolution by
deconvolution at contrast 0.25, interpolation "ReIm" at "min_deconv_res", the twin written) and the outputs
(.vts on cohere's native sheared grid, .vti on its orthogonal grid) are read back.

Signed zeros: center_sync's reference voxel is the flattened array's element N // 2, for an even first axis index
(n0 / 2, 0, 0), on the array's edge and outside any support, where the object is exactly 0; math.atan2 of a zero
gives 0 or +-pi by the zeros' signs (atan2(+0, -0) = pi), so an object whose zero there has a negative real part is
turned by pi, its phase then sits about +-pi and wraps all over the support (strain ~10x too large). Qora's run of
2026-12-04 22:02 (scan 54) hit this. The image's zeros are therefore made +0 before center_sync (the reference phase
is then 0 and the object is left as given: Qora's has its support's mean phase 0); --raw-zeros keeps them as given,
to reproduce the flip. cohere's own phasing, which multiplies by its support, can meet the same.

Prints one JSON line: cohere's orthogonal voxel (nm), native voxel steps (nm), Q (1/A), the strain as cohere
writes it ("Qstrain": grad(u) . Q / 10, u in nm, Q in 1/A) and the same over |Q| / 10 (grad(u) . Q_hat, the
dimensionless strain along Q) with their mean and standard deviation inside the support (orthogonal grid: the
interpolated support > 0.5; native grid: support == 1), the displacement's range there. Saves cohere's arrays as
.npy in --out-dir (orthogonal grid: axes lab x, y, z; native grid: cohere's array order).
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np


def _cohere_image(obj, support, axes, raw_zeros=False):
    """The object as cohere's phasing would save it: conj (its transform convention), cohere's axis order,
    normalised to its maximum, its zeros made +0 (unless raw_zeros: see the module's docstring), centred by
    dvc_utils.center_sync."""
    import cohere_core.utilities.dvc_utils as dvut

    # Qora (frame, row, col) -> cohere (x, y, frame); "tiff" is cohere's and, since aa8a4fe, Qora's assignment
    order = (2, 1, 0) if axes == "tiff" else (1, 2, 0)
    image = np.conj(np.transpose(obj, order)).astype(np.complex128)
    sup = np.transpose(support, order).astype(np.float64)
    dvut.set_lib_from_pkg("np")
    image = image / np.abs(image).max()
    if not raw_zeros:
        image = image + 0.0  # -0.0 + 0.0 = +0.0 in both parts: center_sync's reference phase atan2(0, 0) = 0
    image, sup = dvut.center_sync(image, sup)
    return np.ascontiguousarray(image), np.ascontiguousarray(sup), order


def _write_experiment(exp, spec, scan, image, support, max_ind, binning, disp):
    import cohere_core.utilities as ut
    import cohere_ui.api.convertconfig as conv
    import pandas as pd

    conf = os.path.join(exp, "conf")
    os.makedirs(conf)
    ut.write_config({"working_dir": os.path.dirname(exp), "experiment_id": os.path.basename(exp), "scan": str(scan),
                     "beamline": "aps_34idc", "converter_ver": conv.get_version()}, os.path.join(conf, "config"))
    ut.write_config({"diffractometer": "34idc", "specfile": spec}, os.path.join(conf, "config_instr"))
    ut.write_config({"binning": list(binning)}, os.path.join(conf, "config_data"))
    ut.write_config(disp, os.path.join(conf, "config_disp"))
    prep = os.path.join(exp, "preprocessed_data")
    os.makedirs(prep)
    pd.DataFrame([{"scan": scan, "max ind (x)": int(max_ind[0]), "max ind (y)": int(max_ind[1]),
                   "max ind frame": int(max_ind[2])}]).to_excel(os.path.join(prep, "preprocess.xlsx"), index=False)
    res = os.path.join(exp, "results_phasing")
    os.makedirs(res)
    np.save(os.path.join(res, "image.npy"), image)
    np.save(os.path.join(res, "support.npy"), support)
    return res


def _native(path, shape):
    """point data of cohere's .vts (its grid's dimensions are shape[::-1], the arrays C-ordered in shape)."""
    import pyvista as pv

    grid = pv.read(path)
    return {k: np.asarray(grid.point_data[k]).reshape(shape) for k in grid.point_data.keys()}, grid


def _orthogonal(path):
    """point data of cohere's interpolated .vti, as arrays indexed [x, y, z], with spacing and origin."""
    import pyvista as pv

    grid = pv.read(path)
    dims = tuple(grid.dimensions)
    arrays = {k: np.asarray(grid.point_data[k]).reshape(dims[::-1]).transpose(2, 1, 0) for k in grid.point_data.keys()}
    return arrays, tuple(grid.spacing), tuple(grid.origin)


def _stats(values):
    values = values[np.isfinite(values)]
    return {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
            "max": float(values.max()), "p1": float(np.percentile(values, 1)), "p99": float(np.percentile(values, 99)),
            "n": int(values.size)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("obj")
    p.add_argument("support")
    p.add_argument("spec")
    p.add_argument("scan", type=int)
    p.add_argument("--max-ind", nargs=3, type=int, required=True, metavar=("ROW", "COL", "FRAME"))
    p.add_argument("--axes", choices=("tiff", "qora"), default="tiff",
                   help="tiff: cohere's assignment, Qora's since aa8a4fe; qora: the transposed one Qora used before")
    p.add_argument("--raw-zeros", action="store_true",
                   help="keep the object's signed zeros (center_sync may then turn it by pi)")
    p.add_argument("--binning", default="1,1,1", help="Qora's binning (frames, rows, cols)")
    p.add_argument("--rampups", type=int, default=1)
    p.add_argument("--unwrap", action="store_true")
    p.add_argument("--resolution", default="min_deconv_res")
    p.add_argument("--out-dir", default=".")
    p.add_argument("--tag", default="cohere")
    a = p.parse_args(argv)

    stdout = sys.stdout
    sys.stdout = sys.stderr  # cohere's and xrayutilities' prints stay off the JSON line
    try:
        out = _run(a)
    finally:
        sys.stdout = stdout
    print(json.dumps(out))


def _run(a):
    import cohere_ui.api.postprocessor as pu
    import cohere_ui.beamline_postprocess as bp
    import importlib

    t0 = time.time()
    obj, support = np.load(a.obj), np.load(a.support).astype(bool)
    image, sup, order = _cohere_image(obj, support, a.axes, a.raw_zeros)
    row, col, frame = a.max_ind
    f_bin, r_bin, c_bin = (int(v) for v in a.binning.split(","))
    max_ind = (col, row, frame) if a.axes == "tiff" else (row, col, frame)
    binning = (c_bin, r_bin, f_bin) if a.axes == "tiff" else (r_bin, c_bin, f_bin)
    try:
        resolution = float(a.resolution)
    except ValueError:
        resolution = a.resolution
    disp = {"complex_mode": "AmpPhase", "rampups": a.rampups, "make_twin": True, "unwrap": bool(a.unwrap),
            "Bragg_displacement": "Q", "compute_strain": True, "determine_resolution_type": "deconv",
            "resolution_deconv_contrast": 0.25, "interpolation_mode": "ReIm", "interpolation_resolution": resolution}
    tmp = tempfile.mkdtemp(prefix="cohere_viz_", dir=a.out_dir)
    exp = os.path.join(tmp, "scan_%d" % a.scan)
    res_dir = _write_experiment(exp, os.path.abspath(a.spec), a.scan, image, sup, max_ind, binning, disp)
    # cohere's geometry for the record (the same call process_dir makes)
    instr_module = importlib.import_module("cohere_beamlines.aps_34idc.instrument")
    configs = {"config": {"beamline": "aps_34idc", "scan": str(a.scan)},
               "config_instr": {"diffractometer": "34idc", "specfile": os.path.abspath(a.spec)},
               "config_data": {"binning": list(binning)}}
    trecip, tdir, q, ki, kf = instr_module.create_instr(configs).get_geometry(list(max_ind), a.scan, configs)
    bp.handle_visualization(exp, no_verify=True)
    viz = res_dir.replace("_phasing", "_viz")
    native, _ = _native(os.path.join(viz, "direct_space_images_AmpPhase.vts"), image.shape)
    ortho, spacing, origin = _orthogonal(os.path.join(viz, "direct_space_images_interpolated_ReIm.vti"))

    qnorm = float(np.linalg.norm(q))
    scale = qnorm / 10.0  # cohere's Qstrain = grad(u) . Q / 10 = (|Q| / 10) grad(u) . Q_hat
    inside_n = native["support"] > 0.5
    valid = ortho.get("vtkValidPointMask", np.ones_like(ortho["support"])) > 0
    inside_o = (ortho["support"] > 0.5) & valid
    out = {"tag": a.tag, "axes": a.axes, "raw_zeros": bool(a.raw_zeros), "max_ind_cohere": list(max_ind),
           "image_shape": list(image.shape),
           "Q_per_A": np.asarray(q).tolist(), "Q_norm_per_A": qnorm, "d_from_Q_A": 2 * np.pi / qnorm,
           "Tdir_nm": np.asarray(tdir).tolist(),
           "native_steps_nm": (np.linalg.norm(tdir, axis=0) / np.asarray(image.shape)).tolist(),
           "voxel_nm": float(spacing[0]), "spacing_nm": list(spacing), "ortho_shape": list(ortho["support"].shape),
           "support_voxels_native": int(inside_n.sum()), "support_voxels_ortho": int(inside_o.sum()),
           "Qstrain_ortho": _stats(ortho["Qstrain"][inside_o]),
           "strain_ortho": _stats(ortho["Qstrain"][inside_o] / scale),
           "Qstrain_native": _stats(native["Qstrain"][inside_n]),
           "strain_native": _stats(native["Qstrain"][inside_n] / scale),
           "displacement_ortho_A": _stats(ortho["Displacement"][inside_o] * 10),
           "displacement_native_A": _stats(native["Displacement"][inside_n] * 10),
           "seconds": round(time.time() - t0, 1), "viz_dir": viz}
    # how 'min_deconv_res' became the voxel (beamline_postprocess.process_dir): the deconvolved resolution
    # function's extent above 0.5 (find_datarange) on a grid spanning Tdir with the crop's number of points
    import pyvista as pv
    rgrid = pv.read(os.path.join(viz, "resolution_direct.vts"))
    rshape = tuple(rgrid.dimensions)[::-1]
    rarr = np.asarray(rgrid.point_data["resolution"]).reshape(rshape)
    bounds = pu.find_datarange(rarr, 0, 0.5)
    out["resolution_crop_shape"] = list(rshape)
    out["resolution_bounds_vox"] = list(bounds)
    out["resolution_extent_nm"] = [float(np.linalg.norm(tdir[:, i]) * bounds[i] / rshape[i]) for i in range(3)]
    out["resolution_extent_native_steps_nm"] = [float(np.linalg.norm(tdir[:, i]) * bounds[i] / image.shape[i])
                                                for i in range(3)]
    out["displacement_range_A"] = out["displacement_ortho_A"]["max"] - out["displacement_ortho_A"]["min"]
    if "imPhUW" in native:
        uw = native["imPhUW"][inside_n] / qnorm
        out["displacement_unwrapped_native_A"] = _stats(uw - uw.mean())
    tag = os.path.join(a.out_dir, a.tag)
    np.save(f"{tag}_strain_ortho.npy", np.where(inside_o, ortho["Qstrain"] / scale, np.nan))
    np.save(f"{tag}_Qstrain_ortho.npy", ortho["Qstrain"])
    np.save(f"{tag}_amp_ortho.npy", ortho["imAmp"])
    np.save(f"{tag}_support_ortho.npy", inside_o)
    np.save(f"{tag}_displacement_ortho_A.npy", np.where(inside_o, ortho["Displacement"] * 10, np.nan))
    np.save(f"{tag}_strain_native.npy", native["Qstrain"] / scale)
    np.save(f"{tag}_displacement_native_A.npy", native["Displacement"] * 10)
    np.save(f"{tag}_image_native.npy", image)
    np.save(f"{tag}_support_native.npy", sup)
    with open(f"{tag}_grid.json", "w") as f:
        json.dump({"spacing_nm": list(spacing), "origin_nm": list(origin), "order_from_qora": list(order),
                   "Tdir_nm": np.asarray(tdir).tolist(), "Q_per_A": np.asarray(q).tolist()}, f)
    return out


if __name__ == "__main__":
    main()
