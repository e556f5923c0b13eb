"""A debugger that asks for a token, opened through a ``?token=`` link on another site (a
web mail, a chat): the page loads, its address loses the secret, and a reload still works."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import harness_server
from playwright.sync_api import Page, expect


@pytest.fixture
def elsewhere() -> Iterator[tuple[http.server.HTTPServer, list[bytes]]]:
    """A page on another site (``localhost``, not the debugger's ``127.0.0.1``) holding a link."""
    page: list[bytes] = [b""]

    class Link(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(page[0])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Link)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server, page
    finally:
        server.shutdown()
        server.server_close()


def test_a_token_link_from_another_site_opens_the_debugger(
        page: Page, tmp_path: Path, elsewhere: tuple[http.server.HTTPServer, list[bytes]]) -> None:
    server, link_page = elsewhere
    with harness_server(["serve", "--db", f"sqlite:///{tmp_path / 't.db'}", "--token", "s3cret"], tmp_path) as url:
        base = url
        link_page[0] = f'<a id="go" href="{base}/runs?status=failed&token=s3cret">debugger</a>'.encode()
        page.goto(f"http://localhost:{server.server_address[1]}/")
        page.click("#go")
        page.wait_for_url(f"{base}/runs?status=failed")
        expect(page).to_have_title("Runs · Shadow Harness")
        assert "s3cret" not in page.url
        assert page.reload().status == 200
        expect(page).to_have_title("Runs · Shadow Harness")
        page.go_back()
        page.wait_for_url(f"http://localhost:{server.server_address[1]}/")   # the secret is not in the history
