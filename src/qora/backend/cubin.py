"""Offline builds of the prebuilt CUDA modules (cubins) that ship as package data.

Kernels written against cuFFTDx (a header library of 94 MB with its per-size database, not in a
user's CUDA install; NVRTC would recompile it for a minute or more on every machine) are compiled
once with nvcc and the headers of the ``nvidia-mathdx`` wheel; the cubin is loaded by
:func:`qora.backend.kernels.load_cubin`. A digest of the sources is written beside each cubin, so
that a CPU test fails when the sources change and the cubin was not rebuilt. The engines' build
commands (``python -m qora.phase.build_fused``, ``python -m qora.holo.build_fused``) call
:func:`build_cubin`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KERNELS", "find_mathdx", "source_digest", "build_cubin", "build_parser", "PrebuiltModule"]

#: the backend's kernel folder: headers shared by the engines' prebuilt modules (``line_fft.cuh``)
KERNELS = Path(__file__).parent / "kernels"


def source_digest(paths) -> str:
    """SHA-256 of the files ``paths``, read in that order."""
    h = hashlib.sha256()
    for path in paths:
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def find_mathdx(path: str | os.PathLike | None = None) -> Path:
    """The ``nvidia/mathdx`` folder (holding ``include/cufftdx.hpp``): ``path``, ``$QORA_MATHDX``, or an
    installed ``nvidia-mathdx`` wheel on ``sys.path``."""
    candidates = [Path(p) for p in (path, os.environ.get("QORA_MATHDX")) if p]
    candidates += [Path(p) / "nvidia" / "mathdx" for p in sys.path if p]
    for c in candidates:
        if (c / "include" / "cufftdx.hpp").is_file():
            return c
    raise FileNotFoundError("the cuFFTDx headers were not found: install nvidia-mathdx, or give --mathdx "
                            "(the folder holding include/cufftdx.hpp) or QORA_MATHDX")


def cubin_path(source: Path, arch: str = "sm_90") -> Path:
    """Where :func:`build_cubin` writes ``source``'s module for ``arch``: ``<stem>.<arch>.cubin`` beside it (its
    digest at ``<cubin>.sha256``)."""
    source = Path(source)
    return source.with_name(f"{source.stem}.{arch}.cubin")


def build_cubin(source: Path, *, digest_of, includes=(), arch: str = "sm_90", mathdx=None,
                nvcc: str = "nvcc") -> Path:
    """Compile ``source`` (a .cu file) for ``arch`` into ``<stem>.<arch>.cubin`` beside it, and write the
    digest of ``digest_of`` (the source and every local header it includes) to ``<cubin>.sha256``."""
    root = find_mathdx(mathdx)
    source = Path(source)
    out = cubin_path(source, arch)
    cmd = [nvcc, "-std=c++17", f"-arch={arch}", "-O3", "-cubin", "--resource-usage",
           "-I", str(root / "include"), "-I", str(root / "external" / "cutlass" / "include")]
    for folder in (source.parent, *includes):
        cmd += ["-I", str(folder)]
    subprocess.run(cmd + [str(source), "-o", str(out)], check=True)
    out.with_name(out.name + ".sha256").write_text(source_digest(digest_of) + "\n")
    return out


def build_parser(description: str):
    """The command line shared by the engines' build modules: --arch, --mathdx, --nvcc."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--mathdx", default=None, help="the nvidia/mathdx folder (include/cufftdx.hpp inside)")
    parser.add_argument("--nvcc", default="nvcc")
    return parser


@dataclass(frozen=True)
class PrebuiltModule:
    """One prebuilt module: its sources (the .cu first, then every local header it includes, in digest
    order) and its build command; an engine's ``build_fused`` module is one of these and its ``main``."""

    sources: tuple
    description: str

    @property
    def kernels(self) -> Path:
        """The folder of the .cu file (where the cubin and its digest are written)."""
        return Path(self.sources[0]).parent

    def source_digest(self) -> str:
        """SHA-256 of :attr:`sources`."""
        return source_digest(self.sources)

    def cubin(self, arch: str = "sm_90") -> Path:
        """The prebuilt module's path for ``arch``."""
        return cubin_path(self.sources[0], arch)

    def built_digest(self, arch: str = "sm_90") -> str:
        """The digest of the sources the prebuilt module for ``arch`` was built from (written beside it)."""
        cubin = self.cubin(arch)
        return cubin.with_name(cubin.name + ".sha256").read_text().strip()

    def build(self, *, arch: str = "sm_90", mathdx=None, nvcc: str = "nvcc") -> Path:
        """Compile the module for ``arch``; writes the cubin and its source digest, returns the cubin."""
        return build_cubin(self.sources[0], digest_of=self.sources, includes=(KERNELS,), arch=arch, mathdx=mathdx,
                           nvcc=nvcc)

    def main(self, argv=None) -> None:
        args = build_parser(self.description).parse_args(argv)
        print(self.build(arch=args.arch, mathdx=args.mathdx, nvcc=args.nvcc))
