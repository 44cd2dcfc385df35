import pytest
import json
import subprocess
import sys

from click.testing import CliRunner

from qora.cli import cli


def test_help_lists_the_commands():
    out = CliRunner().invoke(cli, ["--help"])
    assert out.exit_code == 0
    for word in ("info", "bench", "demo"):
        assert word in out.output


def test_info_json_on_the_cpu():
    out = CliRunner().invoke(cli, ["info", "--backend", "cpu", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["backend"] == "cpu" and data["device"]["cpu_cores"] >= 1
    assert "numpy" in data["versions"]


@pytest.mark.slow
def test_demo_writes_its_output(tmp_path):
    out = CliRunner().invoke(cli, ["demo", "--backend", "cpu", "--out", str(tmp_path / "demo")])
    assert out.exit_code == 0, out.output
    assert json.loads((tmp_path / "demo" / "info.json").read_text())["backend"] == "cpu"


def test_python_dash_m_qora_runs():
    out = subprocess.run([sys.executable, "-m", "qora", "info", "--backend", "cpu"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "backend: cpu" in out.stdout


def test_bad_backend_is_rejected_by_the_cli():
    out = CliRunner().invoke(cli, ["info", "--backend", "gpu"])
    assert out.exit_code != 0 and "gpu" in out.output


def test_every_backend_option_is_the_shared_one():
    # one --backend definition (qora.cli.options.backend_option) on every command that computes
    import click

    from qora.cli.options import BACKENDS

    def commands(group, prefix=()):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from commands(cmd, prefix + (name,))
            else:
                yield prefix + (name,), cmd

    found = {path: p for path, cmd in commands(cli) for p in cmd.params if p.name == "backend"}
    assert len(found) >= 10
    wrong = {" ".join(path): p.type.choices for path, p in found.items() if tuple(p.type.choices) != BACKENDS}
    assert not wrong


def _group_raising(exc):
    import click

    from qora.cli.errors import QoraCommands

    @click.group(cls=QoraCommands)
    @click.option("--debug", is_flag=True)
    def root(debug):
        pass

    @root.command()
    def go():
        raise exc

    return root


@pytest.mark.parametrize("exc, code, text", [
    (ValueError("wavelength must be positive, got -1"), 2, "Error: wavelength must be positive, got -1"),
    (FileNotFoundError(2, "No such file or directory", "missing.h5"), 2, "Error: missing.h5: No such file"),
    (MemoryError("needs 512 GiB"), 2, "Error: needs 512 GiB"),
    (KeyError("rotation"), 1, "Error: internal error (KeyError: 'rotation'); please report it"),
])
def test_a_failure_is_one_line_with_its_exit_status(exc, code, text):
    from click.testing import CliRunner

    res = CliRunner().invoke(_group_raising(exc), ["go"])
    assert res.exit_code == code
    assert res.output.startswith(text) and res.output.count("\n") == 1
    assert "Traceback" not in res.output


def test_debug_shows_the_traceback():
    from click.testing import CliRunner

    res = CliRunner().invoke(_group_raising(ValueError("bad")), ["--debug", "go"])
    assert isinstance(res.exception, ValueError) and res.exit_code == 1


def test_the_qora_command_reports_a_missing_gpu_in_one_line():
    from click.testing import CliRunner

    from qora.backend import has_cuda

    if has_cuda():
        pytest.skip("this machine has a GPU")
    res = CliRunner().invoke(cli, ["info", "--backend", "cuda"])
    assert res.exit_code == 2 and res.output.startswith("Error: backend='cuda' was requested but")


def test_help_texts_say_what_a_user_needs(tmp_path):
    """No option's help shows click's "x<=None" for an unbounded number; `phase run --recipe` shows the default
    recipe; `holo phase --plot` has help; a disk check prints sizes in a unit that shows them."""
    from click.testing import CliRunner

    from qora.cli.root import cli
    from qora.io.validate import byte_size
    from qora.phase.recipe import DEFAULT_RECIPE

    runner = CliRunner()
    for command in (["ssb", "image"], ["ssb", "fit"], ["ssb", "simulate"], ["phase", "run"], ["holo", "phase"],
                    ["holo", "reconstruct"]):
        out = runner.invoke(cli, [*command, "--help"], terminal_width=400)
        assert out.exit_code == 0 and "None]" not in out.output, command
    assert DEFAULT_RECIPE in runner.invoke(cli, ["phase", "run", "--help"], terminal_width=1000).output
    holo_help = runner.invoke(cli, ["holo", "phase", "--help"], terminal_width=400).output
    assert "PNG of the phase and amplitude" in holo_help
    assert (byte_size(5e4), byte_size(3 * 2**30), byte_size(100)) == ("48.8 KiB", "3 GiB", "100 bytes")
    out = runner.invoke(cli, ["ssb", "simulate", "--semiangle", "400", "--out", str(tmp_path / "x.h5")])
    assert out.exit_code != 0 and "--step / 2" in out.output and "use a smaller pixel" not in out.output
