"""4D-STEM fits over data larger than one device: G(Q, k) split over workers by bright-field pixel.

Each worker reads the scan's frames for its share of the bright-field pixels and holds that
shard of G (a :class:`qora.ssb.Session` made with ``pixels=``), on its GPU where it has
one. The agreement of a parameter set is sum_Q |S(Q)|^2 / N(Q) / T with S, N and T sums over k
(:meth:`qora.ssb.Band.moments`): each shard returns its partial sums for a batch of
sets (and for Newton their first and second derivatives), the client adds them up and finishes
the agreement (:func:`qora.ssb.combine_moments`). The fits of :mod:`qora.ssb.fitting` and
:mod:`qora.ssb.optimize` run unchanged on a :class:`ShardedSession`: it makes :class:`ShardedBand`
where they make a Band.

A shard is a Dask future: if its worker dies, Dask makes it again on another worker from the
same inputs (the file is read again), and the pass that was waiting on it completes.
"""

from __future__ import annotations

import os

import numpy as np

from qora.distributed.cluster import dask_distributed

__all__ = ["ShardedSession", "ShardedBand"]


def _open(data):
    """The 4D data on a worker: a path is opened there (memory-mapped where the format allows)."""
    from pathlib import Path

    if isinstance(data, (str, Path)):
        from qora.ssb import read_dataset

        return read_dataset(data)[0]
    return data


def _mean_pattern_part(data, rows: slice):
    """The sum of the frames of the scan rows ``rows`` (float64) and their count."""
    from qora.ssb import array_like

    frames = array_like(_open(data))[rows]
    return np.asarray(frames, np.float64).sum((0, 1)), frames.shape[0] * frames.shape[1]


def _make_shard(data, options: dict, pixels: slice):
    from qora.ssb import Session

    return Session(_open(data), pixels=pixels, **options)


def _make_band(shard, parameters, kwargs):
    from qora.ssb import Band

    return Band(shard, parameters, **kwargs)


def _band_facts(band):
    return band.total, band.shape


def _moments(band, values, order):
    return _host(band.moments(values, order=order))


def _batch_moments(band, sets):
    return _host(band.batch_moments(sets))


def _submit_beside(client, held, fn, *args):
    """``fn(held, *args)`` on the worker that holds ``held`` (a shard or its band), where its data
    are: Dask prefers it anyway, this keeps work stealing from copying G; another worker takes
    it only when that one is gone."""
    holders = list(client.who_has([held]).get(held.key, ()))
    if not holders:  # not computed yet, or being made again: wherever Dask puts it
        return client.submit(fn, held, *args, pure=False)
    return client.submit(fn, held, *args, pure=False, workers=holders, allow_other_workers=True)


def _host(moments: dict) -> dict:
    return {k: (v.get() if hasattr(v, "get") else v) for k, v in moments.items()}


