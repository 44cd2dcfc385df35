"""The same benchmark rows measured on two checkouts in one sitting (a restructuring must not slow
anything down). Run once per checkout, the checkout's ``src`` first on PYTHONPATH:

    PYTHONPATH=<tree>/src python3 bench/probes/before_after.py phase|holo LABEL OUT.json

- ``phase``: ``qora bench phase``'s HIO rows of the graph variant at every CUDA size (no peers, no
  8-start and progress rows), with their fp32 cuFFT-pair floors (other variants and sizes: ``QORA_PROBE_VARIANTS``
  like half,mixed and ``QORA_PROBE_SHAPES`` like 1024x1024,256x256x256);
- ``holo``: ``qora bench holo``'s stage and Pipeline rows at 256^3 and 512^3 and the BPM rows at
  256^3 (the 188^3 rotation case is left out: its CPU half takes minutes);
- ``holo-host``: the Pipeline's upload and per-stack rows, and their host-copy and host-to-device parts bare;
- ``bpm``: the BPM rows at 128^3 and 256^3, or the sizes in ``QORA_PROBE_SIZES`` (forward, gradient, kernels,
  accuracy);
- ``bpm-launches``: one BPM kernel through its launcher and raw (this checkout only).

Only functions that exist unchanged in both checkouts are called. ``compare`` prints the ratios:

    python3 bench/probes/before_after.py compare BEFORE.json[,...] AFTER.json[,...] [PREFIX ...]

(several files a side: the medians, their ratio and each side's max/min spread).
"""

from __future__ import annotations

import json
import os
import sys


def _phase() -> dict:
    from qora.bench import phase as pb

    pb.CUDA_VARIANTS = tuple(os.environ.get("QORA_PROBE_VARIANTS", "graph").split(","))
    pb._eight_starts = lambda *a, **k: None
    pb._progress_cost = lambda *a, **k: None
    shapes = os.environ.get("QORA_PROBE_SHAPES")
    shapes = pb.CUDA_SHAPES if not shapes else [tuple(int(v) for v in s.split("x")) for s in shapes.split(",")]
    return pb.run_cuda(shapes=shapes, write=False, peers=False, echo=print).cases


def _holo() -> dict:
    from qora.backend import resolve
    from qora.bench import holo_cuda as hc
    from qora.bench.common import BenchResult, copy_floor

    be = resolve("cuda")
    result = BenchResult("holo", "cuda", be.device_facts().as_dict(), columns=("ms", "gbs", "ratio"))
    copy = copy_floor(be)["gbs"]
    for n in (256, 512):
        hc._stages(result, be, n, copy, print, memory=False)
    hc._bpm(result, be, 256, copy, print)
    return result.cases


def _holo_host() -> dict:
    """The host-side rows of ``holo`` alone (the Pipeline's upload and per-stack wall times at 256^3 and
    512^3), beside their two parts measured bare: the host copy into the page-locked buffer (``np.copyto``)
    and the page-locked host-to-device copy. Tells a change of the code from a change of the host's memory."""
    import time

    import cupy
    import numpy as np

    from qora.bench import holo_cuda as hc
    from qora.holo import Pipeline
    from qora.holo import fields as F
    from qora.holo import reference as R

    rows = {}
    for n in (256, 512):
        g = R.geometry(n)
        holos, bgs, hp = hc.bump_holograms(g)
        pipe = Pipeline(g, sideband=F.find_sideband(bgs[0], hp), hologram_pixel=hp, hologram_n=2 * n,
                        backend="cuda", oversample=1).cuda
        pipe.set_background(bgs)
        pipe.process(holos)
        dev = pipe.fields.holograms
        sync = pipe.copy_stream.synchronize
        label = f"{n}x{n}x{n}"
        rows[f"host/{label}/upload"] = {"ms": hc._wall_ms(lambda: pipe._upload(holos), sync, repeats=10)}
        rows[f"host/{label}/copyto_pinned"] = {"ms": hc._wall_ms(lambda: np.copyto(pipe.host_in, holos), lambda: None,
                                                                 repeats=10)}
        rows[f"host/{label}/h2d_pinned"] = {"ms": hc._wall_ms(lambda: dev.set(pipe.host_in),
                                                              cupy.cuda.runtime.deviceSynchronize, repeats=10)}
        rows[f"host/{label}/per_stack"] = {"ms": hc._wall_ms(lambda: pipe.process(holos), lambda: None, repeats=5)}
        for name, row in rows.items():
            if label in name:
                print(name, f"{row['ms']:.3f} ms")
        del pipe
        time.sleep(0.1)
    return rows


