"""llama-server's own (non-OpenAI) endpoints: /health, /props, /slots (and their save/restore), /tokenize,
/apply-template, /metrics.

The OpenAI-compatible chat endpoint lives in agent.server.chat; this module is the thin HTTP layer for the
introspection endpoints that the packer, the launcher and `doctor` share.
"""

from __future__ import annotations

from typing import Any

import httpx

from agent.server.errors import ServerError, ServerLoading, ServerUnreachable, SlotsUnsupported

__all__ = ["LlamaServerAPI", "ServerError", "ServerLoading", "ServerUnreachable", "http_client", "server_root"]


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

    def chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streaming /v1/chat/completions: the response keeps llama-server's `timings` (doctor's probes)."""
        response = self._request("POST", "/v1/chat/completions", json={**body, "stream": False})
        response.raise_for_status()
        return response.json()
