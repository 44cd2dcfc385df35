"""The host's receive path of live 4D-STEM stage by stage (``qora bench ssb-live``'s ``stage/*`` cases, and
``--stages-only``): Merlin's socket, headers and pixel decoding, DECTRIS's message parse, ZeroMQ read and
bitshuffle-LZ4 decoding, the queue and the ingest pass, each per frame against a memcpy of the frame measured in the
same run; and the scan-like frames every case of the benchmark uses (:func:`pool_frames`)."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["stages", "pool_frames"]


def pool_frames(detector: int, count: int, seed: int = 0) -> np.ndarray:
    """Frames like a 4D-STEM scan's (a bright disk of ~8,800 pixels at 192^2, Poisson counts, a sparse
    dark field), uint16."""
    rng = np.random.default_rng(seed)
    yy, xx = np.indices((detector, detector))
    disk = np.hypot(yy - detector / 2, xx - detector / 2) < detector * 53 / 192
    frames = rng.poisson(30.0, (count, detector, detector)) * disk + rng.poisson(0.02, (count, detector, detector))
    return frames.astype(np.uint16)


def _merlin_stages(add, best, frames) -> None:
    """Merlin's receive path: the socket (loopback), the headers, the pixels at every counter depth."""
    import socket
    import threading

    from qora.ssb.live import merlin
    from qora.ssb import decode_raw

    n, detector = len(frames), frames.shape[-1]
    messages = merlin.frame_messages(np.arange(1, n + 1), frames)
    wire = messages.reshape(-1)
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    into = np.empty_like(wire)

    def socket_read():
        sender = threading.Thread(target=a.sendall, args=(wire,))
        sender.start()
        view, got = memoryview(into), 0
        while got < len(into):
            got += b.recv_into(view[got:])
        sender.join()

    add("merlin/socket_read", best(socket_read), bytes_per_frame=messages.shape[1])
    a.close()
    b.close()
    template = messages[0]
    add("merlin/headers", best(lambda: merlin.frame_numbers(messages, template)))
    head = merlin.merlin_frame_header(bytes(template[merlin.PREFIX:merlin.PREFIX + 384]).decode("latin-1").split(","))
    payload = messages[:, merlin.PREFIX + head["header_size"]:]
    add("merlin/decode_U16", best(lambda: merlin.decode_pixels(payload, head)))
    for depth, assembly in ((1, "1x1"), (6, "1x1"), (12, "1x1"), (24, "1x1"), (12, "2x2")):
        top = {1: 2, 6: 64, 12: 4096, 24: 1 << 24}[depth]
        raw = merlin.encode_raw(np.minimum(frames.astype(np.uint32), top - 1), counter_depth=depth, assembly=assembly)
        add(f"merlin/decode_raw{depth}_{assembly}",
            best(lambda: decode_raw(raw, detector, detector, counter_depth=depth, assembly=assembly)))


def _dectris_stages(add, best, frames, repeats: int) -> None:
    """DECTRIS's receive path: the per-frame parse of the message (v1 two JSON parts, v2 one CBOR map), the read from
    ZeroMQ, the decoding on the host, and the host's part of the device's decoding."""
    import json

    import zmq

    from qora.ssb.live import cbor
    from qora.ssb.live.bslz4_batch import CompressedFrames, block_table
    from qora.ssb.live.bslz4_numba import decode_batch
    from qora.ssb.live.dectris import encode_frame, encode_stream2_frame, receive_parts, stream2_message, v1_image
    from qora.ssb.live.stream2 import scan_image

    n, detector = len(frames), frames.shape[-1]
    info, blob = encode_frame(frames[0])
    v1_head = json.dumps({"htype": "dimage-1.0", "series": 1, "frame": 12345, "hash": ""}).encode()
    v1_info = json.dumps(info).encode()
    add("dectris/v1_json_parse", best(lambda: [(json.loads(v1_head), json.loads(v1_info)) for _ in range(n)]))
    v1_frames = [zmq.Frame(v1_head), zmq.Frame(v1_info), zmq.Frame(b"")]
    known: dict = {}
    add("dectris/v1_pattern_parse", best(lambda: [v1_image(v1_frames, known) for _ in range(n)]))
    v2 = stream2_message("image", 1, image_id=12345, real_time=[1, 1000], start_time=[0, 1000],
                         stop_time=[1, 1000], data={"threshold_1": encode_stream2_frame(frames[0])})
    add("dectris/v2_cbor_parse", best(lambda: [cbor.loads(v2) for _ in range(n)]))
    scratch, channel = np.empty(11, np.int64), np.frombuffer(b"threshold_1", np.uint8)
    add("dectris/v2_compiled_walk", best(lambda: [scan_image(v2, channel, scratch) for _ in range(n)]))
    blobs = [encode_frame(f)[1] for f in frames]
    # the receiver's read of each message from ZeroMQ (loopback, the messages queued before the clock
    # starts: the receiving call's own cost, not the sender's), stream2's one part and v1's four
    context = zmq.Context()
    v1_parts = [v1_head, v1_info, blobs[0], b'{"htype": "dconfig-1.0", "start_time": 1, "stop_time": 2}']
    for name, message in (("dectris/zmq_receive_v2", [v2]), ("dectris/zmq_receive_v1", v1_parts)):
        push, pull = context.socket(zmq.PUSH), context.socket(zmq.PULL)
        push.setsockopt(zmq.SNDHWM, 4 * n)
        pull.setsockopt(zmq.RCVHWM, 4 * n)
        port = push.bind_to_random_port("tcp://127.0.0.1")
        pull.connect(f"tcp://127.0.0.1:{port}")

        def queue_and_read(push=push, pull=pull, message=message):
            for _ in range(n):
                push.send_multipart(message, copy=False)
            time.sleep(0.2 + n * 2e-6)  # on their way to the receiving socket
            t = time.perf_counter()
            for _ in range(n):
                receive_parts(pull, 10.0)
            return time.perf_counter() - t

        queue_and_read()
        add(name, min(queue_and_read() for _ in range(repeats)) / n)
        push.close(0)
        pull.close(0)
    context.term()
    add("dectris/bslz4_decode", best(lambda: decode_batch(blobs, np.uint16, detector * detector)),
        compressed_bytes_per_frame=float(np.mean([len(x) for x in blobs])))
    # what is left on the host when the device decodes: the blobs packed (page-locked memory on CUDA)
    # and the scan of their block sizes
    batch = CompressedFrames(np.arange(n), blobs, np.uint16, (detector, detector))
    packed = np.empty(batch.nbytes, np.uint8)
    add("dectris/device_decode_host_part", best(lambda: block_table(*batch.pack(into=packed), dtype=np.uint16,
                                                                    count=detector * detector)))


