"""Rendering templates: a whole page, or only one of its blocks for an htmx swap.

Every page template names its swappable parts as blocks; a request made by htmx
(``HX-Request``) gets the block it asked for, any other request the full page, so
each URL works on its own and without JavaScript.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from urllib.parse import quote
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Request, Response
from litestar.utils.scope.state import ScopeState
from markupsafe import Markup

from runtime.travel.diff import Change

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"

ENV = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "svg"]),
                  trim_blocks=True, lstrip_blocks=True)


def as_json(value: Any, indent: int | None = None) -> str:
    """A value as pages show it (the ``json`` filter): what a search of shown data matches."""
    return json.dumps(value, indent=indent, sort_keys=False, ensure_ascii=False, default=str)


def _tojson_attr(value: Any) -> Markup:
    """JSON for an HTML attribute value (escaped by Jinja when inserted as a string)."""
    return Markup.escape(json.dumps(value, default=str))


ENV.filters["json"] = as_json
# macros as globals: a block rendered alone (an htmx fragment) does not run the page's imports
ENV.filters["attrjson"] = _tojson_attr


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-history-restore-request") != "true"


def csrf_token(request: Request[Any, Any, Any]) -> str:
    token = ScopeState.from_scope(request.scope).csrf_token
    return token if isinstance(token, str) else ""


def render(request: Request[Any, Any, Any], template: str, context: dict[str, Any], *,
           block: str | None = None, status: int = 200, headers: dict[str, str] | None = None) -> Response[str]:
    """The full page, or just ``block`` of it when htmx asked for a fragment."""
    tmpl = ENV.get_template(template)
    # ``workers``: this server leaves the runs it sets going to worker processes (``serve --workers``)
    workers = bool(getattr(getattr(request.app.state, "tasks", None), "queue", False))
    ctx = {"request": request, "csrf": csrf_token(request), "path": request.url.path, "workers": workers, **context}
    if block is not None and is_htmx(request):
        html = "".join(tmpl.blocks[block](tmpl.new_context(ctx)))
    else:
        html = tmpl.render(ctx)
    return Response(html, status_code=status, media_type="text/html", headers=headers or {})


def _fmt_time(ts: float | None) -> str:
    import datetime as _dt

    if ts is None:
        return ""
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):   # a store written by other code: shown, not a 500
        return f"{ts!r} (not a time)"


def _fmt_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def reading_order(changes: Sequence[Change]) -> list[Change]:
    """Changes as pages list them: a list's removed items by ascending index. The diff lists
    them from the highest index down (so that ``apply`` deletes them without shifting the
    rest); a person reads a list from its start."""
    out: list[Change] = []
    for parent, group in groupby(changes, key=_removed_from):
        same = list(group)
        out.extend(same if parent is None else sorted(same, key=lambda c: c.path[-1]))
    return out


def _removed_from(c: Change) -> tuple[str | int, ...] | None:
    """The list a change removed an item of, or None for any other change."""
    return c.path[:-1] if c.op == "removed" and c.path and isinstance(c.path[-1], int) else None


ENV.filters["fmt_time"] = _fmt_time
ENV.filters["reading_order"] = reading_order
# one path segment, '/' and all: a thread id such as a/../b must not be read as a path
ENV.filters["segment"] = lambda value: quote(str(value), safe="")
ENV.filters["fmt_duration"] = _fmt_duration

_macros: Any = ENV.get_template("_macros.html").module
ENV.globals.update(badge=_macros.badge, effect_state=_macros.effect_state, tree=_macros.tree,
                   form_fields=_macros.form_fields, side=_macros.side)


def badge_html(status: str) -> str:
    return str(_macros.badge(status))
