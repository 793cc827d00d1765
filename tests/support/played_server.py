"""A real llama-server that plays scripted replies: the one double for "the real server, scripted model output".

A loopback HTTP proxy in front of a real llama-server (SmolLM2 with DeepSeek V4's template, the tests' fixtures).
Each chat request is recorded as the product sent it, rendered by the server's own template (`/apply-template`)
and tokenized as the server tokenizes prompts; then the next scripted reply is appended to it as an assistant
message for the server to continue (llama-server's prefill_assistant, `tools/server/server-common.cpp`; DeepSeek's
continuation, `common/parsers/deepseek.cpp`) with a logit bias that makes the model end at once. So the real DSML
parser parses exactly the scripted text into the streamed `tool_calls` and `reasoning_content`, and the slot holds
the prompt plus the reply exactly as if the model had written it: the next request's cached tokens are the real
server's answer to "does it extend what the slot holds". The answer streams back untouched; every other endpoint
(`/props`, `/slots`, `/tokenize`, `/apply-template`, `/completion`, `/metrics` ...) passes through, so the product's
clients, a fleet, a prefix cache, a `Run` or the CLI run unchanged against `url`.
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from support.dsml import Reply
from support.scripted_server import Fail, LoopbackServer, asks_for_a_summary

CHAT = "/v1/chat/completions"
# A bias this strong makes the token certain whatever the sampling settings: the reply ends where the script ends.
CERTAIN = 100.0
# What a cut reply generates before max_tokens stops it: one token of plain text.
CUT_TEXT = "x"
# The script ran out: the model has nothing more to do (as the scripted server says).
EXHAUSTED = Reply(reasoning="Nothing more to do.", content="Nothing more to do.")
UPSTREAM_TIMEOUT_S = 600.0

Step = Reply | Fail


@dataclass
class Exchange:
    """One chat request: what the product sent, how the server rendered it, and what the slot held after it."""

    body: dict[str, Any]
    prompt: str  # the rendering of `body` (the template's text up to the generation prompt)
    tokens: list[int]  # `prompt` tokenized as the server tokenizes prompts
    step: Step
    held: str | None = None  # the rendering continued by the played reply: what the slot holds after it
    held_tokens: list[int] = field(default_factory=list)
    status: int | None = None
    prompt_tokens: int | None = None  # as the server reported them
    cached_tokens: int | None = None
    finish_reason: str | None = None
    content: str = ""  # the answer's content as the server's parser gave it (tool calls parsed out)


def render(url: str, body: dict[str, Any]) -> str:
    """The server's rendering of a chat body (`/apply-template`): the chat endpoint's parsing, nothing generated."""
    return str(_Upstream(url).post("/apply-template", body)["prompt"])


def tokenize(url: str, text: str) -> list[int]:
    """As the server tokenizes a rendered prompt (`server-context.cpp`: special tokens added and parsed)."""
    payload = {"content": text, "add_special": True, "parse_special": True}
    return list(_Upstream(url).post("/tokenize", payload)["tokens"])


class _Upstream:
    """The real server, one short connection per request (loopback: connecting costs nothing worth pooling)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def open(self, method: str, path: str, body: bytes | None) -> tuple[http.client.HTTPConnection, Any]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=UPSTREAM_TIMEOUT_S)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        return connection, connection.getresponse()

    def get(self, path: str) -> Any:
        return self._answer(*self.open("GET", path, None), path)

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        return self._answer(*self.open("POST", path, json.dumps(payload).encode()), path)

    @staticmethod
    def _answer(connection: http.client.HTTPConnection, response: Any, path: str) -> Any:
        try:
            data = response.read()
        finally:
            connection.close()
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
        return json.loads(data)


