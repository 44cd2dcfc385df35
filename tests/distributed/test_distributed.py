"""qora.distributed on a local Dask cluster of two worker processes: each pattern gives the
single-process result (bitwise where the arithmetic is the same, else to float rounding), a
killed worker loses no item, a bad input fails alone, outputs are complete or absent."""

import os
import signal
import time

import numpy as np
import pytest

from qora.distributed import SeriesStore, ShardedSession, connect, reconstruct_many, reconstruct_series
from qora.phase import objects, reconstruct
from qora.phase import read_result, write_pattern

RECIPE = "HIO**40 ER**20"


@pytest.fixture(scope="module")
def client():
    with connect(workers=2) as c:
        yield c


def _kill_a_busy_worker(client) -> int:
    """SIGKILL the process of a worker that is running a task (its nanny starts another)."""
    for _ in range(200):
        busy = [w for w, tasks in client.processing().items() if tasks]
        if busy:
            pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.02)
    raise AssertionError("no worker was busy")


def _patterns(tmp_path):
    paths = []
    for i, name in enumerate(("triangle", "prism", "cut_prism")):
        _, intensity = objects.simulate(name, 32, photons=1e7, seed=i)
        paths.append(tmp_path / f"{name}.cxi")
        write_pattern(paths[-1], intensity)
    bad = tmp_path / "broken.cxi"
    bad.write_bytes(b"not an HDF5 file")
    return paths, bad


def test_many_patterns_equal_single_runs_and_a_bad_file_fails_alone(client, tmp_path):
    from qora.io.patterns import load_pattern

    paths, bad = _patterns(tmp_path)
    report = reconstruct_many(paths + [bad], client=client, starts=2, recipe=RECIPE, backend="cpu",
                              out_dir=tmp_path / "out")
    assert set(report.done) == {p.stem for p in paths}
    assert list(report.failed) == ["broken"] and "broken.cxi" in report.failed["broken"]
    assert not (tmp_path / "out" / "broken.cxi").exists()
    for p in paths:
        intensity, mask = load_pattern(p)
        ref = reconstruct(intensity, mask=mask, starts=2, recipe=RECIPE, backend="cpu", batch=1)
        got = report.done[p.stem]
        np.testing.assert_array_equal(got.object, ref.object)
        np.testing.assert_array_equal(got.final_errors, ref.final_errors)
        assert read_result(tmp_path / "out" / f"{p.stem}.cxi").best == ref.best


def test_starts_split_over_workers_equal_one_run_of_all_starts(client):
    _, intensity = objects.simulate("triangle", 32, photons=1e6, seed=3)
    report = reconstruct_many(intensity, client=client, starts=6, starts_per_task=2, recipe=RECIPE, backend="cpu",
                              keep_all=True)
    got = report.done["pattern0000"]
    ref = reconstruct(intensity, starts=6, recipe=RECIPE, backend="cpu", batch=1, keep_all=True)
    assert got.starts == 6 and got.best == ref.best
    np.testing.assert_array_equal(got.objects, ref.objects)
    np.testing.assert_array_equal(got.errors, ref.errors)
    np.testing.assert_array_equal(got.object, ref.object)


def test_a_killed_worker_loses_no_pattern(client):
    _, intensity = objects.simulate("prism", 48, photons=1e7, seed=5)
    killed = []

    def progress(stage, done, total, metrics):
        if done == 1 and not killed:
            killed.append(_kill_a_busy_worker(client))

    report = reconstruct_many(intensity, client=client, starts=8, starts_per_task=1, recipe="HIO**150 ER**50",
                              backend="cpu", progress=progress)
    assert killed and not report.failed
    ref = reconstruct(intensity, starts=8, recipe="HIO**150 ER**50", backend="cpu", batch=1)
    np.testing.assert_array_equal(report.done["pattern0000"].final_errors, ref.final_errors)
    client.wait_for_workers(2, timeout=60)


@pytest.fixture(scope="module")
def holo_case():
    from qora.holo import fields as F
    from qora.holo import phantoms as P
    from qora.holo import Pipeline, ReconstructionOptions
    from qora.holo import reference as R

    g = R.geometry(32)
    hp = g.pixel / 2
    big = 2 * g.n
    carrier = R.carrier(big, hp)
    stacks = [P.holograms(np.exp(P.born_ratio([P.Sphere(radius=r, index=1.35)], g, n=big, pixel=hp)), g, carrier,
                          hologram_pixel=hp) for r in (0.8, 1.0, 1.2, 1.4)]
    bg = P.holograms(np.ones((g.count, big, big)), g, carrier, hologram_pixel=hp)
    sideband = F.find_sideband(bg[0], hp)
    options = dict(sideband=sideband, hologram_pixel=hp, backend="cpu", options=ReconstructionOptions(iterations=10))
    pipe = Pipeline(g, hologram_n=big, **options)
    pipe.set_background(bg)
    return g, np.stack(stacks), bg, options, [pipe.process(s).index for s in stacks]


