"""The S3 blob settings never show a secret: a malformed credentials file is reported by
line number only (never by its text, which may be a key), and an endpoint written as
``http://user:password@host`` is refused without echoing the password, and redacted in
every error the store raises or logs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from common.adapters.s3_blobs import S3BlobStore, S3Config, S3ConfigError, read_credentials
from common.settings import Settings, SettingsError, redact_userinfo

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzz9k"


def shows_secret(message: str) -> bool:
    """Whether any piece of :data:`SECRET` is in ``message``."""
    return any(piece in message for piece in SECRET.split("/"))


@pytest.mark.parametrize(("text", "line"), [
    # a key pasted on a line of its own: configparser's error quotes the line
    (f"[default]\naws_access_key_id = AKIAEXAMPLE\n{SECRET}\n", 3),
    # no section header: the error quotes the first line
    (f"{SECRET}\n[default]\naws_access_key_id = AKIAEXAMPLE\n", 1),
    # the same option twice: the error names the option, here a secret
    (f"[default]\n{SECRET} = 1\n{SECRET} = 2\n", 3),
    # a section twice
    (f"[{SECRET}]\na = 1\n[{SECRET}]\na = 2\n", 3),
])
def test_a_malformed_credentials_file_is_reported_by_line_not_by_content(
        tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "credentials"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(S3ConfigError) as caught:
        read_credentials(str(path))
    message = str(caught.value)
    assert not shows_secret(message), message
    assert "CRAWLER_BLOB_S3_CREDENTIALS_FILE" in message
    assert f"line {line}" in message, message


def test_a_credentials_file_that_is_not_text_is_reported_without_its_bytes(
        tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    path.write_bytes(b"[default]\naws_secret_access_key = K7MDENG\xff\xfe\n")
    with pytest.raises(S3ConfigError) as caught:
        read_credentials(str(path))
    assert "K7MDENG" not in str(caught.value) and "\\xff" not in str(caught.value)


@pytest.mark.parametrize("endpoint", [
    f"http://AKIAEXAMPLE:{SECRET}@127.0.0.1:8333",
    f"https://{SECRET}@s3.example.test",
    f"ftp://user:{SECRET}@127.0.0.1:8333",  # refused for its scheme too
    f"http://user:{SECRET}@127.0.0.1:8333/path/",  # and for its path
    f"http://user:{SECRET}\x01@127.0.0.1:8333",  # and for a control character
    f"http://user:{SECRET}@127.0.0.1:99999",  # and for its port
])
def test_an_endpoint_with_a_password_is_refused_without_echoing_it(endpoint: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"CRAWLER_BLOB_S3_ENDPOINT": endpoint})
    message = str(caught.value)
    assert "CRAWLER_BLOB_S3_ENDPOINT" in message
    assert not shows_secret(message), message


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://127.0.0.1:0", "http://[::1",
    "http://", "s3.example.test", "http://s3.example.test/bucket", "http://a b",
    "http://s3.example.test?x=1", "http://s3.example.test#x",
])
def test_an_endpoint_the_client_cannot_use_is_refused_at_start(endpoint: str) -> None:
    """The S3 client aborts the process (a panic, not an exception) on a port or address
    it cannot parse: such endpoints are refused with a message instead."""
    with pytest.raises(SettingsError, match="CRAWLER_BLOB_S3_ENDPOINT: expected"):
        Settings.from_env({"CRAWLER_BLOB_S3_ENDPOINT": endpoint})


@pytest.mark.parametrize("endpoint", [
    "http://127.0.0.1:8333", "http://127.0.0.1:8333/", "https://s3.example.test",
    "http://[::1]:8333", "http://seaweed_s3:8333",
])
def test_usable_endpoints_are_accepted(endpoint: str) -> None:
    assert Settings.from_env({"CRAWLER_BLOB_S3_ENDPOINT": endpoint}).blob.s3_endpoint


def test_redact_userinfo_keeps_the_rest_of_the_text() -> None:
    assert (redact_userinfo(f"GET http://u:{SECRET}@127.0.0.1:1/b?x=1 failed")
            == "GET http://***@127.0.0.1:1/b?x=1 failed")
    # a password with an unescaped '/' still ends at the last '@' before white space
    assert (redact_userinfo(f"endpoint https://{SECRET}@s3.example.test: refused")
            == "endpoint https://***@s3.example.test: refused")
    assert redact_userinfo("http://127.0.0.1:8333/a") == "http://127.0.0.1:8333/a"
    assert redact_userinfo("mail a@b.test") == "mail a@b.test"


def test_store_errors_do_not_show_an_endpoint_password(tmp_path: Path) -> None:
    """An S3Config built in code (not from settings) with user:password@ in its endpoint:
    the start-up error, which quotes the endpoint and the client's error (the client
    quotes the URL it asked), shows neither password. The endpoint is a closed loopback
    port, and the keys come from a file, so the client asks nothing else."""
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = AKIAEXAMPLE\n"
                           "aws_secret_access_key = notused\n", encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    password = SECRET.replace("/", "%2F")  # as a URL carries it
    config = S3Config(bucket="crawl", endpoint=f"http://user:{password}@127.0.0.1:{port}",
                      path_style=True, credentials_file=str(credentials),
                      request_timeout=2)
    with pytest.raises(S3ConfigError) as caught:
        S3BlobStore(str(tmp_path / "spool"), config, writer_id="w", fsync=False)
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message
    assert not shows_secret(message), message
