"""A local TCP listener that speaks just enough TDS 7.1 for pyodbc and FreeTDS to log in and run
statements, so that a SQL Server session's statements can fail *for real* through the driver: no
SQL Server runs here (tests/test_mssql_driver.py). It is not a database. It answers:

- the pre-login (no encryption) and the login (LOGINACK: it accepts any login);
- SQLAlchemy's questions when it first connects (the product version, the default schema, the
  isolation level), and every other batch with "done" or, for a SELECT, one row;
- three statements on purpose: `SELECT 'fail'` with SQL Server's error 208 (a statement's
  failure, the connection intact); `SELECT 'hang'` with nothing until the client gives up
  (pyodbc's query timeout: FreeTDS sends an attention, acknowledged); `SELECT 'drop'` by closing
  the connection (a lost link).

Every batch it received is kept per connection (`batches`), so a test can see what a new
connection was set up with.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

SQL_BATCH, LOGIN7, PRELOGIN, ATTENTION, REPLY = 0x01, 0x10, 0x12, 0x06, 0x04
DONE_ERROR, DONE_COUNT, DONE_ATTN = 0x02, 0x10, 0x20
COLLATION = bytes([0x09, 0x04, 0xD0, 0x00, 0x34])  # Latin1_General_CI_AS
# What SQLAlchemy asks when it first connects, and the answers a SQL Server 2022 gives.
ANSWERS = (
    ("ProductVersion", "16.0.1000.6"),
    ("schema_name()", "dbo"),
    ("sys.system_views", "dm_exec_sessions"),
    ("transaction_isolation_level", "READ COMMITTED"),
)


def _us_varchar(text: str) -> bytes:
    data = text.encode("utf-16-le")
    return struct.pack("<H", len(text)) + data


def _b_varchar(text: str) -> bytes:
    return struct.pack("<B", len(text)) + text.encode("utf-16-le")


def _done(status: int = 0, rows: int = 0) -> bytes:
    return struct.pack("<BHHI", 0xFD, status, 0, rows)  # TDS 7.1: a 4-byte row count


def _one_row(value: str) -> bytes:
    """One NVARCHAR column, one row."""
    size = max(2, len(value.encode("utf-16-le")))
    meta = struct.pack("<BH", 0x81, 1) + struct.pack("<HH", 0, 0x0001) + struct.pack("<BH", 0xE7, max(size, 200)) \
        + COLLATION + _b_varchar("value")
    data = value.encode("utf-16-le")
    row = struct.pack("<BH", 0xD1, len(data)) + data
    return meta + row + _done(DONE_COUNT, 1)


def _error(number: int, message: str, severity: int = 16) -> bytes:
    body = struct.pack("<IBB", number, 1, severity) + _us_varchar(message) + _b_varchar("local") + _b_varchar("") \
        + struct.pack("<H", 1)
    return struct.pack("<BH", 0xAA, len(body)) + body + _done(DONE_ERROR)


def _loginack() -> bytes:
    name = "Microsoft SQL Server"
    body = bytes([1, 0x71, 0x00, 0x00, 0x01]) + _b_varchar(name) + bytes([16, 0, 0x03, 0xE8])
    database = _b_varchar("master") + _b_varchar("")
    envchange = struct.pack("<BHB", 0xE3, 1 + len(database), 1) + database
    return envchange + struct.pack("<BH", 0xAD, len(body)) + body + _done()


def _prelogin_reply() -> bytes:
    version = bytes([16, 0, 0x03, 0xE8, 0, 0])
    options = [(0x00, version), (0x01, bytes([0x02]))]  # VERSION; ENCRYPTION: not supported
    offset = 5 * len(options) + 1
    head, data = b"", b""
    for token, value in options:
        head += struct.pack(">BHH", token, offset + len(data), len(value))
        data += value
    return head + b"\xff" + data


class TdsListener:
    """The listener, on 127.0.0.1 and a free port, one thread per connection."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port: int = self._server.getsockname()[1]
        self.batches: list[list[str]] = []  # per accepted connection, in order
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="tds-accept", daemon=True).start()

    def url(self, *query: str) -> str:
        return (f"mssql+pyodbc://sa:pw@127.0.0.1:{self.port}/master?"
                + "&".join(("driver=FreeTDS", "TDS_Version=7.1", *query)))

    def close(self) -> None:
        """Stop listening and end every connection: a pooled connection the driver closes later
        (its logout) meets a closed socket at once, not a silent one."""
        self._closed = True
        self._server.close()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.batches.append([])
                mine = self.batches[-1]
                self._clients.append(client)
            threading.Thread(target=self._serve, args=(client, mine), name="tds-conn", daemon=True).start()

    def _serve(self, client: socket.socket, batches: list[str]) -> None:
        with client:
            try:
                while True:
                    kind, payload = _read_message(client)
                    if kind == PRELOGIN:
                        _send(client, _prelogin_reply())
                    elif kind == LOGIN7:
                        _send(client, _loginack())
                    elif kind == ATTENTION:
                        _send(client, _done(DONE_ATTN))
                    elif kind == SQL_BATCH:
                        text = payload.decode("utf-16-le", errors="replace")
                        batches.append(text)
                        if "'drop'" in text:
                            return  # the connection, closed mid-statement
                        if "'hang'" in text:
                            kind, _ = _read_message(client)  # nothing, until the client gives up
                            if kind == ATTENTION:
                                _send(client, _done(DONE_ATTN))
                            continue
                        _send(client, _reply(text))
                    else:
                        _send(client, _done())
            except (OSError, EOFError):
                return


def _reply(text: str) -> bytes:
    if "'fail'" in text:
        return _error(208, "Invalid object name 'fail'.")
    for needle, answer in ANSWERS:
        if needle in text:
            return _one_row(answer)
    if text.lstrip().upper().startswith("SELECT"):
        return _one_row("1")
    return _done()


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read_message(sock: socket.socket) -> tuple[int, bytes]:
    """One whole message (its packets up to end-of-message): its type and payload."""
    payload, kind = b"", 0
    while True:
        kind, status, length = struct.unpack(">BBH", _read_exact(sock, 8)[:4])
        payload += _read_exact(sock, length - 8)
        if status & 0x01:
            return kind, payload


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">BBHHBB", REPLY, 0x01, len(payload) + 8, 0x37, 1, 0) + payload)


@contextmanager
def tds_listener() -> Iterator[TdsListener]:
    listener = TdsListener()
    try:
        yield listener
    finally:
        listener.close()