def test_series_volumes_equal_the_pipeline_and_a_run_resumes(client, holo_case, tmp_path):
    g, stacks, bg, options, refs = holo_case
    store = tmp_path / "series.zarr"

    def stop_after_two(stage, done, total, metrics):
        return done < 2  # an interrupted run: cancelled after two volumes

    first = reconstruct_series(stacks, bg, g, store=store, client=client, progress=stop_after_two, **options)
    assert first.cancelled and 2 <= len(first.done) < 4
    series = SeriesStore(store)
    # a crash mid-write leaves its volume under .partial, never in the series
    (store / ".partial" / "t000003-deadbeef").mkdir(parents=True, exist_ok=True)
    assert set(series.index()) >= set(first.done)  # a cancelled task that was running may land too
    second = reconstruct_series(stacks, bg, g, store=store, client=client, **options)
    assert set(second.skipped) >= set(first.done) and not set(second.skipped) & set(second.done)
    assert set(second.skipped) | set(second.done) == {0, 1, 2, 3}, second.summary()
    assert sorted(series.index()) == [0, 1, 2, 3]
    for t in range(4):
        np.testing.assert_array_equal(series.volume(t), refs[t])
    assert series.attrs["qora_kind"] == "holo_series" and series.attrs["n"] == g.n
    with pytest.raises(ValueError, match="another geometry or options"):
        reconstruct_series(stacks, bg, g, store=store, client=client,
                           **{**options, "options": options["options"].replace(iterations=11)})


def test_a_bad_stack_fails_alone(client, holo_case, tmp_path):
    g, stacks, bg, options, refs = holo_case
    np.save(tmp_path / "good.npy", stacks[1])
    (tmp_path / "bad.npy").write_bytes(b"garbage")
    report = reconstruct_series([stacks[0], str(tmp_path / "good.npy"), str(tmp_path / "bad.npy")], bg, g,
                                store=tmp_path / "s.zarr", client=client, **options)
    assert sorted(report.done) == [0, 1] and list(report.failed) == [2]
    assert sorted(SeriesStore(tmp_path / "s.zarr").index()) == [0, 1]
    np.testing.assert_array_equal(SeriesStore(tmp_path / "s.zarr").volume(1), refs[1])


