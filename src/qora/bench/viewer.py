"""``qora bench viewer``: the SSB slider's latency, in two measured parts (docs/viewer.md).

- ``--part server`` (on the GPU machine): the viewer's app serving a 256 x 256-scan dataset
  (64 x 64 detector, 300 kV, 20 mrad, C10 = 150 A), driven from a Python client over HTTP on
  localhost as a 100-step drag (C10 moves every request): the time from sending a request to
  holding the encoded PNG, median and 95th percentile; also the 3x preview and the release
  (with the loss).
- ``--part browser`` (on the CPU machine, headless Chromium): the same page and the same payload
  (a PNG of that dataset's 256 x 256 preview) served instantly by a stand-in view, a scripted
  100-step drag: the time from the input event to the new image's ``onload`` minus the server's
  own time, i.e. what the browser adds (request, transfer, decode, paint).

The slider's latency is their sum (medians add; the 95th percentile of the sum is at most the sum
of the 95th percentiles, the bound reported).
"""

from __future__ import annotations

import http.client
import json
import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from qora.bench.common import BenchResult

__all__ = ["run"]

STEPS = 100


def _dataset(backend):
    from qora.ssb import Aberrations, Session, amorphous_slices, simulate

    sim = simulate(amorphous_slices((512, 512), 0.2, atoms_per_a2=0.1, seed=0), pixel=0.2, stride=2, window=64,
                   aberrations=Aberrations(C10=150.0))
    return Session(sim.data, kv=sim.kv, alpha_mrad=sim.alpha_mrad, scan_step=sim.scan_step, backend=backend)


def _stats(samples) -> dict:
    a = np.asarray(samples, float)
    return {"median_ms": float(np.median(a)), "p95_ms": float(np.percentile(a, 95)), "count": len(a)}


