"""Everything the engine is given by the Runtime that composes it (never the Runtime)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.env import Environment
from ..history.registry import GraphRegistry
from ..store.base import CheckpointStore
from .host import CompensationRegistry
from .slots import Slots


@dataclass(frozen=True, slots=True)
class EngineDeps:
    store: CheckpointStore
    env: Environment
    slots: Slots
    graphs: GraphRegistry
    compensations: CompensationRegistry
