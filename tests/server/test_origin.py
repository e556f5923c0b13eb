"""The debugger answers requests addressed to it, and takes changes only from its own
pages or from programs: a page on another site cannot fork, answer or cancel through the
browser of someone who has the debugger open (``server.web.origin``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Seeded
from local_client import TestClient
from test_api import checkpoints, store_contents
from test_pages import csrf

from server.web.app import create_app
from server.web.origin import host_name

Client = TestClient[Any]


def fork_body() -> dict[str, Any]:
    return {"patch": {"n": 9}}


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:9999", "null",
                                    "http://127.0.0.1.evil.example"])
def test_a_change_sent_from_another_site_is_refused_and_writes_nothing(seeded: Seeded, client: Client,
                                                                       origin: str) -> None:
    cp = checkpoints(client, seeded.failed)[1]["id"]
    before = store_contents(seeded.rt)
    # text/plain: the body a page elsewhere can send without asking first (no preflight)
    r = client.post(f"/api/checkpoints/{cp}/fork", content=b'{"patch": {"n": 9}}',
                    headers={"Origin": origin, "Content-Type": "text/plain"})
    assert r.status_code == 403 and "another site" in r.json()["error"]
    page = client.post(f"/runs/{seeded.failed}/cancel", data={"_csrf_token": csrf(client, f"/runs/{seeded.failed}")},
                       headers={"Origin": origin})
    assert page.status_code == 403 and "another site" in page.text
    assert store_contents(seeded.rt) == before


def test_its_own_pages_and_programs_still_change_things(seeded: Seeded, client: Client) -> None:
    cp = checkpoints(client, seeded.failed)[1]["id"]
    own = client.post(f"/api/checkpoints/{cp}/fork", json=fork_body(), headers={"Origin": "http://127.0.0.1"})
    assert own.status_code == 202, own.text
    program = client.post(f"/api/checkpoints/{cp}/fork", json=fork_body())   # curl, a script: no Origin
    assert program.status_code == 202, program.text
    # reading is open to any origin: a page elsewhere cannot read the answer anyway
    assert client.get("/api/runs", headers={"Origin": "http://evil.example"}).status_code == 200


def test_on_loopback_only_this_machines_names_are_answered(seeded: Seeded) -> None:
    """A name an attacker controls can resolve to 127.0.0.1 (DNS rebinding); their page is
    then same-origin with what it reaches, so the name itself is refused."""
    app = create_app(seeded.rt)
    with TestClient(app) as c:   # the test client warns about some base URLs: the header instead
        for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST"):
            assert c.get("/runs", headers={"Host": host}).status_code == 200, host
    with TestClient(app, base_url="http://evil.example:8765") as c:
        r = c.get("/api/runs")
        assert r.status_code == 421 and "not to 'evil.example'" in r.json()["error"]
        assert c.get("/runs").status_code == 421
    with TestClient(app) as c:   # a name hidden behind URL parts is no name
        assert c.get("/runs", headers={"Host": "evil.example:80@127.0.0.1"}).status_code == 421
    # a local reverse proxy's public name, when told
    with TestClient(create_app(seeded.rt, also_hosts=["Harness.Internal."]), base_url="http://harness.internal") as c:
        assert c.get("/runs").status_code == 200


def test_behind_a_proxy_its_pages_may_change_things(seeded: Seeded) -> None:
    """A proxy may pass on its own address as Host (nginx does by default): a page it serves
    sends the proxy's name as Origin, which is this server's when named with --allow-host."""
    cp = checkpoints_of(seeded)
    app = create_app(seeded.rt, also_hosts=["harness.internal"])
    with TestClient(app) as c:   # Host: 127.0.0.1, as the proxy passes it
        for origin in ("https://harness.internal", "https://harness.internal:443", "http://HARNESS.internal"):
            r = c.post(f"/api/checkpoints/{cp}/fork", json=fork_body(), headers={"Origin": origin})
            assert r.status_code == 202, (origin, r.text)
        r = c.post(f"/api/checkpoints/{cp}/fork", json=fork_body(), headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        # another local site (another port) is not this server's page
        r = c.post(f"/api/checkpoints/{cp}/fork", json=fork_body(), headers={"Origin": "http://127.0.0.1:9999"})
        assert r.status_code == 403


def checkpoints_of(seeded: Seeded) -> str:
    return seeded.rt.store.checkpoints(seeded.failed)[1].id


def test_off_loopback_the_token_guards_any_name(seeded: Seeded) -> None:
    app = create_app(seeded.rt, host="0.0.0.0", token="s3cret")
    with TestClient(app, base_url="http://harness.example.org") as c:
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize(("host", "name"), [("127.0.0.1:8765", "127.0.0.1"), ("[::1]:80", "::1"),
                                            ("LocalHost", "localhost"), ("localhost.:80", "localhost"), ("", ""),
                                            ("evil.example@127.0.0.1", ""), ("127.0.0.1/x", "")])
def test_host_names(host: str, name: str) -> None:
    assert host_name(host) == name
