"""Prometheus metrics for a role: one registry per role instance, served on SURREAL_METRICS_PORT.

A registry per instance (not prometheus_client's global one) keeps tests that run several servers in
one process from colliding, and lets each role name exactly what it exports. Every metric carries the
`role` and `index` labels so one Prometheus scrape config covers every pod of an experiment.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger("surreal.metrics")
RATE_WINDOW_S = 5.0  # what a RateGauge averages over
# How often the /metrics server's loop looks for `close`: prometheus_client's `start_http_server` serves with the
# standard library's 0.5 s, and every role closing its endpoint as it stops waited for up to that long.
SHUTDOWN_POLL_S = 0.05


class RoleMetrics:
    def __init__(self, role: str, index: int) -> None:
        self.registry = CollectorRegistry()
        self.labels = {"role": role, "index": str(index)}
        self._server: WSGIServer | None = None

    def counter(self, name: str, doc: str, labelnames: Sequence[str] = ()):
        """A counter already bound to this role's labels; with `labelnames`, a family whose
        `.labels(**extra)` binds the rest."""
        return self._bound(Counter, name, doc, labelnames)

    def gauge(self, name: str, doc: str, labelnames: Sequence[str] = ()):
        return self._bound(Gauge, name, doc, labelnames)

    def _bound(self, kind: type[Counter | Gauge], name: str, doc: str, labelnames: Sequence[str]):
        metric = kind(f"surreal_{name}", doc, [*self.labels, *labelnames], registry=self.registry)
        return _Family(metric, self.labels) if labelnames else metric.labels(**self.labels)

    def serve(self, host: str, port: int) -> int | None:
        """Start the /metrics endpoint (port 0: none). Returns the port actually bound."""
        if port == 0:
            return None
        try:
            self._server = serve_registry(self.registry, host, port)
        except OSError as exc:  # taken meanwhile (a restarted local role): serve on a free port, say which
            self._server = serve_registry(self.registry, host, 0)
            log.warning("metrics port %d unavailable (%s); serving on %d", port, exc, self._server.server_port)
        return self._server.server_port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's signature
        del format, args


def serve_registry(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """`registry` on http://host:port/metrics from a daemon thread (prometheus_client's `start_http_server`, whose
    loop looks for a shutdown every `SHUTDOWN_POLL_S` instead of every 0.5 s)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(host, port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
    loop = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), name="metrics", daemon=True)
    loop.start()
    return server


class _Family:
    """A metric with extra labels beyond role/index: `.labels(reason="x")` gives the child."""

    def __init__(self, metric, base: dict[str, str]) -> None:
        self.metric = metric
        self.base = base

    def labels(self, **extra: str):
        return self.metric.labels(**self.base, **extra)


class RateGauge:
    """Items per second over the last window, for dashboards without a Prometheus server to rate()."""

    def __init__(self, gauge) -> None:
        self.gauge = gauge
        self._count = 0
        self._since = time.monotonic()

    def add(self, n: int) -> None:
        self._count += n

    def tick(self, now: float) -> None:
        elapsed = now - self._since
        if elapsed >= RATE_WINDOW_S:
            self.gauge.set(self._count / elapsed)
            self._count = 0
            self._since = now
