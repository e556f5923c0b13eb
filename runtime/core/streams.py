"""What a stream of a run yields, built the same way live and from the store.

``merge_stream`` turns committed records (trace events, checkpoints, pending
writes) into stream events ordered by trace sequence, a checkpoint right after
the event it reflects and a node's writes on its ``node.succeed`` event. The live
stream applies it to each batch as it commits; a follower in another process
applies it to what it reads back; both therefore see the same sequence.

Streaming is opt-in per call: whoever wants a call's events sets ``SINK`` in the
context the call runs in, and every commit made there is published to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from .jsonvalues import JSON
from .records import Checkpoint, CheckpointSummary, EventType, PendingWrite, TraceEvent, WriteKind

__all__ = ["CHECKPOINT", "CUSTOM", "DROPPED", "SINK", "StreamEvent", "merge_stream", "publish"]

#: stream event type of a committed checkpoint (not a trace event of its own)
CHECKPOINT = "checkpoint"
#: trace and stream event type of ``ctx.emit`` payloads
CUSTOM = EventType.CUSTOM.value
#: stream event type of the notice that a live stream which fell behind its reader dropped
#: ``data["count"]`` ephemeral events of the run (they cannot be read back); itself ephemeral
DROPPED = "stream.dropped"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    run_id: str
    #: the trace sequence number of the event (recorded events are gapless from 1);
    #: for a checkpoint, an ephemeral event or a ``stream.dropped`` notice, the last
    #: recorded event before it
    seq: int
    type: str                  # an EventType value, "checkpoint", "custom" or "stream.dropped"
    node: str | None = None
    attempt: int | None = None
    data: Mapping[str, JSON] = field(default_factory=dict)
    at: float = 0.0
    #: an ``emit(..., ephemeral=True)`` payload (or a ``stream.dropped`` notice): delivered
    #: live, never stored
    ephemeral: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "seq": self.seq, "type": self.type, "node": self.node,
                "attempt": self.attempt, "data": dict(self.data), "at": self.at, "ephemeral": self.ephemeral}


#: where the current call's commits are published (unset: nobody is streaming it)
SINK: ContextVar[Callable[[list[StreamEvent]], None] | None] = ContextVar("harness_stream_sink", default=None)


def merge_stream(run_id: str, events: Iterable[TraceEvent], checkpoints: Iterable[Checkpoint | CheckpointSummary],
                 writes: Iterable[PendingWrite]) -> list[StreamEvent]:
    """Stream events for records committed together (or read back together)."""
    outputs: dict[tuple[str | None, int | None], JSON] = {
        (w.node, w.attempt): w.value for w in writes if w.kind == WriteKind.WRITES}
    items: list[tuple[int, int, StreamEvent]] = []
    for ev in events:
        data = ev.data
        if ev.type == EventType.NODE_SUCCEED and (ev.node, ev.attempt) in outputs:
            data = {**data, "writes": outputs[(ev.node, ev.attempt)]}
        items.append((ev.seq, 0, StreamEvent(run_id, ev.seq, str(ev.type), ev.node, ev.attempt, data, ev.at)))
    for cp in checkpoints:
        items.append((cp.event_seq, 1, StreamEvent(
            run_id, cp.event_seq, CHECKPOINT, data={"id": cp.id, "seq": cp.seq, "nodes": list(cp.nodes),
                                                    "source": str(cp.source)}, at=cp.created_at)))
    items.sort(key=lambda t: (t[0], t[1]))
    return [item for _, _, item in items]


def publish(run_id: str, events: Iterable[TraceEvent], checkpoints: Iterable[Checkpoint] = (),
            writes: Iterable[PendingWrite] = ()) -> None:
    """Hand committed records to whoever streams the current call, if anyone does."""
    sink = SINK.get()
    if sink is not None:
        sink(merge_stream(run_id, events, checkpoints, writes))
