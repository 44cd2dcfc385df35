"use strict";
// qora view: one page for the three kinds of file. Plain JS, no build step.

const TOKEN = new URLSearchParams(location.search).get("token");
const AUTH = TOKEN ? { Authorization: "Bearer " + TOKEN } : {};
const $ = (sel) => document.querySelector(sel);
const main = $("#main");

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function showError(message) { $("#error").textContent = message || ""; }
function status(message) { $("#status").textContent = message; }

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { ...AUTH, ...(options.headers || {}) } });
  if (response.status >= 400) {
    let message = response.statusText;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return response;
}

function withToken(path) { return TOKEN ? path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN) : path; }

function download(blob, name) {
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a); a.click(); a.remove();
}

// One request in flight; while it runs, only the newest wanted state is kept, and sent when it
// returns: a slider dragged faster than the server answers shows its latest position, not a queue.
function coalescer(send) {
  let busy = false, pending = null;
  async function pump() {
    if (busy || pending === null) return;
    const job = pending; pending = null; busy = true;
    try { await send(job); showError(""); } catch (e) { showError(e.message); }
    busy = false; pump();
  }
  return (job) => { pending = job; pump(); };
}

function plot(canvas, series, { logY = false, xLabel = "", yLabel = "", highlight = -1 } = {}) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 36;
  ctx.clearRect(0, 0, w, h);
  const ys = series.flatMap((s) => s.y).filter((v) => Number.isFinite(v) && (!logY || v > 0));
  const xs = series.flatMap((s) => s.x);
  if (!ys.length) return;
  const f = logY ? Math.log10 : (v) => v;
  let y0 = Math.min(...ys.map(f)), y1 = Math.max(...ys.map(f));
  if (y1 === y0) { y1 += 1; }
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1;
  const px = (x) => pad + (w - 2 * pad) * (x - x0) / ((x1 - x0) || 1);
  const py = (y) => h - pad - (h - 2 * pad) * (f(y) - y0) / (y1 - y0);
  ctx.strokeStyle = "#999"; ctx.strokeRect(pad, pad, w - 2 * pad, h - 2 * pad);
  ctx.fillStyle = "#444"; ctx.font = "11px sans-serif";
  ctx.fillText(xLabel, w / 2 - 20, h - 8);
  ctx.fillText(yLabel + (logY ? " (log)" : ""), 4, 14);
  ctx.fillText((logY ? "1e" + y1.toFixed(1) : y1.toPrecision(3)), 4, pad + 4);
  ctx.fillText((logY ? "1e" + y0.toFixed(1) : y0.toPrecision(3)), 4, h - pad);
  series.forEach((s, i) => {
    ctx.strokeStyle = i === highlight ? "#d62728" : (highlight >= 0 ? "#bbb" : "#1f77b4");
    ctx.lineWidth = i === highlight ? 2 : 1;
    ctx.beginPath();
    s.x.forEach((x, k) => { const y = s.y[k]; if (!Number.isFinite(y) || (logY && y <= 0)) return; k ? ctx.lineTo(px(x), py(y)) : ctx.moveTo(px(x), py(y)); });
    ctx.stroke();
  });
}

