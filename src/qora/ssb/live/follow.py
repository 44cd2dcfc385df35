"""A Merlin ``.mib`` file while the detector software writes it (follow mode): frames are read as
the file grows, placed by the frame numbers in their headers, until the scan is complete or the
file has not grown for ``idle_s`` seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from qora.io.errors import FileFormatError, InputError
from qora.ssb.live.frames import Frames, Source, bound_scan, check_scan_shape
from qora.ssb.live.merlin import decode_frame, header_number
from qora.ssb.readers import check_raw, header_fields, merlin_frame_header

__all__ = ["FollowMibSource"]


class FollowMibSource(Source):
    """Frames of a ``.mib`` file being written. ``scan_shape`` (rows, cols), else from the ``.hdr``
    beside it (frames in acquisition / frames per trigger). ``poll_s``: seconds between looks at
    the file's size; ``idle_s``: seconds without growth that end the stream (the acquisition
    stopped short); ``batch``: frames per batch at most."""

    def __init__(self, path, *, scan_shape=None, poll_s: float = 0.05, idle_s: float = 10.0, batch: int = 256) -> None:
        super().__init__()
        self.path = Path(path)
        self.scan_shape = None if scan_shape is None else tuple(int(v) for v in scan_shape)
        self.poll_s, self.timeout, self.batch = float(poll_s), float(idle_s), int(batch)
        self._file = None

    def __repr__(self) -> str:
        return f"FollowMibSource({str(self.path)!r})"

    def _wait_for(self, size: int) -> bool:
        """Wait until the file holds ``size`` bytes; False when it stops growing for ``idle_s``."""
        last, since = -1, time.perf_counter()
        while True:
            now_size = self.path.stat().st_size if self.path.exists() else 0
            if now_size >= size:
                return True
            if now_size != last:
                last, since = now_size, time.perf_counter()
            elif time.perf_counter() - since > self.timeout:
                return False
            time.sleep(self.poll_s)

    def open(self) -> None:
        if self._file is not None:
            return
        if not self._wait_for(768):
            raise InputError(f"{self.path}: no frame written within {self.timeout:g} s")
        hdr_path = self.path.with_suffix(".hdr")
        hdr = header_fields(hdr_path.read_bytes().decode("latin-1")) if hdr_path.is_file() else {}
        self.metadata = {"detector": {"name": "Quantum Detectors Merlin", "header": hdr}}
        self.counter_depth = header_number(hdr, "Counter Depth (number)", str(hdr_path)) or None
        with open(self.path, "rb") as f:
            try:
                head = merlin_frame_header(f.read(768).decode("latin-1").split(","), counter_depth=self.counter_depth)
            except FileFormatError as error:
                raise FileFormatError(f"{self.path}: {error}") from None
        self.frame_bytes = head["header_size"] + head["payload"]
        self.detector_shape = (head["rows"], head["cols"])
        if head["pixel_format"] == "R64":
            check_raw(hdr, head["assembly"], str(self.path), counter_depth=head["counter_depth"])
        frames = header_number(hdr, "Frames in Acquisition (Number)", str(hdr_path))
        per_trigger = header_number(hdr, "Frames per Trigger (Number)", str(hdr_path))
        shape = (frames // per_trigger, per_trigger) if 1 < per_trigger < frames and frames % per_trigger == 0 else None
        check_scan_shape(str(self.path), self.scan_shape, frames, header=hdr_path.name, shape=shape)
        if self.scan_shape is None:
            if shape is None:
                raise InputError(f"{self.path}: no scan shape in its .hdr; give it (scan_shape=(rows, cols), "
                                 "--scan-shape ROWS COLS)")
            self.scan_shape = bound_scan(str(self.path), shape, hdr_path.name)
        self._file = open(self.path, "rb")

    def __iter__(self):
        self.open()
        total = self.scan_shape[0] * self.scan_shape[1]
        done = 0
        while done < total:
            if not self._wait_for((done + 1) * self.frame_bytes):
                break
            available = min(total - done, self.batch, self.path.stat().st_size // self.frame_bytes - done)
            self._file.seek(done * self.frame_bytes)
            raw = self._file.read(available * self.frame_bytes)
            if len(raw) != available * self.frame_bytes:
                raise FileFormatError(f"{self.path}: shorter than its size says (truncated while read?)")
            pairs = [decode_frame(memoryview(raw)[i * self.frame_bytes:(i + 1) * self.frame_bytes],
                                  self.detector_shape, where=str(self.path), counter_depth=self.counter_depth)
                     for i in range(available)]
            done += available
            yield Frames(np.array([i for i, _ in pairs]), np.stack([f for _, f in pairs]))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
