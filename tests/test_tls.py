"""queuetop over TLS (issue 44, point 7: docs/production.md's TLS section): a real server with
`ssl = on` and a certificate of a throwaway CA, reached over TCP with `sslmode=verify-full`. The
dashboard's probes, `snapshot` and an engine command connect encrypted (the server's pg_stat_ssl
says so of their sessions), and a certificate the client does not trust is refused in one line,
exit 2, with no secret printed.

The embedded server's build has no OpenSSL, so this runs on Debian's PostgreSQL 15 (tests/servers.py's
build of that major, which .ci/run installs).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import psycopg
import pytest

from .conftest import run_cli
from .servers import SERVER_USER, MatrixServer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (a CA of its own)."""
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return crt, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed to make the test certificate")
    base = tmp_path_factory.mktemp("tls")
    certs = base / "certs"
    certs.mkdir()
    crt, key = _certificate(certs, "server")
    other, _ = _certificate(certs, "other")  # a CA the server's certificate is not from
    key.chmod(0o600)
    if os.geteuid() == 0:
        certs.chmod(0o755)
        for path in (crt, key):
            shutil.chown(path, SERVER_USER, SERVER_USER)
    port = _free_port()
    server = MatrixServer("15", base, settings={"listen_addresses": "'127.0.0.1'", "port": str(port), "ssl": "on",
                                                "ssl_cert_file": f"'{crt}'", "ssl_key_file": f"'{key}'"})
    admin = f"postgresql://postgres@/postgres?host={server.socket_dir}&port={port}"
    try:
        # Over TCP only TLS is let in: a command that works proves it went encrypted.
        hba = server.pgdata / "pg_hba.conf"
        hba.write_text("hostnossl all all 0.0.0.0/0 reject\n" + hba.read_text())
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE DATABASE qt_tls")
        dsn = f"host=127.0.0.1 port={port} dbname=qt_tls user=postgres sslmode=verify-full sslrootcert={crt}"
        yield server, dsn, f"host=127.0.0.1 port={port} dbname=qt_tls user=postgres sslmode=verify-full sslrootcert={other}"
    finally:
        server.cleanup()


def test_snapshot_and_the_engine_connect_encrypted_and_an_untrusted_certificate_is_refused(tls_server):
    _server, dsn, untrusted = tls_server
    assert run_cli("engine", "init", "--dsn", dsn).returncode == 0
    assert run_cli("engine", "enqueue", "tls-queue", "--count", "3", "--dsn", dsn).returncode == 0
    with psycopg.connect(dsn) as conn:  # the client's side: libpq negotiated TLS
        assert conn.pgconn.ssl_in_use
    result = run_cli("snapshot", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    queue = next(q for q in snap["queues"] if q["name"] == "tls-queue")
    assert queue["ready"] == 3
    # The server's side: the session was encrypted (pg_stat_ssl), and an unencrypted one is refused.
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert row is not None and row[0] is True and str(row[1]).startswith("TLS")
    plain = dsn.replace("sslmode=verify-full", "sslmode=disable")
    assert run_cli("snapshot", "--dsn", plain).returncode == 2

    refused = run_cli("snapshot", "--json", "--dsn", untrusted)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuetop: error:") and "certificate" in lines[0], refused.stderr
