"""The fit workflows: the scan rotation from a cold start, and a session's standard and thick-sample
fits with their JSON-ready result.

:func:`fit_session` is the face's ``qora.ssb.fit``.
"""

from __future__ import annotations

import time

import numpy as np

from qora.io.validate import in_range
from qora.progress import report
from qora.ssb.band import make_band
from qora.ssb.fit_types import BRANCHES, THICK_TILT_STARTS, FitOptions, FitResult
from qora.ssb.depth import (COHERENT, auto_sections, depth_of_field, fit_incoherent,
                            section_depths)
from qora.ssb.identify import (COARSE_ROWS, coarse_stride, distinct_trials, identifiability, multi_start,
                               quarter_wave)
from qora.ssb.optimize import defocus_search, newton, tpe_search
from qora.ssb.orientation import (com_curl, com_spectrum, compose, flip_branch, phase_skewness,
                                  reorient, search_orientation, wrap_angle)

__all__ = ["fit_rotation", "fit_session", "BRANCHES", "FitOptions", "FitResult"]


ROTATION_NEWTON = 60  # Newton's iterations in the rotation fit, and in the thick fit
STANDARD_NEWTON = 20  # ... in the standard fit with the rotation given (newton's default)


# the centre-of-mass rotation is trusted as the coarse grid's centre where its curl fraction is below
# this (measured 0.016 on a thin amorphous film, 0.12 on SrTiO3 two cells thick); else the full grid
COM_TRUSTED = 0.3
COM_GRID_DEG = (-6.0, -3.0, 0.0, 3.0, 6.0)  # the coarse grid around it (degrees; its error: ~0.6)


def _rotation_grid(coarse_deg: float):
    return np.deg2rad(np.arange(-90.0, 90.0, coarse_deg))


def fit_rotation(session, parameters=("C10", "C12a", "C12b"), *, band=(0.2, 0.9), coarse_deg: float = 6.0,
                 angles=None, progress=None, offset: int = 0, total: int | None = None,
                 coarse_rows: int = COARSE_ROWS):
    """Cold-start fit with the scan rotation unknown: ``(rotation, values, agreement)``.

    The agreement does not change when the scan turns by 180 degrees (G(-Q) = conj G(Q) and
    Gamma(-Q) = -conj Gamma(Q)), so the rotation is found in [-90, 90) degrees. A coarse grid
    of ``coarse_deg`` with the C10 search at each angle picks the basin; a finer C10 search at the
    best angle, then Newton on ``parameters`` and the rotation together, with exact first and
    second derivatives in all of them (the apertures with a soft edge, :class:`Band`), refines it.
    ``progress`` is told each angle searched and each Newton step, counted from ``offset`` of
    ``total`` (default: this fit's own, the angles + 1 + 60). ``angles`` (rad), when given, are
    the coarse grid instead (:func:`fit_session` takes a few around the centre-of-mass estimate,
    :mod:`qora.ssb.orientation`). The C10 searches run on the band thinned to ``coarse_rows``
    frequencies (:func:`_thinned`), Newton on the whole band. The rotation returned is in [-90,
    90) degrees with the aberrations of that branch: the other, (rotation + 180, -C), is
    :func:`fit_session`'s choice.
    """
    coarse_deg = in_range("coarse_deg", coarse_deg, 0.0, 90.0, unit="degrees", inclusive=False)

    def c10_only(theta):
        agreement, _, c10 = _c10_check(session, theta, band, coarse_rows)
        return agreement, c10

    grid = _rotation_grid(coarse_deg) if angles is None else np.asarray(angles, float).ravel()
    searched = len(grid) + 1
    total = total or offset + searched + ROTATION_NEWTON
    scores = []
    for i, t in enumerate(grid):
        scores.append(c10_only(t))
        report(progress, "search (rotation)", offset + i + 1, total)
    best = int(np.argmax([a for a, _ in scores]))
    theta0, coarse_c10 = float(grid[best]), scores[best][1]
    b = _thinned(make_band(session, ("C10",), band=band, rotation=theta0), coarse_rows)
    c10, _ = defocus_search(b, step=10.0, low=coarse_c10 - 60.0, high=coarse_c10 + 60.0)
    report(progress, "search (rotation)", offset + searched, total)
    b = make_band(session, tuple(parameters) + ("rotation",), band=band, rotation=theta0)
    start = {p: 0.0 for p in parameters}
    start.update(C10=c10, rotation=theta0)
    values, agreement, _ = newton(b, start, iterations=ROTATION_NEWTON, callback=lambda state: report(
        progress, "newton (standard)", offset + searched + state.step, total))
    report(progress, "newton (standard)", offset + searched + ROTATION_NEWTON, total)
    theta = values.pop("rotation")
    wrapped = wrap_angle(theta, period=np.pi)
    if round((theta - wrapped) / np.pi) % 2:  # an odd number of half turns: the aberrations go with it
        values = flip_branch(values)
    return wrapped, values, agreement


