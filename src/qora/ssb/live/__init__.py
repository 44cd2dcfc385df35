"""Live 4D-STEM: frames received from a detector while the scan runs, G(Q, k) built as they
arrive, the SSB and parallax images and the aberration fit of the rows so far (docs/ssb.md, "Live").

- :mod:`~qora.ssb.live.frames`: :class:`Frames`, :class:`Source`, :class:`MemorySource`, the
  placement of frames on the scan and the report of dropped, late and out-of-order ones.
- :mod:`~qora.ssb.live.accumulate`: :class:`LiveG`, the rows of G transformed as they close.
"""

from qora.ssb.live.accumulate import LiveG
from qora.ssb.live.frames import FrameReport, Frames, MemorySource, Placement, Source

__all__ = ["LiveG", "Frames", "Source", "MemorySource", "Placement", "FrameReport"]
