"""A scriptable stand-in for llama-server: real HTTP on 127.0.0.1, SSE streaming, `timings`, recorded requests.

Tests script what the "model" says turn by turn and then assert on what the agent sent. Token counts are
4 characters per token; `cache_n` is the common prefix with the previous request, as llama-server's slot reuse
would find it, so prefix stability is observable.
"""

from __future__ import annotations

import json
import math
import selectors
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import parse_qs, urlsplit

from prompts import load_prompt


@dataclass
class Reply:
    """One assistant turn. Tool-call arguments: a dict (sent as JSON) or a raw string (sent as is)."""

    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    content: str = ""
    reasoning: str = ""
    draft_n: int = 0
    draft_n_accepted: int = 0
    # A slow prefill: this many prompt_progress chunks (when the request asks for them), this far apart.
    prefill_chunks: int = 0
    prefill_interval_s: float = 0.0
    before: Callable[[], None] | None = None  # runs in the server before it answers, e.g. to break something
    finish_reason: str | None = None  # None: "tool_calls" when it calls tools, else "stop"; "length": cut short


@dataclass
class Hold:
    """No answer: the request is held open until the server stops (`ScriptedServer.held` is set when it comes)."""


@dataclass
class Fail:
    """An HTTP error before any streaming."""

    status: int
    body: dict[str, Any]


@dataclass
class StreamError:
    """An SSE error event in the middle of the stream, as llama-server sends when output breaks the format."""

    message: str


@dataclass
class Cut:
    """A reply whose stream ends cleanly after its first chunks: no finish reason, no usage, no [DONE] (a server
    that died between chunks behind a proxy that closed the body politely)."""

    content: str = "word0 word1 "


@dataclass
class Stall:
    """A server that hangs: headers and the first progress chunk, then nothing for `seconds` (or until shutdown)."""

    seconds: float = 3600.0


@dataclass
class Die:
    """The server goes away: this request is dropped unanswered and the server stops listening (later connections
    are refused), as when its machine or process dies."""


Step = Reply | Fail | StreamError | Stall | Hold | Die | Cut

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}

FORMAT_ERROR = "The model produced output that does not match the expected DeepSeek V4 format"


def tokens_of(text: str) -> int:
    return math.ceil(len(text) / 4)


def rendered_prompt(body: dict[str, Any]) -> str:
    """Stand-in for the chat template: system message, tool list, then the rest, as in DeepSeek V4's."""
    messages = body.get("messages", [])
    return json.dumps([messages[:1], body.get("tools", []), body.get("reasoning_effort"), messages[1:]])