// ---- 4D-STEM: sliders, the preview while dragging, the loss on release, fit from here ----
function buildSsb(info) {
  const image = el("img", { id: "ssb-image", class: "view", alt: "SSB phase" });
  const loss = el("span", { id: "ssb-loss", text: "loss: -" });
  const upsample = el("select", { id: "ssb-upsample" }, el("option", { value: "1", text: "1x" }), el("option", { value: "3", text: "3x (parallax)" }));
  // the method switch (Session.preview): thickness and tilt steer SSB alone; iCoM takes no aberrations
  const method = el("select", { id: "ssb-method" }, ...[["ssb", "SSB"], ["wdd", "WDD"], ["obf", "OBF"], ["parallax", "parallax"], ["icom", "iCoM"]]
    .map(([value, text]) => el("option", { value, text })));
  const controls = el("div", { class: "panel", id: "ssb-controls" });
  const inputs = {};
  for (const [name, s] of Object.entries(info.sliders)) {
    const input = el("input", { type: "range", id: "s-" + name, min: s.min, max: s.max, step: s.step, value: info.start[name] ?? 0 });
    const value = el("span", { class: "value", id: "v-" + name });
    const show = () => { value.textContent = Number(input.value).toPrecision(4) + " " + s.unit; };
    show();
    input.addEventListener("input", (e) => { show(); want(e.timeStamp, false); });
    input.addEventListener("change", (e) => { show(); want(e.timeStamp, true); });
    inputs[name] = input;
    controls.append(el("label", { class: "slider" }, el("span", { text: s.label }), input, value));
  }
  const values = () => Object.fromEntries(Object.entries(inputs).map(([k, i]) => [k, Number(i.value)]));
  const fitButton = el("button", { id: "ssb-fit", text: "fit from here" });
  const progress = el("progress", { id: "ssb-fit-progress", max: 20, value: 0 });
  const exportPng = el("button", { id: "ssb-export-png", text: "image (PNG)" });
  const exportNpy = el("button", { id: "ssb-export-npy", text: "phase (.npy)" });
  const exportJson = el("button", { id: "ssb-export-json", text: "parameters (JSON)" });
  controls.append(el("div", { class: "row" }, el("span", { text: "preview" }), method, upsample, loss),
    el("div", { class: "row" }, fitButton, progress),
    el("div", { class: "row" }, el("span", { text: "export" }), exportPng, exportNpy, exportJson));
  main.append(controls, el("div", { class: "panel" }, image,
    el("span", { class: "caption", text: `${info.file}: ${info.scan[0]} x ${info.scan[1]} scan, ${info.kv} kV, ${info.alpha_mrad} mrad, ${info.bright_field_pixels} bright-field pixels, ${info.backend}` })));

  window.qoraLatency = [];
  const client = Math.random().toString(36).slice(2);
  let seq = 0, lastBlob = null;
  const send = coalescer(async (job) => {
    const mine = ++seq;
    const response = await api("/api/ssb/preview", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ params: job.params, upsample: Number(upsample.value), method: job.method, loss: job.loss, seq: mine, client }) });
    if (response.status === 204) return;
    const blob = await response.blob();
    const serverMs = Number(response.headers.get("X-Server-Ms"));
    if (response.headers.get("X-Loss")) loss.textContent = "loss: " + Number(response.headers.get("X-Loss")).toPrecision(6);
    else if (!job.loss) loss.textContent = "loss: (on release)";
    await new Promise((resolve, reject) => {
      image.onload = () => {
        // what the image shows is said once it shows it (a reader of these never sees the last image's pixels)
        image.dataset.params = JSON.stringify(job.params);
        image.dataset.seq = String(mine);
        image.dataset.loss = job.loss ? "1" : "0";
        image.dataset.method = job.method;
        window.qoraLatency.push({ total_ms: performance.now() - job.t, server_ms: serverMs, bytes: blob.size });
        resolve();
      };
      image.onerror = () => reject(new Error("the image did not decode"));
      image.src = URL.createObjectURL(blob);
    });
    lastBlob = blob;
    status(`preview ${serverMs.toFixed(1)} ms on the server`);
  });
  function want(t, withLoss) { send({ params: values(), method: method.value, loss: withLoss, t: t ?? performance.now() }); }
  upsample.addEventListener("change", (e) => want(e.timeStamp, true));
  method.addEventListener("change", (e) => want(e.timeStamp, true));

  // live mode: the scan is still arriving; each new refresh redraws the image at the sliders' values,
  // and the live fit is shown (and put on the sliders by "use the live fit")
  if (info.live) {
    const liveFit = el("button", { id: "ssb-live-fit", text: "use the live fit" });
    const liveText = el("span", { id: "ssb-live", text: "live: waiting for the first rows" });
    controls.append(el("div", { class: "row" }, liveFit, liveText));
    let rows = 0, fitted = null;
    liveFit.addEventListener("click", () => {
      if (!fitted) return;
      for (const [k, v] of Object.entries(fitted)) if (inputs[k]) { inputs[k].value = v; inputs[k].dispatchEvent(new Event("input")); }
      want(performance.now(), true);
    });
    const poll = async () => {
      try {
        const s = await (await api("/api/ssb/live")).json();
        fitted = s.fit;
        const st = s.statistics || {};
        liveText.textContent = `live (${s.state}): ${s.rows} rows, ${Math.round(st.received_fps || 0)} frames/s, ${st.dropped || 0} dropped` +
          (s.fit ? `; fit C10 ${s.fit.C10.toFixed(1)} A, C12 ${(s.fit.C12 || 0).toFixed(1)} A at ${(s.fit.C12_angle || 0).toFixed(1)} deg` : "") +
          (s.error ? "; " + s.error : "");
        if (s.rows !== rows) { rows = s.rows; want(performance.now(), false); }
        if (s.state === "running") setTimeout(poll, 1000);
      } catch (e) { showError(e.message); setTimeout(poll, 2000); }
    };
    poll();
  }

  fitButton.addEventListener("click", async () => {
    try {
      let state = await (await api("/api/ssb/fit", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ params: values() }) })).json();
      fitButton.disabled = true;
      while (state.state === "running") {
        progress.value = state.done || 0;
        await new Promise((r) => setTimeout(r, 200));
        state = await (await api("/api/ssb/fit")).json();
      }
      fitButton.disabled = false;
      if (state.state === "error") throw new Error(state.error);
      progress.value = 20;
      for (const [k, v] of Object.entries(state.result)) if (inputs[k]) { inputs[k].value = v; inputs[k].dispatchEvent(new Event("input")); }
      status(`fit done: agreement ${state.agreement.toFixed(5)}`);
      want(performance.now(), true);
    } catch (e) { fitButton.disabled = false; showError(e.message); }
  });
  exportPng.addEventListener("click", () => lastBlob && download(lastBlob, "ssb-preview.png"));
  exportJson.addEventListener("click", () => download(new Blob([JSON.stringify({ file: info.file, sliders: values(), units: Object.fromEntries(Object.entries(info.sliders).map(([k, s]) => [k, s.unit])), loss: loss.textContent }, null, 1)], { type: "application/json" }), "ssb-parameters.json"));
  exportNpy.addEventListener("click", async () => {
    try {
      const r = await api("/api/ssb/image.npy", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ params: values(), upsample: Number(upsample.value), method: method.value }) });
      download(await r.blob(), "ssb-phase.npy");
    } catch (e) { showError(e.message); }
  });
  if (!info.live) want(performance.now(), true);
}

