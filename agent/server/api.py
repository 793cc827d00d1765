"""llama-server's own (non-OpenAI) endpoints: /health, /props, /slots (and their save/restore), /tokenize,
/apply-template, the chat endpoint's count of a request, /metrics.

The OpenAI-compatible chat endpoint lives in agent.server.chat; this module is the thin HTTP layer for the
introspection endpoints that the packer, the launcher and `doctor` share.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import httpx

from agent.safety.printable import printable
from agent.server.binary import EMBEDDED_MODEL_FILE
from agent.server.errors import ServerError, ServerLoading, ServerUnreachable, SlotsUnsupported

__all__ = [
    "LlamaServerAPI",
    "ServerError",
    "ServerLoading",
    "ServerUnreachable",
    "http_client",
    "is_embedded",
    "served_model",
    "server_root",
]

# A split GGUF's first shard names the model with this suffix: DeepSeek-V4-Flash-…-00001-of-00003.gguf.
_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")
# The server's text, shown in reports and commit trailers: one printable line of at most this many characters.
_MODEL_NAME_CHARS = 200


def served_model(props: dict[str, Any]) -> str | None:
    """The model a llama-server says it runs (/props): its alias when one was given (`--alias`), else its GGUF's
    name without `.gguf` and a shard suffix; None when /props names none. The request's `model` field is only a
    label llama-server ignores, so this is the one name that says what answered."""
    path, alias = props.get("model_path"), props.get("model_alias")
    if isinstance(alias, str) and alias and alias != path:
        name = alias
    elif isinstance(path, str) and path:
        name = _SHARD_SUFFIX.sub("", PurePath(path).name.removesuffix(".gguf"))
    else:
        return None
    return printable(name, one_line=True)[:_MODEL_NAME_CHARS]


def is_embedded(served: str | None) -> bool:
    """Whether a served model (as `served_model` names it) is the embedded SmolLM2: the first run, which proves the
    install rather than refactoring anything."""
    return served == EMBEDDED_MODEL_FILE.removesuffix(".gguf")


def server_root(base_url: str) -> str:
    """`http://host:8080/v1` -> `http://host:8080`: the introspection endpoints hang off the root."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def http_client(root: str, **options: Any) -> httpx.Client:
    """A client for the server at root. TLS settings are built only for https: loading the CA bundle costs tens
    of milliseconds per client, and a plain-HTTP local server has no use for it."""
    return httpx.Client(base_url=root, verify=root.startswith("https://"), **options)


class LlamaServerAPI:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        self.root = server_root(base_url)
        self._http = http_client(self.root, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LlamaServerAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            reason = f"{exc.__class__.__name__}: {exc}"
            raise ServerUnreachable(f"llama-server unreachable at {self.root}: {reason}") from exc
        if response.status_code == 503:
            raise ServerLoading(f"llama-server at {self.root} is still loading the model (503); retry in a moment")
        return response

    def health(self) -> dict[str, Any]:
        """Raises ServerUnreachable / ServerLoading; returns the body when the server is ready."""
        response = self._request("GET", "/health")
        response.raise_for_status()
        return response.json()

    def props(self) -> dict[str, Any]:
        response = self._request("GET", "/props")
        response.raise_for_status()
        return response.json()

    def slots(self) -> list[dict[str, Any]]:
        response = self._request("GET", "/slots")
        response.raise_for_status()
        return response.json()

    def metrics_text(self) -> str | None:
        """Prometheus text, or None when the server runs without --metrics."""
        response = self._request("GET", "/metrics")
        if response.status_code != 200:
            return None
        return response.text

    def tokenize(self, content: str, *, add_special: bool = False) -> list[int]:
        """The text's tokens; special-token text (`<｜User｜>`) is read as the special token, as the server does."""
        response = self._request("POST", "/tokenize", json={"content": content, "add_special": add_special})
        response.raise_for_status()
        return response.json()["tokens"]

    def apply_template(self, body: dict[str, Any]) -> str:
        """The prompt text a chat request with these fields renders to (`POST /apply-template`: the chat
        endpoint's own parsing, without running anything). The BOS text is left out: tokenizing the prompt with
        `add_special` puts it back, as the chat endpoint does."""
        response = self._request("POST", "/apply-template", json=body)
        response.raise_for_status()
        return str(response.json()["prompt"])

    def slot_action(self, slot: int, action: str, filename: str | None = None) -> dict[str, Any]:
        """`POST /slots/{slot}?action=save|restore|erase`; the filename is relative to the server's
        --slot-save-path. Raises ServerError with the server's own message when it refuses."""
        body = {"filename": filename} if filename is not None else {}
        response = self._request("POST", f"/slots/{slot}", params={"action": action}, json=body)
        if response.status_code != 200:
            try:
                reason = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                reason = response.text[:200]
            refused = SlotsUnsupported if response.status_code == 501 else ServerError
            raise refused(f"slot {action} refused (HTTP {response.status_code}): {reason}")
        return response.json()

    def context_size(self) -> int:
        """The per-slot context window the server was started with."""
        return int(self.props()["default_generation_settings"]["n_ctx"])

    def input_tokens(self, body: dict[str, Any]) -> int:
        """The tokens a chat request with these fields takes, rendered and tokenized as the chat endpoint does,
        without running it (`POST /v1/chat/completions/input_tokens`)."""
        response = self._request("POST", "/v1/chat/completions/input_tokens", json=body)
        response.raise_for_status()
        return int(response.json()["input_tokens"])

    def chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streaming /v1/chat/completions: the response keeps llama-server's `timings` (doctor's probes)."""
        response = self._request("POST", "/v1/chat/completions", json={**body, "stream": False})
        response.raise_for_status()
        return response.json()
