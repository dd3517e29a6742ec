"""An HTTP service on loopback that records every request it receives (path and headers) and answers 200 with a
small JSON body: the upstream behind a dependency's fault proxy, for tests that check what reached it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Received:
    def __init__(self, path: str, headers: dict[str, str]) -> None:
        self.path = path
        self.headers = headers


@contextmanager
def recording_upstream() -> Iterator[tuple[int, list[Received]]]:
    """The port it listens on, and the requests received so far (appended as they arrive)."""
    seen: list[Received] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 128  # not socketserver's 5: a burst's dropped SYNs come back a second late
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, seen
    finally:
        server.shutdown()
        server.server_close()
