"""Nsight Compute counters of the holography kernels (issue 6): FGP variants, mapping, GP.

``bench/ncu-holo.sh OUTDIR`` runs ``python -m qora.bench.holo_counters target KIND N`` under
``ncu`` for each kind (``fused``, ``separate``, ``cube``, ``march``: two FGP steps of a TV
solve; ``gp``: two Gerchberg-Papoulis iterations; ``mapping``: gather and scatter), then
``python -m qora.bench.holo_counters report OUTDIR`` writes the ``holo-counters`` result: per
kernel, time, DRAM bytes against the traffic model (volumes of 4 n^3 bytes), and DRAM GB/s
against the copy bandwidth measured in the same process. DRAM bytes, not requested bytes:
L2 hits do not flatter the bandwidth.

``bpm_fused_forward`` and ``bpm_fused_gradient`` (not in the script's default kinds:
``QORA_NCU_KINDS="bpm_fused_forward bpm_fused_gradient" QORA_NCU_SIZES=256``) profile the BPM's fused
line passes (``qora.holo.bpm_fused``) over 4 slices of the reference geometry's 49 illuminations, each
pass against its bytes in ``bpm_fused.PASS_BYTES``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from qora.bench.counters import METRICS, _mean, parse_csv

__all__ = ["KINDS", "KERNELS", "model_bytes", "target", "report"]

KINDS = ("fused", "separate", "cube", "march", "gp", "mapping", "bpm_fused_forward", "bpm_fused_gradient")
KERNELS = ("fgp_fused", "fgp_primal", "fgp_dual", "fgp_cube", "fgp_march", "clamp_real", "restore_half",
           "map_gather", "map_scatter")
# the fused BPM passes are named bpm_<family>_<kind>_<N>_<lines>_<elements per thread>
_FUSED_BPM = re.compile(r"^(bpm_(?:row|column)_[a-z]+)_\d+_\d+_\d+$")
KERNEL_REGEX = "regex:^(" + "|".join(KERNELS) + "|bpm_(row|column)_[a-z]+_[0-9]+_[0-9]+_[0-9]+)$"
BPM_SLICES = 4  # slices of the profiled BPM passes (every slice runs the same passes)


def kernel_name(raw: str) -> str | None:
    """The model's name of a profiled kernel (the fused BPM passes without their size suffix), or None."""
    base = raw.split("(")[0].strip()
    if base in KERNELS:
        return base
    m = _FUSED_BPM.match(base)
    return m.group(1) if m else None