def com_curl_rotation(session, orientation: str) -> float:
    """The scan rotation (rad) at which ``orientation``'s COM curl is least."""
    qy, qx, c = com_spectrum(session)
    return com_curl(qy, qx, c, orientation)[1]


def _thinned(band, rows: int):
    """``band`` thinned to at least ``rows`` frequencies (:func:`coarse_stride`)."""
    stride = coarse_stride(band, rows)
    return band.thinned(stride) if stride > 1 else band


def _c10_check(session, theta: float, band, coarse_rows: int) -> tuple:
    """(the agreement of a C10 search at scan rotation ``theta``, theta, the C10 found), on the band thinned to
    ``coarse_rows``: the rotation grid's step (:func:`fit_rotation`) and the orientation check's."""
    b = _thinned(make_band(session, ("C10",), band=band, rotation=theta), coarse_rows)
    c10, values = defocus_search(b, step=20.0, low=-400.0, high=400.0)
    return float(values.max()), float(theta), float(c10)


def _orientation(session, orientation: str, rotation, band=(0.2, 0.9), coarse_rows: int = COARSE_ROWS):
    """The orientation to fit in and its report: searched (:func:`search_orientation`) for "auto",
    else the given one. A session without its G in one piece (split over workers) is not searched.
    The candidates' C10 searches run on the band thinned to ``coarse_rows`` frequencies."""
    if orientation == "auto" and not hasattr(session, "G"):
        return "identity", {"orientation": "identity", "searched": False,
                            "note": "not searched: the session's G is split over workers (give orientation=)"}
    if orientation != "auto":
        return orientation, {"orientation": orientation, "searched": False}
    found = search_orientation(session, rotation=rotation)
    # The curl argument holds for a weak phase object; a crystal's strong Bragg beams break it (the
    # simulator's square crystal: the mirrored frame 0.046 against the right one's 0.235). So the
    # two best candidates are told apart by what the fit maximises, the agreement of a C10 search in
    # each, and the curl only orders them.
    # Where no frame's curl is small enough to trust its rotation (COM_TRUSTED, the rule fit_session's rotation search
    # follows), each is checked at the best angle of the coarse rotation grid instead: on abTEM's 100 A SrTiO3 (curls
    # 0.36 and 0.46) the identity frame's COM rotation was -25 degrees for a true 0, its check 0.044 against the
    # mirrored frame's 0.227, and the fit landed in the mirrored frame's basin (C12 162 A for 0); over the grid
    # identity reads 0.401 at 0 degrees. Where the best frame's curl is trusted (films: 0.014 against the mirrored
    # frame's 0.435) the checks stay at the COM rotations: the grid there cost 0.3 s of a 1.1 s CPU fit for nothing.
    trusted = min(found["scores"].values()) < COM_TRUSTED
    checks = {}
    for candidate in (found["orientation"], found["runner_up"]):
        if rotation is not None:
            angles = [rotation]
        elif trusted:
            angles = [found["rotation_rad"] if candidate == found["orientation"] else
                      com_curl_rotation(session, candidate)]
        else:
            angles = _rotation_grid(6.0)
        turned = reorient(session, candidate)
        checks[candidate] = max(_c10_check(turned, theta, band, coarse_rows) for theta in angles)
    best = max(checks, key=lambda n: checks[n][0])
    other = found["runner_up"] if best == found["orientation"] else found["orientation"]
    out = {**found, "searched": True, "orientation": best, "runner_up": other,
              "score": found["scores"][best], "runner_up_score": found["scores"][other],
              "agreement_check": {n: a for n, (a, *_) in checks.items()},
              "method": "bright-field centre-of-mass curl, the best two checked by a C10 search's agreement"}
    if rotation is None:
        out["rotation_rad"] = checks[best][1]
    return best, out


