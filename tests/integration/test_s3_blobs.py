"""S3BlobStore against a real S3-compatible server (SeaweedFS, ``scripts/servers start s3``).

Each test works under a key prefix of its own in the bucket. The outage test starts a
SeaweedFS of its own (other ports, its own data folder) so that it can stop it.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from common.adapters.local_blobs import BlobError
from common.adapters.s3_blobs import S3BlobStore, S3ConfigError
from common.archive import ArchiveWriter, read_response
from common.messages import RecordPointer
from tests.integration.s3_support import (
    ROOT,
    S3Server,
    object_bytes,
    object_keys,
    servers_module,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _records(n: int, size: int = 300) -> list[bytes]:
    return [(f"record {i:04d} ".encode() * (size // 12 + 1))[:size] for i in range(n)]


def _spool_files(spool: Path) -> list[str]:
    return sorted(p.name for p in spool.glob("*.warc.gz"))


def test_round_trip_spool_then_bucket(s3: S3Server, tmp_path: Path) -> None:
    config = s3.config()
    data = _records(20)
    store = S3BlobStore(str(tmp_path / "spool"), config, writer_id="w1", max_bytes=2000)
    pointers = [store.append("warc", d) for d in data]
    store.append_line("index.cdxj", "a line")
    # before the upload: from the spool
    assert [store.read(p) for p in pointers] == data
    store.close()
    assert _spool_files(tmp_path / "spool") == []  # every file went up
    files = sorted({p.file for p in pointers})
    assert len(files) > 1  # it rolled over
    assert set(files) <= set(object_keys(config))
    # a store on another, empty spool reads them from the bucket
    reader = S3BlobStore(str(tmp_path / "other"), config, writer_id="reader")
    try:
        assert [reader.read(p) for p in pointers] == data
        with pytest.raises(BlobError, match="past the end"):
            reader.read(RecordPointer(file=pointers[-1].file, offset=pointers[-1].offset,
                                      length=pointers[-1].length + 1))
        with pytest.raises(BlobError, match="no blob file"):
            reader.read(RecordPointer(file="crawl-nobody-warc-00000.warc.gz", offset=0,
                                      length=1))
    finally:
        reader.close()
    assert object_bytes(config, "index.cdxj") == b"a line\n"


def test_rolled_file_is_uploaded_and_leaves_the_spool(s3: S3Server, tmp_path: Path) -> None:
    config = s3.config(keep_uploaded=0.0)
    spool = tmp_path / "spool"
    store = S3BlobStore(str(spool), config, writer_id="w1", max_bytes=1000)
    try:
        first = store.append("warc", b"x" * 900)
        assert _spool_files(spool) == [first.file]
        second = store.append("warc", b"y" * 900)  # rolls over: the first is finished
        assert second.file != first.file
        assert store.wait_uploaded(30) == 0
        assert _spool_files(spool) == [second.file]  # the open file stays
        assert object_keys(config) == [first.file]
        assert object_bytes(config, first.file) == b"x" * 900
        assert store.read(first) == b"x" * 900  # now by ranged GET
        assert store.read(second) == b"y" * 900  # from the spool
    finally:
        store.close()
    assert object_keys(config) == sorted([first.file, second.file])


def test_an_uploaded_file_stays_in_the_spool_a_while(s3: S3Server, tmp_path: Path) -> None:
    config = s3.config(keep_uploaded=2.0)
    spool = tmp_path / "spool"
    store = S3BlobStore(str(spool), config, writer_id="w1", max_bytes=1000)
    try:
        first = store.append("warc", b"x" * 900)
        second = store.append("warc", b"y" * 900)  # rolls over
        assert store.wait_uploaded(30) == 0
        assert object_keys(config) == [first.file]
        assert _spool_files(spool) == sorted([first.file, second.file])  # kept
        deadline = time.monotonic() + 10
        while first.file in _spool_files(spool) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _spool_files(spool) == [second.file]  # then deleted
        assert store.read(first) == b"x" * 900
    finally:
        store.close()
    assert _spool_files(spool) == []


def test_large_file_goes_up_in_parts(s3: S3Server, tmp_path: Path) -> None:
    mib = 1024 * 1024
    config = s3.config(multipart_bytes=5 * mib, part_bytes=5 * mib)
    store = S3BlobStore(str(tmp_path / "spool"), config, writer_id="w1",
                        max_bytes=64 * mib)
    blob = os.urandom(mib)
    pointers = [store.append("warc", blob[i:] + blob[:i]) for i in range(12)]
    store.close()
    import obstore

    from common.adapters.s3_blobs import open_bucket

    meta = obstore.head(open_bucket(config), pointers[0].file)
    assert meta["size"] == 12 * mib
    etag = (meta["e_tag"] or "").strip('"')
    assert etag.endswith("-3"), f"not a 3-part multipart upload: ETag {etag}"
    reader = S3BlobStore(str(tmp_path / "other"), config, writer_id="reader")
    try:
        for i in (0, 5, 11):
            assert reader.read(pointers[i]) == blob[i:] + blob[:i]
    finally:
        reader.close()


def test_wrong_credentials_are_refused_at_start(s3: S3Server, tmp_path: Path) -> None:
    bad = s3.config(credentials_file=s3.credentials_file(tmp_path, secret="not-the-secret"))
    with pytest.raises(S3ConfigError, match="credentials were refused"):
        S3BlobStore(str(tmp_path / "spool"), bad, writer_id="w1")
    unknown = s3.config(credentials_file=s3.credentials_file(tmp_path, key="nobody"))
    with pytest.raises(S3ConfigError, match="credentials were refused"):
        S3BlobStore(str(tmp_path / "spool"), unknown, writer_id="w1")
    good = s3.config(credentials_file=s3.credentials_file(tmp_path))
    S3BlobStore(str(tmp_path / "spool"), good, writer_id="w1").close()


def test_missing_bucket_is_named_at_start(s3: S3Server, tmp_path: Path) -> None:
    with pytest.raises(S3ConfigError, match="no-such-bucket-here"):
        S3BlobStore(str(tmp_path / "spool"), s3.config(bucket="no-such-bucket-here"),
                    writer_id="w1")


def test_cli_names_the_refused_credentials(s3: S3Server, tmp_path: Path) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": s3.access_key,
           "AWS_SECRET_ACCESS_KEY": "wrong", "CRAWLER_BLOB_BACKEND": "s3",
           "CRAWLER_BLOB_S3_ENDPOINT": s3.endpoint, "CRAWLER_BLOB_S3_BUCKET": s3.bucket,
           "CRAWLER_BLOB_S3_PATH_STYLE": "true", "CRAWLER_CRAWL_OUT_DIR": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "crawler"), "crawl",
                           "--allow-network", "127.0.0.1/32", "http://127.0.0.1:9/"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "credentials were refused" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


_CRASH = textwrap.dedent("""
    import os, sys
    from common.adapters.s3_blobs import S3BlobStore, S3Config
    config = S3Config(bucket=sys.argv[2], endpoint=sys.argv[3], path_style=True,
                      key_prefix=sys.argv[4])
    store = S3BlobStore(sys.argv[1], config, writer_id="crashing", max_bytes=10**9)
    for i in range(50):
        store.append("warc", b"record %04d" % i)
        store.append_line("index.cdxj", "line %d" % i)
    os.kill(os.getpid(), 9)  # no close: the records are in the spool only
