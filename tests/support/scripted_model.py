"""An in-process scripted ChatModel (mini-swe-agent's DeterministicModel): loop and runner tests in milliseconds.

It plays the same `Reply` steps as the scripted HTTP server, which stays for the wire format; token counts are
the scripted server's (4 characters a token, cached = the common prefix with the previous request).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import git

from agent.dispatch.in_order import InOrder
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.events import Event
from agent.protocol.model import AssistantTurn, ChatModel, LLMError, ToolCall
from agent.protocol.records import RunSummary
from agent.protocol.stats import RequestStats
from agent.record.journal import RunJournal
from agent.run.compose import build_run
from agent.run.sandboxes import DockerSandboxes, Sandboxes

from support.scripted_server import Reply, ScriptedServer, common_prefix, rendered_prompt, tokens_of


class ScriptedModel:
    def __init__(self, script: list[Reply | LLMError], name: str = "scripted") -> None:
        self.name = name
        self.script = list(script)
        self.requests: list[list[dict[str, Any]]] = []
        self._previous_prompt = ""

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        self.requests.append(copy.deepcopy(messages))
        prompt = rendered_prompt({"messages": messages, "tools": tools})
        cached = common_prefix(prompt, self._previous_prompt)
        self._previous_prompt = prompt
        if not self.script:
            raise LLMError("the scripted model has no more replies")
        step = self.script.pop(0)
        if isinstance(step, LLMError):
            raise step
        calls = [
            ToolCall(
                id=f"call_{len(self.requests)}_{n}",
                name=name,
                arguments=args if isinstance(args, str) else json.dumps(args),
            )
            for n, (name, args) in enumerate(step.tool_calls)
        ]
        stats = RequestStats(
            prompt_tokens=tokens_of(prompt),
            cached_tokens=tokens_of(prompt[:cached]) if cached else 0,
            completion_tokens=tokens_of(step.content + step.reasoning + "".join(str(a) for _, a in step.tool_calls)),
            draft_tokens=step.draft_n,
            draft_accepted=step.draft_n_accepted,
            latency_s=0.001,
        )
        return AssistantTurn(
            content=step.content, reasoning_content=step.reasoning or None, tool_calls=calls, stats=stats
        )


def run_in_process(
    config: RunConfig | NightConfig,
    model: ChatModel,
    *,
    run_id: str = "run-under-test",
    observe: Callable[[Event], None] = lambda event: None,
    sandboxes: Sandboxes | None = None,
) -> RunSummary:
    """The runner with a scripted model, real git and the real Docker sandbox (or the `sandboxes` given: a test
    that does not test Docker passes LocalSandboxes); a scripted server stands in only for the packer's token counts
    and the metrics probes. A NightConfig brings its night-wide settings (deadline)."""
    night = config if isinstance(config, NightConfig) else NightConfig(repos=[config], runs_dir=config.runs_dir)
    with ScriptedServer([]) as server:
        journal = RunJournal(night.runs_dir, run_id)
        journal.write_config(night.repos[0])
        try:
            return build_run(
                night,
                repos={path: git.Repo(path) for path in night.repositories()},
                sandboxes=sandboxes if sandboxes is not None else DockerSandboxes(),
                model=model,
                server_url=server.url,
                journal=journal,
                observe=observe,
                dispatch=InOrder(),
            ).execute()
        finally:
            journal.close()
