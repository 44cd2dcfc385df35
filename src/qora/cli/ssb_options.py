"""What the ``qora ssb`` commands share: the aberration options, the check of their outputs before any work, and the
naming of the data file in its errors."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import click
import numpy as np

from qora.cli.options import ABERRATION_A, ANGLE_DEG, NONNEGATIVE_ABERRATION_A


def aberrations_from(c10, c12, c12_angle, c30):
    from qora.ssb import Aberrations

    values = {"C10": c10}
    if c12:
        values["C12"] = (c12, np.deg2rad(c12_angle))
    if c30:
        values["C30"] = c30
    return Aberrations(values)


def c12_text(aberrations) -> str:
    """C12 as magnitude and angle: "C12 20.0 A at 25.0 deg"."""
    mag, angle = aberrations.values.get("C12", (0.0, 0.0))
    return f"C12 {mag:.1f} A at {np.rad2deg(angle):.1f} deg"


_aberration_options = [
    click.option("--c10", type=ABERRATION_A, default=0.0, show_default=True, help="C10 (A); the defocus is -C10."),
    click.option("--c12", type=NONNEGATIVE_ABERRATION_A, default=0.0, show_default=True,
                 help="Twofold astigmatism C12 (A)."),
    click.option("--c12-angle", type=ANGLE_DEG, default=0.0, show_default=True, help="Its azimuth (degrees)."),
    click.option("--c30", type=ABERRATION_A, default=0.0, show_default=True, help="Spherical aberration C30 (A)."),
]


def check_outputs(data, named: dict) -> None:
    """Refuse, before any work, an output that is an input (or a folder, or another output), or
    that names a format it would not be written in."""
    from qora.io.errors import OutputError
    from qora.io.validate import outputs_apart

    given = {option: path for option, (path, _) in named.items() if path is not None}
    outputs_apart(list(given.values()), [data] if data is not None else [])
    seen = {}
    for option, path in given.items():
        other = seen.get(Path(path).resolve())
        if other:
            raise OutputError(f"{option} and {other} are the same file {path}: give each its own name")
        seen[Path(path).resolve()] = option
        suffixes = named[option][1]
        if Path(path).suffix.lower() not in suffixes:
            raise OutputError(f"{option} {path}: this output is written as {suffixes[0]} "
                              f"(give a name ending in {' or '.join(suffixes)})")


@contextmanager
def naming(path):
    """An InputError about the data (NaN, all zero, no bright field) names the file it came from."""
    from qora.io.errors import InputError

    try:
        yield
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from exc


def aberration_options(f):
    for option in reversed(_aberration_options):
        f = option(f)
    return f