class PlayedServer(LoopbackServer):
    def __init__(self, upstream_url: str, script: list[Step], *, summary: Reply | None = None) -> None:
        """upstream_url: the real llama-server (its root or its /v1 URL). script: the replies in request order; a
        `Fail` answers that request with its HTTP error without asking the server. summary: the reply played to
        every request for a handoff summary (a compaction's), which then takes no step of the script."""
        self.upstream_url = upstream_url
        self._upstream = _Upstream(upstream_url)
        self.script: list[Step] = list(script)
        self.summary = summary
        self._exchanges: list[tuple[int, Exchange]] = []  # by the order their requests came
        self._lock = threading.Lock()
        # Chat requests still being answered: the client has its answer once the stream's last event is written,
        # before the handler records the exchange (and a retry's request may arrive before the failed one's record).
        self._answering = 0
        self._settled = threading.Condition(self._lock)
        self._endings: dict[str, int] = {}
        super().__init__(self._handler())

    @property
    def exchanges(self) -> list[Exchange]:
        """The chat requests in the order they came, each once its answer is recorded: read after the client has
        its last answer, the handler that wrote it may still be recording it, so this waits for it."""
        with self._settled:
            if not self._settled.wait_for(lambda: self._answering == 0, timeout=UPSTREAM_TIMEOUT_S):
                raise AssertionError("a chat request of the played server is still being answered")
            return [exchange for _, exchange in sorted(self._exchanges, key=lambda numbered: numbered[0])]

    def _ending(self, reply: Reply) -> int:
        """The token the server is made to generate: EOS (the reply ends where the script ends) or, for a cut
        reply, one token of text that max_tokens 1 then stops (finish_reason "length")."""
        key = "cut" if reply.cut else "eos"
        with self._lock:
            if key not in self._endings:
                text = CUT_TEXT if reply.cut else str(self._upstream.get("/props")["eos_token"])
                tokens = self._upstream.post("/tokenize", {"content": text, "parse_special": True})["tokens"]
                self._endings[key] = int(tokens[0])
            return self._endings[key]

    def _played(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """The request the server answers: the product's, continued by the reply and ended by force."""
        return {
            **body,
            "messages": [*body.get("messages", []), reply.message()],
            "max_tokens": 1 if reply.cut else 2,
            "logit_bias": [[self._ending(reply), CERTAIN]],
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        played = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # see scripted_server: two writes per answer must not wait for an ACK

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes | None:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def do_GET(self) -> None:
                self._relay("GET", None)

            def do_POST(self) -> None:
                data = self._body()
                if self.path.split("?")[0] == CHAT:
                    self._chat(json.loads(data or b"{}"))
                else:
                    self._relay("POST", data)

            def _relay(self, method: str, data: bytes | None, record: Exchange | None = None) -> None:
                connection, response = played._upstream.open(method, self.path, data)
                try:
                    self.send_response(response.status)
                    self.send_header("Content-Type", response.getheader("Content-Type") or "application/json")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    answer = bytearray()
                    while piece := response.read1(65536):
                        answer += piece
                        self.wfile.write(piece)
                        self.wfile.flush()
                finally:
                    connection.close()
                self.close_connection = True
                if record is not None:
                    record.status = response.status
                    _read_usage(record, bytes(answer))

            def _chat(self, body: dict[str, Any]) -> None:
                with played._lock:
                    if played.summary is not None and asks_for_a_summary(body):
                        step: Step = played.summary
                    else:
                        step = played.script.pop(0) if played.script else EXHAUSTED
                    number = played._answering + len(played._exchanges)
                    played._answering += 1
                try:
                    exchange = self._answer(body, step)
                    with played._lock:
                        played._exchanges.append((number, exchange))
                finally:
                    with played._settled:
                        played._answering -= 1
                        played._settled.notify_all()

            def _answer(self, body: dict[str, Any], step: Step) -> Exchange:
                prompt = render(played.upstream_url, body)
                exchange = Exchange(body=body, prompt=prompt, tokens=tokenize(played.upstream_url, prompt), step=step)
                if isinstance(step, Fail):
                    exchange.status = step.status
                    data = json.dumps(step.body).encode()
                    self.send_response(step.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    request = played._played(body, step)
                    exchange.held = render(played.upstream_url, request)
                    exchange.held_tokens = tokenize(played.upstream_url, exchange.held)
                    self.path = CHAT
                    self._relay("POST", json.dumps(request).encode(), exchange)
                return exchange

        return Handler


def _read_usage(exchange: Exchange, answer: bytes) -> None:
    """The server's counts from its answer: the last SSE event carrying them, or the JSON body."""
    text = answer.decode("utf-8", errors="replace")
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: {")] or [text]
    for raw in events:
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        for choice in event.get("choices") or []:
            exchange.finish_reason = choice.get("finish_reason") or exchange.finish_reason
            exchange.content += (choice.get("delta") or choice.get("message") or {}).get("content") or ""
        usage, timings = event.get("usage"), event.get("timings")
        if isinstance(usage, dict):
            exchange.prompt_tokens = usage.get("prompt_tokens", exchange.prompt_tokens)
        if isinstance(timings, dict) and "cache_n" in timings:
            exchange.cached_tokens = int(timings["cache_n"])
