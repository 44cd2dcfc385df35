"""Bad input to `qora view` and its API, without a browser: files it cannot read (one Error: line,
exit status 2), the missing extra, requests the server answers with 400 and a one-line reason (and
keeps serving), the IPv6 address, the sliders' start at the file's aberrations."""

import hashlib
import json
import math
import re
import sys
import urllib.error
import urllib.request

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from qora.cli import cli
from qora.io.errors import FileFormatError, MissingExtra
from qora.viewer import BackgroundServer, url_for
from qora.viewer.app import make_app
from qora.viewer.views import open_view


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from qora.holo import reference as R
    from qora.holo.files import write_volume
    from qora.ssb import Aberrations, amorphous_slices, simulate, write_dataset

    folder = tmp_path_factory.mktemp("view")
    ab = Aberrations(C10=150.0, C12=(20.0, math.radians(25.0)), C30=-3000.0)
    sim = simulate(amorphous_slices((32, 32), 0.2, seed=3), pixel=0.2, stride=2, window=32, aberrations=ab)
    write_dataset(folder / "film.h5", sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, aberrations=ab)
    g = R.geometry(16)
    write_volume(folder / "v.h5", np.full((16, 16, 16), 1.33, np.float32), g)
    (folder / "empty.h5").write_bytes(b"")
    (folder / "truncated.h5").write_bytes((folder / "film.h5").read_bytes()[:2000])
    with h5py.File(folder / "other.h5", "w") as f:
        f["frames"] = np.zeros((3, 4))
    np.save(folder / "three.npy", np.ones((4, 16, 16), np.float32))
    np.save(folder / "zeros.npy", np.zeros((4, 4, 16, 16), np.float32))
    return folder


VIEW_ROWS = [
    (["{empty.h5}"], r"empty\.h5: cannot be read"),
    (["{truncated.h5}"], r"truncated\.h5: cannot be read"),
    (["{other.h5}"], r"other\.h5: not a qora 4D-STEM dataset.*frames \(3, 4\)"),
    (["{three.npy}"], r"three\.npy: 4D-STEM data must be .*\(4, 16, 16\)"),
    (["{zeros.npy}"], r"zeros\.npy: the viewer needs"),
    (["{film.h5}", "--host", "0.0.0.0"], r"--host 0\.0\.0\.0 would serve the data beyond this machine"),
]