def _branch_image(session, values, rotation):
    """The standard SSB image of the fit (rad), for the branch rule; None where the session cannot
    make images (a session split over workers)."""
    if not hasattr(session, "image") or getattr(session, "pixels", None) is not None:
        return None
    return session.preview({**values, "rotation": rotation})


# A richer model (thick, incoherent) is the better one only when its agreement exceeds the standard model's by more
# than this (0.1% of the signal): below it the extra parameters explain noise, and the simpler model is kept.
BETTER_MARGIN = 1e-3


def better_rule(model: str, richer: float, standard: float) -> str:
    """The sentence that says why ``better`` is what it is, with both agreements and the margin."""
    diff = richer - standard
    verdict = "more than" if diff > BETTER_MARGIN else "not more than"
    return (f"{model} {richer:.4f} against standard {standard:.4f}: {diff:+.4f}, {verdict} the margin "
            f"{BETTER_MARGIN:g} a richer model must gain")


def _report(session, band, values, agreement, hessian, basins, names):
    scales = quarter_wave(wavelength=session.wavelength, alpha_mrad=session.alpha_mrad,
                          thickness=float(values.get("thickness", 0.0)))
    ident = identifiability(band, basins, scales=scales)
    # one standard error per parameter, the identifiability report's: none (None) where it finds the parameter
    # not determined, so no file or printout gives an error bar for a value the data do not fix
    noise = band.uncertainties(agreement, hessian)
    sigma = {n: (ident["parameters"][n]["sigma"] if n in ident["parameters"] else noise.get(n)) for n in noise}
    return {"parameters": {k: float(values[k]) for k in values if k in names or k in band.parameters},
            "agreement": float(agreement), "hessian": np.asarray(hessian).tolist(),
            "parameter_order": list(band.parameters), "uncertainty": sigma, "identifiability": ident}


def _choose_depth_model(out: dict, requested: str, standard: float, columnar: float, incoherent: float,
                        coherence: float) -> None:
    """The depth model of the result (``out["depth_model"]``, and ``out["better"]`` where it is the
    incoherent one): "auto" takes the incoherent model where the sections' objects are not one
    shifted object (depth coherence below COHERENT) and it explains more than the columnar one."""
    if requested == "incoherent":
        chosen, why = "incoherent", "given"
    elif coherence < COHERENT and incoherent > columnar:
        chosen, why = "incoherent", (f"the depth sections hold different objects (depth coherence {coherence:.2f} < "
                                     f"{COHERENT}): an amorphous film")
    else:
        chosen, why = "columnar", (f"the depth sections hold one object, shifted (depth coherence {coherence:.2f} >= "
                                   f"{COHERENT}): a columnar slab" if coherence >= COHERENT else
                                   "the incoherent model explains no more than the columnar one")
    out["depth_model"] = {"chosen": chosen, "requested": requested, "why": why, "depth_coherence": coherence,
                          "agreement": {"standard": standard, "columnar": columnar, "incoherent": incoherent}}
    if chosen == "incoherent":
        out["better"] = "incoherent" if incoherent > standard + BETTER_MARGIN else "standard"
        out["better_rule"] = better_rule("incoherent", incoherent, standard)


def _branch_rule(work, values, rotation, branch: str, open_branch: bool):
    """Whether to take the other of the two equally good fits (rotation + 180 deg, -C), and the rule's report:
    "flipped" always applies (the other branch is as good a fit, whatever was given), the skewness rule only where
    the branch is open (the rotation fitted or the orientation searched)."""
    image = _branch_image(work, values, rotation)
    skew = None if image is None else phase_skewness(image)
    flip = branch == "flipped" or (open_branch and branch == "auto" and skew is not None and skew < 0)
    rule = {"rule": "the SSB image's skewness is positive (atoms are positive phase)",
            "skewness": None if skew is None else (-skew if flip else skew),
            "choice": branch if open_branch or branch != "auto" else "given", "flipped": flip}
    if open_branch and branch == "auto" and skew is None:
        rule["note"] = "not applied: the session cannot make images"
    return flip, rule