""")


def test_a_restart_uploads_what_a_killed_process_left(s3: S3Server, tmp_path: Path) -> None:
    config = s3.config()
    spool = tmp_path / "spool"
    done = subprocess.run([sys.executable, "-c", _CRASH, str(spool), config.bucket,
                           config.endpoint, config.key_prefix], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    left = _spool_files(spool)
    assert left == ["crawl-crashing-warc-00000.warc.gz"]
    assert object_keys(config) == []
    stale = spool / ".crawl-crashing-warc-00001.warc.gz.1.2.new"  # died while making it
    fresh = spool / ".crawl-other-warc-00000.warc.gz.3.4.new"  # being made right now
    stale.write_bytes(b"")
    fresh.write_bytes(b"")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    # a new process (another writer id) on the same spool ships it
    store = S3BlobStore(str(spool), config, writer_id="restarted")
    try:
        assert store.wait_uploaded(30) == 0
    finally:
        store.close()
    assert _spool_files(spool) == []
    assert not stale.exists() and fresh.exists()
    body = object_bytes(config, left[0])
    assert body == b"".join(b"record %04d" % i for i in range(50))
    assert object_bytes(config, "index.cdxj").decode().splitlines() == [
        f"line {i}" for i in range(50)]


def test_a_restarted_writer_never_reuses_an_uploaded_name(s3: S3Server,
                                                          tmp_path: Path) -> None:
    config = s3.config()
    spool = tmp_path / "spool"
    with S3BlobStore(str(spool), config, writer_id="same") as store:
        first = store.append("warc", b"first run")
    with S3BlobStore(str(spool), config, writer_id="same") as store:
        again = store.append("warc", b"second run")
    assert first.file != again.file
    assert object_bytes(config, first.file) == b"first run"
    assert object_bytes(config, again.file) == b"second run"


def test_warcio_reads_the_uploaded_files(s3: S3Server, tmp_path: Path) -> None:
    config = s3.config()
    store = S3BlobStore(str(tmp_path / "spool"), config, writer_id="w1", max_bytes=4000)
    archive = ArchiveWriter(store, software="test/1.0")
    written = []
    for i in range(8):
        body = f"<html><body>page {i} {'text ' * 100}</body></html>".encode()
        w = archive.write_exchange(
            url=f"http://example.test/{i}", method="GET", request_headers=[("Host", "x")],
            status=200, reason="OK", response_headers=[("Content-Type", "text/html")],
            body=body, fetched_at=1_700_000_000.0 + i, ip="127.0.0.1")
        written.append((w, body))
    store.close()
    files = sorted({w.pointer.file for w, _ in written})
    assert len(files) > 1
    seen: dict[str, bytes] = {}
    for key in files:
        data = object_bytes(config, key)
        kinds = []
        for rec in ArchiveIterator(io.BytesIO(data)):
            kinds.append(rec.rec_type)
            if rec.rec_type == "response":
                seen[rec.rec_headers.get_header("WARC-Target-URI")] = (
                    rec.content_stream().read())
        assert kinds[0] == "warcinfo"  # every uploaded file begins with its header
    assert seen == {f"http://example.test/{i}": body for i, (_, body) in enumerate(written)}
    reader = S3BlobStore(str(tmp_path / "other"), config, writer_id="reader")
    try:
        for w, body in written:  # the parser's read-back, by pointer, from the bucket
            assert read_response(reader, w.pointer).body == body
    finally:
        reader.close()


# -- an outage ---------------------------------------------------------------------------


def _free_port_block(count: int) -> int:
    """A port p with p..p+count-1 and p+10000.. free on 127.0.0.1 (gRPC ports too)."""
    for base in range(21000, 29000, 17):
        ports = [base + i for i in range(count)] + [base + i + 10000 for i in range(count)]
        if all(_free(p) for p in ports):
            return base
    raise AssertionError("no free block of ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def own_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[S3Server, dict[str, str]]]:
    """A SeaweedFS of this test's own (so it may stop it), via scripts/servers."""
    servers = servers_module()
    if not servers.S3().installed():
        from tests.conftest import unavailable

        unavailable("SeaweedFS is not built (scripts/servers install s3)")
    base = _free_port_block(5)
    env = {k: v for k, v in os.environ.items() if k != "S3_ENDPOINT"}
    env.update({"SERVERS_VAR": str(tmp_path / "servers"), "S3_PORT": str(base),
                "S3_MASTER_PORT": str(base + 1), "S3_VOLUME_PORT": str(base + 2),
                "S3_FILER_PORT": str(base + 3), "S3_ADMIN_PORT": str(base + 4)})
    run(env, "start", "s3")
    server = S3Server(endpoint=f"http://127.0.0.1:{base}", bucket=servers.S3_BUCKET,
                      access_key=servers.S3_ACCESS_KEY, secret_key=servers.S3_SECRET_KEY)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    try:
        yield server, env
    finally:
        run(env, "stop", "s3", check=False)


