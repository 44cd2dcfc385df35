"""``qora view``: a local web app to follow the SSB preview while dragging aberration sliders,
and to browse phase results and holography volumes (docs/viewer.md). Needs the ``viewer`` extra
(Starlette and uvicorn)."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time

from qora.io.errors import InputError

__all__ = ["serve", "check_host", "url_for", "require_viewer_extra", "BackgroundServer"]


def check_host(host: str, *, allow_remote: bool, token: str | None) -> str | None:
    """The token the server must require: none on the loopback interface; elsewhere only with
    ``allow_remote`` (the user's explicit choice), and then always one (given, or made here)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return token
    if not allow_remote:
        raise InputError(f"--host {host} would serve the data beyond this machine: add --allow-remote (a token "
                         "is then required on every request)")
    return token or secrets.token_urlsafe(24)


def url_for(host: str, port: int, token: str | None = None) -> str:
    """The address to open: an IPv6 literal in brackets (``http://[::1]:8765/``)."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def require_viewer_extra():
    """uvicorn, once Starlette and it are importable; else MissingExtra naming the extra."""
    from qora.io.errors import MissingExtra

    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise MissingExtra(f"qora view needs Starlette and uvicorn ({exc.name or exc} is missing): "
                           "pip install 'qora[viewer]'") from None
    return uvicorn


def serve(path, *, host: str = "127.0.0.1", port: int = 8765, allow_remote: bool = False, token: str | None = None,
          backend="auto", pattern=None, echo=print) -> None:
    """Open ``path`` and serve its view until interrupted (MissingExtra, before the file is read,
    without the ``viewer`` extra)."""
    uvicorn = require_viewer_extra()

    from qora.viewer.app import make_app
    from qora.viewer.views import open_view

    token = check_host(host, allow_remote=allow_remote, token=token)
    view = open_view(path, backend=backend, pattern=pattern)
    echo(f"qora view: {view.kind} view of {path} at {url_for(host, port, token)}")
    uvicorn.run(make_app(view, token=token), host=host.strip("[]"), port=port, log_level="warning")


class BackgroundServer:
    """An app served by uvicorn on a free port of 127.0.0.1, in a thread (tests, benchmarks,
    notebooks); ``url`` is its address, :meth:`close` stops it."""

    def __init__(self, app, *, timeout: float = 30.0) -> None:
        uvicorn = require_viewer_extra()

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