def _standard_report(work, names, values, rotation, band, basins, searched_band):
    """The standard branch's report and agreement. With the rotation fitted (``searched_band`` None): the Hessian in
    the rotation too, from the soft-edged band it was fitted on, and the agreement the top-hat one, comparable
    with the thick branch's; else the search's band and basins."""
    if searched_band is None:
        std_band = make_band(work, names + ("rotation",), band=band, rotation=rotation)
        point = {**values, "rotation": rotation}
        soft_agreement, _, hessian = std_band.evaluate(point)
        std = _report(work, std_band, point, soft_agreement, hessian, [(point, soft_agreement, hessian)], names)
        std["parameters"].pop("rotation", None)
        agreement = make_band(work, names, band=band, rotation=rotation).evaluate(values, order=0)
        std["agreement"] = float(agreement)
        return std, agreement
    agreement = basins[0][1]
    return _report(work, searched_band, values, agreement, basins[0][2], basins, names), agreement


def _thick_branches(out, work, *, names, values, agreement, band, rotation, coarse_rows, thick_starts, incoherent,
                    depth_model, sections, progress, standard, total, timings, passes) -> None:
    """The thick fit (thickness and tilt, from the standard values) and, where asked, the depth-incoherent one, into
    ``out`` (``thick``, ``better``, ``better_rule``, ``incoherent``, ``depth_model``): :func:`fit_session`'s second
    part. ``standard`` is the progress count where it starts, ``total`` the whole fit's."""
    report(progress, "newton (thick)", standard, total)
    t1 = time.perf_counter()
    tnames = names + ("thickness", "tilt_y", "tilt_x")
    b = make_band(work, tnames, band=band, rotation=rotation)
    coarse = _thinned(b, coarse_rows)
    tstarts = [{**values, "thickness": 60.0, "tilt_y": ty, "tilt_x": tx} for ty, tx in THICK_TILT_STARTS[:thick_starts]]
    tbasins = multi_start(b, tstarts, tnames, iterations=ROTATION_NEWTON, coarse=coarse, callback=lambda i, state:
                          report(progress, "newton (thick)", standard + i * ROTATION_NEWTON + state.step, total))
    tvalues, tagreement, thessian = tbasins[0]
    timings["thick_s"] = time.perf_counter() - t1
    passes["thick"] = getattr(b, "passes", None)
    if coarse is not b:
        passes["thick_coarse"] = {**coarse.passes, "stride": coarse.stride}
    out["thick"] = _report(work, b, tvalues, tagreement, thessian, tbasins, tnames)
    # the simpler model unless the thick one explains measurably more (0.1% of the signal)
    out["better"] = "thick" if tagreement > agreement + BETTER_MARGIN else "standard"
    out["better_rule"] = better_rule("thick", tagreement, agreement)
    thin = (incoherent and depth_model == "auto" and sections is None
            and auto_sections(tvalues["thickness"], work.wavelength, work.alpha_mrad) == 1)
    if incoherent and thin:  # one section: the incoherent model is the columnar one without tilt
        dof = depth_of_field(work.wavelength, work.alpha_mrad)
        out["depth_model"] = {"chosen": "columnar", "requested": depth_model,
                              "why": f"thinner than the depth of field lambda/alpha^2 = {dof:.0f} A: one depth "
                                     "section, where the incoherent model is the columnar one"}
    elif incoherent:
        offset = standard + ROTATION_NEWTON * thick_starts
        t2 = time.perf_counter()
        ivalues, iagreement, ihessian, ib, coherence = fit_incoherent(
            work, {**{n: tvalues[n] for n in names}, "thickness": tvalues["thickness"]}, sections=sections,
            band=band, rotation=rotation, iterations=ROTATION_NEWTON, callback=lambda state: report(
                progress, "newton (incoherent)", offset + state.step, total))
        timings["incoherent_s"] = time.perf_counter() - t2
        passes["incoherent"] = ib.passes
        for i, stage in enumerate(getattr(ib, "stage_passes", [])):
            passes[f"incoherent_stage{i + 1}"] = stage
        out["incoherent"] = _report(work, ib, ivalues, iagreement, ihessian, [(ivalues, iagreement, ihessian)],
                                    names + ("thickness",))
        out["incoherent"].update(sections=ib.sections, coupling=ib.coupling, depth_coherence=coherence,
                                 section_depths_a=section_depths(ivalues["thickness"], ib.sections).tolist(),
                                 tilt="not a parameter: it shifts each independent section sideways, which its "
                                      "free object absorbs (not observable)")
        _choose_depth_model(out, depth_model, agreement, tagreement, iagreement, coherence)
    else:
        out["depth_model"] = {"chosen": "columnar", "requested": depth_model,
                              "why": "given" if depth_model == "columnar" else
                              "the incoherent model needs the whole of G on one session (not split over workers)"}


