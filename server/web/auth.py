"""Who may use the debugger, and who they are.

On loopback (the default) anyone on this machine may, and is ``local``. On any other
address the server refuses to start without a token, and every request must carry
it: ``Authorization: Bearer T``, the ``harness_token`` cookie, or ``?token=T`` once
(which sets the cookie; a browser opening a page is sent on to it without the token).
A named token ``alice:T`` makes ``alice`` the identity recorded as who answered an
interrupt.
"""

from __future__ import annotations

import hmac
from html import escape
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlencode

from litestar.middleware import DefineMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from runtime.core.errors import InvalidRequest

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
COOKIE = "harness_token"


def check_bind(host: str, token: str | None) -> None:
    if host not in LOOPBACK and not token:
        raise InvalidRequest(f"refusing to serve on {host} without a token: set HARNESS_TOKEN or pass --token "
                             "(only 127.0.0.1 is served without one)")


def split_token(token: str) -> tuple[str, str]:
    """(identity, secret) of ``name:secret`` or of a bare secret."""
    name, sep, secret = token.partition(":")
    return (name, secret) if sep and name and secret else ("token", token)


def identity(scope: Scope) -> str:
    return str(scope.get("state", {}).get("identity", "local"))


class TokenMiddleware:
    def __init__(self, app: ASGIApp, token: str | None, host: str):
        self.app = app
        self.identity, self.secret = split_token(token) if token else ("local", "")

    @classmethod
    def define(cls, token: str | None, host: str) -> DefineMiddleware:
        return DefineMiddleware(cls, token=token, host=host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        if not self.secret:
            state["identity"] = "local"
            await self.app(scope, receive, send)
            return
        given, from_query = self._given(scope)
        if given is None or not hmac.compare_digest(given.encode(), self.secret.encode()):
            await self._refuse(send)
            return
        state["identity"] = self.identity
        if not from_query:
            await self.app(scope, receive, send)
            return
        cookie = (b"set-cookie", f"{COOKIE}={self.secret}; HttpOnly; SameSite=Strict; Path=/".encode())
        if _opens_page(scope):
            # a browser opening a page: the cookie, and the same address without the secret,
            # which would otherwise stay in the address bar and the browser's history
            await _hop_without_token(scope, send, cookie)
            return

        async def with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), cookie]}
            await send(message)

        await self.app(scope, receive, with_cookie)

    @staticmethod
    def _given(scope: Scope) -> tuple[str | None, bool]:
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip(), False
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value, False
        query = parse_qs(scope.get("query_string", b"").decode())
        if "token" in query:
            return query["token"][0], True
        return None, False

    @staticmethod
    async def _refuse(send: Send) -> None:
        body = b'{"error": "a token is required: Authorization: Bearer <token>", "status": 401}'
        start: Any = {"type": "http.response.start", "status": 401,
                      "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _opens_page(scope: Scope) -> bool:
    """A browser's GET of a page (it asks for HTML): programs asking for JSON are answered as they are."""
    if scope.get("method") != "GET":   # (a websocket has none)
        return False
    accept = next((v for k, v in scope.get("headers", []) if k.lower() == b"accept"), b"")
    return b"text/html" in accept


async def _hop_without_token(scope: Scope, send: Send, cookie: tuple[bytes, bytes]) -> None:
    """The cookie, and a page that moves on at once to the same address without the token.
    Not an HTTP redirect: the cookie is ``SameSite=Strict``, and a browser that followed a
    link from another site would treat a redirect (and reloads of where it led) as part of
    that cross-site visit and leave the new cookie out; a step taken by this page is not."""
    kept = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True)
            if k != "token"]
    # the path as the request wrote it (``raw_path``, still percent-encoded; some servers
    # leave the query on it), never another host's: ``//host/...`` would lead to another site
    raw = scope.get("raw_path")
    path = raw.decode("latin-1").partition("?")[0] if raw else quote(scope.get("path", "/"))
    target = escape("/" + path.lstrip("/") + (f"?{urlencode(kept)}" if kept else ""))
    body = (f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url={target}">'
            f'<title>Signed in</title><p><a href="{target}">Continue</a></p>').encode()
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()), cookie,
        (b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
