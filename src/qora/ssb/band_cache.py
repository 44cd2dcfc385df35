"""The fits' band of G cached on a session: the rows of G at a band of scan frequencies, gathered
once for the several bands the fits make of one band of frequencies (standard, thick, the
Hessian's) and shared with the session's reoriented copies. At full scale one band is 3 GB."""

from __future__ import annotations

import numpy as np

__all__ = ["BandCache"]


class BandCache:
    """What :class:`qora.ssb.Session` mixes in for its band cache; it reads the session's ``G``,
    ``xp`` and :meth:`host_G`."""

    def band_rows(self, keep, *, on_device: bool):
        """The rows of G at the half-plane frequencies ``keep`` (a boolean mask of :meth:`q_half`'s
        shape) and sum |G|^2 over them: ``(rows (nq, nbf), total)``, on the device with
        ``on_device`` (G held there), else host arrays. What a :class:`qora.ssb.band.Band` is made
        of: the fits make several bands of one band of frequencies (standard, thick, the Hessian's),
        and at full scale each gather is 3 GB, so the last one is kept (the memory of one more band
        is all it costs; :attr:`band_cache_bytes`, :meth:`clear_band_cache`). A pickled session
        leaves it behind."""
        key = keep.tobytes()
        holder = self._band_holder()
        if holder.get("key") == key:
            return holder["G"], holder["total"]
        holder.clear()  # the old band goes before the new one is gathered: never two held (3 GB each)
        xp = self.xp if on_device else np
        G = self.G[xp.asarray(keep)] if on_device else self.host_G()[keep]
        # a float64 sum in blocks of rows, with no G-sized temporary
        total = float(sum(float(xp.sum(xp.abs(G[i:i + 4096]) ** 2, dtype=np.float64)) for i in range(0, G.shape[0], 4096)))
        holder.update(key=key, G=G, total=total)
        return G, total

    def _band_holder(self) -> dict:
        """The band cache (:meth:`band_rows`), one dict shared with this session's reoriented copies
        (:func:`qora.ssb.orientation.reorient`), whose G and bands are this session's: a fit's
        orientation check and its reoriented work session gather no band of their own (at full scale
        that was 2.9 GiB more in the pool, and 25 ms a fit)."""
        holder = self.__dict__.get("_band_cache")
        if holder is None:
            holder = self._band_cache = {}
        return holder

    @property
    def band_cache_bytes(self) -> int:
        """Bytes of the cached band of G (:meth:`band_rows`), 0 when none is cached."""
        holder = self.__dict__.get("_band_cache")
        return int(holder["G"].nbytes) if holder else 0

    def clear_band_cache(self) -> None:
        """Drop the cached band of G (:meth:`band_rows` makes it again when needed), for this session
        and its reoriented copies."""
        self._band_holder().clear()

    _band_cache = None  # {key: mask bytes, G: rows of G, total} of band_rows, shared with reoriented copies
