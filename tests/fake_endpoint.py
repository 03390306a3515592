"""A real HTTP server on loopback that speaks the chat-completions protocol with canned replies.

The one test double of the suite: it stands in for a hosted LLM API, which cannot run here.
``Endpoint(script)`` serves ``POST /v1/chat/completions``; ``script(body, n)`` (n = 0, 1, ... per
request) returns ``(status, body)`` where body is a dict (sent as JSON) or bytes (sent as is),
optionally ``(status, body, headers, delay_s)``. It records every request, the Authorization
header, arrival times and the most requests it ever had in flight.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def completion(content: str, model: str = "fake-model", prompt_tokens: int = 100,
               completion_tokens: int = 50) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def code_reply(source: str) -> dict[str, Any]:
    return completion(f"Here is a faster version.\n\n```python\n{source}\n```\nIt uses fewer launches.")


class Endpoint:
    def __init__(self, script: Callable[[dict, int], tuple]):
        self.script = script
        self.requests: list[dict] = []
        self.auth: list[str] = []
        self.arrivals: list[float] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with endpoint.lock:
                    n = len(endpoint.requests)
                    endpoint.requests.append(body)
                    endpoint.auth.append(self.headers.get("Authorization", ""))
                    endpoint.arrivals.append(time.monotonic())
                    endpoint.in_flight += 1
                    endpoint.max_in_flight = max(endpoint.max_in_flight, endpoint.in_flight)
                try:
                    reply = tuple(endpoint.script(body, n))  # headers and delay are optional
                    status, payload, headers, delay = reply + ({}, 0.0)[len(reply) - 2:]
                    time.sleep(delay)
                    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with endpoint.lock:
                        endpoint.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # shutdown() waits for the loop's next poll: 0.5 s by default, at the end of every test using it
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "Endpoint":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
