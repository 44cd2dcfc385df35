"""qora view end to end: the app served by uvicorn on localhost, driven by headless Chromium
(Debian's, through Playwright): each view opens, a dragged slider redraws the image, the final
image equals Session.preview at the final position, a bad request gets a clear error."""

import io
import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from qora.viewer import BackgroundServer, check_host
from qora.viewer.app import make_app
from qora.viewer.views import open_view, ssb_parameters

CHROMIUM = "/usr/bin/chromium"
# Chromium's own network chatter is refused on a closed network: turn it off (docs/viewer.md)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def Served(view, token=None):
    """The view's app on a free localhost port, in a thread."""
    return BackgroundServer(make_app(view, token=token))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


def _pixels(page, selector):
    """The displayed image's gray levels (the red channel) as the browser decoded them."""
    data = page.evaluate("""(sel) => { const img = document.querySelector(sel);
        const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
        const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data;
        return {w: c.width, h: c.height, v: Array.from(d.filter((_, i) => i % 4 === 0))}; }""", selector)
    return np.array(data["v"], np.int16).reshape(data["h"], data["w"])


def _quiet(page, timeout=60):
    """Wait until the page's last preview carries the loss (the slider's release was served)."""
    page.wait_for_function("() => { const i = document.querySelector('#ssb-image');"
                           " return i && i.dataset.loss === '1' && i.complete; }", timeout=timeout * 1000)


def _drag(page, selector, fraction_from, fraction_to, steps=10):
    box = page.locator(selector).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * fraction_from, y)
    page.mouse.down()
    for k in range(1, steps + 1):
        page.mouse.move(box["x"] + box["width"] * (fraction_from + (fraction_to - fraction_from) * k / steps), y)
        time.sleep(0.02)
    page.mouse.up()