CONVENTIONS = ("Krivanek chi, defocus = -C10, cartesian C_nm,a = C cos(m phi), C_nm,b = C sin(m phi); C10 at the "
               "mid-plane; tilt (y, x) in rad; the detector relabelled by 'orientation' (qora.ssb.orientation); "
               "docs/ssb.md")  # the fit result's "conventions"


def _chosen_branch(session, work, name, values, rotation, basins, branch, fitted_rotation, orient):
    """The 180-degree branch (open where the rotation was fitted or the orientation searched) by ``branch``'s rule:
    the flipped branch moves the rotation (fitted) or the orientation by "rot180" (given). Returns (values,
    rotation wrapped to [-pi, pi), orientation name, reoriented session, basins, the rule's record)."""
    open_branch = fitted_rotation or orient.get("searched", False)
    flip, rule = _branch_rule(work, values, rotation, branch, open_branch)
    if flip:
        values = flip_branch(values)
        if fitted_rotation:
            rotation = rotation + np.pi
        else:
            name = compose(name, "rot180")
            work = reorient(session, name)
            basins = [(flip_branch(v), a, h) for v, a, h in basins]  # the Hessian in C alone is unchanged
    return values, wrap_angle(rotation), name, work, basins, rule


def _standard_starts(b, names, *, trials, batch, seed, starts, coarse_rows, progress, searched, total, timings,
                     passes, t0):
    """The standard branch with the rotation given: the cold start's search (:func:`tpe_search`) and the C10 grid's
    best on the band thinned to ``coarse_rows``, Newton from the ``starts`` best distinct trials and that one,
    finished on the whole band. Returns the basins, best first; records the search's time and the passes over G."""
    coarse = _thinned(b, coarse_rows)  # the search and the starts on 1 / stride of G, finished on all of it
    _, _, points, agreements = tpe_search(coarse, trials=trials, batch=batch, seed=seed,
                                          callback=lambda done: report(progress, "search", done, total))
    first = distinct_trials(points, agreements, names, starts, spread={"C10": 40.0, "C12a": 20.0, "C12b": 20.0})
    c10, _ = defocus_search(coarse)  # a start no seed moves
    first.append({"C10": c10, "C12a": 0.0, "C12b": 0.0})
    timings["search_s"] = time.perf_counter() - t0
    basins = multi_start(b, first, names, iterations=STANDARD_NEWTON, coarse=coarse, callback=lambda i, state:
                         report(progress, "newton (standard)", searched + i * STANDARD_NEWTON + state.step, total))
    passes["standard"] = getattr(b, "passes", None)  # a band split over workers does not count
    if coarse is not b:
        passes["standard_coarse"] = {**coarse.passes, "stride": coarse.stride}
    return basins


