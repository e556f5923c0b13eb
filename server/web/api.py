"""The JSON API: the debugger's reads and actions for programs (its OpenAPI document at ``/schema/openapi.json``).

Reads go through ``services`` (and the records' own ``to_json``/``plain``), actions
through ``actions``, exactly as the pages do. Request bodies are parsed here, with the
rules every JSON a person types follows (``server.inputs``), and checked against the
models below before any action runs: a malformed body, a wrong type or an unknown field
is a 422 naming the field and what it expects (the validator's own errors under
``details``), and writes nothing. Actions that drive a run answer 202 with
the id of the run that goes on (it continues in the background); compensate answers
200 with its report and import 201 with the ids of the runs it created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, cast

from litestar import Request, Response, Router, get, post
from litestar.types import Empty
from litestar.exceptions import ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Operation, RequestBody, Schema
from litestar.openapi.spec.media_type import OpenAPIMediaType
from litestar.params import FromPath, FromQuery, QueryParameter
from pydantic import ValidationError

from runtime import Runtime
from runtime.core.errors import InvalidRequest, NotFound
from runtime.core.jsonvalues import JSON
from runtime.core.records import Checkpoint, Interrupt, InterruptKind, InterruptStatus
from runtime.history.events import with_writes
from server.inputs import MAX_DEPTH, InputError, kind_of, parse_json
from server.present import attempt_json, interrupt_question, journal_json, load_run_view, plain

from . import actions, services
from .bodies import MAX_IMPORT_BODY, AnswerBody, Body, CancelBody, CompensateBody, ForkBody, ReplayBody, ResumeBody, patch_refused, refused
from .auth import identity
from .services import complete, in_thread
from .threads import thread_in_path, thread_tree

#: an exported thread wraps values of up to MAX_DEPTH levels in an envelope of its own
DOCUMENT_DEPTH = MAX_DEPTH + 10
EVENTS_LIMIT = 1000
CHECKPOINTS_PER_PAGE = 50
CHECKPOINTS_LIMIT = 500
PER_PAGE_LIMIT = 500

Req = Request[Any, Any, Any]
Json = dict[str, Any]


EXPORTED: Json = {"type": "object", "description": "a thread as GET /api/runs/{run_id}/export gives it"}


M = TypeVar("M", bound=Body)


@dataclass(frozen=True, slots=True)
class ApiError:
    error: str
    status: int
    details: list[dict[str, Any]] | None = None   # a refused body: the validator's own errors


def _errors(*codes: int) -> dict[int, ResponseSpec]:
    meaning = {404: "no such run, checkpoint or interrupt", 409: "the run is not in a state that allows it",
               413: "the body is larger than this route takes",
               422: "an invalid parameter or body; the message names the field"}
    return {c: ResponseSpec(data_container=ApiError, description=meaning[c], generate_examples=False)
            for c in codes}


@dataclass
class ApiOperation(Operation):
    """An operation of this API as OpenAPI shows it: parameter errors are 422 here
    (``_invalid_parameter``), not the 400 Litestar documents by default."""

    def __post_init__(self) -> None:
        if self.responses:
            self.responses.pop("400", None)


def _read(path: str, summary: str, *errors: int) -> get:
    return get(path, summary=summary, responses=_errors(*errors), operation_class=ApiOperation)


def _act(path: str, status: int, summary: str, body: type[Body] | Json, *errors: int,
         max_body: int | None = None, also: dict[int, ResponseSpec] | None = None) -> post:
    """A POST whose JSON body this module parses itself (Litestar's own parsing would answer
    400 for what is a 422 here, and 500 for very deep JSON), documented as OpenAPI's body."""
    schema = body if isinstance(body, dict) else body.model_json_schema()
    content = {"application/json": OpenAPIMediaType(schema=cast(Schema, schema))}

    @dataclass
    class WithBody(ApiOperation):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.request_body = RequestBody(content=content, required=False)

    return post(path, status_code=status, summary=summary, responses={**(also or {}), **_errors(*errors)},
                operation_class=WithBody,
                request_max_body_size=Empty if max_body is None else max_body)   # Empty: the app's


async def _json_body(request: Req, depth: int = MAX_DEPTH, empty: JSON = None) -> JSON:
    """The request's JSON body, or ``empty`` when there is none (422 if that is None);
    413 past the size limit."""
    raw = await request.body()
    if not raw.strip():
        if empty is None:
            raise InvalidRequest("the request body is empty: this route takes a JSON document")
        return empty
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"the request body is not UTF-8 text (byte {e.start} cannot be decoded)") from None
    try:
        return parse_json(text, "the request body", depth)
    except InputError as e:
        raise InvalidRequest(str(e)) from None