@pytest.fixture(scope="module")
def ssb_served(tmp_path_factory):
    from qora.ssb import Aberrations, amorphous_slices, simulate, write_dataset

    sim = simulate(amorphous_slices((96, 96), 0.2, seed=2), pixel=0.2, stride=2, window=32, kv=300.0,
                   alpha_mrad=20.0, aberrations=Aberrations(C10=150.0))
    path = tmp_path_factory.mktemp("ssb") / "film.h5"
    write_dataset(path, sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
    view = open_view(path, backend="cpu")
    served = Served(view)
    yield served, view
    served.close()


def _open_ssb(browser, served):
    """A new page on the 4D-STEM view, once its first preview (with the loss) is shown."""
    page = browser.new_page()
    page.goto(served.url)
    _quiet(page)
    return page


def test_ssb_drag_redraws_and_matches_session_preview(browser, ssb_served):
    served, view = ssb_served
    page = _open_ssb(browser, served)
    first = _pixels(page, "#ssb-image")
    first_seq = int(page.get_attribute("#ssb-image", "data-seq"))
    _drag(page, "#s-C10", 0.5, 0.58)  # C10 from 0 towards +160 A
    _quiet(page)
    assert int(page.get_attribute("#ssb-image", "data-seq")) > first_seq
    shown = json.loads(page.get_attribute("#ssb-image", "data-params"))
    c10 = float(page.input_value("#s-C10"))
    assert shown["C10"] == c10 and 100.0 < c10 < 200.0
    assert all(v == 0 for k, v in shown.items() if k != "C10")
    got = _pixels(page, "#ssb-image")
    assert np.abs(got - first).mean() > 1.0  # the image changed
    # the independent check: the session's preview at the final position, scaled min..max to 8 bits
    phase = view.session.preview({"C10": c10, "rotation": 0.0})
    expected = np.rint((phase - phase.min()) / (phase.max() - phase.min()) * 255)
    assert got.shape == phase.shape
    assert np.abs(got - expected).max() <= 1
    assert page.text_content("#ssb-loss").startswith("loss: ") and "(" not in page.text_content("#ssb-loss")
    latency = page.evaluate("window.qoraLatency")
    assert latency and all(e["total_ms"] >= e["server_ms"] > 0 for e in latency)
    page.close()


def test_ssb_method_switch_shows_each_method(browser, ssb_served):
    """The method select redraws with that method's image (the session's, at the sliders' values), and the
    exported phase is the method's too."""
    served, view = ssb_served
    page = _open_ssb(browser, served)
    page.fill("#s-C10", "150")
    page.dispatch_event("#s-C10", "change")
    for method in ("wdd", "obf", "icom"):
        page.select_option("#ssb-method", method)
        # the image the page shows once it says so: that method's, with the loss of the release
        page.wait_for_function(f"() => {{ const i = document.querySelector('#ssb-image'); return i.dataset.method "
                               f"=== '{method}' && i.dataset.loss === '1' && JSON.parse(i.dataset.params).C10 == 150; }}",
                               timeout=60000)
        # the sliders' values as the server reads them (another test's fit may have moved the page's start)
        shown = ssb_parameters(json.loads(page.get_attribute("#ssb-image", "data-params")))
        assert shown["C10"] == 150.0
        phase = view.session.preview(shown, method=method)
        expected = np.rint((phase - phase.min()) / (phase.max() - phase.min()) * 255)
        assert np.abs(_pixels(page, "#ssb-image") - expected).max() <= 1, method
    # the switch changed what is shown: WDD's image is not SSB's
    assert not np.allclose(view.session.preview(shown, method="wdd"), view.session.preview(shown))
    # the export of the phase takes the method too
    data = page.evaluate("""async () => { const r = await fetch('/api/ssb/image.npy', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({params: {C10: 150}, method: 'wdd'})});
        return Array.from(new Uint8Array(await r.arrayBuffer())); }""")
    exported = np.load(io.BytesIO(bytes(data)))
    np.testing.assert_allclose(exported, view.session.preview(shown, method="wdd"), atol=1e-6)
    page.close()


def test_ssb_bad_requests_get_clear_errors(browser, ssb_served):
    served, _ = ssb_served
    page = _open_ssb(browser, served)
    post = """async (body) => { const r = await fetch('/api/ssb/preview', {method: 'POST', body});
                                 return [r.status, r.status === 200 ? null : (await r.json()).error]; }"""
    cases = {json.dumps({"params": {"C10": "abc"}}): "C10 must be a number",
             json.dumps({"params": {"C10": 1e9}}): "C10 must be within",
             json.dumps({"params": {"C99": 1}}): "unknown parameters ['C99']",
             json.dumps({"params": {"C10": 1}, "upsample": 2}): "upsample must be 1 or 3",
             json.dumps({"params": {"C10": 1}, "method": "ptycho"}): "method must be one of ssb, obf, wdd",
             json.dumps({"params": {"C10": 1}, "loss": "yes"}): "loss must be true or false",
             json.dumps({"params": {"C10": 1}, "seq": 2**60}): "seq must be within",
             "{not json": "not JSON",
             json.dumps([1, 2]): "must be a JSON object"}
    for body, message in cases.items():
        status, error = page.evaluate(post, body)
        assert status == 400 and message in error, (body, status, error)
    status, _ = page.evaluate(post, json.dumps({"params": {"C10": 5.0}, "seq": 10**9}))
    assert status == 200  # the server goes on
    # the page shows an error from the server in its alert line
    page.evaluate("() => { const s = document.querySelector('#ssb-upsample'); s.options[1].value = '2';"
                  " s.value = '2'; s.dispatchEvent(new Event('change')); }")
    page.wait_for_function("() => document.querySelector('#error').textContent.includes('upsample must be 1 or 3')")
    page.close()


def test_ssb_fit_from_here(browser, ssb_served):
    served, _ = ssb_served
    page = _open_ssb(browser, served)
    page.fill("#s-C10", "120")
    page.dispatch_event("#s-C10", "change")
    page.click("#ssb-fit")
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('fit done')",
                           timeout=120_000)
    assert abs(float(page.input_value("#s-C10")) - 150.0) < 3.0
    assert int(page.get_attribute("#ssb-fit-progress", "value")) == 20
    page.close()


def test_ssb_fit_progress_comes_from_newtons_callback(ssb_served, monkeypatch):
    """Server side, no browser: "fit from here" passes newton a callback (it no longer wraps the
    band) and its progress is the accepted steps that callback reports; it ends done with the fit."""
    import qora.ssb

    _, view = ssb_served
    real, reported = qora.ssb.newton, []

    def newton(band, start, **kwargs):
        callback = kwargs.pop("callback")

        def spy(state):
            callback(state)
            reported.append((state.step, view.fit_status()["done"]))

        return real(band, start, callback=spy, **kwargs)

    monkeypatch.setattr(qora.ssb, "newton", newton)
    status = view.start_fit({"params": {"C10": 120.0}})
    while status["state"] == "running":
        time.sleep(0.01)
        status = view.fit_status()
    assert status["state"] == "done", status
    assert abs(status["result"]["C10"] - 150.0) < 3.0
    assert status["done"] == status["total"] == 20
    assert reported and all(done == min(step + 1, 20) for step, done in reported)