def fit_session(session, options: FitOptions | None = None, *, progress=None, **changes) -> FitResult:
    """The standard fit (C10, C12) and, with ``tilt``, the thick-sample fit beside it.

    ``options``: a :class:`~qora.ssb.fit_types.FitOptions`; keyword ``changes`` override its fields:

    ``orientation`` is the detector's against the scan (:data:`qora.ssb.orientation.ORIENTATIONS`):
    "auto" finds it by the bright-field centre-of-mass curl (:func:`search_orientation`; with the
    rotation unknown only the handedness, "identity" or "transpose", since turns by 90 degrees
    are the rotation's), a name takes it as given. ``rotation`` (rad) is given or, when None,
    fitted (:func:`fit_rotation`, its coarse grid a few angles around the centre-of-mass estimate
    where that is trusted). With the rotation given the cold start is :func:`tpe_search` over C10
    and C12 (``trials`` sets, ``batch`` per pass over G, ``seed``), then Newton from the
    ``starts`` best distinct trials and the C10 grid's best (:func:`defocus_search`), the basins
    kept for the identifiability report. The thick fit starts from the standard one with 60 A of
    thickness and the first ``thick_starts`` tilts of :data:`THICK_TILT_STARTS` (all three by
    default) and fits C10, C12, thickness and tilt by Newton from each. The searches and the
    starts' Newton run on the band thinned to at least ``coarse_rows`` frequencies (every
    stride-th: :func:`qora.ssb.identify.coarse_stride`; the whole band where it holds fewer than
    twice that), and the basins within reach of the best are finished on the whole band
    (:func:`qora.ssb.identify.multi_start`): at full scale a pass of the starts reads a fifth of G.

    ``branch``: the data are explained equally by (rotation, C, phase) and (rotation + 180 deg,
    -C, -phase). Where that is open (the rotation fitted, or the orientation searched) "auto"
    takes the branch whose SSB image has positive skewness (atoms are positive phase,
    :func:`phase_skewness`; with both rotation and orientation given it keeps the fit, since C is
    then determined), "as-fitted" keeps the one the fit found, "flipped" takes the other (always).
    With the rotation fitted the branch moves the rotation; with it given, the orientation
    (by "rot180"). Rotation and aberrations are always a consistent pair, the rotation in
    [-180, 180) degrees.

    Returns a :class:`~qora.ssb.fit_types.FitResult` (read like its JSON object): per branch its parameters (A, rad), agreement, Hessian,
    standard errors (:meth:`Band.uncertainties`) and identifiability report
    (:func:`qora.ssb.identify.identifiability`: sigma only for determined parameters); the
    rotation; the orientation (with the runner-up's score) and the branch with the rule's
    statistic; which branch fits better; stage timings (s) and passes over G; the conventions.
    ``compare_standard=False`` leaves the standard branch (still the thick fit's start) out of the
    result when ``tilt`` is on. ``progress`` (:mod:`qora.progress`) counts the whole fit with the
    stages "search", "newton (standard)", "newton (thick)" (and "newton (incoherent)").

    ``depth_model`` (with ``tilt``): "columnar" fits the thick model above (every slice the same
    projected structure, a crystal near a zone axis); "incoherent" also fits the depth-incoherent
    model from it (:mod:`qora.ssb.depth`: ``sections`` depth sections with their own objects,
    default one per depth of field of the columnar fit's thickness; an amorphous film), reported
    as "incoherent" with its depth coherence; "auto" fits both and takes the incoherent model
    where the sections' objects are not shifted copies of each other (depth coherence below
    :data:`qora.ssb.depth.COHERENT`) and it explains more (``depth_model`` in the result says
    which, and why). ``better`` is then "standard", "thick" (columnar) or "incoherent".
    """
    o = FitOptions.made(options, **changes)
    rotation, orientation, branch, tilt, band, depth_model, sections = (o.rotation, o.orientation, o.branch, o.tilt,
                                                                         o.band, o.depth_model, o.sections)
    trials, batch, seed, starts, thick_starts, coarse_rows = (o.trials, o.batch, o.seed, o.starts, o.thick_starts,
                                                              o.coarse_rows)
    incoherent = tilt and depth_model != "columnar" and hasattr(session, "band_rows")
    timings, passes = {}, {}
    t0 = time.perf_counter()
    names = ("C10", "C12a", "C12b")
    fitted_rotation = rotation is None
    name, orient = _orientation(session, orientation, rotation, band, coarse_rows)
    timings["orientation_s"] = time.perf_counter() - t0
    work = reorient(session, name)
    angles = None
    if fitted_rotation and orient.get("searched") and orient["score"] < COM_TRUSTED:
        angles = orient["rotation_rad"] + np.deg2rad(COM_GRID_DEG)
    # one count for the whole fit: the search's trials (or the rotation search's angles), then
    # Newton's steps of each start at most (a start that converges early jumps to its end)
    searched = ((len(_rotation_grid(6.0)) if angles is None else len(angles)) + 1) if fitted_rotation else trials
    standard = searched + (ROTATION_NEWTON if fitted_rotation else STANDARD_NEWTON * (starts + 1))
    total = standard + (ROTATION_NEWTON * thick_starts if tilt else 0) + (ROTATION_NEWTON if incoherent else 0)
    report(progress, "search", 0, total)
    b = basins = None
    if fitted_rotation:
        rotation, values, _ = fit_rotation(work, names, band=band, angles=angles, progress=progress, total=total,
                                           coarse_rows=coarse_rows)
    else:
        b = make_band(work, names, band=band, rotation=rotation)
        basins = _standard_starts(b, names, trials=trials, batch=batch, seed=seed, starts=starts,
                                  coarse_rows=coarse_rows, progress=progress, searched=searched, total=total,
                                  timings=timings, passes=passes, t0=t0)
        values = dict(basins[0][0])
    report(progress, "newton (standard)", standard, total)
    values, rotation, name, work, basins, rule = _chosen_branch(session, work, name, values, rotation, basins,
                                                                branch, fitted_rotation, orient)
    orient["orientation"] = name
    timings["standard_s"] = time.perf_counter() - t0
    std, agreement = _standard_report(work, names, values, rotation, band, basins, None if fitted_rotation else b)
    out = {"rotation_rad": float(rotation), "orientation": orient,
           "branch": rule, "standard": std, "conventions": CONVENTIONS, "band_inv_a": list(band)}
    if tilt:
        _thick_branches(out, work, names=names, values=values, agreement=agreement, band=band, rotation=rotation,
                        coarse_rows=coarse_rows, thick_starts=thick_starts, incoherent=incoherent,
                        depth_model=depth_model, sections=sections, progress=progress, standard=standard,
                        total=total, timings=timings, passes=passes)
        if not o.compare_standard:
            out.pop("standard")
    report(progress, "done", total, total)
    timings["total_s"] = time.perf_counter() - t0
    out["timings_s"] = timings
    out["passes"] = {k: dict(v) for k, v in passes.items() if v is not None}  # over G, per branch's band
    return FitResult.from_dict(out)