// ---- phase results: images, error curves of all starts, PRTF ----
function buildPhase(info) {
  const images = el("div", { class: "row" });
  for (const what of ["amplitude", "phase", "support"]) {
    const img = el("img", { id: "phase-" + what, class: "small", alt: what, src: withToken("/api/phase/image/" + what) });
    images.append(el("div", { class: "panel" }, el("span", { text: what }), img));
  }
  const errors = el("canvas", { id: "phase-errors", width: 520, height: 300 });
  const prtf = el("canvas", { id: "phase-prtf", width: 520, height: 300 });
  main.append(images, el("div", { class: "panel" }, el("span", { text: `Fourier error of all ${info.starts} starts (best, ${info.best}, in red)` }), errors),
    el("div", { class: "panel" }, el("span", { id: "phase-prtf-note", text: "PRTF " + (info.prtf.note || "") }), prtf));
  plot(errors, info.errors.map((y) => ({ x: y.map((_, k) => k * info.error_stride), y })), { logY: true, xLabel: "iteration", yLabel: "Fourier error", highlight: info.best });
  if (info.prtf.q) plot(prtf, [{ x: info.prtf.q, y: info.prtf.prtf }], { xLabel: "q (cycles/pixel)", yLabel: "PRTF" });
  status(`${info.file}: ${info.shape.join(" x ")}, ${info.recipe}, Fourier error ${info.fourier_error.toExponential(2)}`);
}

// ---- holography volumes: orthogonal slices, a line profile, the colour scale ----
function buildHolo(info) {
  const axis = el("select", { id: "holo-axis" }, el("option", { value: "0", text: "z (x-y planes)" }), el("option", { value: "1", text: "y (x-z planes)" }), el("option", { value: "2", text: "x (y-z planes)" }));
  const slice = el("input", { type: "range", id: "holo-slice", min: 0, max: info.shape[0] - 1, step: 1, value: Math.floor(info.shape[0] / 2) });
  const time = el("input", { type: "range", id: "holo-time", min: 0, max: info.times.length - 1, step: 1, value: 0 });
  const label = el("span", { class: "value", id: "holo-slice-value" });
  const image = el("img", { id: "holo-image", class: "view", alt: "slice" });
  const profile = el("canvas", { id: "holo-profile", width: 520, height: 260 });
  main.append(el("div", { class: "panel" },
    el("label", { class: "row" }, el("span", { text: "axis" }), axis),
    el("label", { class: "slider" }, el("span", { text: "slice" }), slice, label),
    el("label", { class: "slider" }, el("span", { text: "time point" }), time, el("span", { class: "value", id: "holo-time-value" })),
    el("div", { class: "row" }, el("span", { text: info.range[0].toFixed(4) }), el("div", { class: "colorbar" }), el("span", { text: info.range[1].toFixed(4) })),
    el("span", { class: "caption", id: "holo-caption", text: `${info.quantity || "refractive index"}; profile along the slice's middle row` }), profile),
    el("div", { class: "panel" }, image));
  const send = coalescer(async (q) => {
    const query = `axis=${q.axis}&index=${q.index}&t=${q.t}`;
    const blob = await (await api("/api/holo/slice?" + query)).blob();
    await new Promise((resolve) => { image.onload = resolve; image.dataset.query = query; image.src = URL.createObjectURL(blob); });
    const p = await (await api("/api/holo/profile?" + query)).json();
    plot(profile, [{ x: p.x_um, y: p.index_values }], { xLabel: "position (um)", yLabel: info.profile_label || (info.quantity ? "strain" : "index") });
  });
  function update() {
    const a = Number(axis.value);
    slice.max = info.shape[a] - 1;
    const t = info.times[Number(time.value)];
    label.textContent = `${slice.value} (${((slice.value - Math.floor(info.shape[a] / 2)) * info.pixel_um).toFixed(2)} um)`;
    $("#holo-time-value").textContent = String(t);
    send({ axis: a, index: Number(slice.value), t });
  }
  for (const c of [axis, slice, time]) c.addEventListener("input", update);
  status(`${info.file}: ${info.shape.join(" x ")} voxels of ${info.pixel_um} um` + (info.medium_index == null ? "" : `, medium ${info.medium_index}`));
  update();
}

(async () => {
  try {
    const info = await (await api("/api/info")).json();
    $("#file").textContent = info.file;
    document.body.dataset.kind = info.kind;
    ({ ssb: buildSsb, phase: buildPhase, holo: buildHolo })[info.kind](info);
  } catch (e) { showError(e.message); }
})();