def test_phase_result_view(browser, tmp_path):
    from qora.phase import objects, reconstruct
    from qora.phase.files import write_result

    _, intensity = objects.simulate("triangle", 48, photons=1e7, seed=0)
    result = reconstruct(intensity, starts=3, recipe="HIO**60 ER**20", backend="cpu", keep_all=True)
    write_result(tmp_path / "r.cxi", result)
    served = Served(open_view(tmp_path / "r.cxi"))
    try:
        page = browser.new_page()
        page.goto(served.url)
        for what in ("amplitude", "phase", "support"):
            page.wait_for_function(f"() => (document.querySelector('#phase-{what}') || {{}}).naturalWidth === 48")
        support = _pixels(page, "#phase-support")
        np.testing.assert_array_equal(support > 127, result.support)
        for canvas in ("#phase-errors", "#phase-prtf"):  # both plots drew something
            inked = page.evaluate("""(sel) => { const c = document.querySelector(sel);
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && d[i] < 200) n++; return n; }""",
                                  canvas)
            assert inked > 200, canvas
        assert "best start" in page.text_content("#phase-prtf-note")  # no pattern given: the stand-in is named
        page.close()
    finally:
        served.close()


def test_holo_volume_view(browser, tmp_path):
    from qora.holo import phantoms as P
    from qora.holo import reference as R
    from qora.holo.files import write_volume

    g = R.geometry(32)
    volume = P.render_spheres([P.Sphere(radius=1.5, index=1.36, center=(1.0, 0.0, 0.0))], g.n, g.pixel,
                              g.medium_index)
    write_volume(tmp_path / "v.h5", volume, g)
    served = Served(open_view(tmp_path / "v.h5"))
    try:
        page = browser.new_page()
        page.goto(served.url)
        page.wait_for_function("() => ((document.querySelector('#holo-image') || {dataset: {}}).dataset.query || '')"
                               ".includes('index=16')")
        before = _pixels(page, "#holo-image")
        _drag(page, "#holo-slice", 0.5, 0.95)
        page.wait_for_function("() => document.querySelector('#holo-image').dataset.query.includes("
                               "'index=' + document.querySelector('#holo-slice').value + '&')")  # the final position
        query = page.get_attribute("#holo-image", "data-query")
        index = int(query.split("index=")[1].split("&")[0])
        assert index > 20 and index == int(page.input_value("#holo-slice"))
        page.wait_for_function("() => document.querySelector('#holo-image').complete")
        assert np.abs(_pixels(page, "#holo-image") - before).mean() > 1.0
        status = page.evaluate("async () => (await fetch('/api/holo/slice?axis=5')).status")
        assert status == 400
        with urllib.request.urlopen(served.url + "api/holo/profile?axis=0&index=16") as response:
            profile = json.loads(response.read())
        np.testing.assert_allclose(profile["index_values"], volume[16, 16], rtol=1e-6)
        page.close()
    finally:
        served.close()


def test_remote_binding_needs_the_flag_and_a_token(tmp_path):
    with pytest.raises(ValueError, match="--allow-remote"):
        check_host("0.0.0.0", allow_remote=False, token=None)
    assert check_host("127.0.0.1", allow_remote=False, token=None) is None
    token = check_host("0.0.0.0", allow_remote=True, token=None)
    assert token and len(token) >= 24
    from qora.holo import reference as R
    from qora.holo.files import write_volume

    g = R.geometry(16)
    write_volume(tmp_path / "v.h5", np.full((16, 16, 16), 1.33, np.float32), g)
    served = Served(open_view(tmp_path / "v.h5"), token="secret-token")
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(served.url + "api/info")
        err.value.close()
        assert err.value.code == 401
        request = urllib.request.Request(served.url + "api/info", headers={"Authorization": "Bearer secret-token"})
        with urllib.request.urlopen(request) as response:
            assert json.loads(response.read())["kind"] == "holo"
        with urllib.request.urlopen(served.url + "api/info?token=secret-token") as response:
            assert response.status == 200
    finally:
        served.close()