def _bpm() -> dict:
    from qora.backend import resolve
    from qora.bench import holo_cuda as hc
    from qora.bench.common import BenchResult, copy_floor

    be = resolve("cuda")
    result = BenchResult("holo", "cuda", be.device_facts().as_dict(), columns=("ms", "gbs", "ratio"))
    copy = copy_floor(be)["gbs"]
    for n in [int(v) for v in os.environ.get("QORA_PROBE_SIZES", "128,256").split(",")]:
        hc._bpm(result, be, n, copy, print)
    return result.cases


def _bpm_device() -> dict:
    """BpmDevice forward and gradient alone at 128^3 (launch-bound: two kernels of ~10 us and two
    transforms per slice), 20 samples after 3 warm-ups each."""
    import numpy as np

    from qora.backend import resolve
    from qora.bench.common import time_device
    from qora.holo import bpm_cuda, reference
    try:
        from qora.holo.plans import bpm_tables
    except ImportError:  # the checkout before the layout rebuild
        from qora.holo.bpm import bpm_tables

    be = resolve("cuda")
    cp = be.xp
    g = reference.geometry(128)
    dev = bpm_cuda.BpmDevice(g, bpm_tables(g, 128))
    dev.set_contrast(cp.zeros((dev.nz, 128, 128), cp.float32) + cp.float32(0.01))
    out = cp.empty((g.count, 128, 128), cp.complex64)
    data = cp.ones((g.count, 128, 128), cp.complex64)
    rows = {}
    for name, fn in (("forward", lambda: dev.forward(out)), ("gradient", lambda: dev.reverse(data))):
        t = time_device(be, fn, warmup=3, repeats=20)
        rows[f"bpm_device/128/{name}"] = {"ms": t.median_ms, "min_ms": float(np.min(t.samples_ms))}
        print(name, f"median {t.median_ms:.2f} ms, min {np.min(t.samples_ms):.2f} ms")
    return rows


def _bpm_launches() -> dict:
    """The BPM propagation kernel at 256^3 through its launcher and through the raw kernel object
    with a prebuilt argument tuple (the old call): one launch per sample, 20 back to back, and one
    queued behind an L2-flushing copy (``time_queued``). Does the launcher cost anything?"""
    import numpy as np

    from qora.backend import resolve
    from qora.bench.common import time_device, time_queued
    from qora.holo import bpm_cuda, reference
    from qora.holo import kernels as K
    from qora.holo.plans import bpm_tables

    be = resolve("cuda")
    g = reference.geometry(256)
    dev = bpm_cuda.BpmDevice(g, bpm_tables(g, 256))
    b = dev.chunk
    total = b * 256 * 256
    a, s, tq, tr = dev.w[:b], dev.s[:b], dev.cq[:b], dev.cr[:b]
    raw = K.kernel("bpm_propagate")
    grid, args = (-(-total // 256),), (a, tq, tr, np.int64(total), s)
    out = {}
    for name, one in (("launcher", lambda: K.bpm_propagate(a=a, tq=tq, tr=tr, total=total, s=s)),
                      ("raw", lambda: raw(grid, (256,), args))):
        for launches in (1, 20):
            t = time_device(be, lambda: [one() for _ in range(launches)], repeats=30, per_call=launches)
            out[f"bpm_propagate/{name}/{launches}_per_sample"] = {"ms": t.median_ms}
            print(name, launches, f"{t.median_ms:.4f} ms")
        t = time_queued(be, one, repeats=30)
        out[f"bpm_propagate/{name}/queued"] = {"ms": t.median_ms}
        print(name, "queued", f"{t.median_ms:.4f} ms")
    return out


def _compare(before: str, after: str, prefixes) -> None:
    """Medians over the comma-separated files of each side, their ratio, and each side's spread (max/min)."""
    import statistics

    sides = [[json.load(open(f)) for f in files.split(",")] for files in (before, after)]
    names = set.intersection(*(set(d) for side in sides for d in side))
    print(f"{'case':58} {'before':>10} {'after':>10} {'after/before':>12} {'spread b/a':>12}")
    for name in sorted(names):
        if prefixes and not name.startswith(tuple(prefixes)):
            continue
        ms = [[d[name].get("ms") for d in side] for side in sides]
        if all(all(side) for side in ms):
            (mb, ma), (sb, sa) = ([statistics.median(v) for v in ms], [max(v) / min(v) for v in ms])
            print(f"{name:58} {mb:10.4f} {ma:10.4f} {ma / mb:12.3f} {sb:6.3f}/{sa:5.3f}")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "compare":
        _compare(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        cases = {"phase": _phase, "holo": _holo, "holo-host": _holo_host, "bpm": _bpm, "bpm-device": _bpm_device,
                 "bpm-launches": _bpm_launches}[mode]()
        with open(sys.argv[3], "w") as f:
            json.dump({k: v for k, v in cases.items()}, f, indent=1, default=float)
        print(f"{sys.argv[2]}: {len(cases)} cases written to {sys.argv[3]}")
