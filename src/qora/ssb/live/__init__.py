"""Live 4D-STEM: frames received from a detector while the scan runs, G(Q, k) built as they
arrive, the SSB and parallax images and the aberration fit of the rows so far (docs/ssb.md, "Live").

>>> from qora.ssb import live  # doctest: +SKIP
>>> with live.MerlinSimulator(scan.data, fps=2000) as sim:  # doctest: +SKIP
...     result = live.run_live(live.open_source(sim.address), kv=300, alpha_mrad=25, scan_step=0.4)

- :mod:`~qora.ssb.live.frames`: :class:`Frames`, :class:`Source`, :class:`MemorySource`, the
  placement of frames on the scan and the report of dropped, late and out-of-order ones.
- :mod:`~qora.ssb.live.merlin` (normal and RAW frames, single chip and quad),
  :mod:`~qora.ssb.live.dectris` (stream v1 JSON and v2 CBOR, with :mod:`~qora.ssb.live.cbor`,
  :mod:`~qora.ssb.live.stream2`, :mod:`~qora.ssb.live.bslz4`), :mod:`~qora.ssb.live.follow`,
  :mod:`~qora.ssb.live.sources`: the detector streams and files.
- :mod:`~qora.ssb.live.receivers`: :class:`ParallelDectrisSource`, several receiving processes on
  one DECTRIS stream (its PUSH socket deals the frames among them), batches in shared memory.
- :mod:`~qora.ssb.live.ingest`: the host's one pass over each batch (the mean pattern, the
  bright-field gather, page-locked staging for the device).
- :mod:`~qora.ssb.live.bslz4_batch`, :mod:`~qora.ssb.live.bslz4_device`: DECTRIS frames kept
  compressed and decoded on the GPU (:class:`~qora.ssb.live.bslz4_batch.CompressedFrames`, the
  block table, the kernel's Numba twin; the double-buffered device decoder).
- :mod:`~qora.ssb.live.accumulate`: :class:`LiveG`, the rows of G transformed as they close.
- :mod:`~qora.ssb.live.fitting`, :mod:`~qora.ssb.live.run`: the fit warm-started as rows arrive,
  :func:`run_live` with its receive queue, statistics and refreshes.
- :mod:`~qora.ssb.live.simulate`: Merlin and DECTRIS simulators on 127.0.0.1, a ``.mib`` writer.
"""

from qora.ssb.live.accumulate import LiveG
from qora.ssb.live.bslz4_batch import CompressedFrames
from qora.ssb.live.dectris import DectrisZMQSource
from qora.ssb.live.follow import FollowMibSource
from qora.ssb.live.frames import FrameReport, Frames, MemorySource, Placement, Source
from qora.ssb.live.merlin import MerlinTCPSource
from qora.ssb.live.receivers import RECEIVER_BATCH, ParallelDectrisSource
from qora.ssb.live.run import FellBehind, LiveOptions, LiveResult, LiveUpdate, run_live
from qora.ssb.live.simulate import DectrisSimulator, MerlinSimulator, MibWriter
from qora.ssb.live.sources import open_source

__all__ = ["LiveG", "CompressedFrames", "Frames", "Source", "MemorySource", "Placement", "FrameReport",
           "MerlinTCPSource", "DectrisZMQSource", "ParallelDectrisSource", "FollowMibSource", "open_source", "run_live", "LiveOptions", "LiveResult",
           "LiveUpdate", "FellBehind", "MerlinSimulator", "DectrisSimulator", "MibWriter", "RECEIVER_BATCH"]
