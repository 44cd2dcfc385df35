"""``qora view``: a local web app to follow the SSB preview while dragging aberration sliders,
and to browse phase results and holography volumes (docs/viewer.md). Needs the ``viewer`` extra
(Starlette and uvicorn)."""

from __future__ import annotations

import ipaddress
import secrets

__all__ = ["serve", "check_host"]


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
