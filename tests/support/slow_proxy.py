"""A tiny HTTP proxy in front of a tracking server that answers one path slowly (issue 47):
MLflow's client asks ``/version`` with a 3 s timeout and used to cache the failure for the
whole process, so a server slow on that one answer lost every later ``log_spans``.

``slow_proxy(upstream, "/version", 5.0)`` forwards every request (method, path, headers, body)
to ``upstream`` and its answer back, waiting ``delay_s`` before answering a request whose path
ends with ``slow_suffix``; ``proxy.slow_hits`` counts those requests.
"""

from __future__ import annotations

import http.client
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import urlsplit

#: hop-by-hop headers not forwarded (the proxy sends whole bodies with Content-Length)
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "trailer", "upgrade"}


class SlowProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, slow_suffix: str, delay_s: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.slow_suffix, self.delay_s = slow_suffix, delay_s
        self.slow_hits = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: SlowProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.path.split("?")[0].endswith(self.server.slow_suffix):
            with self.server.lock:
                self.server.slow_hits += 1
            time.sleep(self.server.delay_s)
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=300)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        try:
            self.send_response(resp.status, resp.reason)
            for key, value in resp.getheaders():
                if key.lower() not in HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (MLflow's 3 s timeout)
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


@contextmanager
def slow_proxy(upstream: str, slow_suffix: str = "/version", delay_s: float = 5.0) -> Iterator[SlowProxy]:
    """A started :class:`SlowProxy` (stopped at the end)."""
    proxy = SlowProxy(upstream, slow_suffix, delay_s)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
