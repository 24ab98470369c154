"""`queuetop export prometheus`: /metrics for every target, each sampled on its own schedule."""

from __future__ import annotations

import argparse
import threading

from dbcore.errors import UsageError
from tui.title import PROG

from .context import Context
from .options import ArgumentParser, float_between, leaf, pgbouncer_option
from .watching import sampling, watched


def cmd_export_prometheus(ctx: Context) -> int:
    """Serve /metrics for every target until SIGINT or SIGTERM: a sampler per host on its own
    schedule, a scrape reading only the cached snapshots."""
    from probes.prometheus import SnapshotCollector, serve

    args = ctx.args
    config, targets, interval = watched(ctx)
    host, port = args.listen
    collector = SnapshotCollector()
    try:
        server = serve(collector, host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from None
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    try:
        with sampling(targets, config, interval, collector.update, stop):
            thread.start()
            bound_host, bound_port = server.server_address[:2]
            print(f"{PROG}: serving http://{_address(str(bound_host), int(bound_port))}/metrics for "
                  f"{', '.join(name for name, _t in targets)} every {interval:g}s", flush=True)
            stop.wait()
    finally:
        if thread.is_alive():
            server.shutdown()  # waits for serve_forever to return: only when it runs
        server.server_close()
    return 0


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or :PORT (all IPv4 interfaces)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "[" in host or "]" in host or any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port_text)


def register(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="serve the probes' figures to a monitoring system")
    export_sub = export.add_subparsers(title="exporters", metavar="FORMAT", required=True, parser_class=ArgumentParser)
    p = leaf(export_sub, "prometheus", cmd_export_prometheus,
             "serve /metrics for Prometheus: every target sampled on its own schedule, scrapes read the cached snapshots")
    pgbouncer_option(p)
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 9187), metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:9187; :9187 for every interface; port 0: any free port)")
    p.add_argument("--interval", type=float_between(0.1, 3600), default=None, metavar="SECONDS",
                   help="seconds between samples, 0.1 to 3600 (default: the config's probes.interval, 2)")
    p.add_argument("--config", default=argparse.SUPPRESS, help="TOML file declaring your queue tables and [[targets]]")
