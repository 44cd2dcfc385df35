"""The ``qora`` command: ``info``, ``demo``, ``view``, and the groups of the engines and benchmarks
(``qora phase``, ``qora holo``, ``qora ssb``, ``qora bench``), each in its own module of this package."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

import qora
from qora.cli.bench import bench
from qora.cli.errors import QoraCommands
from qora.cli.options import backend_option
from qora.cli.phase import phase
from qora.cli.holo import holo
from qora.cli.ssb import ssb


@click.group(cls=QoraCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(qora.__version__, prog_name="qora")
@click.option("--debug", is_flag=True, help="Show the traceback of an error instead of one line.")
def cli(debug: bool) -> None:
    """Qora: coherent imaging reconstruction (CDI, holographic tomography, 4D-STEM) on CPUs and NVIDIA GPUs.

    Errors are one line and exit status 2 (1 for an internal error); --debug shows the traceback."""


def _info(backend: str, measure: bool) -> dict:
    from qora.backend import cuda_note, has_cuda, resolve
    from qora.provenance import versions

    from qora.backend.fft import cpu_libraries
    from qora.backend.host import ENV_THREADS, num_threads

    be = resolve(backend)
    facts = be.device_facts(measure=measure).as_dict()
    return {"backend": be.name, "cuda_available": has_cuda(),
            "cuda_note": cuda_note() or "ok", "device": facts, "versions": versions(),
            "host_fft": cpu_libraries(), "cpu_threads": num_threads(), "cpu_threads_from": ENV_THREADS
            if os.environ.get(ENV_THREADS, "").strip() else "cores available"}


def _print_info(info: dict) -> None:
    dev = info["device"]
    click.echo(f"qora {info['versions']['qora']}")
    click.echo(f"backend: {info['backend']} (CUDA: {'yes' if info['cuda_available'] else 'no, ' + info['cuda_note']})")
    click.echo(f"device: {dev['name']}")
    if info["backend"] == "cuda":
        click.echo(f"  {dev['sm_count']} SMs at up to {dev['clock_mhz']:.0f} MHz, compute capability "
                   f"{dev['compute_capability']}, L2 {dev['l2_bytes'] / 2**20:.0f} MiB, "
                   f"memory {dev['total_memory_bytes'] / 2**30:.1f} GiB")
        click.echo(f"  peak DRAM {dev['peak_dram_gbs']:.0f} GB/s ({dev['memory_clock_mhz']:.0f} MHz x "
                   f"{dev['bus_width_bits']} bit x 2)")
    else:
        click.echo(f"  {dev['cpu_cores']} cores available to this process")
    if dev.get("copy_gbs"):
        click.echo(f"  measured copy bandwidth {dev['copy_gbs']:.0f} GB/s (read + write)")
    fft = info["host_fft"]
    missing = [k for k in ("ducc0", "pyfftw") if fft[k] is None]
    click.echo(f"host FFT: {fft['used']} (ducc0 {fft['ducc0'] or 'not installed'}, pyFFTW "
               f"{fft['pyfftw'] or 'not installed'}, scipy {fft['scipy']})"
               + (f"; without {' and '.join(missing)} the CPU transforms are slower" if missing else ""))
    click.echo(f"CPU threads: {info['cpu_threads']} (from {info['cpu_threads_from']}; set QORA_NUM_THREADS to change)")
    click.echo("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()
                                         if k not in ("qora", "ducc0", "pyfftw", "host_fft")))


@cli.command()
@backend_option()
@click.option("--measure", is_flag=True, help="Also measure the copy bandwidth (a second or two).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def info(backend: str, measure: bool, as_json: bool) -> None:
    """Print the backend, the device and the versions Qora sees."""
    data = _info(backend, measure)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        _print_info(data)


@cli.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo-output"),
              show_default=True, help="Folder for the demo's images and results.")
@backend_option()
def demo(out: Path, backend: str) -> None:
    """Run the main jobs on built-in example data and write their images to OUT."""
    out.mkdir(parents=True, exist_ok=True)
    data = _info(backend, measure=False)
    _print_info(data)
    (out / "info.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    click.echo(f"wrote {out / 'info.json'}")
    _demo_phase(out, backend)
    _demo_holo(out)
    _demo_ssb(out)


def _demo_ssb(out: Path) -> None:
    """4D-STEM: a simulated amorphous film (300 kV, 20 mrad, C10 = 150 A) to SSB and parallax images."""
    from click.testing import CliRunner

    runner = CliRunner()
    data = out / "ssb-dataset.h5"
    steps = [["ssb", "simulate", "--scan", "64", "--c10", "150", "--out", str(data), "--quiet"]]
    for method in ("ssb", "parallax"):
        steps.append(["ssb", "image", str(data), "--c10", "150", "--method", method, "--out",
                      str(out / f"ssb-{method}.h5"), "--plot", str(out / f"ssb-{method}.png")])
    for args in steps:
        res = runner.invoke(cli, args, catch_exceptions=False)
        click.echo(res.output.rstrip())
        if res.exit_code != 0:
            raise click.ClickException(f"demo step failed: qora {' '.join(args)}")


def _demo_holo(out: Path) -> None:
    """ODT: the reference bead (3 um, n = 1.36, 49 illuminations) from holograms to a volume."""
    from click.testing import CliRunner

    runner = CliRunner()
    holos = out / "holo-holograms.h5"
    for args in (["holo", "simulate", "--size", "128", "--out", str(holos)],
                 ["holo", "reconstruct", str(holos), "--method", "gp", "--out", str(out / "holo-volume.h5"),
                  "--plot", str(out / "holo-slices.png"), "--quiet"]):
        res = runner.invoke(cli, args, catch_exceptions=False)
        click.echo(res.output.rstrip())
        if res.exit_code != 0:
            raise click.ClickException(f"demo step failed: qora {' '.join(args)}")


def _demo_phase(out: Path, backend: str) -> None:
    """CDI: the 64^2 triangle from its pattern alone (autocorrelation support, default recipe)."""
    from qora.phase import analysis, objects, reconstruct
    from qora.phase import plot_result, write_pattern, write_result

    obj, intensity = objects.simulate("triangle", 64)
    write_pattern(out / "phase-pattern.cxi", intensity, truth=obj)
    be = "cpu" if backend == "auto" else backend  # the phase CUDA variants are a later issue
    result = reconstruct(intensity, starts=4, backend=be)
    err = analysis.object_error(result.object, obj)
    write_result(out / "phase-result.cxi", result)
    plot_result(out / "phase-result.png", result,
                title=f"CDI demo: triangle 64^2, default recipe, best of 4; object error {err:.1e}")
    click.echo(f"phase: object error {err:.2e}; wrote {out / 'phase-result.png'} and phase-result.cxi")


@cli.command("view")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (IPv6 too: ::1).")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True)
@click.option("--allow-remote", is_flag=True, help="Allow a --host beyond this machine (a token is then required).")
@click.option("--token", default=None, help="The token to require (default: made up and printed when remote).")
@backend_option(help="Where a 4D-STEM Session computes its previews.")
@click.option("--pattern", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Phase results: the measured pattern, for the PRTF.")
def view_cmd(path, host, port, allow_remote, token, backend, pattern) -> None:
    """Browse a result in the browser: 4D-STEM data with aberration sliders (SSB preview), a phase
    result (images, errors, PRTF), a holography volume or Zarr series (slices, profile).

    Needs the viewer extra (pip install 'qora[viewer]'). A file that cannot be read is one Error:
    line, before anything is served."""
    from qora.viewer import serve

    serve(path, host=host, port=port, allow_remote=allow_remote, token=token, backend=backend, pattern=pattern,
          echo=click.echo)


for _group in (phase, holo, ssb, bench):
    cli.add_command(_group)


def stop_on_sigterm() -> None:
    """SIGTERM (a job scheduler's or ``kill``'s stop) ends the command as Ctrl-C does, through Python: every
    ``finally`` runs, so a half-written output's temporary is removed (:func:`qora.io.atomic.atomic_path`) and
    nothing existing is replaced; the exit status is 143 (128 + 15). Python's default let the process die at once."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv=None) -> None:
    stop_on_sigterm()
    try:
        cli.main(args=argv, prog_name="qora", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