def run_server(*, backend="auto", write=True, echo=print) -> BenchResult:
    from qora.backend import resolve
    from qora.viewer import BackgroundServer
    from qora.viewer.app import make_app
    from qora.viewer.views import SsbView

    be = resolve(backend)
    result = BenchResult("viewer-server", be.name, be.device_facts().as_dict(), columns=("median_ms", "p95_ms"))
    view = SsbView(_dataset(be), name="bench-256x256")
    served = BackgroundServer(make_app(view))
    conn = http.client.HTTPConnection("127.0.0.1", served.port)
    seq = 0

    def request(params, **options):
        nonlocal seq
        seq += 1
        body = json.dumps({"params": params, "seq": seq, "client": "bench", **options})
        t0 = time.perf_counter()
        conn.request("POST", "/api/ssb/preview", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        ms = (time.perf_counter() - t0) * 1e3
        if response.status != 200:
            raise RuntimeError(f"preview failed: {response.status} {data[:200]!r}")
        return ms, float(response.getheader("X-Server-Ms")), len(data)

    try:
        for k in range(10):  # warm: kernels, plans, the pool
            request({"C10": 100.0 + k}, loss=k % 2 == 1, upsample=3 if k > 6 else 1)
        for name, options in (("drag_1x", {}), ("drag_3x", {"upsample": 3}), ("release_loss_1x", {"loss": True})):
            steps = STEPS if name != "release_loss_1x" else 20
            samples = [request({"C10": 100.0 + 0.5 * k}, **options) for k in range(steps)]
            total, server, size = zip(*samples)
            result.add(f"{name}/request_to_png", **_stats(total), png_bytes=int(np.median(size)))
            result.add(f"{name}/in_view", **_stats(server))
            echo(f"{name}: request to PNG median {np.median(total):.1f} ms, p95 {np.percentile(total, 95):.1f} ms "
                 f"(in the view {np.median(server):.1f} ms; PNG {int(np.median(size))} bytes)")
    finally:
        conn.close()
        served.close()
    result.notes.update(scan=[256, 256], detector=[64, 64], steps=STEPS,
                        bright_field_pixels=int(len(view.session.bf_index)))
    if write:
        echo(f"result written to {result.write()}")
    return result


class _FixedImage:
    """A stand-in SSB view that answers every preview at once with the same PNG (the payload of
    the real one), so that the browser's part of the latency is measured alone."""

    kind = "ssb"

    def __init__(self, info: dict, payload: bytes) -> None:
        self._info, self.payload = info, payload

    def info(self):
        return self._info

    def preview(self, body):
        return self.payload, {"X-Seq": str(body.get("seq", 0)), "X-Server-Ms": "0.001", "X-Range": "0,1"}


def _serve_stub(directory: str, port: int) -> None:
    """The stand-in server, in a process of its own (so that it shares no interpreter lock with
    the Python that drives the browser)."""
    import uvicorn

    from qora.viewer.app import make_app

    directory = Path(directory)
    view = _FixedImage(json.loads((directory / "info.json").read_text()), (directory / "payload.png").read_bytes())
    uvicorn.run(make_app(view), host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_browser(*, write=True, echo=print, screenshots: Path | None = None) -> BenchResult:
    from playwright.sync_api import sync_playwright

    from qora.backend import resolve
    from qora.plot import png
    from qora.viewer.views import SsbView

    be = resolve("cpu")
    result = BenchResult("viewer-browser", "cpu", be.device_facts().as_dict(), columns=("median_ms", "p95_ms"))
    session = _dataset(be)
    real = SsbView(session, name="bench-256x256")
    payload, _, _ = png(session.preview({"C10": 150.0}))
    import subprocess
    import sys

    stub_dir = tempfile.TemporaryDirectory()
    (Path(stub_dir.name) / "info.json").write_text(json.dumps(real.info()))
    (Path(stub_dir.name) / "payload.png").write_bytes(payload)
    port = _free_port()
    stub = subprocess.Popen([sys.executable, "-c", f"from qora.bench.viewer import _serve_stub; "
                             f"_serve_stub({stub_dir.name!r}, {port})"])
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or stub.poll() is not None:
                raise RuntimeError("the stand-in server did not start")
            time.sleep(0.1)
    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=flags, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_function("() => (document.querySelector('#ssb-image') || {}).complete && "
                                   "window.qoraLatency && window.qoraLatency.length > 0")
            for _ in range(2):  # warm
                page.evaluate("window.qoraLatency = []")
                _drag(page, 20)
            page.evaluate("window.qoraLatency = []")
            _drag(page, STEPS)
            page.wait_for_timeout(500)
            entries = page.evaluate("window.qoraLatency")
            overhead = [e["total_ms"] - e["server_ms"] for e in entries]
            result.add("drag_1x/browser_overhead", **_stats(overhead), png_bytes=len(payload))
            echo(f"browser overhead (input event to onload, less the server): median {np.median(overhead):.1f} ms, "
                 f"p95 {np.percentile(overhead, 95):.1f} ms over {len(entries)} images of {len(payload)} bytes")
            browser.close()
    finally:
        stub.terminate()
        stub.wait(10)
        stub_dir.cleanup()
    result.notes.update(steps=STEPS, chromium="/usr/bin/chromium", payload="PNG of the 256x256 preview",
                        stand_in="a server process of its own answering at once")
    if screenshots is not None:
        _screenshots(Path(screenshots), session, echo)
    if write:
        echo(f"result written to {result.write()}")
    return result


def _drag(page, steps: int) -> None:
    box = page.locator("#s-C10").bounding_box()
    y = box["y"] + box["height"] / 2
    x0 = box["x"] + box["width"] * 0.55
    page.mouse.move(x0, y)
    page.mouse.down()
    for k in range(1, steps + 1):  # one input per frame at 60 Hz, a steady hand
        page.mouse.move(x0 + box["width"] * 0.002 * k, y)
        page.wait_for_timeout(16)
    page.mouse.up()
    page.wait_for_timeout(200)


def _screenshots(directory: Path, session, echo) -> None:
    """The three views, for docs/viewer.md: the 256^2 dataset at C10 = 150 A, a phase result, a
    holography volume."""
    from playwright.sync_api import sync_playwright

    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo import write_volume
    from qora.phase import objects, reconstruct
    from qora.phase import write_result
    from qora.viewer import BackgroundServer
    from qora.viewer.app import make_app
    from qora.viewer.views import SsbView, open_view

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _, intensity = objects.simulate("triangle", 64, photons=1e7, seed=0)
        write_result(tmp / "r.cxi", reconstruct(intensity, starts=4, backend="cpu", keep_all=True))
        g = R.geometry(64)
        write_volume(tmp / "v.h5", P.render_spheres([P.Sphere(radius=3.0, index=1.37), P.Sphere(center=(0, 2.5, 2.5),
                                                     radius=1.2, index=1.39)], g.n, g.pixel, g.medium_index), g)
        views = {"ssb": SsbView(session, name="film-256x256.h5"), "phase": open_view(tmp / "r.cxi"),
                 "holo": open_view(tmp / "v.h5")}
        flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=flags, headless=True)
            for name, view in views.items():
                served = BackgroundServer(make_app(view))
                try:
                    page = browser.new_page(viewport={"width": 1300, "height": 820})
                    page.goto(f"http://127.0.0.1:{served.port}/")
                    if name == "ssb":
                        page.wait_for_function("() => (document.querySelector('#ssb-image') || {}).complete")
                        page.fill("#s-C10", "150")
                        page.dispatch_event("#s-C10", "change")
                        page.wait_for_function("() => JSON.parse(document.querySelector('#ssb-image').dataset.params"
                                               " || '{}').C10 === 150 && document.querySelector('#ssb-image').complete",
                                               timeout=120_000)
                    page.wait_for_timeout(1500)
                    page.screenshot(path=str(directory / f"viewer-{name}.png"))
                    echo(f"wrote {directory / f'viewer-{name}.png'}")
                finally:
                    served.close()
            browser.close()


def run(*, part: str, backend="auto", write=True, echo=print, screenshots=None) -> BenchResult:
    if part == "server":
        return run_server(backend=backend, write=write, echo=echo)
    if part == "browser":
        return run_browser(write=write, echo=echo, screenshots=screenshots)
    raise ValueError(f"part must be 'server' or 'browser', got {part!r}")
