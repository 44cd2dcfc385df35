"""``qora bench ... --threads``: the thread-scaling sweeps (qora.bench.threads), on tiny cases."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qora.backend.host import cpu_count
from qora.bench import threads as T
from qora.io.errors import InputError


def test_parse_counts():
    assert T.parse_counts("4, 1,2,2") == [1, 2, 4]
    for bad in ("", "1,x", "0", "2,-1"):
        with pytest.raises(InputError, match="--threads"):
            T.parse_counts(bad)


def test_counts_above_the_cores_are_skipped():
    run, skipped = T.split_counts([1, cpu_count(), cpu_count() + 1, 10**4])
    assert run == sorted({1, cpu_count()}) and skipped == [cpu_count() + 1, 10**4]


def test_a_missing_peer_is_recorded_not_raised(tmp_path):
    out = T.run_peer(["whatever.py"], 1, python=tmp_path / "no-python")
    assert "no peers' interpreter" in out["error"]


def test_phase_sweep_writes_scaling_floor_and_notes(tmp_path, monkeypatch):
    from qora.bench import phase

    monkeypatch.setenv("QORA_PEERS_PYTHON", str(tmp_path / "absent"))
    r = phase.run(backend="cpu", shapes=((64, 64),), threads=[1, 10**4], write=False, echo=lambda *_: None)
    row = r.cases["hio/64x64/1_threads"]
    assert row["ms"] > 0 and row["floor_ms"] > 0 and row["speedup"] == 1.0 and row["vs_floor"] > 0
    assert r.notes["skipped_thread_counts"]["counts"] == [10**4]
    assert "64x64/1" in r.notes["jax_missing"]
    libs = r.notes["fft_libraries"]
    assert libs["used"] in ("fftw", "ducc0", "scipy") and "ducc0" in libs and "pyfftw" in libs
    assert r.benchmark == "phase-cpu-threads"


def test_holo_sweep_times_every_stage(tmp_path, monkeypatch):
    from qora.bench import holo

    monkeypatch.setenv("QORA_PEERS_PYTHON", str(tmp_path / "absent"))
    r = holo.run_cpu_threads([1], size=24, angles=6, iterations=3, rounds=1, write=False, echo=lambda *_: None)
    total = r.cases["rotation/24x24x24x6/gp3_total/1_threads"]
    assert {"rytov_ms", "mapping_plan_ms", "mapping_ms", "gp_ms"} <= set(total)
    solver = r.cases["rotation/24x24x24x6/gp3_solver/1_threads"]
    assert solver["floor_ms"] > 0 and solver["ms"] == total["gp_ms"]


def test_cli_threads_options(tmp_path, monkeypatch):
    from qora.cli.root import cli

    monkeypatch.setenv("QORA_PEERS_PYTHON", str(tmp_path / "absent"))
    out = CliRunner().invoke(cli, ["bench", "--out", str(tmp_path), "phase", "--backend", "cpu", "--threads", "1",
                                   "--shapes", "32x32"])
    assert out.exit_code == 0, out.output
    written = list((tmp_path / "phase-cpu-threads").glob("*.json"))
    assert len(written) == 1
    data = json.loads(written[0].read_text())
    assert "hio/32x32/1_threads" in data["cases"] and data["versions"]["ducc0"]
    bad = CliRunner().invoke(cli, ["bench", "phase", "--backend", "cpu", "--threads", "1,zero"])
    assert bad.exit_code == 2 and "--threads" in bad.output
    bad = CliRunner().invoke(cli, ["bench", "phase", "--backend", "cpu", "--threads", "1", "--shapes", "32"])
    assert bad.exit_code == 2 and "--shapes" in bad.output


def test_info_names_the_host_fft_and_the_threads(monkeypatch):
    from qora.backend import fft_host
    from qora.cli.root import cli

    monkeypatch.setenv("QORA_NUM_THREADS", "3")
    monkeypatch.setattr(fft_host, "_ducc0", lambda: None)
    monkeypatch.setenv("QORA_DISABLE_FFTW", "1")
    out = CliRunner().invoke(cli, ["info", "--backend", "cpu"])
    assert out.exit_code == 0, out.output
    assert "host FFT: scipy (ducc0 not installed" in out.output and "without ducc0" in out.output
    assert "CPU threads: 3 (from QORA_NUM_THREADS" in out.output
    monkeypatch.setenv("QORA_NUM_THREADS", "0")
    out = CliRunner().invoke(cli, ["info", "--backend", "cpu"])
    assert out.exit_code == 2 and "QORA_NUM_THREADS" in out.output