def model_bytes(kernel: str, n: int, kind: str = "", count: int = 49) -> float | None:
    """Compulsory DRAM bytes of one launch at n^3 (the solver grid equals the box here); a fused BPM pass
    over ``count`` illuminations of n^2 (its row forward pass stores w_k in the gradient's forward)."""
    if kernel.startswith("bpm_"):
        from qora.holo.bpm_fused import PASS_BYTES

        key = kernel[4:] + ("_keep" if kernel == "bpm_row_forward" and kind == "bpm_fused_gradient" else "")
        return PASS_BYTES[key] * count * n * n if key in PASS_BYTES else None
    vol = 4.0 * n**3
    half = n * n * (n // 2 + 1)
    return {
        "fgp_fused": 13 * vol, "fgp_cube": 13 * vol, "fgp_march": 13 * vol,
        "fgp_primal": 5 * vol,  # read v, r (3); write z
        "fgp_dual": 13 * vol,  # read z, p (3), r (3); write p (3), r (3)
        "clamp_real": 2 * 4.0 * n * n * 2 * (n // 2 + 1),
        "restore_half": 25.0 * half,
    }.get(kernel)


def target(kind: str, n: int) -> None:
    """Build the solver for ``kind`` at n^3 (reference geometry, 49 illuminations), run it once,
    then run the profiled part between cudaProfilerStart and Stop."""
    from qora.backend import resolve
    from qora.holo import reference as R
    from qora.holo.cuda_pipeline import Reconstruction
    from qora.holo import mapping_plan
    from qora.holo.cuda_stages import Mapper, WorkArea
    from qora.holo import FGP_VARIANTS, ReconstructionOptions

    cp = resolve("cuda").xp
    g = R.geometry(n)
    if kind.startswith("bpm_fused"):
        _bpm_target(kind, g, cp)
        return
    rng = np.random.default_rng(0)
    phi = cp.asarray((rng.standard_normal((g.count, n, n)) * 0.01 + 0j).astype(np.complex64))
    work = WorkArea()
    if kind in FGP_VARIANTS:
        options = ReconstructionOptions(method="tv", iterations=1, tv_inner=2, tv_weight=1e-3, fgp=kind)
    else:
        options = ReconstructionOptions(method="gp", iterations=2, r2c=True)
    recon = Reconstruction(g, work, mapping_plan(g, options), options)
    work.allocate()
    dst = cp.empty((n, n, n), cp.float32)
    spectra = phi.copy()
    recon(spectra, dst.data.ptr)
    cp.cuda.Device().synchronize()
    solver = recon.solver
    rt = cp.cuda.runtime
    rt.profilerStart()
    if kind in FGP_VARIANTS:
        solver.fgp_steps(2)
    elif kind == "gp":
        for _ in range(2):
            solver._clamp()
            solver._restore()
    else:
        recon.mapper(spectra, solver.sums, solver.hits)
        Mapper(recon.plan, "scatter")(spectra, solver.sums, solver.hits)
    cp.cuda.Device().synchronize()
    rt.profilerStop()


def _bpm_target(kind: str, g, cp) -> None:
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo.bpm_fused import FusedSteps
    from qora.holo import bpm_tables

    n = g.n
    dev = BpmDevice(g, bpm_tables(g, BPM_SLICES), variant="fused_fft")
    # one lane: each launch covers all the chunk's illuminations, the count of the passes' byte model (the
    # profiler serialises the lanes' launches anyway)
    dev.fused = FusedSteps(dev, lanes=1)
    dev.set_contrast(cp.full((BPM_SLICES, n, n), 0.01, cp.float32))
    out = cp.empty((g.count, n, n), cp.complex64)
    data = cp.ones((g.count, n, n), cp.complex64)
    run = (lambda: dev.forward(out)) if kind == "bpm_fused_forward" else (lambda: dev.reverse(data))
    run()
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStart()
    run()
    cp.cuda.Device().synchronize()
    cp.cuda.runtime.profilerStop()


def report(directory, *, write: bool = True, echo=print):
    """Read ``KIND-N.csv`` files; write the holo-counters result with GB/s against the copy bandwidth."""
    from qora.backend import resolve
    from qora.bench.common import BenchResult, copy_floor

    be = resolve("cuda")
    copy = copy_floor(be)
    kinds = {p.stem.rsplit("-", 1)[0] for p in Path(directory).glob("*.csv")}
    # a run of the BPM kinds alone is its own benchmark: holo-counters' result lists the FGP, GP and mapping rows
    name = "holo-bpm-counters" if kinds and all(k.startswith("bpm_fused") for k in kinds) else "holo-counters"
    result = BenchResult(name, "cuda", be.device_facts().as_dict(), columns=("us", "gbs", "pct_copy"))
    result.add("copy", gbs=copy["gbs"])
    for path in sorted(Path(directory).glob("*.csv")):
        kind, size = path.stem.rsplit("-", 1)
        n = int(size)
        per: dict[str, list] = {}
        for k in parse_csv(path.read_text(errors="replace")):
            name = kernel_name(k["name"])
            if name is not None:
                per.setdefault(name, []).append(k)
        for name, launches in per.items():
            t = _mean([k.get("gpu__time_duration.sum", np.nan) for k in launches]) * 1e-9
            b = _mean([k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0) for k in launches])
            model = model_bytes(name, n, kind)
            gbs = b / t / 1e9
            result.add(f"counters/{n}/{kind}/{name}", us=t * 1e6, dram_bytes=b, model_bytes=model,
                       bytes_vs_model=b / model if model else None, gbs=gbs, pct_copy=100 * gbs / copy["gbs"],
                       l2_hit_pct=_mean([k.get("lts__t_sector_hit_rate.pct", np.nan) for k in launches]),
                       dram_pct_of_peak=_mean([k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", np.nan)
                                               for k in launches]),
                       registers=int(launches[0].get("launch__registers_per_thread", 0) or 0),
                       launches=len(launches))
            echo(f"  {n:>4} {kind:>9} {name:<20} {t * 1e6:9.1f} us  {b / 2**20:8.1f} MiB"
                 + (f" ({b / model:4.2f} of model)" if model else "")
                 + f"  {gbs:7.0f} GB/s = {100 * gbs / copy['gbs']:5.1f}% of copy")
    if write:
        path = result.write()
        echo(f"result written to {path}")
    return result


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["metrics"]:
        print(",".join(METRICS))
    elif argv[:1] == ["regex"]:
        print(KERNEL_REGEX)
    elif argv[:1] == ["target"] and len(argv) == 3:
        target(argv[1], int(argv[2]))
    elif argv[:1] == ["report"] and len(argv) == 2:
        report(argv[1])
    else:
        print("usage: python -m qora.bench.holo_counters metrics | regex | target KIND N | report DIR",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
