"""The figure of a ptychography result and the solver's checkpoints (the state saved after each pass, and read
back to go on from it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qora.io.errors import InputError
from qora.ssb.ptycho.solver import PtychoState

__all__ = ["plot_result", "save_state", "load_state"]


def plot_result(path, result) -> Path:
    """A PNG: the summed phase (rad; its linear ramp over the scanned region removed), the first probe mode's
    modulus, each slice's phase (up to 8), and the misfit per pass."""
    from qora.plot import save_png, subplots

    slices = result.objects.shape[0]
    shown = min(slices, 8) if slices > 1 else 0
    fig, axes = subplots(1, 3 + shown, figsize=(3.2 * (3 + shown), 3.2))
    extent = (0, result.phase.shape[1] * result.grid.pixel, result.phase.shape[0] * result.grid.pixel, 0)
    im = axes[0].imshow(result.phase, cmap="gray", extent=extent)
    axes[0].set(title="summed phase (rad)", xlabel="x (A)", ylabel="y (A)")
    fig.colorbar(im, ax=axes[0], shrink=0.8)
    axes[1].imshow(np.abs(result.probe[0]), cmap="magma")
    axes[1].set(title=f"probe mode 1 of {result.probe.shape[0]}", xticks=[], yticks=[])
    for s in range(shown):
        axes[2 + s].imshow(np.angle(result.objects[s]), cmap="gray", extent=extent)
        axes[2 + s].set(title=f"slice {s + 1} ({(s + 0.5) * result.grid.slice_spacing:.0f} A)", xticks=[], yticks=[])
    axes[-1].semilogy(np.arange(1, len(result.losses) + 1), result.losses)
    axes[-1].set(title="misfit", xlabel="pass")
    fig.tight_layout()
    save_png(fig, path)
    return Path(path)


def save_state(path, state: PtychoState) -> Path:
    """The solver's state as .npz (atomically: a stop mid-write leaves the last checkpoint)."""
    from qora.io.atomic import atomic_path

    arrays = {"objects": state.objects, "probe": state.probe, "positions": state.positions,
              "iteration": np.asarray(state.iteration), "losses": np.asarray(state.losses, float)}
    for name, value in state.adam.items():
        if isinstance(value, dict):
            arrays.update({f"adam_{name}_{k}": v for k, v in value.items()})
        else:
            arrays[f"adam_{name}"] = value
    host = {k: (v.get() if hasattr(v, "get") else np.asarray(v)) for k, v in arrays.items()}
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **host)
    return path


def load_state(path, xp=np) -> PtychoState:
    """A state written by :func:`save_state`, on ``xp``'s arrays."""
    try:
        with np.load(path) as archive:  # closed here: every array read now
            data = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable checkpoint ({exc})") from None
    missing = {"objects", "probe", "positions", "iteration", "losses"} - set(data)
    if missing:
        raise InputError(f"{path}: not a ptychography checkpoint (no {', '.join(sorted(missing))})")
    adam = {}
    for key in data:
        group = next((g for g in ("positions", "scale_moments", "spacing_moments") if key.startswith(f"adam_{g}_")),
                     None)
        if group == "positions":  # the positions' moments: arrays
            adam.setdefault(group, {})[key[len(f"adam_{group}_"):]] = xp.asarray(data[key])
        elif group is not None:  # the scale's and the spacing's: numbers
            adam.setdefault(group, {})[key[len(f"adam_{group}_"):]] = data[key].item()
        elif key.startswith("adam_"):
            value = data[key]
            adam[key[len("adam_"):]] = value.item() if value.ndim == 0 else xp.asarray(value)
    return PtychoState(objects=xp.asarray(data["objects"]), probe=xp.asarray(data["probe"]),
                       positions=xp.asarray(data["positions"]), iteration=int(data["iteration"]),
                       losses=list(map(float, data["losses"])), adam=adam)
