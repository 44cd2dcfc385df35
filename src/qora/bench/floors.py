"""``qora bench floors``: the hardware floors every other benchmark is judged against.

For each shape the time of one forward+inverse C2C pair (fp32 and, on the GPU,
fp16) replayed from a CUDA graph, and the measured copy bandwidth. The pair is
the floor of any iteration that keeps cuFFT; the copy bandwidth turns a byte
model into a time.
"""

from __future__ import annotations

from qora.backend import resolve
from qora.bench.common import BenchResult, copy_floor, fft_pair_floor
from qora.bench.registry import FLOOR_PRECISIONS, FLOOR_SHAPES, fft_pair_case, shape_label

__all__ = ["run"]


def run(*, backend="auto", shapes=FLOOR_SHAPES, precisions=FLOOR_PRECISIONS, repeats: int = 20,
        write: bool = True, echo=print) -> BenchResult:
    """Measure the floors and (by default) write the result to :func:`qora.bench.common.results_dir`.

    On the CPU only fp32 pairs up to 2^22 elements are timed (larger ones take
    seconds each and no CPU benchmark needs them).
    """
    be = resolve(backend)
    facts = be.device_facts(measure=False)
    result = BenchResult("floors", be.name, facts.as_dict(),
                         columns=("ms", "gbs", "bytes_per_elem", "pairs"))
    copy = copy_floor(be)
    result.device["copy_gbs"] = copy["gbs"]
    result.add("copy", ms=None, gbs=copy["gbs"], detail=copy)
    echo(f"device: {facts.name}; copy bandwidth {copy['gbs']:.0f} GB/s (read + write)")
    for shape in shapes:
        n = 1
        for s in shape:
            n *= s
        for precision in precisions:
            if not be.is_cuda and (precision != "fp32" or n > 2**22):
                continue
            r = fft_pair_floor(be, shape, precision, repeats=repeats)
            # byte model: each transform reads and writes every element once
            bytes_per_elem = 4 * (8 if precision == "fp32" else 4)
            gbs = n * bytes_per_elem / (r["ms"] * 1e-3) / 1e9
            result.add(fft_pair_case(shape, precision), ms=r["ms"], gbs=gbs, bytes_per_elem=bytes_per_elem,
                       pairs=r["pairs_per_sample"], shape=list(shape), precision=precision,
                       timing=r["timing"], finite=r.get("finite"), plan_created_s=r.get("plan_created_s"))
            echo(f"  {shape_label(shape):>12} {precision}: {r['ms']:.4f} ms per pair")
    if write:
        path = result.write()
        result.notes["written_to"] = str(path)
        echo(f"result written to {path}")
    echo(result.table())
    return result
