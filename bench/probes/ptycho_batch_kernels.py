"""Where a batch's step of the multislice solver spends the device's time (issue 45): the issue's sizes (128^2
pixels, 10 slices, 4 modes, batches of 16 unless given), one warm pass, then ``STEPS`` steps run as they are
between cudaProfilerStart and Stop, so that ``ncu --profile-from-start off --metrics gpu__time_duration.sum
--print-summary per-kernel`` lists each kernel's time; without ncu, the steps' median time by CUDA events.

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --print-summary per-kernel \
        python3 bench/probes/ptycho_batch_kernels.py [BATCH] [STEPS]
"""

import sys

import numpy as np


def main() -> None:
    import cupy as cp

    from qora.ssb.ptycho import Grid, Problem, PtychoOptions, PtychoState, iterate
    from qora.ssb.ptycho.model import propagator
    from qora.ssb.ptycho.solver import _step

    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    n, slices, modes, side = 128, 10, 4, 32
    rng = np.random.default_rng(0)
    grid = Grid(window=n, pixel=0.1, wavelength=0.0197, slice_spacing=10.0, band=0.5 / 0.1)
    corners = np.stack(np.meshgrid(np.arange(side) * 2.0, np.arange(side) * 2.0, indexing="ij"), -1).reshape(-1, 2) + 2
    shape = (int(corners[:, 0].max()) + n + 4, int(corners[:, 1].max()) + n + 4)
    problem = Problem(amplitudes=cp.asarray(rng.random((len(corners), n, n), np.float32)),
                      positions=cp.asarray(corners), object_shape=shape, grid=grid)
    state = PtychoState(objects=cp.asarray(np.exp(0.1j * rng.standard_normal((slices,) + shape)).astype(np.complex64)),
                        probe=cp.asarray((rng.standard_normal((modes, n, n)) + 0j).astype(np.complex64)),
                        positions=cp.asarray(corners, np.float32))
    options = PtychoOptions(iterations=1, probe_from=0, positions_from=0, batch=batch)
    iterate(problem, state, options, free_bytes=8 << 30)  # plans, kernels, the Adam moments
    prop = propagator(grid, cp, state.probe.dtype)
    index = cp.arange(batch)
    flags = {"probe": True, "positions": True, "scale": False}
    _step(problem, state, options, index, prop, **flags)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    for _ in range(steps):
        _step(problem, state, options, index, prop, **flags)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    times = []
    for _ in range(20):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        _step(problem, state, options, index, prop, **flags)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    print(f"batch {batch}: one step {np.median(times):.3f} ms (median of 20, as it is: launches included); "
          f"a pass of 16,384 positions {np.median(times) * 16384 / batch / 1e3:.2f} s at that rate")


if __name__ == "__main__":
    main()
