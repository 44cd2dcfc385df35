"""A source named by text, as ``qora ssb live SOURCE`` takes it."""

from __future__ import annotations

from pathlib import Path

from qora.io.errors import InputError
from qora.ssb.live.frames import MemorySource, check_scan_shape

__all__ = ["open_source"]


def open_source(text: str, *, protocol: str | None = None, scan_shape=None, timeout: float = 10.0,
                follow: bool = False, batch: int = 256, processes: int = 1):
    """The :class:`qora.ssb.live.Source` that ``text`` names:

    - ``tcp://HOST:PORT``: a Merlin's TCP data port (``protocol`` "merlin", the default for tcp);
    - ``zmq://HOST:PORT`` or ``zmq+tcp://HOST:PORT``, or ``tcp://`` with ``protocol`` "dectris": a
      DECTRIS detector's ZeroMQ stream;
    - a path: with ``follow``, a ``.mib`` file being written; else a finished file
      (:func:`qora.ssb.load_data`) sent from memory, for trying the live path on a recording.

    ``scan_shape`` (rows, cols) where the header does not say it, or agreeing with the frames it says
    (another grid of as many frames; one that disagrees is an InputError); ``timeout`` (s) bounds each wait.
    ``processes``: receiving processes on a DECTRIS stream (its PUSH socket deals the frames among
    them, :class:`qora.ssb.live.receivers.ParallelDectrisSource`); a Merlin's TCP stream is one
    connection, read by one.
    """
    if protocol not in (None, "merlin", "dectris"):
        raise InputError(f"protocol must be 'merlin' or 'dectris', got {protocol!r}")
    processes = int(processes)
    if processes < 1:
        raise InputError(f"processes must be at least 1, got {processes}")
    for scheme in ("zmq+tcp://", "zmq://", "tcp://"):
        if text.startswith(scheme):
            address = text[len(scheme):]
            host, sep, port = address.rpartition(":")
            if not sep or not port.isdigit() or not host:
                raise InputError(f"{text}: give the address as {scheme}HOST:PORT")
            if scheme != "tcp://" or protocol == "dectris":
                if processes > 1:
                    from qora.ssb.live.receivers import ParallelDectrisSource

                    return ParallelDectrisSource(f"tcp://{host}:{port}", processes=processes, scan_shape=scan_shape,
                                                 timeout=timeout, batch=batch)
                from qora.ssb.live.dectris import DectrisZMQSource

                return DectrisZMQSource(f"tcp://{host}:{port}", scan_shape=scan_shape, timeout=timeout, batch=batch)
            if processes > 1:
                raise InputError(f"{text}: a Merlin's TCP stream is one connection, read by one process (its frames "
                                 "are parsed a buffer at a time); several receiving processes are for a DECTRIS stream")
            from qora.ssb.live.merlin import MerlinTCPSource

            return MerlinTCPSource(host, int(port), scan_shape=scan_shape, timeout=timeout, batch=batch)
    path = Path(text)
    if processes > 1:
        raise InputError(f"{text}: several receiving processes are for a DECTRIS stream (zmq://HOST:PORT)")
    if follow:
        if path.suffix.lower() != ".mib":
            raise InputError(f"{text}: --follow reads a Merlin .mib file as it is written")
        from qora.ssb.live.follow import FollowMibSource

        return FollowMibSource(path, scan_shape=scan_shape, idle_s=timeout, batch=batch)
    if not path.exists():
        raise InputError(f"{text}: no such file, and not tcp://HOST:PORT (Merlin) or zmq://HOST:PORT (DECTRIS)")
    from qora.ssb import load_data

    data, _ = load_data(path, scan_shape=scan_shape)
    if scan_shape is not None:
        check_scan_shape(text, scan_shape, data.shape[0] * data.shape[1], header="file",
                         shape=tuple(data.shape[:2]))
        data = data.reshape(tuple(int(v) for v in scan_shape) + tuple(data.shape[-2:]))
    return MemorySource(data, batch=batch)
