"""Notebook widgets (anywidget): sliders and the image they drive, computed in the kernel.

:func:`slider_image` makes a widget from a description of sliders, their start, and a ``render``
function from slider values to PNG bytes and a status line. The engines give it their own sliders and
renderers (``qora.ssb.Session.widget()``); the browser viewer uses the same slider definitions and
PNG rendering (:func:`qora.plot.png`), so the two front ends show the same thing.

The widget's state is three synced traits: ``values`` (slider name -> number; the page sets it, and a
script can too), ``image`` (PNG bytes) and ``status`` (the image's range, or the error of a refused
value, in which case the image stays as it was). Needs the ``notebook`` extra (anywidget).
"""

from __future__ import annotations

import functools

from qora.io.errors import MissingExtra, QoraError

__all__ = ["slider_image"]

_ESM = """
function render({ model, el }) {
  const spec = model.get("sliders");
  const img = document.createElement("img");
  img.style.maxWidth = "100%";
  const status = document.createElement("div");
  const box = document.createElement("div");
  box.style.display = "grid";
  box.style.gridTemplateColumns = "16em 1fr 6em";
  box.style.gap = "2px 8px";
  for (const [name, s] of Object.entries(spec)) {
    const label = document.createElement("label");
    label.textContent = s.unit ? `${s.label} (${s.unit})` : s.label;
    let input;
    if (s.options) {  // a choice
      input = document.createElement("select");
      for (const option of s.options) input.append(new Option(option, option));
    } else {
      input = document.createElement("input");
      Object.assign(input, { type: "range", min: s.min, max: s.max, step: s.step });
    }
    input.value = model.get("values")[name] ?? (s.options ? s.options[0] : 0);
    input.dataset.name = name;
    const shown = document.createElement("span");
    shown.textContent = s.options ? "" : input.value;
    input.addEventListener("input", () => {
      if (!s.options) shown.textContent = input.value;
      const value = s.options ? input.value : Number(input.value);
      model.set("values", { ...model.get("values"), [name]: value });
      model.save_changes();
    });
    box.append(label, input, shown);
  }
  let url = null;
  const show = () => {
    const data = model.get("image");
    if (data && data.byteLength) {
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(new Blob([data], { type: "image/png" }));
      img.src = url;
    }
    status.textContent = model.get("status");
  };
  model.on("change:image", show);
  model.on("change:status", show);
  show();
  el.append(img, status, box);
}
export default { render };
"""


@functools.lru_cache(maxsize=1)
def _widget_class():
    try:
        import anywidget
        import traitlets
    except ImportError as exc:
        raise MissingExtra("notebook widgets need anywidget: pip install 'qora[notebook]'") from exc

    class SliderImage(anywidget.AnyWidget):
        """Sliders and the image they drive (see :mod:`qora.widgets`)."""

        _esm = _ESM
        sliders = traitlets.Dict().tag(sync=True)
        values = traitlets.Dict().tag(sync=True)
        image = traitlets.Bytes(b"").tag(sync=True)
        status = traitlets.Unicode("").tag(sync=True)

        def __init__(self, sliders: dict, start: dict, render) -> None:
            super().__init__(sliders=sliders, values=dict(start))
            self._render = render
            self.observe(self._redraw, names="values")
            self._redraw()

        def _redraw(self, change=None) -> None:
            try:
                data, note = self._render(dict(self.values))
            except (QoraError, ValueError) as exc:  # a refused value: say why, keep the last image
                self.status = f"Error: {exc}"
                return
            self.image = data
            self.status = note

    return SliderImage


def slider_image(sliders: dict, start: dict, render):
    """A widget of ``sliders`` (name -> {"label", "unit", "min", "max", "step"}, or {"label",
    "options": [...]} for a choice) starting at ``start`` (name -> value) whose image is
    ``render(values) -> (png_bytes, status_text)``, redrawn on each change of the values."""
    return _widget_class()(sliders, start, render)
