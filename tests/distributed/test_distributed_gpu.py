"""qora.distributed with one Dask worker per GPU: each pattern against the single-process run on
the same device kind (cuFFT plans are the same on the same GPU model, so the phase results are
bitwise equal; the holo volumes and the ssb fits to float rounding)."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def client(gpu_module):
    from qora.distributed import connect, gpu_count

    with connect(gpus="all") as c:
        assert len(c.scheduler_info(n_workers=-1)["workers"]) == gpu_count()
        yield c


def test_workers_each_see_one_gpu(client):
    def visible():
        import os

        from qora.backend import resolve

        be = resolve("cuda")
        return os.environ["CUDA_VISIBLE_DEVICES"], be.xp.cuda.runtime.getDeviceCount()

    seen = client.run(visible)
    assert all(count == 1 for _, count in seen.values())
    assert len({device for device, _ in seen.values()}) == len(seen)


def test_many_patterns_on_gpu_workers_equal_single_runs(client):
    from qora.distributed import reconstruct_many
    from qora.phase import objects, reconstruct

    patterns = {name: objects.simulate(name, 128, photons=1e8, seed=i)[1]
                for i, name in enumerate(("triangle", "prism", "cut_prism"))}
    report = reconstruct_many(patterns, client=client, starts=4, starts_per_task=2, recipe="HIO**200 ER**50",
                              backend="cuda", variant="graph")
    assert not report.failed and set(report.done) == set(patterns)
    for name, intensity in patterns.items():
        ref = reconstruct(intensity, starts=4, recipe="HIO**200 ER**50", backend="cuda", variant="graph", batch=1)
        np.testing.assert_array_equal(report.done[name].final_errors, ref.final_errors)
        np.testing.assert_array_equal(report.done[name].object, ref.object)


def test_series_on_gpu_workers_equal_the_gpu_pipeline(client, tmp_path):
    from qora.distributed import SeriesStore, reconstruct_series
    from qora.holo import fields as F
    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo import Pipeline, ReconstructionOptions

    g = R.geometry(64)
    hp = g.pixel / 2
    big = 2 * g.n
    carrier = R.carrier(big, hp)
    stacks = np.stack([P.holograms(np.exp(P.born_ratio([P.Sphere(radius=r, index=1.36)], g, n=big, pixel=hp)), g,
                                   carrier, hologram_pixel=hp) for r in (1.0, 1.5, 2.0)])
    bg = P.holograms(np.ones((g.count, big, big)), g, carrier, hologram_pixel=hp)
    options = dict(sideband=F.find_sideband(bg[0], hp), hologram_pixel=hp, backend="cuda",
                   options=ReconstructionOptions(iterations=30))
    report = reconstruct_series(stacks, bg, g, store=tmp_path / "s.zarr", client=client, **options)
    assert not report.failed and all(info["backend"] == "cuda" for info in report.done.values())
    pipe = Pipeline(g, hologram_n=big, **options)
    pipe.set_background(bg)
    store = SeriesStore(tmp_path / "s.zarr")
    for t, stack in enumerate(stacks):
        np.testing.assert_allclose(store.volume(t), pipe.process(stack).index, rtol=0, atol=1e-6)


def test_sharded_fit_on_gpu_workers_matches_the_cpu(client, tmp_path):
    from qora.distributed import ShardedSession
    from qora.ssb import Aberrations, Session, amorphous_slices, fit_session, read_dataset, simulate, write_dataset

    sim = simulate(amorphous_slices((96, 96), 0.2, seed=4), pixel=0.2, stride=2, window=48, kv=300.0,
                   alpha_mrad=20.0, aberrations=Aberrations(C10=120.0, C12=(15.0, 0.4)))
    path = tmp_path / "scan.h5"
    write_dataset(path, sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
    sharded = ShardedSession(str(path), client=client, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step,
                             backend="cuda", shards=2)
    single = Session(read_dataset(path)[0], kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step,
                     detector=sharded.detector, level=sharded.level, backend="cpu")
    a = fit_session(single, rotation=0.0, tilt=True, trials=32)
    b = fit_session(sharded, rotation=0.0, tilt=True, trials=32)
    for branch in ("standard", "thick"):  # the GPU parity bounds (part 2)
        assert b[branch]["agreement"] == pytest.approx(a[branch]["agreement"], rel=1e-5)
        for name in ("C10", "C12a", "C12b"):
            assert abs(b[branch]["parameters"][name] - a[branch]["parameters"][name]) < 0.1
    for name in ("tilt_y", "tilt_x"):
        assert abs(b["thick"]["parameters"][name] - a["thick"]["parameters"][name]) < 5e-5
    sharded.close()
