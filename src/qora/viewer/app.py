"""The viewer's web app (Starlette; served by uvicorn): one page, a JSON API per kind of view.

Heavy calls (a preview, a slice) run in Starlette's thread pool, so the event loop keeps
answering; the views serialise their own work. Errors from the page's input come back as 400
with ``{"error": message}`` (so does a value an engine refuses, a QoraError); anything else as 500
with the exception's message, and the server goes on. Messages are one line (at most 200
characters): a request of a 5,000-digit number gets a 400 that says so, not an echo of it.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from qora.io.errors import QoraError
from qora.viewer.views import BadRequest

__all__ = ["make_app"]

STATIC = Path(__file__).with_name("static")
MAX_BODY = 64 * 1024  # a request carries slider values, nothing larger


class _Token(BaseHTTPMiddleware):
    """Every API call must carry the token (``Authorization: Bearer``, or ``?token=`` for links)."""

    def __init__(self, app, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next):
        if request.url.path.startswith("/api/"):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            given = given or request.query_params.get("token", "")
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return JSONResponse({"error": "missing or wrong token"}, status_code=401)
        return await call_next(request)


async def _json(request: Request):
    body = await request.body()
    if len(body) > MAX_BODY:
        raise BadRequest(f"request too large ({len(body)} bytes)")
    try:
        return json.loads(body or b"{}")
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits, nesting too deep
        raise BadRequest(f"the request body cannot be read: {_short(exc)}") from None


def _short(exc: BaseException, limit: int = 200) -> str:
    """An error's message on one line of at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _guard(handler):
    async def wrapped(request: Request):
        try:
            return await handler(request)
        except (BadRequest, QoraError) as exc:  # the request's fault (a value the engine refuses too)
            return JSONResponse({"error": _short(exc)}, status_code=400)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the server keeps serving
            return JSONResponse({"error": f"{type(exc).__name__}: {_short(exc)}"}, status_code=500)

    return wrapped


def _png(data: bytes, headers: dict) -> Response:
    return Response(data, media_type="image/png", headers={**headers, "Cache-Control": "no-store"})


def make_app(view, *, token: str | None = None) -> Starlette:
    """The app for one view (:func:`qora.viewer.views.open_view`); ``token`` required on the API
    when given (the server then listens beyond this machine)."""

    async def index(request: Request):
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def info(request: Request):
        return JSONResponse(await run_in_threadpool(view.info))

    def need(kind: str) -> None:
        if view.kind != kind:
            raise BadRequest(f"this is a {view.kind} view, not {kind}")

    async def ssb_preview(request: Request):
        need("ssb")
        body = await _json(request)
        data, headers = await run_in_threadpool(view.preview, body)
        if data is None:  # a newer slider position is on its way
            return Response(status_code=204, headers=headers)
        return _png(data, headers)

    async def ssb_npy(request: Request):
        need("ssb")
        body = await _json(request)
        data = await run_in_threadpool(view.image_npy, body)
        return Response(data, media_type="application/octet-stream",
                        headers={"Content-Disposition": 'attachment; filename="ssb-phase.npy"'})

    async def ssb_fit(request: Request):
        need("ssb")
        if request.method == "POST":
            return JSONResponse(view.start_fit(await _json(request)))
        return JSONResponse(view.fit_status())

    async def ssb_live(request: Request):
        need("ssb")
        if not hasattr(view, "live_status"):
            raise BadRequest("this view is of a file, not a live scan")
        return JSONResponse(view.live_status())

    async def phase_image(request: Request):
        need("phase")
        data, headers = await run_in_threadpool(view.image, request.path_params["what"])
        return _png(data, headers)

    async def holo_slice(request: Request):
        need("holo")
        data, headers = await run_in_threadpool(view.slice_png, dict(request.query_params))
        return _png(data, headers)

    async def holo_profile(request: Request):
        need("holo")
        return JSONResponse(await run_in_threadpool(view.profile, dict(request.query_params)))

    routes = [
        Route("/", index),
        Route("/api/info", _guard(info)),
        Route("/api/ssb/preview", _guard(ssb_preview), methods=["POST"]),
        Route("/api/ssb/image.npy", _guard(ssb_npy), methods=["POST"]),
        Route("/api/ssb/fit", _guard(ssb_fit), methods=["GET", "POST"]),
        Route("/api/ssb/live", _guard(ssb_live)),
        Route("/api/phase/image/{what}", _guard(phase_image)),
        Route("/api/holo/slice", _guard(holo_slice)),
        Route("/api/holo/profile", _guard(holo_profile)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(_Token, token=token)] if token else []
    return Starlette(routes=routes, middleware=middleware)
