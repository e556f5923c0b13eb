"""Pages that act on runs: fork (patch editor with a preview of its diff), replay and
its report, resume, cancel, compensate, export and import.

Every form posts with a CSRF token; a rejected request re-renders the form with the
error (HTTP 422 or 409) and creates nothing.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath
from litestar.response import Redirect

from runtime import Runtime
from server.inputs import MAX_DEPTH, InputError, parse_json
from runtime.core.errors import GraphError, InvalidRequest, NotFound
from runtime.core.states import RunStatus
from runtime.travel.branches import apply_patch, mockable_effects
from runtime.travel.diff import diff

from . import actions, services, wording
from .bodies import MAX_IMPORT_BODY
from .render import is_htmx, render
from .services import Conflict, complete, in_thread



def _rt(request: Request[Any, Any, Any]) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def _go(request: Request[Any, Any, Any], url: str) -> Response[Any]:
    """After an action: to the run it created or moved (htmx follows HX-Redirect)."""
    if is_htmx(request):
        return Response("", status_code=200, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


def _status(exc: Exception) -> int:
    return 409 if isinstance(exc, Conflict) else 404 if isinstance(exc, NotFound) else 422


# ------------------------------------------------------------------ fork

def _fork_context(rt: Runtime, checkpoint_id: FromPath[str]) -> dict[str, Any]:
    cp = rt.store.get_checkpoint(checkpoint_id)
    run = complete(rt.get_run(cp.run_id))
    state = complete(rt.state_at(cp.id)).model_dump(mode="json")
    try:
        graph = rt.graphs.graph_for(run)
        schema = graph.state_model.model_json_schema()
    except (NotFound, InvalidRequest, GraphError):
        graph, schema = None, {}
    return {"cp": cp, "run": run, "state": state, "schema": schema, "graph": graph,
            "effect_names": mockable_effects(rt.store, cp.id)}


def _preview(rt: Runtime, ctx: dict[str, Any], patch_text: str) -> tuple[dict[str, Any] | None, list[Any]]:
    patch = services.parse_json_object(patch_text, "patch", "state fields")
    if patch is None:
        return None, []
    if ctx["graph"] is None:
        raise InvalidRequest("the graph's code is not loaded in this server: its state cannot be checked")
    try:
        patched = apply_patch(ctx["graph"], ctx["state"], patch)
    except InvalidRequest as e:
        raise wording.patch_refusal(e) from None
    return patch, diff(ctx["state"], patched)


@get("/checkpoints/{checkpoint_id:str}/fork", include_in_schema=False)
async def fork_form(request: Request[Any, Any, Any], checkpoint_id: FromPath[str]) -> Response[str]:
    ctx = await in_thread(_fork_context, _rt(request), checkpoint_id)
    return render(request, "fork.html", {**ctx, "patch_text": "", "mocks_text": "", "effects": "mock",
                                         "changes": None, "error": None})


@post("/checkpoints/{checkpoint_id:str}/fork", include_in_schema=False)
async def fork_submit(request: Request[Any, Any, Any], checkpoint_id: FromPath[str],
                      data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    rt = _rt(request)
    ctx = await in_thread(_fork_context, rt, checkpoint_id)
    patch_text, mocks_text = data.get("patch", ""), data.get("mocks", "")
    effects = data.get("effects", "mock")
    form = {**ctx, "patch_text": patch_text, "mocks_text": mocks_text, "effects": effects, "changes": None,
            "error": None, "error_detail": ""}
    try:
        patch, changes = await in_thread(_preview, rt, ctx, patch_text)
        form["changes"] = changes
        mocks = services.parse_json_object(mocks_text, "mocks", "{effect name: result}")
        if data.get("action") == "preview":
            return render(request, "fork.html", form, block="preview")
        run_id = await actions.fork(rt, request.app.state.tasks, checkpoint_id, patch, effects, mocks)
    except (InvalidRequest, Conflict, NotFound) as e:
        form["error"], form["error_detail"] = str(e), getattr(e, "detail", "")
        return render(request, "fork.html", form, block="preview", status=_status(e))
    return _go(request, f"/runs/{run_id}")


# ------------------------------------------------------------------ replay and its report

def _version_label(rt: Runtime, version: str) -> str:
    """A graph version as people tell them apart: the reference it was registered by
    (``MODULE:GRAPH``, a plan's file), with its hash."""
    graph = rt.graphs.registered(version)
    ref = graph.ref if graph is not None else None
    if not ref:
        stored = rt.store.graph_description(version) or {}
        ref = stored.get("ref") if isinstance(stored.get("ref"), str) else None
    return f"{ref} ({version})" if ref else version


def _replay_context(rt: Runtime, run_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """The replay form of a run, or of what follows one of its checkpoints: the run's own
    version and the other registered versions of its graph, each named."""
    cp = rt.store.get_checkpoint(checkpoint_id) if checkpoint_id else None
    run = complete(rt.get_run(cp.run_id if cp else run_id))
    versions = [(g.version, _version_label(rt, g.version)) for g in rt.graphs.versions(run.graph_name)
                if not rt.graphs.made_by(g, run.graph_version)]
    action = f"/checkpoints/{cp.id}/replay" if cp else f"/runs/{run.id}/replay"
    return {"run": run, "cp": cp, "own": _version_label(rt, run.graph_version), "versions": versions,
            "action": action, "error": None, "mocks_text": ""}


async def _replay(request: Request[Any, Any, Any], target: str, ctx: dict[str, Any],
                  data: dict[str, str]) -> Response[Any]:
    """Start (or queue) the replay the form asks for, and go to its report; the form again
    with the error when it is refused."""
    rt = _rt(request)
    try:
        mocks = services.parse_json_object(data.get("mocks", ""), "mocks", "{effect name: result}")
        new_id = await actions.replay(rt, request.app.state.tasks, target, data.get("version") or None, mocks)
    except (InvalidRequest, Conflict, NotFound) as e:
        return render(request, "replay.html", {**ctx, "error": str(e), "mocks_text": data.get("mocks", "")},
                      status=_status(e))
    return _go(request, f"/runs/{new_id}/report")


@get("/runs/{run_id:str}/replay", include_in_schema=False)
async def replay_form(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[str]:
    return render(request, "replay.html", await in_thread(_replay_context, _rt(request), run_id))


@post("/runs/{run_id:str}/replay", include_in_schema=False)
async def replay_submit(request: Request[Any, Any, Any], run_id: FromPath[str], data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    return await _replay(request, run_id, await in_thread(_replay_context, _rt(request), run_id), data)


@get("/checkpoints/{checkpoint_id:str}/replay", include_in_schema=False)
async def replay_from_form(request: Request[Any, Any, Any], checkpoint_id: FromPath[str]) -> Response[str]:
    """Replay what followed a checkpoint (the nodes folded up to it are kept, as a fork keeps them)."""
    return render(request, "replay.html", await in_thread(_replay_context, _rt(request), "", checkpoint_id))


@post("/checkpoints/{checkpoint_id:str}/replay", include_in_schema=False)
async def replay_from_submit(request: Request[Any, Any, Any], checkpoint_id: FromPath[str], data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    ctx = await in_thread(_replay_context, _rt(request), "", checkpoint_id)
    return await _replay(request, checkpoint_id, ctx, data)


@get("/runs/{run_id:str}/report", include_in_schema=False)
async def report_page(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[str]:
    rt = _rt(request)
    run = await in_thread(lambda: complete(rt.get_run(run_id)))
    if not run.options.get("compare"):
        raise NotFound(f"run {run_id} is not a replay: it has no divergence report")
    report = await in_thread(lambda: complete(rt.replay_report(run_id)))
    # where it started: the run's start, or a checkpoint whose folded nodes it kept
    base = await in_thread(rt.store.get_checkpoint, report.base_checkpoint_id)
    return render(request, "report.html", {"run": run, "report": report, "base": base}, block="report")


# ------------------------------------------------------------------ resume, cancel, compensate

@post("/runs/{run_id:str}/resume", include_in_schema=False)
async def resume_submit(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[Any]:
    new_id = await actions.resume(_rt(request), request.app.state.tasks, run_id)
    return _go(request, f"/runs/{new_id}")


@post("/runs/{run_id:str}/cancel", include_in_schema=False)
async def cancel_submit(request: Request[Any, Any, Any], run_id: FromPath[str], data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    rt = _rt(request)
    run = await in_thread(lambda: complete(rt.get_run(run_id)))
    await actions.cancel(rt, request.app.state.tasks, run_id, data.get("reason", ""))
    if is_htmx(request) and run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
        # the page follows a running run live: it shows the end itself, without navigating away
        return Response("", status_code=204)
    return _go(request, f"/runs/{run_id}")


@post("/runs/{run_id:str}/compensate", include_in_schema=False)
async def compensate_submit(request: Request[Any, Any, Any], run_id: FromPath[str],
                            data: Annotated[dict[str, str], Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    report = await actions.compensate(_rt(request), request.app.state.tasks, run_id,
                                      retry_in_doubt=data.get("retry_in_doubt") == "on")
    # the notice goes to #flash; the page reloads what the compensation changed (the action
    # bar, the journal's statuses) on the event this names (run.html)
    return render(request, "compensated.html", {"run_id": run_id, "report": report}, block="message",
                  headers={"HX-Trigger": "run-changed"})


# ------------------------------------------------------------------ export and import

@get("/runs/{run_id:str}/export", include_in_schema=False)
async def export_download(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[bytes]:
    doc = await actions.export_thread(_rt(request), run_id)
    body = json.dumps(doc, indent=1).encode()
    return Response(body, media_type="application/json",
                    headers={"Content-Disposition": _attachment(f"thread-{run_id}.json")})


def _attachment(filename: str) -> str:
    """A download's Content-Disposition (RFC 6266): an imported run's id may be any text, which a
    header cannot carry as it is, so an ASCII stand-in plus the exact name percent-encoded (RFC 5987)."""
    fallback = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


@get("/import", include_in_schema=False)
async def import_form(request: Request[Any, Any, Any]) -> Response[str]:
    return render(request, "import.html", {"error": None, "runs": None})


@post("/import", include_in_schema=False, request_max_body_size=MAX_IMPORT_BODY)
async def import_submit(request: Request[Any, Any, Any], data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.MULTI_PART)]) -> Response[Any]:
    upload = data.get("file")
    try:
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("choose an exported thread (.json) to upload")
        raw = await upload.read()
        try:   # the rules `harness import` applies: UTF-8, no NaN, bounded depth
            document = parse_json(raw.decode("utf-8"), upload.filename or "the file", MAX_DEPTH + 10)
        except UnicodeDecodeError as e:
            raise InvalidRequest(f"the file is not UTF-8 text (byte {e.start} cannot be decoded)") from None
        except InputError as e:
            raise InvalidRequest(str(e)) from None
        runs = await actions.import_thread(_rt(request), document, str(data.get("effects", "mock")))
    except (InvalidRequest, NotFound) as e:
        return render(request, "import.html", {"error": str(e), "runs": None}, status=_status(e))
    return render(request, "import.html", {"error": None, "runs": runs}, status=201)


HANDLERS = [fork_form, fork_submit, replay_form, replay_submit, replay_from_form, replay_from_submit, report_page, resume_submit, cancel_submit,
            compensate_submit, export_download, import_form, import_submit]
