"""`doctor`: is this machine ready for an overnight run? One result per check; any failure means exit 1.

The checks encode what goes wrong in practice with a healthy-looking server: a drafter that makes no drafts
(HTTP still answers 200), acceptance that does not pay for the verification passes, a prompt cache that does
not serve an exact extension, a slot that cannot be saved and restored or whose restore gives nothing, an unpinned
or pre-DSpark build, a chat template that is not the target's, thinking off while the effort asks for it
(agent/server/doctor_target.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

from agent.environment.spec import EnvironmentFileError, load_environment_file
from agent.environment.stage import describe_environment
from agent.gate.test_command import detect_test_command
from agent.packing.budget import context_budget
from agent.packing.tokens import DEFAULT_TOKENS_PER_BYTE
from agent.protocol.config import DEFAULT_IMAGE, DEFAULT_SERVER_URL, LLMConfig
from agent.protocol.effort import Effort
from agent.safety.printable import printable
from agent.server import doctor_target as target
from agent.server.api import LlamaServerAPI, ServerError, ServerUnreachable
from agent.server.errors import SlotsUnsupported
from agent.server.launcher import ServerState, find_state
from agent.server.metrics import spec_counters_from_text, speculation_configured
from agent.settings.layers import SettingsError, user_setting
from agent.worktree.workspace import WorkspaceError, open_repository
from sandbox import SandboxError, docker_client, require_image

Status = Literal["ok", "warn", "fail", "skip"]

# llama.cpp release b10228 (merge 596a579, PR #25784) is the first with DeepSeek V4 and DSpark.
FIRST_DSPARK_BUILD = 10228
PROBE_MAX_TOKENS = 32
# Overwritten by every doctor run, and removed when the save directory is known.
PROBE_SLOT_FILE = "refactor-agent-doctor-probe.bin"


class CheckResult(BaseModel):
    name: str
    status: Status
    message: str


class DoctorOptions(BaseModel):
    server_url: str = DEFAULT_SERVER_URL
    repo: Path | None = None
    min_accepted_per_pass: float = Field(
        1.0, ge=0, description="below one accepted token per verification pass the drafter rarely pays for itself"
    )
    effort: Effort = Field(LLMConfig.model_fields["effort"].default, description="the effort runs will ask for")
    image: str = DEFAULT_IMAGE
    environment: Path | None = None  # a TOML file with an [environment] table, as `run --environment` takes
    check_docker: bool = True


class _Probe(BaseModel):
    drafted: int
    accepted: int
    generated: int
    cached: int
    evaluated: int
    reasoning: str | None = None


def _probe(api: LlamaServerAPI, max_tokens: int, effort: Effort) -> _Probe:
    response = api.chat_completion(
        {
            "messages": target.PROBE_MESSAGES,
            "max_tokens": max_tokens,
            "reasoning_effort": effort,
            # Greedy: the probe should measure the drafter, not the sampler's luck.
            "temperature": 0.0,
            "cache_prompt": True,
        }
    )
    timings: dict[str, Any] = response.get("timings", {})
    message = (response.get("choices") or [{}])[0].get("message") or {}
    return _Probe(
        drafted=int(timings.get("draft_n", 0)),
        accepted=int(timings.get("draft_n_accepted", 0)),
        generated=int(timings.get("predicted_n", 0)),
        cached=int(timings.get("cache_n", 0)),
        evaluated=int(timings.get("prompt_n", 0)),
        reasoning=message.get("reasoning_content") or None,
    )


def _server_hint(url: str) -> str:
    return f"no llama-server at {url}: start one with `refactor-agent server start --preset embedded` (or dspark)"


def check_build(props: dict[str, Any]) -> CheckResult:
    build = str(props.get("build_info", "unknown"))
    match = re.match(r"b(\d+)", build)
    number = int(match.group(1)) if match else 0
    if number == 0:
        return CheckResult(
            name="build",
            status="warn",
            message=f"build_info {build}: cannot confirm the build includes DSpark (llama.cpp b{FIRST_DSPARK_BUILD}, "
            "commit 596a579); pin the build you tested",
        )
    if number < FIRST_DSPARK_BUILD:
        return CheckResult(
            name="build",
            status="warn",
            message=f"build {build} predates b{FIRST_DSPARK_BUILD}, the first with DeepSeek V4 and DSpark: upgrade",
        )
    return CheckResult(name="build", status="ok", message=f"build {build} (DSpark since b{FIRST_DSPARK_BUILD})")


def estimate_repo_tokens(repo: Path) -> int:
    """Tracked bytes times a typical tokens-per-byte ratio: rough, but enough to compare with a window."""
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True, timeout=120
    ).stdout
    paths = [repo / name for name in listing.decode(errors="surrogateescape").split("\0") if name]
    total = sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())
    return int(total * DEFAULT_TOKENS_PER_BYTE)


def check_context(props: dict[str, Any], repo: Path | None) -> CheckResult:
    n_ctx = int(props["default_generation_settings"]["n_ctx"])
    slots = int(props.get("total_slots", 1))
    # Each task is pinned to a slot of its own (id_slot): several slots serve `run --parallel N`, one task each.
    slotted = f"; {slots} slots: `run --parallel {slots}` runs a task in each" if slots > 1 else ""
    if repo is None:
        return CheckResult(
            name="context",
            status="ok",
            message=f"{n_ctx} tokens per slot (pass --repo to compare with a repository){slotted}",
        )
    try:
        needed = estimate_repo_tokens(repo)
    except (OSError, subprocess.SubprocessError):
        return CheckResult(name="context", status="fail", message=f"--repo {repo} is not a readable git repository")
    budget = context_budget(n_ctx, "max", None)
    if needed > budget:
        return CheckResult(
            name="context",
            status="fail",
            message=f"{repo} needs about {needed} tokens but {n_ctx} leaves {budget} for the repository: raise --ctx "
            f"(the packer will otherwise leave files out){slotted}",
        )
    return CheckResult(
        name="context",
        status="ok",
        message=f"{repo} needs about {needed} of the {budget} tokens {n_ctx} leaves for the repository{slotted}",
    )


def check_template(props: dict[str, Any]) -> CheckResult:
    found = target.check_template(props, target.kept_template())
    return CheckResult(name="template", status=found.status, message=found.message)


def check_thinking(api: LlamaServerAPI, probe: _Probe, effort: Effort) -> CheckResult:
    found = target.check_thinking(target.rendering(api, effort), probe.reasoning, effort)
    return CheckResult(name="thinking", status=found.status, message=found.message)


def _launched_state(url: str) -> ServerState | None:
    """The state file of the server at `url`, when refactor-agent started it."""
    port = urlsplit(url).port
    return find_state(port) if port is not None else None


def _launched_with_draft(url: str) -> bool:
    """Whether refactor-agent started the server at `url` with a drafter (its state file knows the command)."""
    state = _launched_state(url)
    return state is not None and state.drafting


def check_speculation(probe: _Probe, configured: bool, launched_with_draft: bool) -> CheckResult:
    if not configured:
        if launched_with_draft:
            return CheckResult(
                name="speculation",
                status="fail",
                message="a drafter is on the command line but the server reports no speculative decoding: "
                "the draft failed to initialise, see the server log",
            )
        return CheckResult(
            name="speculation", status="skip", message="no speculative decoding configured (dspark preset enables it)"
        )
    if probe.drafted == 0:
        return CheckResult(
            name="speculation",
            status="fail",
            message=f"draft model loaded but no drafts made: is --fit off set? (probe generated {probe.generated} "
            "tokens without a single draft)",
        )
    return CheckResult(
        name="speculation",
        status="ok",
        message=f"probe drafted {probe.drafted} tokens, {probe.accepted} accepted",
    )


def check_acceptance(metrics_text: str | None, configured: bool, floor: float) -> CheckResult:
    if metrics_text is None:
        return CheckResult(
            name="acceptance",
            status="fail" if configured else "warn",
            message="no /metrics: start llama-server with --metrics (acceptance is otherwise only estimated)",
        )
    if not configured:
        return CheckResult(name="acceptance", status="skip", message="no speculative decoding to measure")
    counters = spec_counters_from_text(metrics_text)
    if counters.drafts == 0 or counters.accepted_per_pass is None:
        return CheckResult(
            name="acceptance", status="fail", message="/metrics counts no verification passes: nothing is drafted"
        )
    rate = counters.acceptance_rate or 0.0
    summary = (
        f"{counters.accepted_per_pass:.2f} accepted tokens per verification pass "
        f"(acceptance {rate:.0%} of {counters.draft_tokens} drafted, {counters.drafts} passes)"
    )
    if counters.accepted_per_pass < floor:
        return CheckResult(
            name="acceptance",
            status="fail",
            message=f"{summary}, below the floor {floor:g}: the drafter does not pay for its passes; check that it "
            "belongs to the target model and --spec-draft-n-max",
        )
    return CheckResult(name="acceptance", status="ok", message=f"{summary}, floor {floor:g}")


def check_prompt_cache(probe: target.Extension) -> CheckResult:
    found = target.check_prompt_cache(probe)
    return CheckResult(name="prompt-cache", status=found.status, message=found.message)


def check_slot_save(api: LlamaServerAPI, save_dir: Path | None, effort: Effort) -> CheckResult:
    """Save the probe's slot, erase it, restore it and send the probe again: what lets a task restore a prefix
    prefilled by an earlier one, and whether the restored tokens are then served from the cache."""
    try:
        saved = api.slot_action(0, "save", PROBE_SLOT_FILE)
        api.slot_action(0, "erase")
        restored = api.slot_action(0, "restore", PROBE_SLOT_FILE)
        again = api.chat_completion(target.probe_body(target.EXTENDED_MESSAGES, effort))
    except SlotsUnsupported:
        return CheckResult(
            name="slot-save",
            status="warn",
            message="the server cannot save slots (no --slot-save-path): every task and every night prefills the "
            "repository again; start it with `refactor-agent server start`, whose presets set it",
        )
    except ServerError as error:
        return CheckResult(name="slot-save", status="fail", message=f"saving or restoring the probe's slot: {error}")
    finally:
        if save_dir is not None:
            (save_dir / PROBE_SLOT_FILE).unlink(missing_ok=True)
    tokens, written = int(saved.get("n_saved", 0)), int(saved.get("n_written", 0))
    if int(restored.get("n_restored", -1)) != tokens or tokens == 0:
        return CheckResult(
            name="slot-save",
            status="fail",
            message=f"saved {tokens} tokens of the probe but restored {restored.get('n_restored')}",
        )
    cached = int(again.get("timings", {}).get("cache_n", 0))
    # The same prompt again: llama-server evaluates its last token anew (server-context.cpp), the rest is reused.
    if cached < tokens - 1:
        return CheckResult(
            name="slot-save",
            status="warn",
            message=f"restored prefixes give this server nothing (cached {cached} of the {tokens} restored): "
            "DeepSeek V4 needs --swa-full (docs/llama-server.md)",
        )
    per_token = f"{written / tokens / 1024:.0f} KB per token"
    managed = f", saved prefixes in {save_dir}" if save_dir is not None else ", directory not managed by refactor-agent"
    return CheckResult(
        name="slot-save",
        status="ok",
        message=f"saved, restored and reused the probe's {tokens} tokens ({per_token}){managed}",
    )


def check_docker(image: str) -> CheckResult:
    try:
        client = docker_client(timeout_s=20)
        require_image(client, image)
    except SandboxError as error:
        return CheckResult(name="docker", status="fail", message=str(error))
    return CheckResult(name="docker", status="ok", message=f"Docker daemon answers and image {image} is present")


def _note(line: str) -> None:
    print(line, file=sys.stderr)


def check_environment(repo: Path, image: str, environment: Path | None) -> CheckResult:
    """Which environment source wins for the repository, which were skipped and why, and whether its image is
    already built."""
    try:
        spec = load_environment_file(environment) if environment is not None else None
        ready, message = describe_environment(
            open_repository(repo),
            client=docker_client(timeout_s=20),
            sandbox_image=image,
            image_explicit=False,
            spec=spec,
            # A note that the repository's own config file was not read goes to stderr: --json keeps stdout.
            allowed_base_images=user_setting("allowed_base_images", [repo], _note) or [],
        )
    except (EnvironmentFileError, SettingsError, WorkspaceError, SandboxError) as error:
        return CheckResult(name="environment", status="fail", message=str(error))
    # The message quotes the repository (image names, paths): its control characters are shown, not sent.
    return CheckResult(name="environment", status="ok" if ready else "fail", message=printable(message))


def check_test_command(repo: Path) -> CheckResult:
    """The command the gate would run the repository's tests with, and why that one."""
    chosen = detect_test_command(repo)
    if chosen is None:
        return CheckResult(
            name="test-command",
            status="warn",
            message="none found (tasks would be unverified); name one with `run --test-cmd`",
        )
    return CheckResult(name="test-command", status="ok", message=f"{chosen.command}  (from {chosen.source})")


