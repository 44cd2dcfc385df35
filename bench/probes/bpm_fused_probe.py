"""The BPM's fused_fft variant against the cuFFT variant, side by side in one run: forward and gradient
at n^3 (49 illuminations, one chunk), each fused pass timed alone, bytes per element against the byte
model and GB/s against a copy kernel measured in the same run, and the two variants' results compared.
``--chunks`` adds both variants with smaller chunks of illuminations: with 16 at 256^2 a chunk's W, S
and tables (34 MB) could stay in the 50 MB L2 from slice to slice (the tables are the same for every
slice but the last), which the byte model does not count. ``--resident`` adds the ``fused_resident``
variant (the slice loop in one cluster per illumination, the field on chip) at each CTAs-per-SM setting
built, with its own byte model and, for comparison, the line passes' bytes over its time. ``--candidates`` adds the candidate kernels
(docs/holo-performance.md, "Fused BPM candidates"), each a "+"-joined list of FusedSteps options:
``async`` / ``stage`` (column_load), ``col8`` (column_lines 8), ``rowpipe`` (row_load "pipe"), ``row16``
(row_ept 16), ``early`` (reverse_load "early", after rowpipe in a list: the forward row passes piped, the
reverse one early); one not built at a size is reported and skipped.

    PYTHONPATH=src python bench/probes/bpm_fused_probe.py [--sizes 256,128] [--repeats 5] [--chunks 16,8]
        [--candidates async,stage,...] [--resident 2,1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from qora.backend import resolve
from qora.bench.common import copy_floor, time_device, time_queued
from qora.io.errors import InputError


CANDIDATE_OPTIONS = {"async": {"column_load": "async"}, "stage": {"column_load": "stage"},
                     "col8": {"column_lines": 8}, "rowpipe": {"row_load": "pipe"}, "row16": {"row_ept": 16},
                     "early": {"reverse_load": "early"}}
DEFAULT_CANDIDATES = ("async,stage,stage+col8,col8,rowpipe,row16,rowpipe+row16,early,stage+rowpipe,async+rowpipe,"
                      "stage+rowpipe+early")


def candidate_options(text: str) -> dict:
    """FusedSteps keywords of a "+"-joined candidate."""
    options = {}
    for part in text.split("+"):
        options.update(CANDIDATE_OPTIONS[part])
    return options


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def probe(be, n: int, copy: float, repeats: int, column_epts, chunks=(), candidates=(), resident=()) -> dict:
    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo.bpm_cuda import BpmDevice
    from qora.holo import bpm_resident
    from qora.holo.bpm_fused import PASS_BYTES, SLICE_BYTES, FusedSteps
    from qora.holo.plans import bpm_tables

    cp = be.xp
    g = R.geometry(n)
    tables = bpm_tables(g, n)
    truth = P.render_spheres([P.Sphere(radius=1.5, index=1.40)], n, g.pixel, g.medium_index, supersample=3)
    x = cp.asarray((truth - g.medium_index).astype(np.float32))
    data = cp.asarray(P.partial_wave_ratio(P.Sphere(radius=1.5, index=1.40), g) + 1, cp.complex64)
    chunk = BpmDevice(g, tables).chunk  # as many as fit; every variant below runs with it
    cp.get_default_memory_pool().free_all_blocks()

    def fused_device(options, c=chunk):
        def make():
            dev = BpmDevice(g, tables, chunk=c, variant="fused_fft")
            dev.fused = FusedSteps(dev, **options)
            return dev
        return make

    # built one at a time (each holds its stored envelopes: 6.6 GB at 256^3)
    devices = {"cufft": lambda: BpmDevice(g, tables, chunk=chunk)}
    for ept in column_epts:
        devices[f"fused_fft_ept{ept}"] = fused_device({"column_ept": ept})
    for text in candidates:
        devices[f"fused_fft[{text}]"] = fused_device(candidate_options(text))
    for ctas in resident:
        if ctas in bpm_resident.CTAS_PER_SM.get(n, ()):
            def make_resident(ctas=ctas):
                dev = BpmDevice(g, tables, chunk=chunk, variant="fused_resident")
                dev.fused = bpm_resident.ResidentSteps(dev, ctas_per_sm=ctas)
                return dev
            devices[f"fused_resident_sm{ctas}"] = make_resident
    for c in chunks:
        devices[f"cufft_chunk{c}"] = lambda c=c: BpmDevice(g, tables, chunk=c)
        devices[f"fused_fft_chunk{c}"] = lambda c=c: BpmDevice(g, tables, chunk=c, variant="fused_fft")
    elements = g.count * n * n * n  # element-slices of one pass through the volume, all illuminations
    row = {"n": n, "count": g.count, "chunk": chunk, "copy_gbs": copy, "variants": {}}
    outputs = {}
    for name, make in devices.items():
        try:
            dev = make()
        except InputError as exc:  # a candidate not built at this size
            print(f"  {n}^3 {name}: not built ({exc})", flush=True)
            continue
        dev.set_contrast(x)
        out = cp.empty((g.count, n, n), cp.complex64)
        try:
            fwd = time_device(be, lambda: dev.forward(out), warmup=1, repeats=repeats).median_ms
            grad = time_device(be, lambda: dev.reverse(data), warmup=1, repeats=repeats).median_ms
            gradient, loss = dev.reverse(data)
        except Exception as exc:  # noqa: BLE001 - one failing candidate must not end the run
            print(f"  {n}^3 {name}: failed: {exc!r}", flush=True)
            out = dev = None
            cp.get_default_memory_pool().free_all_blocks()
            continue
        outputs[name] = (out.get(), gradient.get(), loss)
        kind = name.split("_sm")[0] if name.startswith("fused_resident") else \
            "cufft" if name.startswith("cufft") else "fused_fft"
        entry = {"forward_ms": fwd, "gradient_ms": grad}
        for direction, ms in (("forward", fwd), ("gradient", grad)):
            screen = (8 if direction == "forward" else 16) / dev.chunk
            own = bpm_resident.SLICE_BYTES[direction] if kind == "fused_resident" else SLICE_BYTES[kind, direction]
            model = own + screen
            gbs = model * elements / (ms * 1e-3) / 1e9
            entry[direction] = {"ms": ms, "ps_per_element_slice": ms * 1e9 / elements, "model_bytes": model,
                                "model_gbs": gbs, "pct_copy": 100 * gbs / copy,
                                # the line passes' bytes over this time: the copy floor of the fused_fft design
                                "pct_copy_at_line_pass_bytes": 100 * (SLICE_BYTES["fused_fft", direction] + screen)
                                * elements / (ms * 1e-3) / 1e9 / copy}
        row["variants"][name] = entry
        print(f"  {n}^3 {name}: forward {fwd:.2f} ms ({entry['forward']['pct_copy']:.0f}% of copy at "
              f"{entry['forward']['model_bytes']:.0f} B/el), gradient {grad:.2f} ms "
              f"({entry['gradient']['pct_copy']:.0f}%); at the line passes' bytes "
              f"{entry['forward']['pct_copy_at_line_pass_bytes']:.0f}% and "
              f"{entry['gradient']['pct_copy_at_line_pass_bytes']:.0f}%", flush=True)
        if name.startswith("fused_fft_ept") or name.startswith("fused_fft["):  # each pass alone, queued behind a copy (no launch gap, a cold L2)
            b, scale, fused = chunk, np.float32(1.0 / (n * n)), dev.fused
            w, s = dev.w[:b], dev.s[:b]
            fused.run_forward(slice(0, b), True)
            tq, tr = dev._tables(slice(0, b), 0)
            launches = {
                "row_forward": lambda: fused.row("forward", b * n // fused.row.lines, w, dev.screens[0], scale,
                                                np.uint64(0)),
                "row_forward_keep": lambda: fused.row("forward", b * n // fused.row.lines, w, dev.screens[0], scale,
                                                     dev.stored[0, :b]),
                "column_forward": lambda: fused.column("forward", b * n // fused.column.lines, w, s, tq, tr),
                "column_reverse": lambda: fused.column("reverse", b * n // fused.column.lines, w, s, tq, tr, scale,
                                                      np.int32(0)),
                "row_reverse": lambda: fused.reverse_row("reverse", n * -(-b // fused.reverse_row.lines), w,
                                                        dev.screens[0], dev.stored[0, :b], np.int32(b), dev.kd,
                                                        dev.grad[0]),
            }
            passes = {}
            for pname, launch in launches.items():
                ms = time_queued(be, launch).median_ms
                gbs = PASS_BYTES[pname] * b * n * n / (ms * 1e-3) / 1e9
                passes[pname] = {"ms": ms, "gbs": gbs, "pct_copy": 100 * gbs / copy}
            entry["passes"] = passes
            entry["kernels"] = {"column": fused.column.name, "row": fused.row.name,
                                "reverse_row": fused.reverse_row.name}
            print("    passes: " + ", ".join(f"{k} {v['ms'] * 1e3:.1f} us {v['gbs']:.0f} GB/s" for k, v in passes.items())
                  + f" (kernels {entry['kernels']})", flush=True)
            w = s = tq = tr = launches = fused = None
        out = None
        dev = None  # release its buffers before the next one is built
        cp.get_default_memory_pool().free_all_blocks()
    ref_out, ref_grad, ref_loss = outputs["cufft"]
    for name, (o, gr, loss) in outputs.items():
        if name == "cufft":
            continue
        entry = row["variants"][name]
        entry["forward_rel_to_cufft"] = _rel(o - 1, ref_out - 1)
        entry["gradient_rel_to_cufft"] = _rel(gr, ref_grad)
        entry["loss_rel_to_cufft"] = abs(loss - ref_loss) / ref_loss
        entry["forward_speedup"] = row["variants"]["cufft"]["forward_ms"] / entry["forward_ms"]
        entry["gradient_speedup"] = row["variants"]["cufft"]["gradient_ms"] / entry["gradient_ms"]
        print(f"  {name}: x{entry['forward_speedup']:.2f} forward, x{entry['gradient_speedup']:.2f} gradient; "
              f"against cufft: field {entry['forward_rel_to_cufft']:.1e}, gradient {entry['gradient_rel_to_cufft']:.1e}",
              flush=True)
    cp.get_default_memory_pool().free_all_blocks()
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="256,128")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--column-ept", default="16,8", help="the fused column passes' elements per thread to try")
    parser.add_argument("--chunks", default="", help="smaller chunks of illuminations to add, e.g. 16,8")
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, help="candidate kernels ('' for none)")
    parser.add_argument("--resident", default="2,1", help="fused_resident CTAs per SM to add ('' for none)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    be = resolve("cuda")
    copy = copy_floor(be)["gbs"]
    print(f"{be.device_facts().name}; copy {copy:.0f} GB/s", flush=True)
    rows = []
    for n in (int(v) for v in args.sizes.split(",")):
        epts = [int(e) for e in args.column_ept.split(",") if not (n == 128 and int(e) == 16)]
        chunks = [int(c) for c in args.chunks.split(",") if c]
        candidates = [c for c in args.candidates.split(",") if c]
        resident = [int(c) for c in args.resident.split(",") if c]
        rows.append(probe(be, n, copy, args.repeats, epts, chunks, candidates, resident))
    result = {"device": be.device_facts().as_dict(), "copy_gbs": copy, "rows": rows}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bpm_fused_probe.json").write_text(json.dumps(result, indent=1))
        print(f"written {out / 'bpm_fused_probe.json'}")


if __name__ == "__main__":
    main()
