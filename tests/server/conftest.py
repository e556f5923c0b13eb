"""Shared fixtures for the server tests: a Runtime over a fresh SQLite file holding a
few runs of small graphs (one succeeded with a live effect, one failed, one waiting on
a question with a response model, a map run and a loop run), and an app over it.

Each test gets its own store, so actions in one test never show up in another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from litestar import Litestar
from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, SqlStore, append
from server.web.app import create_app

# ------------------------------------------------------------------ graphs


class Order(BaseModel):
    order_id: int
    amount: int = 0
    receipt: str = ""
    hold: bool = False   # makes `charge` wait until the run is cancelled: a run that stays running


@dataclass
class World:
    """What effects and compensations did outside the runtime."""

    charges: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)


def order_graph(world: World) -> Graph:
    g = Graph("api_order", Order)

    @g.node()
    def price(s: Order) -> dict[str, Any]:
        return {"amount": s.order_id * 10}

    @g.node(after=["price"])
    async def charge(s: Order, ctx: NodeContext) -> dict[str, Any]:
        if s.hold:
            await asyncio.Event().wait()   # until cancelled

        def pay() -> str:
            world.charges.append(str(s.order_id))
            return f"rcpt-{s.order_id}"

        def refund(info: Any) -> str:
            world.refunds.append(info.result)
            return "refunded"

        receipt = await ctx.effect("payments.charge", pay, request={"amount": s.amount}, compensate=refund)
        return {"receipt": receipt}

    return g


class Steps(BaseModel):
    n: int = 0
    log: Annotated[list[str], append] = []


def failing_graph() -> Graph:
    """``second`` fails while ``n`` is below 1 (a fork that patches ``n`` gets through)."""
    g = Graph("api_failing", Steps)

    @g.node()
    def first(s: Steps) -> dict[str, Any]:
        return {"log": ["first"]}

    @g.node(after=["first"])
    def second(s: Steps) -> dict[str, Any]:
        if s.n < 1:
            raise ValueError("n must be at least 1")
        return {"log": [f"second with n={s.n}"]}

    return g


class Approval(BaseModel):
    approve: bool
    note: str = ""


class Review(BaseModel):
    doc: str
    title: str = ""
    approved: bool = False
    note: str = ""


def review_graph() -> Graph:
    g = Graph("api_review", Review)

    @g.node()
    def draft(s: Review) -> dict[str, Any]:
        return {"title": s.doc.upper()}

    @g.node(after=["draft"])
    async def ask(s: Review, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": f"publish {s.title}?"}, response=Approval)
        return {"approved": answer.approve, "note": answer.note}

    return g


class Batch(BaseModel):
    count: int = 3
    items: list[int] = []
    results: Annotated[list[int], append] = []
    total: int = 0


def map_graph() -> Graph:
    g = Graph("api_map", Batch)

    @g.node()
    def plan(s: Batch) -> dict[str, Any]:
        return {"items": list(range(s.count))}

    @g.node(after=["plan"], map_over="items")
    def work(s: Batch, item: int) -> dict[str, Any]:
        return {"results": [item * item]}

    @g.node(after=["work"])
    def reduce(s: Batch) -> dict[str, Any]:
        return {"total": sum(s.results)}

    return g


class Chat(BaseModel):
    turns: int = 0
    goal: int = 3
    messages: Annotated[list[str], append] = []


def loop_graph() -> Graph:
    g = Graph("api_loop", Chat)

    @g.node()
    def prep(s: Chat) -> dict[str, Any]:
        return {"messages": ["user: go"]}

    @g.node(after=["prep", "tool"], max_iterations=10)
    def model(s: Chat) -> dict[str, Any]:
        return {"turns": s.turns + 1, "messages": [f"model {s.turns + 1}"]}

    @g.node(after=["model"], when=lambda s: s.turns < s.goal)
    def tool(s: Chat) -> dict[str, Any]:
        return {"messages": [f"tool {s.turns}"]}

    @g.node(after=["model"])
    def finish(s: Chat) -> dict[str, Any]:
        return {"messages": ["done"]}

    return g


# ------------------------------------------------------------------ fixtures


@dataclass
class Seeded:
    """A runtime over a SQLite file and the runs recorded in it."""

    rt: Runtime
    path: Path
    world: World
    succeeded: str
    failed: str
    interrupted: str
    mapped: str
    looped: str
    graphs: dict[str, Graph]


async def _seed(rt: Runtime, world: World, graphs: dict[str, Graph]) -> dict[str, str]:
    runs = {
        "succeeded": await rt.start(graphs["order"], {"order_id": 7}),
        "failed": await rt.start(graphs["failing"], {}),
        "interrupted": await rt.start(graphs["review"], {"doc": "notes"}),
        "mapped": await rt.start(graphs["map"], {"count": 3}),
        "looped": await rt.start(graphs["loop"], {"goal": 2}),
    }
    expected = {"succeeded": RunStatus.SUCCEEDED, "failed": RunStatus.FAILED, "interrupted": RunStatus.INTERRUPTED,
                "mapped": RunStatus.SUCCEEDED, "looped": RunStatus.SUCCEEDED}
    for name, run in runs.items():
        assert run.status == expected[name], (name, run.status, run.error)
    return {name: run.id for name, run in runs.items()}


def make_seeded(path: Path) -> Seeded:
    world = World()
    graphs = {"order": order_graph(world), "failing": failing_graph(), "review": review_graph(),
              "map": map_graph(), "loop": loop_graph()}
    rt = Runtime(store=SqlStore(f"sqlite:///{path}"), max_concurrency=4)
    ids = asyncio.run(_seed(rt, world, graphs))
    return Seeded(rt=rt, path=path, world=world, graphs=graphs, **ids)


def app_over(rt: Runtime, **options: Any) -> Litestar:
    """``create_app(rt, **options)``; building it must raise no warning (the test run turns
    warnings into errors), so every handler declares its parameters the current way."""
    return create_app(rt, **options)


@pytest.fixture
def make_app() -> Callable[..., Litestar]:
    return app_over


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[Seeded]:
    """A store of its own, for a test that changes it."""
    s = make_seeded(tmp_path / "h.db")
    yield s
    s.rt.close()


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient[Any]]:
    with TestClient(app_over(seeded.rt)) as c:
        yield c


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One store for a module's tests that only read."""
    s = make_seeded(tmp_path_factory.mktemp("shared") / "h.db")
    yield s
    s.rt.close()


@pytest.fixture(scope="module")
def reader(shared: Seeded) -> Iterator[TestClient[Any]]:
    with TestClient(app_over(shared.rt)) as c:
        yield c


@pytest.fixture
def empty_rt(tmp_path: Path) -> Iterator[Runtime]:
    """A second, empty store (an import target)."""
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'other.db'}"), max_concurrency=4)
    yield rt
    rt.close()
