"""SPEC data files (certif.com's SPEC, as beamlines such as APS 34-ID-C write them): one scan's header and columns.

A SPEC file is text: file headers (``#F``, ``#E``, ``#D``, ``#O<n>`` the motor names, two or more spaces apart,
since a name may hold one space), then scans, each from ``#S <number> <command>`` to the next ``#S``: its motor
positions at the start (``#P<n>``, one value per name of the matching ``#O<n>`` line), the column labels (``#L``,
two or more spaces apart) and one line of numbers per point. Other ``#`` lines (``#G``, ``#Q``, ``#UIMDET``, ...)
are kept by their key. A scan number may repeat in one file (a restarted SPEC session); the last is taken, and
said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, InputError

__all__ = ["SpecScan", "read_spec_scan", "scan_numbers"]

_NAMES = re.compile(r"\s{2,}")


@dataclass
class SpecScan:
    """One scan: ``number``, ``command`` (e.g. "ascan  th -0.28 0.72  200 0.25"), ``motors`` (name -> position at
    the scan's start), ``columns`` (label -> values per point), ``headers`` (key -> the rest of the line, e.g.
    "UIMDET" -> "34idcTIM2:") and ``notes`` (what the reader noticed)."""

    number: int
    command: str
    motors: dict
    columns: dict
    headers: dict
    notes: list = field(default_factory=list)

    @property
    def scan_motor(self) -> str:
        """The scanned motor's mnemonic (the command's first argument)."""
        return self._command_parts()[1]

    def scan_range(self) -> tuple:
        """(start, stop, intervals) of a one-motor scan (``ascan``/``dscan``/``lup``): the command's arguments."""
        parts = self._command_parts()
        if len(parts) < 5:
            raise FileFormatError(f"scan {self.number}: its command {self.command!r} is not a one-motor scan")
        try:
            return float(parts[2]), float(parts[3]), int(parts[4])
        except ValueError:
            raise FileFormatError(f"scan {self.number}: cannot read start, stop and intervals from "
                                  f"{self.command!r}") from None

    def _command_parts(self) -> list:
        parts = self.command.split()
        if len(parts) < 2:
            raise FileFormatError(f"scan {self.number}: its command {self.command!r} names no motor")
        return parts

    def motor(self, name: str) -> float:
        """A motor's position at the scan's start, by its name in the ``#O`` lines; a clear error naming the file's
        motors when it has none of that name."""
        if name not in self.motors:
            raise InputError(f"scan {self.number} records no motor {name!r} (it has {', '.join(sorted(self.motors))})")
        return self.motors[name]


def scan_numbers(path) -> list:
    """The scan numbers a SPEC file holds, in file order."""
    return [int(line.split()[1]) for line in _lines(path) if line.startswith("#S ") and len(line.split()) > 1]


def _lines(path) -> list:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such SPEC file")
    return path.read_text(errors="replace").splitlines()


def read_spec_scan(path, scan: int) -> SpecScan:
    """Scan ``scan`` of the SPEC file ``path``."""
    lines = _lines(path)
    names = {}  # the #O lines in force: a later file header (a restarted session) replaces them
    starts = []
    for i, line in enumerate(lines):
        if line.startswith("#O") and line[2:3].isdigit():
            key, _, rest = line.partition(" ")
            names[key[2:]] = [n.strip() for n in _NAMES.split(rest.strip()) if n.strip()]
        elif line.startswith("#S ") and line.split()[1:2] == [str(scan)]:
            starts.append((i, {k: list(v) for k, v in names.items()}))
    if not starts:
        found = scan_numbers(path)
        span = f"{found[0]}..{found[-1]}" if found else "none"
        raise InputError(f"{path}: no scan {scan} (its scans: {span}, {len(found)} in all)")
    start, names = starts[-1]
    parsed = _scan(lines, start, names, Path(path))
    if len(starts) > 1:
        parsed.notes.append(f"scan {scan} appears {len(starts)} times in the file; the last is read")
    return parsed


def _scan(lines, start: int, names: dict, path: Path) -> SpecScan:
    number, command = lines[start].split(maxsplit=2)[1], (lines[start].split(maxsplit=2) + [""])[2].strip()
    motors, headers, labels, rows = {}, {}, None, []
    for offset, line in enumerate(lines[start + 1:], start + 2):
        if line.startswith("#S "):
            break
        if line.startswith("#P") and line[2:3].isdigit():
            key, _, rest = line.partition(" ")
            values = rest.split()
            for name, value in zip(names.get(key[2:], []), values):
                motors[name] = _number(value, path, offset)
        elif line.startswith("#L "):
            labels = [n.strip() for n in _NAMES.split(line[3:].strip()) if n.strip()]
        elif line.startswith("#"):
            key, _, rest = line[1:].partition(" ")
            headers[key] = rest.strip()
        elif line.strip():
            rows.append([_number(v, path, offset) for v in line.split()])
    columns = {}
    if labels is not None and rows:
        widths = {len(r) for r in rows}
        if widths != {len(labels)}:
            raise FileFormatError(f"{path}: scan {number} has {len(labels)} column labels and rows of "
                                  f"{sorted(widths)} numbers")
        data = np.asarray(rows, np.float64)
        columns = {label: data[:, j] for j, label in enumerate(labels)}
    return SpecScan(int(number), command, motors, columns, headers)


def _number(text: str, path: Path, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise FileFormatError(f"{path}, line {line}: {text!r} is not a number") from None
