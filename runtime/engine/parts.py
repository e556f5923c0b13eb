"""What the parts mixed into ``RunLoop`` (``outcomes``, ``growth``, ``takeover``) may use
of it: its records and the steps it alone defines."""

from __future__ import annotations

from abc import abstractmethod

from ..core.env import Environment
from ..core.jsonvalues import JSON
from ..core.records import Run
from ..core.states import NodeEvent
from .deps import EngineDeps
from .folding import StateFold
from .host import RunHost
from .instances import Instances
from .recorder import Recorder
from .stopping import Stop


class LoopPart:
    deps: EngineDeps
    env: Environment
    host: RunHost
    inst: Instances
    rec: Recorder
    state: StateFold
    _stop: Stop | None
    _retry_at: dict[str, float]
    _candidates: set[str]
    _attempt_no: dict[str, int]

    @property
    @abstractmethod
    def run(self) -> Run:
        ...

    @property
    @abstractmethod
    def run_id(self) -> str:
        ...

    @abstractmethod
    def _node(self, node: str, event: NodeEvent, attempt: int | None = None, **data: JSON) -> None:
        ...