@pytest.mark.parametrize("args, pattern", VIEW_ROWS, ids=[r[0][0] for r in VIEW_ROWS])
def test_view_refuses_with_one_line(files, args, pattern, monkeypatch):
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("served a file it should refuse"))
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files.iterdir()}
    args = [re.sub(r"\{(.+?)\}", lambda m: str(files / m[1]), a) for a in args]
    result = CliRunner().invoke(cli, ["view", *args, "--backend", "cpu"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert re.search(pattern, lines[0]), lines[0]
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files.iterdir()} == before


@pytest.mark.parametrize("missing", ["uvicorn", "starlette"])
def test_view_without_the_extra_names_it(files, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # what an environment without it gives
    result = CliRunner().invoke(cli, ["view", str(files / "film.h5")])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: qora view needs Starlette and uvicorn")
    assert "pip install 'qora[viewer]'" in result.output and "Traceback" not in result.output
    from qora.viewer import require_viewer_extra

    with pytest.raises(MissingExtra, match=r"pip install 'qora\[viewer\]'"):
        require_viewer_extra()


@pytest.mark.parametrize("host, url", [("::1", "http://[::1]:8765/"), ("[::1]", "http://[::1]:8765/"),
                                       ("127.0.0.1", "http://127.0.0.1:8765/"),
                                       ("localhost", "http://localhost:8765/")])
def test_the_printed_address_is_a_valid_url(host, url):
    assert url_for(host, 8765) == url
    assert url_for(host, 8765, "t") == url + "?token=t"


def test_view_on_ipv6_loopback_prints_a_bracketed_url(files, monkeypatch):
    import uvicorn

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(kw))
    result = CliRunner().invoke(cli, ["view", str(files / "v.h5"), "--host", "::1", "--port", "9001"])
    assert result.exit_code == 0, result.output
    assert "at http://[::1]:9001/" in result.output
    assert served["host"] == "::1" and served["port"] == 9001


def test_the_sliders_start_at_the_files_aberrations(files):
    view = open_view(files / "film.h5", backend="cpu")
    start = view.info()["start"]
    assert start["C10"] == pytest.approx(150.0)
    assert start["C12"] == pytest.approx(20.0) and start["C12_angle"] == pytest.approx(25.0)
    assert start["C30"] == pytest.approx(-3000.0)
    assert start["C21"] == 0.0 and start["thickness"] == 0.0


def test_slider_start_folds_angles_and_clips_to_the_sliders():
    from qora.ssb import Aberrations
    from qora.viewer.views import SSB_SLIDERS, slider_start

    start = slider_start(Aberrations(C12=(20.0, math.radians(170.0)), C23=(50.0, math.radians(100.0)),
                                     C10=5000.0))
    assert start["C12_angle"] == pytest.approx(-10.0)  # C12 at 170 deg is C12 at -10 deg (twofold)
    assert start["C23_angle"] == pytest.approx(-20.0)  # threefold: 100 - 120
    assert start["C10"] == SSB_SLIDERS["C10"][3]  # beyond the slider: at its end
    assert slider_start(None) == {name: 0.0 for name in SSB_SLIDERS}


def _request(url, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST" if data else "GET")) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


@pytest.fixture(scope="module")
def servers(files):
    ssb = BackgroundServer(make_app(open_view(files / "film.h5", backend="cpu")))
    holo = BackgroundServer(make_app(open_view(files / "v.h5")))
    yield ssb, holo
    ssb.close()
    holo.close()


DIGITS = "7" * 5000
BAD_REQUESTS = [
    ("ssb", "api/ssb/preview", ('{"params": {"C10": %s}}' % DIGITS).encode(), r"request body cannot be read"),
    ("ssb", "api/ssb/preview", ('{"params": {"C10": 1}, "seq": %s}' % DIGITS).encode(), r"cannot be read"),
    ("ssb", "api/ssb/preview", {"params": {"C10": 1}, "seq": DIGITS}, r"seq must be within .* 5000 characters"),
    ("ssb", "api/ssb/preview", {"params": {"C10": 1e308 * 10}}, r"C10 must be within"),
    ("ssb", "api/ssb/preview", b'{"params": {"C10": NaN}}', r"C10 must be within \[-1000, 1000\], got nan"),
    ("ssb", "api/ssb/preview", {"params": {"C10": "abc"}}, r"C10 must be a number, got str"),
    ("ssb", "api/ssb/preview", b"[" * 100000, r"request too large|cannot be read"),
    ("ssb", "api/ssb/image.npy", {"params": {"C10": 1}, "upsample": DIGITS}, r"upsample must be within"),
    ("ssb", "api/ssb/fit", {"params": {"rotation": "x"}}, r"rotation must be a number"),
    ("holo", "api/holo/slice?lo=abc", None, r"lo must be a number, got 'abc'"),
    ("holo", "api/holo/slice?hi=nan", None, r"hi must be within"),
    ("holo", "api/holo/slice?lo=" + DIGITS, None, r"lo must be within \[-10, 10\], got inf"),
    ("holo", "api/holo/slice?lo=2&hi=1", None, r"lo must be below hi"),
    ("holo", "api/holo/slice?index=" + DIGITS, None, r"index must be within \[0, 15\], got 5000 characters"),
    ("holo", "api/holo/slice?axis=" + "9" * 30, None, r"axis must be within \[0, 2\]"),
    ("holo", "api/holo/profile?row=-" + DIGITS, None, r"row must be within"),
]


@pytest.mark.parametrize("which, path, body, pattern", BAD_REQUESTS,
                         ids=[f"{r[0]}-{r[1][:24]}-{i}" for i, r in enumerate(BAD_REQUESTS)])
def test_bad_requests_get_400_with_a_one_line_reason(servers, which, path, body, pattern):
    server = servers[0] if which == "ssb" else servers[1]
    status, text = _request(server.url + path, body)
    assert status == 400, (status, text[:300])
    error = json.loads(text)["error"]
    assert "\n" not in error and len(error) <= 200, error
    assert re.search(pattern, error), error
    status, _ = _request(server.url + "api/info")
    assert status == 200  # it goes on serving


def test_open_view_names_a_damaged_file(files):
    with pytest.raises(FileFormatError, match=r"truncated\.h5: cannot be read"):
        open_view(files / "truncated.h5")