def asks_for_a_summary(body: dict[str, Any]) -> bool:
    """A compaction's request for a handoff summary: its last message is the handoff prompt."""
    messages = body.get("messages") or [{}]
    return messages[-1].get("role") == "user" and messages[-1].get("content") == load_prompt("handoff").rstrip()


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items (characters, tokens) two sequences share."""
    limit = min(len(a), len(b))
    index = 0
    while index < limit and a[index] == b[index]:
        index += 1
    return index


class _Server(ThreadingHTTPServer):
    timeout = 0  # handle_request() is called when a connection waits: it never waits for one itself

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a test abandons a stream on purpose) is no error. Its traceback would also be
        printed from a handler thread while the tests go on, and Python 3.11 parses source lines to print one: an
        ast.parse of a test in the main thread at the same time can fail ("AST constructor recursion depth
        mismatch", CPython gh-106905)."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LoopbackServer:
    """An HTTP server on 127.0.0.1 (port 0: a free one) answering from a thread while inside `with`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self._httpd = _Server(("127.0.0.1", port), handler)
        # serve_forever() looks for a shutdown between polls, so each `with` ended half a poll late on average
        # (hundreds of times in the fast tier): this loop waits on a socket pair as well, which `stop` wakes.
        self._wake, self._woken = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._httpd, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in selector.select()]
                if self._woken in ready:
                    return
                self._httpd.handle_request()

    def stop(self) -> None:
        """Ends the serving loop (at once, whatever it waits for); connections already accepted go on."""
        self._wake.send(b"stop")

    @property
    def root(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._thread.join()
        self._httpd.server_close()
        self._wake.close()
        self._woken.close()


@dataclass
class ScriptedSlots:
    """llama-server's slots, for the saved-prefix tests: one token per character of the rendered prompt, what each
    slot holds, `/slots/N?action=save|restore|erase` to files in `save_dir`, `/apply-template`, `/tokenize` and
    `/v1/completions` (a prefill by tokens). How much of a restored slot the next request reuses (`after_restore`):
    "cut" all the prompt shares with it (a cache that can be cut back, SmolLM2's), "extension" only what a prompt
    extending it whole shares (DeepSeek V4's: a restore clears the context checkpoints a cut needs), "nothing"
    not even that. A file saved with another slot count is refused, as llama-server refuses it ("n_stream
    mismatch", HTTP 400)."""

    save_dir: Path
    after_restore: Literal["cut", "extension", "nothing"] = "cut"
    held: dict[int, list[int]] = field(default_factory=dict)
    actions: list[tuple[str, int]] = field(default_factory=list)  # (action, slot) in order, prefills as "prefill"
    _restored: set[int] = field(default_factory=set)

    @staticmethod
    def tokens(text: str) -> list[int]:
        return [ord(character) for character in text]

    def process(self, slot: int, prompt: list[int], after: list[int]) -> int:
        """The cached tokens of a request with `prompt` on `slot`, which then holds `prompt + after`."""
        held = self.held.get(slot, [])
        shared = common_prefix(held, prompt)
        if slot in self._restored and (
            self.after_restore == "nothing" or (self.after_restore == "extension" and shared < len(held))
        ):
            shared = 0
        self._restored.discard(slot)
        self.held[slot] = prompt + after
        return min(shared, len(prompt) - 1)  # llama-server always evaluates a prompt's last token

    def action(self, slot: int, action: str, filename: str, slots: int) -> tuple[int, dict[str, Any]]:
        self.actions.append((action, slot))
        path = self.save_dir / filename
        if action == "erase":
            self.held[slot] = []
            return 200, {"id_slot": slot, "n_erased": 0}
        if action == "save":
            path.write_text(json.dumps({"slots": slots, "tokens": self.held.get(slot, [])}))
            return 200, {"id_slot": slot, "n_saved": len(self.held.get(slot, [])), "timings": {"save_ms": 1.0}}
        saved = json.loads(path.read_text())
        if saved["slots"] != slots:
            message = "Unable to restore slot: No available space in KV cache or invalid slot save file"
            return 400, {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}
        self.held[slot] = saved["tokens"]
        self._restored.add(slot)
        return 200, {"id_slot": slot, "n_restored": len(saved["tokens"]), "timings": {"restore_ms": 1.0}}


class ScriptedServer(LoopbackServer):
    def __init__(
        self,
        script: list[Step] | None = None,
        *,
        n_ctx: int = 65536,
        loading_requests: int = 0,
        port: int = 0,
        speculative: bool = False,
        scripts: dict[str, list[Step]] | None = None,
        slots: int = 1,
        kv: ScriptedSlots | None = None,
        model_path: str | None = None,
        cache: bool = True,
        summary: Reply | None = None,
    ) -> None:
        """loading_requests: answer that many requests, of any endpoint, with 503 "Loading model" first, as
        llama-server does while it loads. port: 0 picks a free one. speculative: /slots reports a drafter.
        scripts: a script per task, for tasks that run in parallel: a request plays the script whose key occurs
        in its first user message, else `script`. slots: what /props and /slots report (the server answers any
        number of requests at once whatever it says). kv: slots that hold, save and restore tokens (prompt and
        cached tokens then count one per character of the rendered prompt). model_path: the GGUF /props names
        (`model_path`, `model_alias`), as llama-server reports the model it runs. cache: False reports nothing
        cached, ever (a prompt cache that does not hold). summary: the answer to every request for a handoff
        summary (a compaction's), which then takes no step of the script."""
        self.script: list[Step] = list(script or [])
        self.scripts = {key: list(steps) for key, steps in (scripts or {}).items()}
        self.n_ctx = n_ctx
        self.loading_requests = loading_requests
        self.speculative = speculative
        self.slots = slots
        self.kv = kv
        self.model_path = model_path
        self.cache = cache
        self.summary = summary
        self.held = threading.Event()
        self._release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.tokenized: list[str] = []  # every text sent to /tokenize
        self.counted: list[dict[str, Any]] = []  # every body sent to /v1/chat/completions/input_tokens
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__(self._handler(), port)

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._release.set()
        super().__exit__(*exc)

    def next_step(self, body: dict[str, Any]) -> tuple[Step, int, int]:
        with self._lock:
            self.requests.append(body)
            prompt = rendered_prompt(body)
            previous = self.prompts[-1] if self.prompts else ""
            self.prompts.append(prompt)
            script = self._script_for(body)
            prompt_n = tokens_of(prompt)
            if prompt_n > self.n_ctx:  # answered with exceed_context_size_error: the script's step is not used up
                step: Step = Reply()
            elif self.summary is not None and asks_for_a_summary(body):
                step = self.summary
            else:
                step = script.pop(0) if script else Reply(content="Nothing more to do.")
        cache_n = tokens_of(prompt[: common_prefix(prompt, previous)]) if self.cache else 0
        return step, prompt_n, cache_n

    def _script_for(self, body: dict[str, Any]) -> list[Step]:
        first_user = next((m for m in body.get("messages", []) if m.get("role") == "user"), {})
        content = str(first_user.get("content", ""))
        return next((steps for key, steps in self.scripts.items() if key in content), self.script)

    def die(self) -> None:
        """Stop listening now (the socket closes at once: later connections are refused, not queued)."""
        self._closing.set()
        self._release.set()
        self.stop()
        self._httpd.socket.close()

    def still_loading(self) -> bool:
        with self._lock:
            if self.loading_requests <= 0:
                return False
            self.loading_requests -= 1
            return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm on, the second waits for the client's
            # delayed ACK (~40 ms a request), which the packer's hundreds of /tokenize calls add up to seconds.
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if server.still_loading():
                    self._json(503, LOADING)
                elif self.path == "/health":
                    self._json(200, {"status": "ok"})
                elif self.path == "/props":
                    self._json(
                        200,
                        {
                            "model_path": "scripted.gguf",
                            "default_generation_settings": {"n_ctx": server.n_ctx},
                            "total_slots": server.slots,
                            "build_info": "scripted",
                            **(
                                {"model_path": server.model_path, "model_alias": server.model_path}
                                if server.model_path
                                else {}
                            ),
                            "chat_template_caps": {"supports_tools": True, "supports_reasoning_effort": True},
                        },
                    )
                elif self.path == "/slots":
                    slots = [
                        {"id": slot, "n_ctx": server.n_ctx, "speculative": server.speculative}
                        for slot in range(server.slots)
                    ]
                    self._json(200, slots)
                elif self.path == "/v1/models":
                    self._json(200, {"data": [{"id": "scripted", "meta": {"n_ctx": server.n_ctx}}]})
                else:
                    self._json(404, {"error": {"code": 404, "message": "not found", "type": "not_found_error"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if server.still_loading():
                    self._json(503, LOADING)
                elif self.path == "/tokenize":
                    server.tokenized.append(body.get("content", ""))
                    content = body.get("content", "")
                    tokens = server.kv.tokens(content) if server.kv else list(range(tokens_of(content)))
                    self._json(200, {"tokens": tokens})
                elif self.path == "/v1/chat/completions":
                    self._chat(body)
                elif server.kv is not None and self.path == "/apply-template":
                    self._json(200, {"prompt": rendered_prompt(body)})
                elif server.kv is not None and self.path.startswith("/slots/"):
                    address = urlsplit(self.path)
                    action = parse_qs(address.query)["action"][0]
                    slot = int(address.path.rsplit("/", 1)[1])
                    with server._lock:
                        self._json(*server.kv.action(slot, action, body.get("filename", ""), server.slots))
                elif server.kv is not None and self.path == "/v1/completions":
                    self._prefill_tokens(body)
                elif self.path == "/v1/chat/completions/input_tokens":
                    server.counted.append(body)
                    self._json(200, {"input_tokens": tokens_of(rendered_prompt(body))})
                else:
                    self._json(404, {"error": {"code": 404, "message": "not found", "type": "not_found_error"}})

            def _prefill_tokens(self, body: dict[str, Any]) -> None:
                """A /v1/completions request with a token array and one token to generate, streamed."""
                assert server.kv is not None
                with server._lock:
                    server.kv.actions.append(("prefill", int(body.get("id_slot", 0))))
                    cache_n = server.kv.process(int(body.get("id_slot", 0)), list(body["prompt"]), [])
                prompt_n = len(body["prompt"])
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                usage = {
                    "prompt_tokens": prompt_n,
                    "completion_tokens": 1,
                    "total_tokens": prompt_n + 1,
                    "prompt_tokens_details": {"cached_tokens": cache_n},
                }
                timings = {"cache_n": cache_n, "prompt_n": prompt_n - cache_n, "predicted_n": 1}
                choice = {"index": 0, "text": "", "finish_reason": "length"}
                chunk = {"id": "cmpl-scripted", "object": "text_completion", "created": 0, "model": "scripted"}
                self._event({**chunk, "choices": [choice], "usage": usage, "timings": timings})
                self._event("[DONE]")

            def _chat(self, body: dict[str, Any]) -> None:
                step, prompt_n, cache_n = server.next_step(body)
                if server.kv is not None:
                    reply = step if isinstance(step, Reply) else Reply()
                    prompt = server.kv.tokens(rendered_prompt(body))
                    with server._lock:
                        slot = int(body.get("id_slot", 0))
                        cache_n = server.kv.process(slot, prompt, server.kv.tokens(reply.reasoning + reply.content))
                    prompt_n = len(prompt)
                if prompt_n > server.n_ctx:
                    error = {
                        "code": 400,
                        "type": "exceed_context_size_error",
                        "message": f"request ({prompt_n} tokens) exceeds the available context size ({server.n_ctx})",
                        "n_prompt_tokens": prompt_n,
                        "n_ctx": server.n_ctx,
                    }
                    self._json(400, {"error": error})
                    return
                if isinstance(step, Fail):
                    self._json(step.status, step.body)
                    return
                if isinstance(step, Die):
                    server.die()
                    self.close_connection = True
                    return
                if isinstance(step, Hold):
                    server.held.set()
                    server._release.wait()
                    return
                if isinstance(step, Reply) and step.before is not None:
                    step.before()
                if isinstance(step, Reply) and not body.get("stream"):
                    self._json(200, self._message(step, prompt_n, cache_n))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                if isinstance(step, StreamError):
                    self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
                    self._event({"error": {"code": 500, "message": step.message, "type": "server_error"}})
                    return
                if isinstance(step, Cut):
                    for word in step.content.split(" ")[:-1]:
                        self._chunk({"content": word + " "})
                    return
                if isinstance(step, Stall):
                    self._progress(prompt_n, cache_n, cache_n)
                    server._closing.wait(step.seconds)
                    return
                if body.get("return_progress"):
                    self._prefill(step, prompt_n, cache_n)
                self._stream_reply(step, prompt_n, cache_n)

            def _progress(self, total: int, cache: int, processed: int) -> None:
                """A prompt_progress chunk as llama-server sends it: an empty assistant delta carrying the counts."""
                self._event(
                    {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "scripted",
                        "choices": [
                            {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
                        ],
                        "prompt_progress": {"total": total, "cache": cache, "processed": processed, "time_ms": 0},
                    }
                )

            def _prefill(self, reply: Reply, prompt_n: int, cache_n: int) -> None:
                for chunk in range(1, reply.prefill_chunks + 1):
                    if chunk > 1 and server._closing.wait(reply.prefill_interval_s):
                        return  # the test is over: no more chunks into a closed connection
                    self._progress(prompt_n, cache_n, cache_n + (prompt_n - cache_n) * chunk // reply.prefill_chunks)

            def _event(self, payload: Any) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

            def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> None:
                self._event(
                    {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "scripted",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                )

            def _message(self, reply: Reply, prompt_n: int, cache_n: int) -> dict[str, Any]:
                """A non-streaming answer (doctor's probes ask for one)."""
                generated = tokens_of(reply.reasoning + reply.content + json.dumps(reply.tool_calls))
                message: dict[str, Any] = {"role": "assistant", "content": reply.content}
                if reply.reasoning:
                    message["reasoning_content"] = reply.reasoning
                return {
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt_n, "completion_tokens": generated},
                    "timings": {"cache_n": cache_n, "prompt_n": prompt_n - cache_n, "predicted_n": generated},
                }

            def _stream_reply(self, reply: Reply, prompt_n: int, cache_n: int) -> None:
                self._chunk({"role": "assistant", "content": None})
                for piece in _pieces(reply.reasoning):
                    self._chunk({"reasoning_content": piece})
                for piece in _pieces(reply.content):
                    self._chunk({"content": piece})
                for index, (name, arguments) in enumerate(reply.tool_calls):
                    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
                    self._chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": f"call_{len(server.requests)}_{index}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        }
                    )
                    for piece in _pieces(raw):
                        self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                self._chunk({}, finish=reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"))
                generated = tokens_of(reply.reasoning + reply.content + json.dumps(reply.tool_calls))
                timings: dict[str, Any] = {
                    "cache_n": cache_n,
                    "prompt_n": prompt_n - cache_n,
                    "prompt_ms": 1.0,
                    "predicted_n": generated,
                    "predicted_ms": 10.0,
                    "predicted_per_second": generated * 100.0,
                }
                if reply.draft_n:
                    timings.update(draft_n=reply.draft_n, draft_n_accepted=reply.draft_n_accepted)
                self._event(
                    {
                        "id": "chatcmpl-scripted",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "scripted",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt_n,
                            "completion_tokens": generated,
                            "total_tokens": prompt_n + generated,
                            "prompt_tokens_details": {"cached_tokens": cache_n},
                        },
                        "timings": timings,
                    }
                )
                self._event("[DONE]")

        return Handler


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]
