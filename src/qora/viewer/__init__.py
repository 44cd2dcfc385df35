"""``qora view``: a local web app to follow the SSB preview while dragging aberration sliders,
and to browse phase results and holography volumes (docs/viewer.md). Needs the ``viewer`` extra
(Starlette and uvicorn)."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time

__all__ = ["serve", "check_host", "BackgroundServer"]


def check_host(host: str, *, allow_remote: bool, token: str | None) -> str | None:
    """The token the server must require: none on the loopback interface; elsewhere only with
    ``allow_remote`` (the user's explicit choice), and then always one (given, or made here)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return token
    if not allow_remote:
        raise ValueError(f"--host {host} would serve the data beyond this machine: add --allow-remote (a token "
                         "is then required on every request)")
    return token or secrets.token_urlsafe(24)


def serve(path, *, host: str = "127.0.0.1", port: int = 8765, allow_remote: bool = False, token: str | None = None,
          backend="auto", pattern=None, echo=print) -> None:
    """Open ``path`` and serve its view until interrupted."""
    import uvicorn

    from qora.viewer.app import make_app
    from qora.viewer.views import open_view

    token = check_host(host, allow_remote=allow_remote, token=token)
    view = open_view(path, backend=backend, pattern=pattern)
    url = f"http://{host}:{port}/" + (f"?token={token}" if token else "")
    echo(f"qora view: {view.kind} view of {path} at {url}")
    uvicorn.run(make_app(view, token=token), host=host, port=port, log_level="warning")


class BackgroundServer:
    """An app served by uvicorn on a free port of 127.0.0.1, in a thread (tests, benchmarks,
    notebooks); ``url`` is its address, :meth:`close` stops it."""

    def __init__(self, app, *, timeout: float = 30.0) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the viewer's server did not start")
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