def _server_checks(options: DoctorOptions) -> list[CheckResult]:
    with LlamaServerAPI(options.server_url, timeout_s=120.0) as api:
        try:
            api.health()
            props = api.props()
        except ServerUnreachable:
            return [CheckResult(name="server", status="fail", message=_server_hint(api.root))]
        model = Path(str(props.get("model_path", "?"))).name
        results = [
            CheckResult(name="server", status="ok", message=f"{api.root} is up, model {model}"),
            check_build(props),
            check_context(props, options.repo),
            check_template(props),
        ]
        configured = speculation_configured(api)
        first = _probe(api, PROBE_MAX_TOKENS, options.effort)
        results.append(check_thinking(api, first, options.effort))
        results.append(check_speculation(first, configured, _launched_with_draft(options.server_url)))
        results.append(check_acceptance(api.metrics_text(), configured, options.min_accepted_per_pass))
        results.append(check_prompt_cache(target.extension_probe(api, options.effort)))
        state = _launched_state(options.server_url)
        results.append(check_slot_save(api, state.slot_save_path if state is not None else None, options.effort))
    return results


def run_doctor(options: DoctorOptions) -> list[CheckResult]:
    try:
        results = _server_checks(options)
    except (ServerError, httpx.HTTPError) as error:
        # A server that fails mid-way (loading, HTTP 500 on the probe) is one failure, said in one line.
        results = [CheckResult(name="server", status="fail", message=" ".join(str(error).split()))]
    if options.check_docker:
        results.append(check_docker(options.image))
        if options.repo is not None:
            results.append(check_environment(options.repo, options.image, options.environment))
    if options.repo is not None:
        results.append(check_test_command(options.repo))
    return results


def failed(results: list[CheckResult]) -> bool:
    return any(result.status == "fail" for result in results)