def run(env: dict[str, str], *args: str, check: bool = True) -> None:
    done = subprocess.run([str(ROOT / "scripts" / "servers"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert done.returncode == 0, f"scripts/servers {args}: {done.stdout}{done.stderr}"


def test_server_down_for_20_s_loses_nothing(own_s3: tuple[S3Server, dict[str, str]],
                                            tmp_path: Path) -> None:
    server, env = own_s3
    config = replace(server.config(), request_timeout=5.0)
    store = S3BlobStore(str(tmp_path / "spool"), config, writer_id="w1", max_bytes=2000)
    pointers: list[RecordPointer] = []
    data: list[bytes] = []
    try:
        def write(n: int) -> None:
            for d in _records(n, 400):
                pointers.append(store.append("warc", d))
                data.append(d)

        write(20)
        assert store.wait_uploaded(30) == 0
        run(env, "stop", "s3")  # by its PID
        down = time.monotonic()
        while time.monotonic() - down < 20:  # the crawl goes on writing meanwhile
            write(5)
            time.sleep(1)
        assert store.pending_uploads() > 0  # rolled files wait in the spool
        assert store.upload_failures() > 0
        assert [store.read(p) for p in pointers[-10:]] == data[-10:]  # from the spool
        # files uploaded before the outage are still kept in the spool: readable too
        assert [store.read(p) for p in pointers[:20]] == data[:20]
        run(env, "start", "s3")
        assert store.wait_uploaded(120) == 0
    finally:
        store.close()
    assert _spool_files(tmp_path / "spool") == []
    reader = S3BlobStore(str(tmp_path / "other"), config, writer_id="reader")
    try:
        assert [reader.read(p) for p in pointers] == data
    finally:
        reader.close()
