"""Issue 30, point 6: rate limits get patience of their own, and the server's `Retry-After` is honoured.

A local OpenAI-compatible server on 127.0.0.1 answers a scripted list of (status, headers), then 200; the delays
are tenths of a second so that the tests are fast, and the waits are read from when the requests arrived."""

import time

from local_server import LocalServer, chat_reply

from reasoning_study.backends.presets import ModelPreset, load_backend
from reasoning_study.backends.request import chat


class RateLimitedServer(LocalServer):
    "Answers each request with the next scripted (status, headers), then 200; records when each request arrived."

    def __init__(self, script):
        super().__init__()
        self.script, self.arrivals = list(script), []

    def respond(self, body):
        with self.lock:
            self.record(body)
            self.arrivals.append(time.monotonic())
            status, headers = self.script.pop(0) if self.script else (200, {})
        return status, headers, chat_reply("4") if status == 200 else {"error": {"message": f"scripted {status}"}}

    def waits(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]


def backend_for(server, **options):
    return load_backend(
        ModelPreset("limited", "some-model", "openai"), base_url=server.base_url, retry_base_delay=0.01, **options
    )


def test_retry_after_is_honoured_beyond_the_backoff_cap():
    # our own backoff is capped at 0.05 s; the server asks for 0.6 s: the wait honours the server
    with RateLimitedServer([(429, {"Retry-After": "0.6"})]) as server:
        [[c]] = backend_for(server, retry_max_delay=0.05, rate_limit_max_delay=5.0).generate([chat("Hi")])
    assert c.status == "answered" and len(server.bodies) == 2
    [wait] = server.waits()
    assert 0.6 <= wait < 3, wait


def test_retry_after_is_capped_by_the_rate_limit_cap():
    with RateLimitedServer([(429, {"Retry-After": "3600"})]) as server:
        started = time.monotonic()
        [[c]] = backend_for(server, rate_limit_max_delay=0.3).generate([chat("Hi")])
    assert c.status == "answered" and 0.15 <= server.waits()[0] and time.monotonic() - started < 5


def test_rate_limits_have_more_patience_than_other_errors():
    # five rate limits in a row with max_retries=1: still answered (before: an error row after 2 attempts)
    with RateLimitedServer([(429, {"Retry-After": "0"})] * 5) as server:
        [[c]] = backend_for(server, max_retries=1, rate_limit_retries=6).generate([chat("Hi")])
    assert c.status == "answered" and len(server.bodies) == 6
    with RateLimitedServer([(503, {})] * 5) as server:  # a server error keeps max_retries
        [[c]] = backend_for(server, max_retries=1, rate_limit_retries=6).generate([chat("Hi")])
    assert c.status == "error" and len(server.bodies) == 2 and "(2 attempts)" in c.error


def test_rate_limit_patience_ends():
    with RateLimitedServer([(429, {"Retry-After": "0"})] * 9) as server:
        [[c]] = backend_for(server, max_retries=0, rate_limit_retries=2).generate([chat("Hi")])
    assert c.status == "error" and len(server.bodies) == 3
    assert "HTTP 429" in c.error and "(3 attempts, 3 rate-limited)" in c.error