def fitted_image(session, result: dict, *, branch: str | None = None):
    """The phase image (rad, scan grid) a fit's result describes, on ``session`` (the data the fit was made on):
    its detector orientation and scan rotation applied, and the aberrations of ``branch`` (default: the result's
    ``better`` one) imaged by that branch's model: SSB for "standard", the thick model with the fitted
    thickness and tilt for "thick", the sum of the depth sections for "incoherent".

    Returns ``(phase, method, values)``: the image, the method's name ("ssb", "thick", "depth-sections") and the
    branch's parameters (cartesian, A and rad). A result without that branch is refused (ValueError).
    """
    from qora.ssb.depth import depth_sections
    from qora.ssb.model import parameters_to_aberrations
    from qora.ssb.orientation import reorient

    branch = branch or result.get("better") or "standard"
    if branch not in result or "parameters" not in result.get(branch, {}):
        have = [b for b in ("standard", "thick", "incoherent") if b in result]
        raise ValueError(f"the fit has no {branch!r} branch (it has {have})")
    if "rotation_rad" not in result or "orientation" not in result:
        raise ValueError("the fit lacks its rotation_rad or orientation: not a result of qora ssb fit")
    values = dict(result[branch]["parameters"])
    work = reorient(session, result["orientation"]["orientation"])
    rotation = float(result["rotation_rad"])
    if branch == "incoherent":
        return depth_sections(work, values, sections=result[branch]["sections"], rotation=rotation).sum(0), \
            "depth-sections", values
    saved = work.rotation
    work.rotation = rotation
    try:
        if branch == "thick":
            phase = work.image(parameters_to_aberrations(values), "thick", thickness=values["thickness"],
                               tilt=(values["tilt_y"], values["tilt_x"]))
            return phase, "thick", values
        return work.image(parameters_to_aberrations(values), "ssb"), "ssb", values
    finally:
        work.rotation = saved
