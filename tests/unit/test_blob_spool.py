"""The local store's hooks for a store that ships finished files (the S3 spool), the
S3 settings and the credentials file; no server needed."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from common.adapters.local_blobs import LocalBlobStore
from common.adapters.s3_blobs import S3ConfigError, read_credentials
from common.runtime import s3_config
from common.settings import Settings, SettingsError


def _locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_file_is_locked_while_written_and_reported_when_finished(tmp_path: Path) -> None:
    finished: list[str] = []
    store = LocalBlobStore(str(tmp_path), writer_id="w", max_bytes=100, lock_files=True,
                           on_finished=finished.append)
    first = store.append("warc", b"a" * 80)
    assert _locked(tmp_path / first.file)
    assert finished == []
    second = store.append("warc", b"b" * 80)  # rolls over
    assert finished == [first.file]
    assert not _locked(tmp_path / first.file)
    assert _locked(tmp_path / second.file)
    store.close()
    assert finished == [first.file, second.file]
    assert not _locked(tmp_path / second.file)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.file, second.file])


def test_without_lock_files_nothing_is_locked(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path), writer_id="w")
    pointer = store.append("warc", b"x")
    assert not _locked(tmp_path / pointer.file)
    store.close()


def test_sequence_continues_after_files_shipped_elsewhere(tmp_path: Path) -> None:
    asked: list[str] = []

    def known(start: str) -> list[str]:
        asked.append(start)
        return [f"{start}00007.warc.gz", f"{start}00003.warc.gz", "unrelated.warc.gz",
                "crawl-w-text-00099.warc.gz"]

    store = LocalBlobStore(str(tmp_path), writer_id="w", known_keys=known)
    assert store.append("warc", b"x").file == "crawl-w-warc-00008.warc.gz"
    store.close()
    assert asked == ["crawl-w-warc-"]


def test_sequence_takes_the_highest_of_spool_and_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "crawl-w-warc-00011.warc.gz").write_bytes(b"old")
    store = LocalBlobStore(str(tmp_path), writer_id="w",
                           known_keys=lambda start: [f"{start}00004.warc.gz"])
    assert store.append("warc", b"x").file == "crawl-w-warc-00012.warc.gz"
    store.close()


def test_s3_backend_needs_a_bucket() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_BLOB_S3_BUCKET"):
        Settings.from_env({"CRAWLER_BLOB_BACKEND": "s3"})
    with pytest.raises(SettingsError, match="CRAWLER_BLOB_BACKEND"):
        Settings.from_env({"CRAWLER_BLOB_BACKEND": "ftp"})


@pytest.mark.parametrize("endpoint", ["127.0.0.1:8333", "ftp://x", "http://h/path"])
def test_s3_endpoint_must_be_an_http_url(endpoint: str) -> None:
    with pytest.raises(SettingsError, match="CRAWLER_BLOB_S3_ENDPOINT"):
        Settings.from_env({"CRAWLER_BLOB_S3_ENDPOINT": endpoint})


def test_s3_settings_make_the_config() -> None:
    settings = Settings.from_env({
        "CRAWLER_BLOB_BACKEND": "s3", "CRAWLER_BLOB_S3_BUCKET": "b",
        "CRAWLER_BLOB_S3_ENDPOINT": "http://127.0.0.1:8333/",
        "CRAWLER_BLOB_S3_PREFIX": "/crawl/1/", "CRAWLER_BLOB_S3_PATH_STYLE": "yes"})
    config = s3_config(settings)
    assert (config.bucket, config.endpoint, config.key_prefix, config.path_style) == (
        "b", "http://127.0.0.1:8333", "crawl/1", True)


def test_part_size_may_not_exceed_the_multipart_threshold() -> None:
    with pytest.raises(SettingsError, match="CRAWLER_BLOB_S3_PART_BYTES"):
        Settings.from_env({"CRAWLER_BLOB_S3_PART_BYTES": str(100 * 2**20)})


def test_credentials_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "credentials"
    path.write_text("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n"
                    "[other]\naws_access_key_id=AK2\naws_secret_access_key=SK2\n"
                    "aws_session_token=T\n")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    assert read_credentials(str(path)) == ("AK", "SK", None)
    assert read_credentials(str(path), "other") == ("AK2", "SK2", "T")
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert read_credentials(str(path))[0] == "AK2"
    with pytest.raises(S3ConfigError, match=r"CRAWLER_BLOB_S3_CREDENTIALS_FILE.*\[nope\]"):
        read_credentials(str(path), "nope")
    with pytest.raises(S3ConfigError, match="cannot read it"):
        read_credentials(str(tmp_path / "missing"))
    path.write_text("[default]\naws_access_key_id = AK\n")
    with pytest.raises(S3ConfigError, match="aws_secret_access_key"):
        read_credentials(str(path), "default")