class ShardedSession:
    """The bright field of a 4D-STEM scan split over a Dask cluster's workers, for the fits.

    Parameters
    ----------
    data : path or array (scan_row, scan_col, det_row, det_col)
        A dataset file (read by each worker: the workers must see the same file system) or an
        array (sent to the workers; for data that fits the client).
    client : distributed.Client
    kv, alpha_mrad, scan_step, rotation, detector, chunk
        As for :class:`qora.ssb.Session`: accelerating voltage (kV), convergence semi-angle (mrad),
        scan step (A), scan rotation (rad). Without ``detector`` the disk is fitted on the
        mean pattern, summed over scan rows by the workers.
    shards : int, optional
        Pieces of the bright-field pixel list (default: one per worker).
    backend : {"auto", "cpu", "cuda"}
        Where each worker holds its shard ("auto": its GPU where it has one).

    Notes
    -----
    The fits of :mod:`qora.ssb.fitting` (``qora.ssb.fit``, ``fit_rotation``) accept it as their
    session; images need the whole bright field in one :class:`Session`.
    """

    def __init__(self, data, *, client, kv: float, alpha_mrad: float, scan_step: float, rotation: float = 0.0,
                 detector=None, shards: int | None = None, backend="auto", chunk: int = 512) -> None:
        from qora.io.errors import InputError
        from qora.io.validate import integer
        from qora.ssb import bright_field_pixels, fit_detector_from_mean, wavelength
        from qora.ssb import check_data, check_settings

        # the settings are checked here, before the cluster is asked for anything
        kv, alpha_mrad, scan_step, rotation = check_settings(kv, alpha_mrad, scan_step, rotation)
        chunk = integer("chunk", chunk, low=1)
        if shards is not None:
            shards = integer("shards", shards, low=1)
        self.client = client
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        count = workers if shards is None else shards
        probe = check_data(_open(data))
        self.scan_shape = probe.shape[:2]
        self.detector_shape = probe.shape[2:]
        del probe
        remote = data if isinstance(data, (str, os.PathLike)) else client.scatter(data, broadcast=True, hash=False)
        # the mean pattern, summed over blocks of scan rows by the workers: the detector fit and the
        # bright field's level (every shard normalises by the whole bright field's, so they add up)
        rows = np.array_split(np.arange(self.scan_shape[0]), max(1, min(workers, self.scan_shape[0])))
        parts = client.gather([client.submit(_mean_pattern_part, remote, slice(int(r[0]), int(r[-1]) + 1), pure=False)
                               for r in rows if len(r)])
        mean = sum(p for p, _ in parts) / sum(n for _, n in parts)
        if detector is None:
            detector = fit_detector_from_mean(mean, alpha_mrad)
        self.kv, self.alpha_mrad, self.scan_step, self.rotation = float(kv), float(alpha_mrad), scan_step, rotation
        self.wavelength = wavelength(kv)
        self.detector = detector
        self.bf_index, self.k = bright_field_pixels(self.detector_shape, detector, alpha_mrad, kv)
        if not len(self.bf_index):
            raise InputError("no detector pixel inside the bright-field disk")
        self.level = float(mean.ravel()[self.bf_index].mean())
        nbf = len(self.bf_index)
        if count > nbf:
            raise InputError(f"shards: {count} shards for {nbf} bright-field pixels")
        bounds = np.linspace(0, nbf, count + 1).round().astype(int)
        self.pixels = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        options = dict(kv=kv, alpha_mrad=alpha_mrad, scan_step=scan_step, rotation=rotation, detector=detector,
                       chunk=chunk, backend=backend, level=self.level)
        self.shards = [client.submit(_make_shard, remote, options, p, pure=False) for p in self.pixels]
        dask_distributed().wait(self.shards)
        failed = [f for f in self.shards if f.status == "error"]
        if failed:
            failed[0].result()  # raises the first shard's error

    def q_half(self, rotation: float | None = None):
        """(Qy, Qx) (1/A) of the half plane, as :meth:`Session.q_half`."""
        from qora.ssb import scan_frequencies

        return scan_frequencies(self.scan_shape, self.scan_step, self.rotation if rotation is None else rotation,
                                half=True)

    def make_band(self, parameters, **kwargs) -> "ShardedBand":
        return ShardedBand(self, parameters, **kwargs)

    def close(self) -> None:
        """Release the shards' memory on the workers."""
        for f in self.shards:
            f.release()
        self.shards = []


class ShardedBand:
    """A :class:`qora.ssb.Band` whose G is split over workers: the same interface
    (``parameters``, ``evaluate``, ``evaluate_batch``, ``uncertainties``), each pass one task
    per shard and a sum of their moments on the client."""

    def __init__(self, session: ShardedSession, parameters, **kwargs) -> None:
        client = session.client
        self.client = client
        self.parameters = tuple(parameters)
        self._bands = [_submit_beside(client, shard, _make_band, self.parameters, kwargs) for shard in session.shards]
        facts = client.gather([_submit_beside(client, b, _band_facts) for b in self._bands])
        self.total = float(sum(t for t, _ in facts))
        nq = facts[0][1][0]
        self.shape = (nq, sum(s[1] for _, s in facts))

    def uncertainties(self, agreement: float, hessian) -> dict:
        """As :meth:`Band.uncertainties`: :func:`qora.ssb.uncertainties` of this band's shape, total and parameters."""
        from qora.ssb import uncertainties

        return uncertainties(agreement, hessian, total=self.total, shape=self.shape, parameters=self.parameters)

    def _sum(self, fn, *args) -> dict:
        parts = self.client.gather([_submit_beside(self.client, b, fn, *args) for b in self._bands])
        return {k: sum(p[k] for p in parts) for k in parts[0]}

    def evaluate(self, values: dict, *, order: int = 2):
        from qora.ssb import combine_moments

        return combine_moments(self._sum(_moments, dict(values), order), self.total, order)

    def evaluate_batch(self, sets) -> np.ndarray:
        from qora.ssb import combine_batch_moments

        return combine_batch_moments(self._sum(_batch_moments, [dict(v) for v in sets]), self.total)