def test_ssb_live_mode_builds_up_and_takes_the_live_fit(browser):
    """The live mode (qora ssb live --view): while the Merlin simulator serves a scan, the page shows
    the rows so far and the live fit; at the end the image is the whole scan's, and "use the live
    fit" puts the fitted C10 on its slider and draws that image."""
    from qora.ssb import Aberrations, amorphous_slices, simulate
    from qora.ssb.live import LiveOptions, MerlinSimulator, open_source
    from qora.viewer.views import LiveSsbView

    sim = simulate(amorphous_slices((96, 96), 0.1, atoms_per_a2=0.1, seed=1), pixel=0.1, stride=4, window=32,
                   alpha_mrad=25.0, aberrations=Aberrations(C10=-120.0), dose=2e5, seed=3)
    data = sim.data.astype(np.uint16)
    with MerlinSimulator(data, fps=300, timeout=20, time_limit=60) as detector:
        view = LiveSsbView(open_source(detector.address), kv=300.0, alpha_mrad=25.0, scan_step=sim.scan_step,
                           rotation=0.0, backend="cpu", options=LiveOptions(refresh_s=0.3, fit_after=0.3))
        served = Served(view)
        page = browser.new_page()
        try:
            page.goto(served.url)
            page.wait_for_function("() => (document.querySelector('#ssb-live') || {}).textContent"
                                   "?.includes('live (running)')", timeout=30000)
            page.wait_for_function("() => document.querySelector('#ssb-live').textContent.includes('live (done)')",
                                   timeout=60000)
            detector.join()
            assert "0 dropped" in page.text_content("#ssb-live")
            page.click("#ssb-live-fit")
            _quiet(page)
            fitted = view.result.fit["standard"]["parameters"]["C10"]
            assert abs(float(page.input_value("#s-C10")) - fitted) <= 0.5  # the slider's step is 1 A
            got = _pixels(page, "#ssb-image")
            assert got.shape == data.shape[:2]
        finally:
            page.close()
            served.close()


def test_bragg_result_opens_as_a_strain_volume(browser, tmp_path):
    """`qora view` of a `qora phase bragg` result: the strain along G in the volume view's slices, labelled so."""
    from types import SimpleNamespace

    from qora.phase import CIRCLES_34IDC, BraggGeometry, BraggResult

    geometry = BraggGeometry(CIRCLES_34IDC, dict(Theta=0.0, Chi=90.0, Phi=-5.0, Delta=32.0, Gamma=12.0), 9000.0,
                             0.5, (55e-6, 55e-6), (256.0, 256.0), "Theta", 0.005)
    z = np.indices((20, 22, 24))[2].astype(float)
    support = np.zeros((20, 22, 24), bool)
    support[4:-4, 4:-4, 4:-4] = True
    strain = np.where(support, 1e-4 * (z - 12), np.nan)
    lab = support * (1.0 + 0j)
    result = BraggResult(lab, support, lab, support, 90.0, np.zeros(3), strain, np.where(support, 0.0, np.nan),
                         np.array([0.0, 0.0, 2.65]), SimpleNamespace(fourier_error=0.1), (0, 0, 0), {}, geometry)
    view = open_view(result.save(tmp_path / "bragg.h5"))
    info = view.info()
    assert info["quantity"].startswith("strain along G") and info["shape"] == [20, 22, 24]
    assert info["medium_index"] is None and info["range"][1] == -info["range"][0] > 0
    plane = view._plane({"axis": "0", "index": "10"})[0]
    np.testing.assert_allclose(plane[4:-4, 4:-4], strain[10, 4:-4, 4:-4], rtol=1e-6)
    caption, status = _volume_page_texts(browser, view, "index=10")
    assert "strain along G" in caption
    assert "medium" not in status


def _volume_page_texts(browser, view, query: str) -> tuple:
    """The volume page of ``view`` in the browser, once its slice image for ``query`` has loaded: the caption's and
    the status line's texts."""
    served = Served(view)
    try:
        page = browser.new_page()
        page.goto(served.url)
        page.wait_for_function("() => ((document.querySelector('#holo-image') || {dataset: {}}).dataset.query || '')"
                               f".includes('{query}')")
        texts = page.text_content("#holo-caption"), page.text_content("#status")
        page.close()
        return texts
    finally:
        served.close()


def test_ptycho_result_opens_as_its_slices(browser, tmp_path):
    """`qora view` of a `qora ssb ptycho` result: each slice's phase in the volume view, labelled with the slices'
    spacing, its profile in rad."""
    from qora.ssb.ptycho import Grid, PtychoResult

    phase = np.zeros((3, 30, 34))
    phase[1, 10:20, 12:22] = 0.5
    result = PtychoResult(objects=np.exp(1j * phase), probe=np.ones((1, 8, 8), complex), positions=np.zeros((4, 2)),
                          start_positions=np.zeros((4, 2)), losses=[0.1],
                          grid=Grid(window=8, pixel=0.125, wavelength=0.0197, slice_spacing=7.5), start={})
    view = open_view(result.save(tmp_path / "ptycho.h5"))
    info = view.info()
    assert info["quantity"] == "phase of each of 3 slice(s) (rad), 7.5 A apart" and info["shape"] == [3, 30, 34]
    assert info["profile_label"] == "phase (rad)" and info["pixel_um"] == pytest.approx(0.125e-4)
    np.testing.assert_allclose(view._plane({"axis": "0", "index": "1"})[0], phase[1], atol=1e-6)
    caption, _ = _volume_page_texts(browser, view, "index=")
    assert "phase of each of 3 slice(s)" in caption