@pytest.fixture(scope="module")
def ssb_file(tmp_path_factory):
    from qora.ssb import Aberrations, amorphous_slices, simulate, write_dataset

    sim = simulate(amorphous_slices((96, 96), 0.2, seed=4), pixel=0.2, stride=2, window=48, kv=300.0,
                   alpha_mrad=20.0, aberrations=Aberrations(C10=120.0, C12=(15.0, 0.4)))
    path = tmp_path_factory.mktemp("ssb") / "scan.h5"
    write_dataset(path, sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
    return path, sim


@pytest.mark.slow
def test_sharded_fit_equals_the_single_session_fit(client, ssb_file):
    from qora.ssb import Band, Session, fit_session, read_dataset

    path, sim = ssb_file
    sharded = ShardedSession(str(path), client=client, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step,
                             backend="cpu")
    assert len(sharded.shards) == 2 and sharded.pixels[0].stop == sharded.pixels[1].start
    data = read_dataset(path)[0]  # what the workers read
    single = Session(data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, detector=sharded.detector,
                     level=sharded.level)
    assert single.level == pytest.approx(Session(data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step).level,
                                         rel=1e-12)
    names = ("C10", "C12a", "C12b", "thickness", "tilt_y")
    values = {"C10": 100.0, "C12a": 5.0, "C12b": -3.0, "thickness": 50.0, "tilt_y": 0.003}
    a, b = Band(single, names), sharded.make_band(names)
    va, ga, ha = a.evaluate(values)
    vb, gb, hb = b.evaluate(values)
    assert vb == pytest.approx(va, rel=1e-12)
    np.testing.assert_allclose(gb, ga, rtol=1e-10, atol=1e-12 * np.abs(ga).max())
    np.testing.assert_allclose(hb, ha, rtol=1e-10, atol=1e-12 * np.abs(ha).max())
    assert b.shape == a.shape and b.total == pytest.approx(a.total, rel=1e-12)
    # the sharded session is not searched for its orientation (its G is split): the same for the single
    fa = fit_session(single, rotation=0.0, orientation="identity", tilt=True, trials=32)
    fb = fit_session(sharded, rotation=0.0, tilt=True, trials=32)
    for branch in ("standard", "thick"):
        assert fb[branch]["agreement"] == pytest.approx(fa[branch]["agreement"], rel=1e-10)
        for name, value in fa[branch]["parameters"].items():
            assert fb[branch]["parameters"][name] == pytest.approx(value, rel=1e-7, abs=1e-9)
    sharded.close()


def test_a_killed_worker_costs_the_sharded_band_nothing(client, ssb_file):
    path, sim = ssb_file
    sharded = ShardedSession(str(path), client=client, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step,
                             backend="cpu")
    band = sharded.make_band(("C10", "C12a"))
    before = band.evaluate_batch([{"C10": c} for c in (50.0, 100.0, 150.0)])
    victim = next(iter(client.who_has([sharded.shards[0]])[sharded.shards[0].key]))
    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    after = band.evaluate_batch([{"C10": c} for c in (50.0, 100.0, 150.0)])  # the shard is made again
    np.testing.assert_allclose(after, before, rtol=1e-12)
    client.wait_for_workers(2, timeout=60)
    sharded.close()


def test_cli_scale_out_options(client, tmp_path, ssb_file, holo_case):
    import json

    from click.testing import CliRunner

    from qora.cli import cli

    runner = CliRunner()
    paths, bad = _patterns(tmp_path)
    address = client.scheduler.address
    out = runner.invoke(cli, ["phase", "run", *map(str, paths[:2]), str(bad), "--recipe", RECIPE, "--starts", "2",
                              "--backend", "cpu", "--scheduler", address, "--out", str(tmp_path / "many"), "--quiet"])
    assert out.exit_code == 1, out.output
    assert "FAILED broken" in out.output and "2 done, 1 failed" in out.output
    assert sorted(p.name for p in (tmp_path / "many").iterdir()) == ["prism.cxi", "triangle.cxi"]
    out = runner.invoke(cli, ["phase", "run", str(paths[0]), "--workers", "1", "--scheduler", address, "--out",
                              str(tmp_path / "x.cxi")])
    assert out.exit_code == 2 and "not --scheduler and --workers" in out.output
    path, _ = ssb_file
    out = runner.invoke(cli, ["ssb", "fit", str(path), "--rotation", "0", "--no-tilt", "--trials", "16", "--backend",
                              "cpu", "--scheduler", address, "--out", str(tmp_path / "fit.json"), "--quiet"])
    assert out.exit_code == 0, out.output
    assert abs(json.loads((tmp_path / "fit.json").read_text())["standard"]["parameters"]["C10"] - 120.0) < 3.0
    g, stacks, bg, options, refs = holo_case
    np.save(tmp_path / "series.npy", stacks[:2])
    np.save(tmp_path / "bg.npy", bg)
    opts = ["--wavelength", str(g.wavelength), "--pixel", str(g.pixel), "--medium-index", str(g.medium_index),
            "--na", str(g.na_detection), "--iterations", "10", "--backend", "cpu", "--quiet"]
    out = runner.invoke(cli, ["holo", "reconstruct", str(tmp_path / "series.npy"), str(tmp_path / "bg.npy"), *opts,
                              "--scheduler", address, "--out", str(tmp_path / "series.zarr")])
    assert out.exit_code == 0, out.output
    assert "2 of 2 time points" in out.output
    assert SeriesStore(tmp_path / "series.zarr").volume(1).shape == (g.n,) * 3


def test_a_missing_dask_is_named_as_the_extra(monkeypatch):
    import sys

    from qora.distributed.cluster import dask_distributed
    from qora.io.errors import MissingExtra

    monkeypatch.setitem(sys.modules, "distributed", None)  # what an environment without Dask gives
    with pytest.raises(MissingExtra, match=r"pip install 'qora\[dask\]'"):
        dask_distributed()


def test_two_local_clusters_get_dashboards_on_free_ports():
    # Dask's default dashboard port is 8787: two runs on one machine would collide on it
    from qora.distributed.cluster import connect

    with connect(workers=1) as a, connect(workers=1) as b:
        ports = [c.scheduler_info()["services"].get("dashboard") for c in (a, b)]
    assert all(ports) and ports[0] != ports[1] and 8787 not in ports


@pytest.mark.parametrize("kwargs, pattern", [
    ({"kv": float("nan")}, r"kv .* must be finite"), ({"alpha_mrad": 0.0}, r"alpha_mrad .* must be positive"),
    ({"scan_step": -0.4}, r"scan_step must be positive"), ({"rotation": float("inf")}, r"rotation must be finite"),
    ({"shards": 0}, r"shards must be at least 1"), ({"chunk": 0}, r"chunk must be at least 1"),
])
def test_sharded_session_refuses_bad_settings_before_asking_the_cluster(kwargs, pattern):
    """ssb: a bad setting is an InputError naming it, before the client is used (None here)."""
    from qora.io.errors import InputError

    options = {"kv": 300.0, "alpha_mrad": 20.0, "scan_step": 0.4, **kwargs}
    with pytest.raises(InputError, match=pattern):
        ShardedSession("absent.h5", client=None, **options)


def test_a_real_objects_pattern_runs_the_real_object_search_split_over_workers(client):
    """The default's choice holds on the workers too (issue 37): a centrosymmetric pattern runs real-envelope, its
    starts split over workers keep their numbers, and the merged result ranks them by the search's own rule."""
    from qora.phase import analysis, envelope
    from qora.phase.detector import Detector, lithograph, record

    counts, mask = record(lithograph(128), Detector(photons=1e8, beamstop=0, gap=0))  # nothing masked
    report = reconstruct_many(counts, client=client, starts=2, starts_per_task=1, backend="cpu", keep_all=True)
    got = report.done["pattern0000"]
    assert got.recipe == "real-envelope" and got.choice.startswith("the pattern is centrosymmetric")
    assert got.starts == 2 and got.timings["parts"] == 2
    assert got.best == analysis.compact_best(got.timings["rfactor"], got.timings["support_px"])
    second = envelope.reconstruct(counts, mask=mask, starts=1, seed=1, backend="cpu", keep_all=True)
    iou = analysis.support_iou(got.supports[1], second.supports[0])
    assert iou > 0.95, iou  # start 1 is PCG64(seed + 1) on the worker as here


def test_a_series_fits_the_rotation_axis_once_before_its_stacks(client, tmp_path):
    """``fit_axis``: the axis fitted to the first stack in this process (as ``qora.holo.fitted_axis``), every
    volume made with it (as one Pipeline of that geometry), and the fit reported."""
    from click.testing import CliRunner

    from qora import holo as H
    from qora.cli import cli

    path = tmp_path / "rot.h5"
    out = CliRunner().invoke(cli, ["holo", "simulate", "--size", "32", "--angles", "24", "--geometry", "rotation",
                                   "--spheres", "0.8,0.5,-1,1,1.36;-0.7,-0.6,0.9,0.8,1.35", "--out", str(path)])
    assert out.exit_code == 0, out.output
    stack, bgs, g, hp, _ = H.read_holograms(path)
    options = dict(sideband=H.find_sideband(bgs[0], hp), hologram_pixel=hp, backend="cpu",
                   options=H.ReconstructionOptions(method="plain"))
    fitted, text = H.fitted_axis(H.ratio_from_holograms(stack, bgs, g, hp), g, options["options"])
    report = reconstruct_series(np.stack([stack, stack]), bgs, g, store=tmp_path / "s.zarr", client=client,
                                fit_axis=True, **options)
    assert report.info["axis_fit"] == text and sorted(report.done) == [0, 1]
    assert np.array_equal(report.info["geometry"].axis, fitted.axis)
    pipe = H.Pipeline(fitted, hologram_n=bgs.shape[-1], **options)
    pipe.set_background(bgs)
    np.testing.assert_array_equal(SeriesStore(tmp_path / "s.zarr").volume(1), pipe.process(stack).index)
    # another axis on the same workers: their Pipeline is made again for it (the pose is in the plans' token)
    from dataclasses import replace as _replace

    tilted = _replace(fitted, axis=H.rotation_axis(0.15))
    other = reconstruct_series(np.stack([stack]), bgs, tilted, store=tmp_path / "t.zarr", client=client, **options)
    assert sorted(other.done) == [0]
    pipe_tilted = H.Pipeline(tilted, hologram_n=bgs.shape[-1], **options)
    pipe_tilted.set_background(bgs)
    np.testing.assert_array_equal(SeriesStore(tmp_path / "t.zarr").volume(0), pipe_tilted.process(stack).index)
    # the command: the same call, the fit printed
    H.write_holograms(tmp_path / "series.h5", np.stack([stack, stack]), bgs, g, hologram_pixel=hp)
    out = CliRunner().invoke(cli, ["holo", "reconstruct", str(tmp_path / "series.h5"), "--fit-axis", "--method", "plain",
                                   "--backend", "cpu", "--quiet", "--scheduler", client.scheduler.address, "--out",
                                   str(tmp_path / "cli.zarr")])
    assert out.exit_code == 0, out.output
    assert text in out.output and "2 of 2 time points" in out.output
    np.testing.assert_array_equal(SeriesStore(tmp_path / "cli.zarr").volume(0), pipe.process(stack).index)
