"""A scripted OpenAI-compatible server on 127.0.0.1 for tests of what goes over the wire.

Real HTTP and the real `openai` client, with replies chosen by the test: each POST's JSON body is
recorded, and `respond(body)` returns (status, headers, reply JSON). A server that needs the request's
headers (to check the key sent, or to echo them back as some proxies do) overrides
`respond_with_headers(body, headers)` instead."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat_reply(content: str, reasoning: str | None = None, usage=(9, 7)) -> dict:
    "A chat.completion body with one answered choice."
    message = {
        "role": "assistant",
        "content": content,
        **({"reasoning_content": reasoning} if reasoning is not None else {}),
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


class LocalServer:
    "Subclasses define `respond(body) -> (status, headers, reply)`; use as a context manager."

    def __init__(self):
        self.bodies, self.lock, outer = [], threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, headers, reply = outer.respond_with_headers(body, dict(self.headers))
                payload = json.dumps(reply).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def record(self, body: dict):
        "Keep a request body (call under `self.lock`)."
        self.bodies.append(body)

    def respond(self, body: dict) -> tuple[int, dict, dict]:
        raise NotImplementedError

    def respond_with_headers(self, body: dict, headers: dict) -> tuple[int, dict, dict]:
        "The reply to a request with these headers (default: `respond(body)`)."
        return self.respond(body)

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
