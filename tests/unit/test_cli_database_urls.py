"""``--db URL`` as users write it: a malformed URL is one line and exit 2, a password is
never shown, and ``postgres://`` (the usual ``DATABASE_URL``) is PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import make_url

from runtime import InvalidRequest, SqlStore
from runtime.store.sql.urls import masked, normalized, without_passwords
from server.cli import main


@pytest.fixture(autouse=True)
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    return tmp_path


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:notaport/x", "postgresql://:::/x",
                                 "postgresql://postgres:S3cretPw@127.0.0.1:notaport/x"])
def test_a_port_that_is_not_a_number_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], url: str):
    code = main(["runs", "--db", url])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "its port must be a number" in err and "Traceback" not in err
    assert "S3cretPw" not in err


def test_a_database_error_masks_the_password(capsys: pytest.CaptureFixture[str]):
    # port 1: nothing listens there, so the driver's own error is reported
    code = main(["runs", "--db", "postgresql://postgres:S3cretPw@127.0.0.1:1/x"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("harness: database error (postgresql://postgres:***@127.0.0.1:1/x): ")
    assert "S3cretPw" not in err


def test_a_password_given_as_a_query_parameter_is_masked_too(capsys: pytest.CaptureFixture[str]):
    code = main(["runs", "--db", "postgresql://postgres@127.0.0.1:1/x?password=S3cretPw&connect_timeout=2"])
    err = capsys.readouterr().err
    assert code == 2 and "password=***" in err and "S3cretPw" not in err


def test_an_unencoded_at_sign_in_a_password_is_refused_without_showing_any_of_it(
        capsys: pytest.CaptureFixture[str]):
    code = main(["runs", "--db", "postgresql://u:s3cr@tpw@127.0.0.1:5432/d"])
    err = capsys.readouterr().err
    assert code == 2 and "s3cr" not in err and "tpw" not in err and "%40" in err
    assert len(err.strip().splitlines()) == 1


def test_the_stores_own_refusal_masks_the_password():
    with pytest.raises(InvalidRequest) as caught:
        SqlStore("postgresql://postgres:S3cretPw@127.0.0.1:notaport/x")
    assert "S3cretPw" not in str(caught.value) and "postgres:***@" in str(caught.value)


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:pw@h:5432/d", "postgresql://u:***@h:5432/d"),
    ("postgresql+psycopg://u:p%40ss@h/d", "postgresql+psycopg://u:***@h/d"),
    ("postgresql://u@h/d", "postgresql://u@h/d"),
    ("postgresql://h/d?user=u&password=pw", "postgresql://h/d?user=u&password=***"),
    ("sqlite:///tmp/a:b@c.db", "sqlite:///tmp/a:b@c.db"),
    ("postgresql://u:s3cr@tpw@h:5432/d", "postgresql://u:***@h:5432/d"),   # an '@' not written %40
])
def test_masked_hides_only_the_password(url: str, shown: str):
    assert masked(url) == shown


def test_without_passwords_hides_a_decoded_password_in_a_message():
    url = "postgresql://u:s3cret%40pw@h/d"
    assert without_passwords(f"failed for {url}: password s3cret@pw refused", url) == \
        "failed for postgresql://u:***@h/d: password *** refused"


@pytest.mark.parametrize(("url", "read_as"), [
    ("postgres://u@h:5432/d", "postgresql://u@h:5432/d"),
    ("postgres+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
    ("postgresql://u@h/d", "postgresql://u@h/d"),
    ("sqlite:///postgres://x", "sqlite:///postgres://x"),
])
def test_postgres_urls_are_read_as_postgresql(url: str, read_as: str):
    assert normalized(url) == read_as


def test_a_postgres_url_opens_the_postgresql_store(pg_empty_url: str, capsys: pytest.CaptureFixture[str]):
    url = make_url(pg_empty_url).set(drivername="postgres").render_as_string(hide_password=False)
    assert url.startswith("postgres://")
    code = main(["runs", "--db", url])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, "no runs\n", "")


@pytest.mark.parametrize("command", [["runs"], ["worker", "--once"], ["show", "run_x"]])
def test_an_empty_db_is_refused_and_no_local_store_is_made(capsys: pytest.CaptureFixture[str], workdir: Path,
                                                           monkeypatch: pytest.MonkeyPatch, command: list[str]):
    """``--db "$DATABASE_URL"`` with the variable unset: not a silent fall-back to ./harness.db,
    where workers would poll an empty store."""
    assert main([*command, "--db", ""]) == 2
    assert capsys.readouterr().err.startswith("harness: --db is empty ('')")
    monkeypatch.setenv("HARNESS_DB", " ")
    assert main(command) == 2
    assert capsys.readouterr().err.startswith("harness: HARNESS_DB is set but empty (' ')")
    assert list(workdir.iterdir()) == []
    monkeypatch.delenv("HARNESS_DB")
    assert main(["runs"]) == 0 and (workdir / "harness.db").exists()   # unset: the default, as documented
