"""Test clients that reach the debugger as a browser on this machine does: at 127.0.0.1
(the debugger answers only to this machine's names, ``server.web.origin``)."""

from __future__ import annotations

from typing import Any, TypeVar

from litestar import Litestar
from litestar.testing import AsyncTestClient as _AsyncTestClient
from litestar.testing import TestClient as _TestClient

T = TypeVar("T", bound=Litestar)

LOCAL = "http://127.0.0.1"


class TestClient(_TestClient[T]):
    __test__ = False   # not a test class for pytest

    def __init__(self, app: T, base_url: str = LOCAL, **kwargs: Any) -> None:
        super().__init__(app, base_url=base_url, **kwargs)


class AsyncTestClient(_AsyncTestClient[T]):
    __test__ = False

    def __init__(self, app: T, base_url: str = LOCAL, **kwargs: Any) -> None:
        super().__init__(app, base_url=base_url, **kwargs)