async def _body(request: Req, model: type[M]) -> M:
    value = await _json_body(request, empty={})
    if not isinstance(value, dict):
        raise InvalidRequest(f"the request body must be a JSON object, not {kind_of(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise refused(e, model) from None


def _invalid_parameter(request: Req, exc: ValidationException) -> Response[Json]:
    """Litestar's own checks of query and path parameters, as a 422 naming the parameter."""
    extra = exc.extra if isinstance(exc.extra, list) else []
    message = "; ".join(f"{e.get('key')}: {e.get('message')}" for e in extra if isinstance(e, dict)) or str(exc.detail)
    return Response({"error": message, "status": 422}, status_code=422)


def _rt(request: Req) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def _load(request: Req, fn: Any, *args: Any) -> Json:
    """``fn(runtime, *args)`` in a worker thread (store reads block)."""
    out: Json = await in_thread(fn, _rt(request), *args)
    return out


def _started(run_id: str) -> Response[Json]:
    return Response({"run_id": run_id}, status_code=202)


# ------------------------------------------------------------------ reads

def checkpoint_json(cp: Checkpoint) -> Json:
    out: Json = plain(cp)
    del out["snapshot"]   # a storage detail: the state is GET /api/checkpoints/{id}
    return out


@_read("/runs", "List runs", 422)
async def list_runs(request: Req, status: FromQuery[str | None] = None, graph: FromQuery[str | None] = None,
                    kind: FromQuery[str | None] = None,
                    q: Annotated[str | None, QueryParameter(max_length=200)] = None,
                    page: Annotated[int, QueryParameter(ge=1)] = 1,
                    per_page: Annotated[int, QueryParameter(ge=1, le=PER_PAGE_LIMIT)] = services.PER_PAGE) -> Json:
    """Runs, newest first: by status, graph name, kind, and ids containing ``q``; one page at a time."""
    p = await in_thread(services.runs_page, _rt(request), status=status, graph=graph, kind=kind, q=q, page=page,
                        per_page=per_page)
    return {"runs": plain(p.runs), "page": p.page, "per_page": per_page, "has_next": p.has_next,
            "filters": dict(p.filters)}


@_read("/runs/{run_id:str}", "One run", 404)
async def get_run(request: Req, run_id: FromPath[str]) -> Json:
    """The run, its state at its latest checkpoint, the questions it waits on, and the runs that continued it."""
    view = await in_thread(lambda: complete(load_run_view(_rt(request), run_id)))
    out: Json = view.to_json()
    del out["checkpoints"]   # GET /api/runs/{run_id}/checkpoints lists them
    out["checkpoint_count"] = len(view.checkpoints)
    out["head_checkpoint_id"] = view.checkpoints[-1].id if view.checkpoints else None
    out["orphaned"] = view.orphaned
    return out


@_read("/threads/{thread_id:path}", "A thread and its branches", 404)
async def get_thread(request: Req, thread_id: FromPath[str]) -> Json:
    """Every run of the thread as a tree of branches (forks with the fields their patch
    edited), and the state the thread's next turn starts from."""
    thread_id = thread_in_path(request, thread_id)
    def load(rt: Runtime) -> Json:
        branches = thread_tree(rt, thread_id)
        state = complete(rt.thread_state(thread_id)).model_dump(mode="json")
        return {"thread_id": thread_id, "state": state,
                "runs": [{"run": plain(b.run), "depth": b.depth, "base_seq": b.base_seq, "patched": list(b.patched)}
                         for b in branches]}

    return await _load(request, load)


@_read("/runs/{run_id:str}/checkpoints", "A run's checkpoints, a page at a time", 404, 422)
async def list_checkpoints(request: Req, run_id: FromPath[str],
                           after: Annotated[int | None, QueryParameter(ge=0, le=services.MAX_INT)] = None,
                           limit: Annotated[int, QueryParameter(ge=1, le=CHECKPOINTS_LIMIT)] = CHECKPOINTS_PER_PAGE
                           ) -> Json:
    """Oldest first, up to ``limit`` checkpoints with a seq above ``after`` (from the first
    when omitted), with every node instance's status; ``next_after`` continues while
    ``has_more``. The states are at GET /api/checkpoints/{id}."""
    def load(rt: Runtime) -> Json:
        run = complete(rt.get_run(run_id))
        first = 0 if after is None else after + 1
        # nothing lies past the head: a seq beyond it is not sent to the store
        found = rt.store.checkpoints(run_id, first, limit + 1) if first <= run.head_seq else []
        shown = found[:limit]
        return {"run_id": run_id, "checkpoints": [checkpoint_json(c) for c in shown],
                "next_after": shown[-1].seq if shown else after, "has_more": len(found) > limit}

    return await _load(request, load)


@_read("/checkpoints/{checkpoint_id:str}", "One checkpoint with its state", 404)
async def get_checkpoint(request: Req, checkpoint_id: FromPath[str]) -> Json:
    """The state there, the outcomes recorded against it, and what would run next from it."""
    return await _load(request, lambda rt: complete(rt.checkpoint(checkpoint_id)).to_json())


@_read("/runs/{run_id:str}/journal", "A run's effect journal", 404)
async def get_journal(request: Req, run_id: FromPath[str]) -> Json:
    """``entries``: every journal entry in the order recorded; ``effects``: one row per effect
    with how it ended up (LIVE, MOCKED, FAILED, IN DOUBT, COMPENSATED, …)."""
    def load(rt: Runtime) -> Json:
        run = complete(rt.get_run(run_id))
        entries = rt.store.journal([run_id])
        return {"run_id": run_id, "entries": [journal_json(e) for e in entries],
                "effects": plain(services.journal_rows(entries, run))}

    return await _load(request, load)


@_read("/runs/{run_id:str}/attempts", "A run's node attempts", 404)
async def get_attempts(request: Req, run_id: FromPath[str]) -> Json:
    """Every attempt of every node instance: status, duration, error class and the retry decision."""
    def load(rt: Runtime) -> Json:
        complete(rt.get_run(run_id))
        return {"run_id": run_id, "attempts": [attempt_json(a) for a in complete(rt.attempts(run_id))]}

    return await _load(request, load)


@_read("/runs/{run_id:str}/events", "A run's trace, a window at a time", 404, 422)
async def get_events(request: Req, run_id: FromPath[str], after: Annotated[int, QueryParameter(ge=0, le=services.MAX_INT)] = 0,
                     limit: Annotated[int, QueryParameter(ge=1, le=EVENTS_LIMIT)] = services.EVENTS_PER_PAGE) -> Json:
    """Up to ``limit`` events with a sequence number above ``after``; ``next_after`` continues."""
    def load(rt: Runtime) -> Json:
        run = complete(rt.get_run(run_id))
        # one more than shown says whether there are more; nothing lies past the last event
        events = rt.store.events(run_id, after, limit + 1) if after < run.event_seq else []
        shown = with_writes(rt.store, run_id, events[:limit])
        return {"run_id": run_id, "events": plain(shown), "next_after": shown[-1].seq if shown else after,
                "has_more": len(events) > limit}

    return await _load(request, load)


@_read("/diff", "Compare two checkpoints", 404, 422)
async def get_diff(request: Req, a: FromQuery[str], b: FromQuery[str]) -> Json:
    """Field-level changes from the state at checkpoint ``a`` to the state at ``b`` (any two, any branches)."""
    return await _load(request, lambda rt: {"a": a, "b": b, "changes": [c.to_json() for c in complete(rt.diff(a, b))]})


@_read("/runs/{run_id:str}/report", "A replay's divergence report", 404)
async def get_report(request: Req, run_id: FromPath[str]) -> Json:
    """Node by node, what the replay did differently from the recording (404 for a run that is not a replay)."""
    def load(rt: Runtime) -> Json:
        run = complete(rt.get_run(run_id))
        if not run.options.get("compare"):
            raise NotFound(f"run {run_id} is not a replay: it has no divergence report")
        return complete(rt.replay_report(run_id)).to_json()

    return await _load(request, load)


@_read("/runs/{run_id:str}/export", "Export the run's thread", 404, 409)
async def export_thread(request: Req, run_id: FromPath[str]) -> Json:
    """The whole thread of the run as one versioned document; POST it to /api/import elsewhere."""
    return await actions.export_thread(_rt(request), run_id)


@_read("/interrupts", "Questions runs wait on", 404, 422)
async def list_interrupts(request: Req, run_id: FromQuery[str | None] = None, graph: FromQuery[str | None] = None,
                          kind: FromQuery[str | None] = None, pending: FromQuery[bool] = True) -> Json:
    """Pending questions (``pending=false``: answered and cancelled ones too), by run, graph name and kind."""
    if kind is not None and kind not in set(InterruptKind):
        raise InvalidRequest(f"kind: unknown interrupt kind {kind!r}; one of: {', '.join(InterruptKind)}")
    def load(rt: Runtime) -> Json:
        if run_id is not None:
            complete(rt.get_run(run_id))
        found: list[Interrupt] = rt.store.interrupts(run_id, InterruptStatus.PENDING if pending else None)
        graphs: dict[str, str] = {}
        out = []
        for i in found:
            if kind is not None and i.kind != kind:
                continue
            if i.run_id not in graphs:
                graphs[i.run_id] = complete(rt.get_run(i.run_id)).graph_name
            if graph is not None and graphs[i.run_id] != graph:
                continue
            out.append({**plain(i), "graph_name": graphs[i.run_id], "question": interrupt_question(i)})
        return {"interrupts": out}

    return await _load(request, load)


# ------------------------------------------------------------------ actions

@_act("/runs/{run_id:str}/resume", 202, "Resume a run", ResumeBody, 404, 409, 422)
async def resume(request: Req, run_id: FromPath[str]) -> Response[Json]:
    """Continue a failed or cancelled run (as a continuation), start a queued one, recover one
    whose process is gone, or answer several questions of a paused run at once (``answers``);
    limits given replace the inherited ones. Answers with the id of the run that goes on."""
    body = await _body(request, ResumeBody)
    return _started(await actions.resume(_rt(request), request.app.state.tasks, run_id, answers=body.answers,
                                         limits=body.limits(), by=identity(request.scope), queue=body.queue))


@_act("/runs/{run_id:str}/cancel", 202, "Cancel a run", CancelBody, 404, 409, 422)
async def cancel(request: Req, run_id: FromPath[str]) -> Response[Json]:
    """Ask the run to stop; it ends CANCELLED. 409 when it has already ended."""
    body = await _body(request, CancelBody)
    return _started(await actions.cancel(_rt(request), request.app.state.tasks, run_id, body.reason))


@_act("/runs/{run_id:str}/compensate", 200, "Compensate an ended run", CompensateBody, 404, 409, 422,
      also={202: ResponseSpec(data_container=dict[str, Any], generate_examples=False,
                              description="left to a worker (``queue``): the report says ``queued``")})
async def compensate(request: Req, run_id: FromPath[str]) -> Response[Json]:
    """Undo the run's live effects that registered a compensation, newest first; the report says how each went
    (202 and ``queued``: left to a worker)."""
    body = await _body(request, CompensateBody)
    report = await actions.compensate(_rt(request), request.app.state.tasks, run_id,
                                      retry_in_doubt=body.retry_in_doubt, queue=body.queue)
    return Response(report.to_json(), status_code=202 if report.queued else 200)


@_act("/checkpoints/{checkpoint_id:str}/fork", 202, "Fork at a checkpoint", ForkBody, 404, 422)
async def fork(request: Req, checkpoint_id: FromPath[str]) -> Response[Json]:
    """A new branch from the checkpoint with the patch applied (validated against the state's
    schema before anything is written); ``queue``: left QUEUED for a worker."""
    body = await _body(request, ForkBody)
    try:
        run_id = await actions.fork(_rt(request), request.app.state.tasks, checkpoint_id, body.patch,
                                    body.effects, body.mocks, limits=body.limits(), queue=body.queue)
    except InvalidRequest as e:
        raise patch_refused(e) from None
    return _started(run_id)


@_act("/runs/{run_id:str}/replay", 202, "Replay a run", ReplayBody, 404, 409, 422)
async def replay(request: Req, run_id: FromPath[str]) -> Response[Json]:
    """Re-execute the run with effects mocked (``queue``: left QUEUED for a worker); its report is
    GET /api/runs/{new run id}/report."""
    body = await _body(request, ReplayBody)
    return _started(await actions.replay(_rt(request), request.app.state.tasks, run_id, body.version, body.mocks,
                                         queue=body.queue))


@_act("/import", 201, "Import an exported thread", EXPORTED, 413, 422, max_body=MAX_IMPORT_BODY)
async def import_thread(request: Req, effects: FromQuery[str] = "mock") -> Json:
    """Load the thread into this store (its ids must be new here); a bad document writes nothing.
    ``effects=mock`` (the default): resuming or continuing its runs here serves the effects they
    recorded and asks before any other; ``live``: they may call the outside world again."""
    document = await _json_body(request, DOCUMENT_DEPTH)
    runs = await actions.import_thread(_rt(request), document, effects)
    return {"thread_id": runs[0].thread_id if runs else None, "run_ids": [r.id for r in runs]}


@_act("/interrupts/{interrupt_id:str}/answer", 202, "Answer a question", AnswerBody, 404, 409, 422)
async def answer(request: Req, interrupt_id: FromPath[str]) -> Response[Json]:
    """Validated against the question's response model before the run moves; who answered
    (the token's name, or ``local``) is recorded on the trace's ``interrupt.answered`` event."""
    body = await _body(request, AnswerBody)
    run_id = await actions.answer(_rt(request), request.app.state.tasks, interrupt_id, cast(JSON, body.answer),
                                  identity(request.scope))
    return _started(run_id)


ROUTES = [list_runs, get_run, get_thread, list_checkpoints, get_checkpoint, get_journal, get_attempts, get_events,
          get_diff, get_report, export_thread, list_interrupts, resume, cancel, compensate, fork, replay,
          import_thread, answer]

HANDLERS = [Router("/api", route_handlers=ROUTES, tags=["debugger"],
                   exception_handlers={ValidationException: _invalid_parameter})]
