"""Requests the debugger answers: only those addressed to it, and writes only from itself.

A page on any other site can make the browser send a plain POST to 127.0.0.1 (a form, or
``fetch`` with ``text/plain``: no preflight); the forms carry a CSRF token, the JSON API does
not. A browser names the page that sent a request in ``Origin``: a write whose origin is not
this server is refused. A name an attacker controls can also be made to resolve to
127.0.0.1 (DNS rebinding), making their page this server's own origin; on loopback, a
request addressed to any other name than this machine's (``Host``) is refused as well.
Requests from programs (no ``Origin``) are answered as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from litestar.enums import ScopeType
from litestar.middleware import DefineMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from .auth import LOOPBACK

#: methods that change nothing: any origin may read (a page cannot read the answer anyway)
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(host: str) -> str:
    """The name in a ``Host`` header: without its port, IPv6 without brackets, lower case,
    without a trailing dot; "" for anything that is not a plain host[:port]."""
    if any(c in host for c in "@/\\?#"):   # a URL's other parts would hide the real name
        return ""
    try:
        return (urlsplit(f"//{host}").hostname or "").lower().rstrip(".")
    except ValueError:   # a malformed port or bracket
        return ""


class SameOrigin:
    def __init__(self, app: ASGIApp, names: frozenset[str] | None, proxied: frozenset[str]):
        self.app, self.names, self.proxied = app, names, proxied

    @classmethod
    def define(cls, host: str, also: Iterable[str] = ()) -> DefineMiddleware:
        """On loopback, answer only to this machine's names and ``also`` (a local reverse
        proxy's public names, whose pages may also send changes: a proxy may pass on its own
        Host); off loopback every request carries the token anyway."""
        proxied = frozenset(n for n in map(host_name, also) if n)
        names = frozenset({*LOOPBACK, *proxied}) if host in LOOPBACK else None
        return DefineMiddleware(cls, names=names, proxied=proxied)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if self.names is not None and host_name(host) not in self.names:
            await _refuse(scope, send, 421, f"this debugger answers to {', '.join(sorted(self.names))} only, "
                                            f"not to {host_name(host) or 'no name'!r} (a proxy's name is "
                                            f"added with harness serve --allow-host NAME)")
            return
        origin = headers.get("origin")
        if scope.get("method", "GET") not in SAFE and origin is not None and not self._own(origin, host):
            await _refuse(scope, send, 403, f"a change sent from another site ({origin}) is refused: "
                                            f"use the debugger's own pages, or a program (no Origin header)")
            return
        await self.app(scope, receive, send)


    def _own(self, origin: str, host: str) -> bool:
        """A page of this server: the origin is the address the request came to, or the name
        of a proxy in front of it (which may pass its own address as Host)."""
        try:
            sent = urlsplit(origin)
        except ValueError:
            return False
        if not sent.netloc:   # "null": a sandboxed page, a file
            return False
        return sent.netloc.lower() == host.lower() or host_name(sent.netloc) in self.proxied


async def _refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    if str(scope.get("path", "")).startswith("/api/"):
        body, kind = json.dumps({"status": status, "error": message}).encode(), b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    start: Any = {"type": "http.response.start", "status": status,
                  "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())]}
    await send(start)
    await send({"type": "http.response.body", "body": body, "more_body": False})