def _ingest_stages(add, best, frames, cols: int) -> None:
    """The hand-off and the host's pass: the queue, the mean pattern and the bright-field gather, against the four
    NumPy passes it replaced."""
    import queue

    from qora.backend import resolve
    from qora.ssb.live import Frames, LiveG
    from qora.ssb.live.ingest import Staging, ingest

    n, detector = len(frames), frames.shape[-1]
    q: queue.Queue = queue.Queue()
    add("queue/put_get_batch", best(lambda: (q.put(frames), q.get())))
    live = LiveG((8, cols), (detector, detector), kv=300.0, alpha_mrad=30.0, scan_step=0.373, rotation=0.0)
    live.add(Frames(np.arange(4 * cols), frames[np.arange(4 * cols) % n]))  # the disk fitted: the pixels known
    gathered = live._flat_index
    mean_sum = np.zeros((detector, detector))
    out = Staging(resolve("cpu")).array(n, len(gathered), frames.dtype)
    add("ingest/mean_and_gather", best(lambda: ingest(frames, gathered, mean_sum, out)), gathered=len(gathered))
    # what it replaces (LiveG before issue 25's host work): a float64 sum, the disk's bounding box, an
    # index gather and a conversion, four NumPy passes
    r, c = np.unravel_index(gathered, (detector, detector))
    r0, r1, c0, c1 = r.min(), r.max() + 1, c.min(), c.max() + 1
    in_box = (r - r0) * (c1 - c0) + (c - c0)
    add("ingest/numpy_four_passes_before", best(lambda: (
        frames.sum(0, dtype=np.float64), frames[:, r0:r1, c0:c1].reshape(n, -1)[:, in_box].astype(np.float64))))


def stages(*, detector: int = 192, batch: int = 512, cols: int = 128, repeats: int = 3) -> list[dict]:
    """The host's receive path stage by stage, each timed alone on a batch of ``batch`` frames of
    ``detector``^2 uint16 (the pool's scan-like frames) and given per frame, against the floor
    measured in the same run: a memcpy of the frame's bytes (``x_floor``: the stage's time over it).
    Each stage's best of ``repeats`` (the least disturbed by other work on the machine)."""
    frames = pool_frames(detector, batch)
    n = len(frames)
    frame_bytes = frames[0].nbytes
    rows = []

    def best(fn) -> float:
        fn()  # compiles, warms the caches
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times) / n

    src = frames.view(np.uint8).reshape(n, -1)
    dst = np.empty_like(src)
    floor = best(lambda: np.copyto(dst, src))

    def add(name: str, seconds: float, **extra) -> None:
        rows.append({"stage": name, "us_per_frame": seconds * 1e6, "x_floor": seconds / floor,
                     "frames_per_s": 1 / seconds, **extra})

    add("floor/memcpy", floor, bytes_per_frame=frame_bytes)
    _merlin_stages(add, best, frames)
    _dectris_stages(add, best, frames, repeats)
    _ingest_stages(add, best, frames, cols)
    return rows
