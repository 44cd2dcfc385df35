import json

import numpy as np
import pytest

from qora.bench import common
from qora.bench.common import BenchResult, Timing, git_state, newest_result, time_device, time_peer


def test_time_peer_takes_the_difference_of_n_and_2n(monkeypatch):
    clock = {"t": 0.0}
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock["t"])

    def run(k):  # 3 ms per iteration plus 50 ms of fixed cost (compilation, transfer)
        clock["t"] += (3.0 * k + 50.0) * 1e-3

    assert time_peer(run, 10) == pytest.approx(3.0)


def test_timing_summary():
    t = Timing([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median_ms == 3.0 and t.min_ms == 1.0
    assert t.as_dict()["repeats"] == 5


def test_time_device_runs_setup_outside_and_counts_calls(be):
    calls = {"fn": 0, "setup": 0}

    def fn():
        calls["fn"] += 1

    def setup():
        calls["setup"] += 1

    t = time_device(be, fn, warmup=2, repeats=5, setup=setup)
    assert calls == {"fn": 7, "setup": 7}
    assert len(t.samples_ms) == 5


def test_result_json_round_trip_and_newest(tmp_path, monkeypatch):
    monkeypatch.setenv("QORA_COMMIT", "abc123")
    monkeypatch.setenv("QORA_TREE_CLEAN", "1")
    r = BenchResult("floors", "cpu", {"name": "Test CPU"})
    r.add("copy", ms=None, gbs=10.0)
    p1 = r.write(tmp_path)
    data = json.loads(p1.read_text())
    assert data["commit"] == "abc123" and data["clean"] is True
    assert data["device"]["name"] == "Test CPU" and data["cases"]["copy"]["gbs"] == 10.0
    assert {"python", "numpy", "scipy", "qora"} <= set(data["versions"])
    older = dict(data, date="2000-01-01T00:00:00+00:00", cases={})
    assert p1.parent == tmp_path / "floors"  # one folder per benchmark
    (tmp_path / "floors" / "old.json").write_text(json.dumps(older))
    path, newest = newest_result("floors", tmp_path)
    assert path == p1 and newest["cases"]
    assert newest_result("phase", tmp_path) is None
    assert not list(tmp_path.rglob("*.tmp"))
    assert "copy" in r.table()


def test_git_state_reads_the_repository(monkeypatch):
    monkeypatch.delenv("QORA_COMMIT", raising=False)
    monkeypatch.delenv("QORA_TREE_CLEAN", raising=False)
    state = git_state()
    assert isinstance(state["commit"], str) and state["commit"]


def test_pairs_per_replay_stay_in_range():
    for n in [2**16, 2**20, 2**22, 2**24, 2**27]:
        # an unscaled pair multiplies by n; the forward half by about sqrt(n)
        pairs, mag = common._pairs_per_replay(n, "fp32")
        top = np.log2(mag) + pairs * np.log2(n)
        assert pairs >= 1 and np.log2(mag) > -126 and top < 127
        pairs, mag = common._pairs_per_replay(n, "fp16")
        assert pairs == 1 and np.log2(mag) + np.log2(n) < 15.9 and np.log2(mag) >= -24


def test_floors_on_the_cpu(tmp_path, monkeypatch):
    from qora.bench import floors

    monkeypatch.setenv("QORA_RESULTS_DIR", str(tmp_path))
    lines = []
    result = floors.run(backend="cpu", shapes=((64, 64), (16, 16, 16)), repeats=5, echo=lines.append)
    assert {"copy", "fft_pair/64x64/fp32", "fft_pair/16x16x16/fp32"} == set(result.cases)
    assert result.cases["copy"]["gbs"] > 0
    assert all(c["ms"] > 0 for k, c in result.cases.items() if k != "copy")
    assert len(list((tmp_path / "floors").glob("floors-*.json"))) == 1


def test_ssb_bench_times_every_step_on_a_small_scan():
    from qora.bench import ssb

    r = ssb.run(scan=16, window=32, write=False, repeats=1, echo=lambda *_: None, peers=False)
    steps = {k.split("/")[-1] for k in r.cases if k.startswith("step/16x16x32x32/")}
    assert steps == set(ssb.SSB_STEPS)
    assert all(r.cases[f"step/16x16x32x32/{s}"]["ms"] > 0 for s in steps)
    assert r.cases["memory/16x16x32x32/prepare"]["g_bytes"] > 0


def test_ssb_methods_bench_scores_every_method_at_every_dose():
    """`qora bench ssb-methods` on the abTEM fixture, one draw per dose: every (dose, method) row, WDD ahead of SSB
    at every dose and OBF ahead of SSB at 1e3 e/A^2 (what docs/ssb-methods.md's table says)."""
    from pathlib import Path

    from qora.bench import ssb_methods

    fixture = Path(__file__).parent / "ssb" / "fixtures" / "abtem_srtio3_wdd.npz"
    r = ssb_methods.run(data=fixture, seeds=1, write=False, echo=lambda *_: None, peers=False)
    assert set(r.cases) == {f"{d}/{m}" for d in ("1000", "10000", "100000", "1e+06", "noise-free")
                            for m in ssb_methods.METHODS}
    for dose in ("1000", "10000", "100000", "1e+06", "noise-free"):
        assert r.cases[f"{dose}/wdd"]["r"] > r.cases[f"{dose}/ssb"]["r"]
    assert r.cases["1000/obf"]["r"] > r.cases["1000/ssb"]["r"] + 0.2
    assert r.cases["noise-free/wdd"]["r"] > 0.99


def test_ssb_live_bench_measures_every_case_on_a_small_scan():
    """`qora bench ssb-live` at a tiny size: every case present with a positive rate or time (the
    simulator runs in a process of its own; the DECTRIS cases take the same path)."""
    from qora.bench import ssb_live

    lines = []
    r = ssb_live.run(backend="cpu", scan=8, detector=32, pool=8, protocols=("merlin",), methods=("obf",),
                     refresh_s=1e-9, write=False, echo=lines.append)
    # the stream again with OBF's image of the rows so far made during the scan (--method obf)
    obf = r.cases["to_G/merlin/8x32/obf"]
    assert obf["method"] == "obf" and obf["refreshes"] >= 1 and obf["frames_per_s"] > 0
    assert r.cases["to_G/merlin/8x32"]["refreshes"] == 0
    # the final fit's C10 is printed with what the fit says of it (the 16-row film cannot tell it) and the truth's plane
    final = [line for line in lines if line.startswith("final image + cold fit")]
    assert final and "not determined" in final[0] and "the same plane" in final[0]
    assert r.cases["final/16x32"]["C10_determined"] is False
    assert {"floor/host_copy", "receive/merlin/32", "to_G/merlin/8x32", "memory_to_G/8x32",
            "final/16x32", "final/16x32/auto", "stage/dectris/device_decode_host_part",
            "stage/dectris/zmq_receive_v2", "stage/dectris/v1_pattern_parse", "parity/16x32"} <= set(r.cases)
    # "auto" on a 16-row film: no partial fit can see WARM_MIN_ROWS rows, so the end is the cold search
    assert r.cases["final/16x32/auto"]["warm_start"] is False
    parity = r.cases["parity/16x32"]  # the live end against the offline session of the same frames
    assert parity["G_rel"] < 1e-6 and parity["image_rel"] < 1e-6 and parity["agreement_rel"] < 1e-5
    assert max(parity["C10_A"], parity["C12a_A"], parity["C12b_A"]) < 0.1
    wire = r.cases["parity_wire/merlin/16x32"]  # the same film served over the Merlin protocol
    assert wire["G_rel"] < 1e-6 and wire["image_rel"] < 1e-6 and wire["agreement_rel"] < 1e-5
    assert max(wire["C10_A"], wire["C12a_A"], wire["C12b_A"]) < 0.1 and wire["dropped"] == 0
    for name, case in r.cases.items():
        value = case.get("frames_per_s") or case.get("s")
        assert value is not None and value > 0, (name, case)


def test_the_cli_offers_the_engines_image_methods():
    """The CLI's choices for ssb image, ssb live and bench ssb-live --method are the engine's preview methods, written
    out so that the CLI starts without importing the engine."""
    from qora.cli.options import SSB_IMAGE_CHOICES
    from qora.ssb import PREVIEW_METHODS

    assert sorted(SSB_IMAGE_CHOICES) == sorted(PREVIEW_METHODS)


def test_ssb_live_parity_bounds_fail_the_run():
    """A parity case beyond the issue's bounds (or NaN) is named; the run raises after writing its result."""
    from qora.bench.ssb_live_parity import PARITY_BOUNDS, parity_breaches

    good = {"G_rel": 3e-9, "image_rel": 8e-8, "agreement_rel": 1e-9, "C10_A": 0.0, "C12a_A": 0.0, "C12b_A": 0.0,
            "dropped": 0}
    assert set(good) == set(PARITY_BOUNDS)
    assert parity_breaches({"parity/8x32": good, "parity_wire/merlin/8x32": good, "final/8x32": {"s": 9.0}}) == []
    bad = {**good, "image_rel": 2e-6, "C10_A": float("nan"), "dropped": 3}
    found = parity_breaches({"parity_wire/dectris/8x32/x4": bad})
    assert len(found) == 3 and all(f.startswith("parity_wire/dectris/8x32/x4: ") for f in found)
    assert any("image_rel" in f for f in found) and any("C10_A nan" in f for f in found)


def test_median_wall_returns_the_last_result_and_the_median_after_warmup():
    from qora.bench.common import median_wall

    calls = []

    def fn():
        calls.append(len(calls))
        return len(calls)

    out, seconds = median_wall(fn, 3, warmup=2)
    assert len(calls) == 5 and out == 5
    assert 0.0 <= seconds < 1.0


def test_time_queued_needs_the_gpu():
    from qora.backend import resolve
    from qora.bench.common import time_queued

    with pytest.raises(ValueError, match="CUDA"):
        time_queued(resolve("cpu"), lambda: None)


@pytest.mark.gpu
def test_time_queued_times_the_device_work_of_one_launch():
    from qora.backend import resolve
    from qora.bench.common import time_queued

    be = resolve("cuda")
    small, large = (be.xp.ones(n, be.xp.float32) for n in (2**22, 2**25))
    t_small = time_queued(be, lambda: small.__imul__(2), repeats=10).median_ms
    t_large = time_queued(be, lambda: large.__imul__(2), repeats=10).median_ms
    # 8x the bytes (256 MiB read + written, far past the L2) takes several times longer on the device
    assert 0 < t_small and 4 * t_small < t_large


def test_results_go_under_the_current_directory_unless_told(tmp_path, monkeypatch):
    monkeypatch.delenv("QORA_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    common.set_results_dir(None)
    assert common.results_dir() == tmp_path / "qora-bench-results"
    assert common.results_dir() != common.committed_results_dir()
    monkeypatch.setenv("QORA_RESULTS_DIR", str(tmp_path / "env"))
    assert common.results_dir() == tmp_path / "env"
    common.set_results_dir(tmp_path / "given")
    try:
        assert common.results_dir() == tmp_path / "given"
    finally:
        common.set_results_dir(None)


def test_cli_bench_out_writes_where_asked_and_nowhere_else(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from qora.bench import floors
    from qora.cli import cli

    monkeypatch.delenv("QORA_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    committed = sorted(common.committed_results_dir().rglob("*"))

    def fake_run(*, backend, repeats, write, echo):  # the CLI's wiring, not a measurement
        r = BenchResult("floors", "cpu", {"name": "Test CPU"})
        r.add("copy", ms=None, gbs=1.0)
        echo(f"result written to {r.write()}")

    monkeypatch.setattr(floors, "run", fake_run)
    out = CliRunner().invoke(cli, ["bench", "--out", str(tmp_path / "mine"), "floors"])
    assert out.exit_code == 0, out.output
    assert [p.parent for p in (tmp_path / "mine").rglob("*.json")] == [tmp_path / "mine" / "floors"]
    out = CliRunner().invoke(cli, ["bench", "floors"])  # the default: under the current directory
    assert out.exit_code == 0, out.output
    assert len(list((tmp_path / "qora-bench-results" / "floors").glob("*.json"))) == 1
    assert sorted(common.committed_results_dir().rglob("*")) == committed
    (tmp_path / "file").write_text("x")
    out = CliRunner().invoke(cli, ["bench", "--out", str(tmp_path / "file"), "floors"])
    assert out.exit_code == 2 and "is a file" in out.output and (tmp_path / "file").read_text() == "x"


def test_newest_tracked_result_ignores_untracked_files(tmp_path, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setenv("QORA_COMMIT", "abc123")
    r = BenchResult("floors", "cpu", {"name": "Test CPU"})
    r.add("copy", ms=None, gbs=10.0)
    committed = r.write(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "."], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "result"], cwd=tmp_path, check=True)
    newer = json.loads(committed.read_text())
    newer.update(date="2999-01-01T00:00:00+00:00", cases={})  # an incomplete run, never committed
    (tmp_path / "floors" / "untracked.json").write_text(json.dumps(newer))
    assert newest_result("floors", tmp_path)[0].name == "untracked.json"
    assert newest_result("floors", tmp_path, tracked=True)[0] == committed
    plain = tmp_path / "nogit"
    shutil.copytree(tmp_path / "floors", plain / "floors")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above plain/ either
    assert newest_result("floors", plain, tracked=True)[0].name == "untracked.json"  # no git: every file


def test_ssb_files_bench_times_every_step_on_a_small_scan():
    from qora.bench import ssb_files

    r = ssb_files.run(scan=16, window=32, write=False, repeats=1, echo=lambda *_: None)
    steps = {name.split("/")[-1] for name in r.cases}
    assert steps == {"read_whole", "read_lazy", "prepare_in_memory", "prepare_lazy_hdf5", "prepare_layout_xy_npy",
                     "descan_fit_plane", "descan_correct_in_memory", "prepare_descan_in_memory",
                     "prepare_descan_lazy"}
    assert all(case["ms"] > 0 for case in r.cases.values())


def test_ssb_cpu_fit_comparison_rows_on_a_small_scan(monkeypatch, tmp_path):
    """The CPU fit comparison's rows (qora's alone where py4DSTEM's environment is missing) and the
    batch pass's thread rows, on a 16 x 16 scan."""
    from qora.bench import ssb
    from qora.bench.common import BenchResult

    monkeypatch.setenv("QORA_PY4DSTEM_PYTHON", str(tmp_path / "none" / "python"))
    result = BenchResult("ssb-cpu-fit", "cpu", {"name": "test"}, columns=("ms",))
    ssb.cpu_batch_scaling(result, lambda *_: None, scan=16, sets=9, threads=[1], repeats=1)
    ssb.cpu_fit_against_py4dstem(result, lambda *_: None, scan=16, repeats=1)
    assert {"agreement_cpu/16x16/9_sets/threads_1", "agreement_cpu/16x16/rotation_grid_30x41"} <= set(result.cases)
    for case in ("film_16", "crystal_3.2A_rot7_16"):
        for who in ("qora_cold", "qora_rotation_given"):
            row = result.cases[f"fit_cpu/{case}/{who}"]
            assert row["ms"] > 0 and isinstance(row["right"], bool) and len(row["loadavg_1min"]) == 1
        assert f"fit_cpu/{case}/py4dstem" not in result.cases
    given = result.cases["fit_cpu/film_16/qora_rotation_given"]
    assert given["rotation_error_deg"] == 0.0


def test_cli_bench_holo_parts_are_checked_by_name_and_backend():
    """--parts names parts of the CUDA benchmark: an unknown name is a usage error, and on the CPU, where
    the benchmark has no parts, it is refused rather than ignored."""
    from click.testing import CliRunner

    from qora.cli import cli

    runner = CliRunner()
    out = runner.invoke(cli, ["bench", "holo", "--backend", "cpu", "--parts", "bpm,stage", "--no-write"])
    assert out.exit_code == 2 and "--parts" in out.output and "stage" in out.output and "rotation" in out.output
    out = runner.invoke(cli, ["bench", "holo", "--backend", "cpu", "--parts", "bpm", "--no-write"])
    assert out.exit_code != 0 and "--backend cuda" in out.output


def test_a_run_of_some_holo_parts_is_not_the_holo_result():
    from qora.bench.holo_cuda import PARTS, result_name

    assert result_name(PARTS) == "holo" and result_name(("rotation", "stages", "bpm")) == "holo"
    assert result_name(("bpm",)) == "holo-bpm" and result_name(("bpm", "stages")) == "holo-stages-bpm"


def test_the_gp_rows_give_the_fused_loops_difference_beside_its_time(be):
    """`qora bench holo`'s GP row (`_gp_loops`, run on the device there): both loops timed, the solver's loop left as
    it was, and the fused volume's largest difference from cuFFT's loop's, relative to that volume's range."""
    from types import SimpleNamespace

    from qora.bench.holo_cuda import _gp_loops

    fused = SimpleNamespace(tiles=8, measured_tiles=lambda counts: np.flatnonzero(counts))
    solver = SimpleNamespace(fused=fused, counts=np.array([0, 1, 0, 1, 1, 0, 0, 0]))
    cufft_volume = np.linspace(1.33, 1.37, 27).reshape(3, 3, 3)
    volume = {}

    def gp_half():
        volume["last"] = cufft_volume + (2e-5 if solver.fused is fused else 0.0)
        return volume["last"]

    result = BenchResult("holo-stages", "cpu", {})
    times = {"mapping_gather": 0.0}
    _gp_loops(result, be, solver, gp_half, times, "3x3x3")
    row = result.cases["gp/3x3x3/fused_over_cufft"]
    assert solver.fused is fused and volume["last"][0, 0, 0] == cufft_volume[0, 0, 0] + 2e-5  # fused layout left
    assert row["max_difference_of_range"] == pytest.approx(2e-5 / 0.04)
    assert row["measured_tiles"] == 3 / 8 and set(times) >= {"gp50_r2c", "gp50_r2c_cufft"}
    assert row["ratio"] == pytest.approx(times["gp50_r2c"] / times["gp50_r2c_cufft"])


def test_ssb_ptycho_bench_beats_wdd_on_abtems_crystal():
    """`qora bench ssb-ptycho` on abTEM's 8 A SrTiO3 at 1e5 e/A^2 (the default chain from the counts): the summed
    phase correlates at least 0.95 with the projected potential low-passed to 2 alpha / lambda and beats WDD's image
    on every band (measured 0.968 / 0.952 / 0.951 against 0.957 / 0.942 / 0.944); the time-per-pass case runs."""
    from qora.bench import ssb_ptycho

    r = ssb_ptycho.run(backend="cpu", data=(ssb_ptycho.FIXTURE_8A,), positions=16, detector=32, slices=2, modes=1,
                       repeats=1, edges=("amplitude",), write=False, echo=lambda *_: None)
    case = "quality/abtem_srtio3_ptycho_8a/amplitude-edge"
    ours, wdd = r.cases[f"{case}/ptycho"], r.cases[f"{case}/wdd"]
    assert ours["r_2alpha"] >= 0.95
    for band in ("2alpha", "grid", "alpha+detector"):
        assert ours[f"r_{band}"] > wdd[f"r_{band}"], band
    assert r.cases["pass/16x32/2s1m"]["s"] > 0
