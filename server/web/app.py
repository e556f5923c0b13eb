"""The composition root: ``create_app(runtime)`` builds the Litestar app.

Pages and the JSON API share ``services``; security lives in ``origin`` (requests
addressed to this machine, writes sent from its own pages or from programs), ``auth``
(token rule off loopback, identity of who answers) and Litestar's CSRF middleware
(every form post); request bodies are size-limited; user mistakes map to 404/409/422, never 500.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterable
from typing import Any

from litestar import Litestar, Request, Response
from litestar.config.csrf import CSRFConfig
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.static_files import create_static_files_router

from runtime import Runtime
from runtime.core.errors import GraphError, GraphNotRegistered, InvalidRequest, NotFound

from . import api, approvals, commands, live, pages, questions, threads
from .auth import TokenMiddleware, check_bind
from .origin import SameOrigin
from .render import STATIC, is_htmx, render
from .background import Background
from .bodies import MAX_BODY, MAX_IMPORT_BODY as MAX_IMPORT_BODY
from .services import Conflict

log = logging.getLogger(__name__)



def _status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, GraphNotRegistered):   # the runtime's advice is for Python callers
        return 404, f"{exc.missing}; start the server with its code: harness serve --graph MODULE:GRAPH"
    if isinstance(exc, NotFound):
        return 404, str(exc)
    if isinstance(exc, Conflict):
        return 409, str(exc)
    if isinstance(exc, (InvalidRequest, GraphError)):
        return 422, str(exc)
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        # name the parameter (``page: Expected `int`, got `str```), as the JSON API does
        return 400, "; ".join(f"{e.get('key')}: {e.get('message')}" for e in exc.extra if isinstance(e, dict))
    if isinstance(exc, HTTPException):
        if exc.status_code == 403 and "CSRF" in str(exc.detail):   # most often: the server restarted since
            return 403, f"{exc.detail}: the page is older than this server's session; reload it and try again"
        return exc.status_code, str(exc.detail)
    return 500, f"internal error ({type(exc).__name__}): the server's log has the details"


def _error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    status, message = _status_of(exc)
    if request.url.path.startswith("/api/"):
        details = getattr(exc, "details", None)   # a refused body's raw errors, beside the words
        return Response({"error": message, "status": status, **({"details": details} if details else {})},
                        status_code=status)
    if is_htmx(request):   # shown where the form was, instead of replacing the page
        return render(request, "error.html", {"status": status, "message": message}, block="message",
                      status=status, headers={"HX-Retarget": "#flash", "HX-Reswap": "innerHTML"})
    return render(request, "error.html", {"status": status, "message": message}, status=status)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """A fault of the server's own: its traceback to the log, and the page (or the API's JSON)
    saying so in the same shape as any other error, rather than the framework's bare body."""
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(request, exc)


def _not_kept(response: Response[Any]) -> Response[Any]:
    """A page shows a run as it is now: the browser must not keep it for Back, which
    would show a question already answered with its form ready to send again."""
    if str(getattr(response, "media_type", "")).startswith("text/html"):   # a static file has none
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def create_app(runtime: Runtime, *, host: str = "127.0.0.1", token: str | None = None,
               csrf_secret: str | None = None, also_hosts: Iterable[str] = (), workers: bool = False) -> Litestar:
    """The debugger over ``runtime``. Off loopback a token is required (``token``); on
    loopback it answers to this machine's names and ``also_hosts`` only (``origin``).
    ``workers``: runs are driven by worker processes, so what an answer, a resume, a fork or a
    replay sets going is left QUEUED for them (``Runtime.resume(queue=True)``,
    ``Runtime.fork(queue=True)``, ``Runtime.submit_replay``), not driven here."""
    check_bind(host, token)
    app = Litestar(
        route_handlers=[*pages.HANDLERS, *api.HANDLERS, *approvals.HANDLERS, *questions.HANDLERS,
                        *live.HANDLERS, *commands.HANDLERS,
                        *threads.HANDLERS, create_static_files_router(path="/static", directories=[STATIC])],
        middleware=[SameOrigin.define(host, also_hosts), TokenMiddleware.define(token, host)],
        csrf_config=CSRFConfig(secret=csrf_secret or secrets.token_hex(32), exclude=["/api/", "/static/"],
                               cookie_samesite="strict"),
        exception_handlers={NotFound: _error, InvalidRequest: _error, GraphError: _error,
                            NotFoundException: _error, ValidationException: _error, HTTPException: _error,
                            Exception: _unexpected},
        request_max_body_size=MAX_BODY,
        after_request=_not_kept,
        debug=False,
    )
    app.state.runtime = runtime
    app.state.tasks = Background(queue=workers)   # runs started by actions, driven in the background
    app.state.lock = asyncio.Lock()
    return app
