"""`doctor`'s checks on canned answers, and against real llama-servers (marker `llama_server`): one configured
right, one whose drafter never drafts, one that cannot save slots."""

import json
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agent.server import doctor_target as target
from agent.server.binary import TEMPLATES_DIR, V4_TEMPLATE
from agent.server.cli import doctor
from agent.server.doctor import (
    CheckResult,
    DoctorOptions,
    _Probe,
    check_acceptance,
    check_build,
    check_context,
    check_prompt_cache,
    check_slot_save,
    check_speculation,
    check_template,
    estimate_repo_tokens,
    failed,
    run_doctor,
)
from agent.server.launcher import start_server, stop_server
from agent.server.presets import PresetRequest, build_preset

from support.llama_fixtures import READY_TIMEOUT_S, TEST_THREADS, free_port
from support.scripted_server import Reply, ScriptedServer, rendered_prompt, tokens_of

METRICS_TEXT = """\
llamacpp:spec_decode_num_draft_tokens_total 245
llamacpp:spec_decode_num_accepted_tokens_total 102
llamacpp:spec_decode_num_drafts_total 51
"""


def _props(n_ctx: int = 8192, slots: int = 1, **extra) -> dict:
    return {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": slots, **extra}


@pytest.mark.parametrize(
    ("build", "status"),
    [("b10228-596a579", "ok"), ("b11434-abc1234", "ok"), ("b9000-deadbee", "warn"), ("b0-unknown", "warn")],
)
def test_build_is_compared_with_the_first_dspark_build(build, status):
    assert check_build({"build_info": build}).status == status


def test_unknown_build_says_what_it_cannot_confirm():
    message = check_build({"build_info": "b0-unknown"}).message
    assert "b10228" in message and "unknown" in message


def _git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    return path


def test_repo_estimate_counts_tracked_files_only(tmp_path):
    repo = _git_repo(tmp_path / "repo", {"a.py": "x = 1\n" * 1000})
    (repo / "untracked.log").write_text("y" * 100_000)
    assert 1000 < estimate_repo_tokens(repo) < 3000


def test_context_fails_when_the_repository_does_not_fit(tmp_path):
    repo = _git_repo(tmp_path / "repo", {"big.py": "value = 'abcdefgh'\n" * 10_000})
    result = check_context(_props(n_ctx=8192), repo)
    assert result.status == "fail"
    assert "raise --ctx" in result.message


def test_context_passes_when_the_repository_fits(tmp_path):
    repo = _git_repo(tmp_path / "repo", {"small.py": "x = 1\n"})
    assert check_context(_props(n_ctx=262_144), repo).status == "ok"


def test_context_names_the_slots_parallel_tasks_can_use():
    result = check_context(_props(slots=4), None)
    assert result.status == "ok"
    assert "8192 tokens per slot" in result.message and "4 slots: `run --parallel 4`" in result.message


def test_context_reports_a_path_that_is_not_a_repository(tmp_path):
    result = check_context(_props(), tmp_path / "missing")
    assert result.status == "fail"
    assert "not a readable git repository" in result.message


FULL_CAPS = {"supports_tools": True, "supports_reasoning_effort": True}


def _template(name: str) -> str:
    return (TEMPLATES_DIR / name).read_text(encoding="utf-8")


def test_template_without_tools_or_effort_is_a_warning():
    v4 = _template(V4_TEMPLATE).rstrip("\n")
    no_caps = {"supports_tools": False, "supports_reasoning_effort": False}
    result = check_template(_props(chat_template=v4, chat_template_caps=no_caps))
    assert result.status == "warn"
    assert "tools and reasoning_effort" in result.message
    assert check_template(_props(chat_template=v4, chat_template_caps=FULL_CAPS)).status == "ok"


@pytest.mark.parametrize(
    ("template", "status", "named"),
    [
        # /props shows the file without its trailing newline: still the kept one.
        (lambda: _template(V4_TEMPLATE).rstrip("\n"), "ok", "DeepSeek V4 Flash 0731's own (the file setup kept"),
        (lambda: _template(V4_TEMPLATE).replace("## Tools", "## Tools!"), "warn", "a DeepSeek V4 Flash 0731 template"),
        (lambda: _template("deepseek-ai-DeepSeek-V4.jinja"), "warn", "DeepSeek V4's preview template"),
        (lambda: _template(V4_TEMPLATE).replace("tool_calls", "function_calls"), "warn", "DeepSeek V3.2's"),
        (lambda: "{{ '<|im_start|>' + message['role'] }}", "warn", "not DeepSeek V4 Flash 0731's: it has no DSML"),
        (lambda: "", "warn", "the server shows no chat template"),
    ],
    ids=["kept", "variant", "preview", "v3.2", "chatml", "none"],
)
def test_doctor_names_the_chat_template_it_sees(template, status, named):
    result = check_template(_props(chat_template=template(), chat_template_caps=FULL_CAPS))
    assert (result.status, result.message[: len(named)]) == (status, named), result.message


def test_thinking_off_while_effort_is_max_fails_in_one_line():
    result = target.check_thinking("<｜User｜>Count.<｜Assistant｜></think>", None, "max")
    assert result.status == "fail" and "\n" not in result.message
    assert (
        result.message.startswith("thinking is off (the prompt ends </think>") and "--reasoning off" in result.message
    )
    assert target.check_thinking("<｜Assistant｜></think>", None, "low").status == "ok", "low effort asks for nothing"


def test_doctor_fails_when_thinking_yields_no_reasoning():
    """--reasoning-budget 0 renders like thinking on and ends every thinking block at once (not reproducible on
    SmolLM2, whose tokenizer splits <think>): only the live reply tells."""
    result = target.check_thinking("<｜Assistant｜><think>", None, "max")
    assert result.status == "fail" and "--reasoning-budget 0" in result.message
    thinking = target.check_thinking(f"{target.FLASH_MAX_PREAMBLE}…<｜Assistant｜><think>", "Counting.", "max")
    assert thinking.status == "ok" and "the effort preamble is in" in thinking.message
    assert target.check_thinking("<|im_start|>assistant\n", "x", "max").status == "skip"


def test_doctor_fails_when_the_extension_is_not_reused():
    with ScriptedServer([Reply(content="1, 2, 3")] * 4, cache=False) as server:
        results = _by_name(run_doctor(DoctorOptions(server_url=server.url, check_docker=False)))
        first, second = server.requests[1:3]
    assert second["messages"][: len(first["messages"])] == first["messages"], "the second request extends the first"
    assert (first["max_tokens"], first["id_slot"]) == (1, 0)
    status, message = results["prompt-cache"]
    shared = tokens_of(rendered_prompt(first))
    assert status == "fail" and "\n" not in message
    assert f"it reused 0 of the {shared} tokens they share" in message and "--swa-full" in message


def test_an_extension_served_from_a_checkpoint_warns_that_v4_needs_swa_full():
    """DeepSeek V4 without --swa-full: the nearest context checkpoint, 4 tokens before the first prompt's end."""
    assert check_prompt_cache(target.Extension(first_prompt=668, shared=668, cached=668)).status == "ok"
    warned = check_prompt_cache(target.Extension(first_prompt=668, shared=668, cached=664))
    assert warned.status == "warn" and "--swa-full" in warned.message
    assert check_prompt_cache(target.Extension(first_prompt=668, shared=668, cached=100)).status == "fail"


class _RestoringServer:
    """A server's slot endpoints as DeepSeek V4's cache answers them without --swa-full: the save and restore work,
    and the request after the restore is processed from the start."""

    def __init__(self, cached_after_restore: int) -> None:
        self.cached = cached_after_restore
        self.actions: list[str] = []

    def slot_action(self, slot: int, action: str, filename: str | None = None) -> dict:
        self.actions.append(action)
        return {"save": {"n_saved": 700, "n_written": 700 * 23_000}, "restore": {"n_restored": 700}}.get(action, {})

    def chat_completion(self, body: dict) -> dict:
        self.actions.append("chat")
        return {"timings": {"cache_n": self.cached}}


def test_doctor_warns_when_restores_give_nothing():
    server = _RestoringServer(cached_after_restore=0)
    result = check_slot_save(server, None, "max")
    assert server.actions == ["save", "erase", "restore", "chat"]
    assert (
        result.status == "warn" and "restored prefixes give this server nothing (cached 0 of the 700" in result.message
    )
    assert "--swa-full" in result.message
    assert check_slot_save(_RestoringServer(cached_after_restore=699), None, "max").status == "ok"


def _probe(drafted: int = 0, accepted: int = 0, cached: int = 0, evaluated: int = 300) -> _Probe:
    return _Probe(drafted=drafted, accepted=accepted, generated=48, cached=cached, evaluated=evaluated)


def test_speculation_that_never_drafts_fails_with_the_fit_hint():
    result = check_speculation(_probe(), configured=True, launched_with_draft=True)
    assert result.status == "fail"
    assert result.message.startswith("draft model loaded but no drafts made: is --fit off set?")


def test_a_drafter_on_the_command_line_that_the_server_dropped_fails():
    result = check_speculation(_probe(), configured=False, launched_with_draft=True)
    assert result.status == "fail"
    assert "reports no speculative decoding" in result.message


def test_speculation_not_configured_is_skipped():
    assert check_speculation(_probe(), configured=False, launched_with_draft=False).status == "skip"
    assert check_speculation(_probe(drafted=20, accepted=9), configured=True, launched_with_draft=False).status == "ok"


def test_acceptance_is_judged_per_verification_pass():
    assert check_acceptance(METRICS_TEXT, configured=True, floor=1.5).status == "ok"  # 102 / 51 = 2.0
    low = check_acceptance(METRICS_TEXT, configured=True, floor=2.5)
    assert low.status == "fail"
    assert "2.00 accepted tokens per verification pass" in low.message


def test_acceptance_without_metrics_fails_only_when_speculating():
    assert check_acceptance(None, configured=True, floor=1.0).status == "fail"
    assert check_acceptance(None, configured=False, floor=1.0).status == "warn"
    assert "--metrics" in check_acceptance(None, configured=True, floor=1.0).message


def test_acceptance_with_zero_passes_fails():
    result = check_acceptance("llamacpp:spec_decode_num_drafts_total 0\n", configured=True, floor=1.0)
    assert result.status == "fail"


def test_failed_means_any_failure():
    ok = CheckResult(name="a", status="ok", message="")
    assert not failed([ok, CheckResult(name="b", status="warn", message="")])
    assert failed([ok, CheckResult(name="c", status="fail", message="")])


def test_doctor_without_a_server_fails_with_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    results = run_doctor(DoctorOptions(server_url="http://127.0.0.1:9/v1", check_docker=False))
    assert [(result.name, result.status) for result in results] == [("server", "fail")]
    assert "refactor-agent server start" in results[0].message


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("doctor")(doctor)

    @app.callback()
    def _root() -> None:
        """Keeps `doctor` a named subcommand, as in the real CLI."""

    return app


def _by_name(results: list[CheckResult]) -> dict[str, tuple[str, str]]:
    return {result.name: (result.status, result.message) for result in results}


@pytest.mark.llama_server
def test_doctor_passes_on_a_well_configured_server(llama_server):
    checks = run_doctor(DoctorOptions(server_url=llama_server.url, check_docker=False))
    assert not failed(checks)
    results = _by_name(checks)
    assert list(results) == [
        "server",
        "build",
        "context",
        "template",
        "thinking",
        "speculation",
        "acceptance",
        "prompt-cache",
        "slot-save",
    ]
    for name in ("server", "speculation", "acceptance", "prompt-cache", "slot-save"):
        assert results[name][0] == "ok", results[name]
    # The probe's saved slot does not stay behind in the directory of saved prefixes.
    assert llama_server.slot_save_path is not None and not list(llama_server.slot_save_path.glob("*doctor*"))
    # The PyPI build reports no build number: a warning, not a pass and not a failure.
    assert results["build"][0] == "warn"
    # SmolLM2's own template is named for what it is not, and it has no thinking block for effort to act on.
    assert results["template"][0] == "warn" and results["template"][1].startswith("not DeepSeek V4 Flash 0731's")
    assert results["thinking"][0] == "skip"


@pytest.mark.llama_server
def test_doctor_names_the_v4_template_and_thinking_on(llama_server_v4):
    results = _by_name(run_doctor(DoctorOptions(server_url=llama_server_v4.url, check_docker=False)))
    assert results["template"][0] == "ok", results["template"]
    assert results["template"][1].startswith("DeepSeek V4 Flash 0731's own (the file setup kept")
    assert results["thinking"] == (
        "ok",
        "thinking is on (the prompt ends <think> and the probe's reply reasons), effort max; the effort preamble is in",
    )
    assert results["prompt-cache"][0] == "ok", results["prompt-cache"]
    assert results["slot-save"][0] == "ok", results["slot-save"]


@pytest.mark.llama_server
def test_doctor_fails_with_thinking_off_while_effort_is_max(llama_server_v4_thinking_off):
    checks = run_doctor(DoctorOptions(server_url=llama_server_v4_thinking_off.url, check_docker=False))
    status, message = _by_name(checks)["thinking"]
    assert status == "fail" and failed(checks)
    assert message == (
        "thinking is off (the prompt ends </think>: the server runs with --reasoning off), so effort max does "
        "nothing: start it without --reasoning off"
    )
    low = _by_name(
        run_doctor(DoctorOptions(server_url=llama_server_v4_thinking_off.url, effort="low", check_docker=False))
    )
    assert low["thinking"][0] == "ok"


@pytest.mark.llama_server
def test_doctor_fails_when_the_drafter_makes_no_drafts(llama_server_misconfigured):
    results = _by_name(run_doctor(DoctorOptions(server_url=llama_server_misconfigured.url, check_docker=False)))
    status, message = results["speculation"]
    assert status == "fail"
    assert message.startswith("draft model loaded but no drafts made: is --fit off set?")
    assert results["acceptance"][0] == "fail"
    assert results["server"][0] == "ok"


@pytest.mark.llama_server
def test_doctor_cli_exits_1_and_prints_json_on_failure(llama_server_misconfigured):
    result = CliRunner().invoke(_cli(), ["doctor", "--server", llama_server_misconfigured.url, "--json"])
    assert result.exit_code == 1
    checks = {entry["name"]: entry["status"] for entry in json.loads(result.stdout)}
    assert checks["speculation"] == "fail"
    assert "docker" in checks


@pytest.mark.llama_server
def test_doctor_cli_prints_one_line_per_check(llama_server):
    result = CliRunner().invoke(_cli(), ["doctor", "--server", llama_server.url, "--image", "no-such-image:never"])
    lines = result.stdout.strip().splitlines()
    assert [line.split()[1] for line in lines] == [
        "server",
        "build",
        "context",
        "template",
        "thinking",
        "speculation",
        "acceptance",
        "prompt-cache",
        "slot-save",
        "docker",
    ]
    # The missing image is the one failure, and it alone makes the exit code 1.
    assert lines[-1].startswith("[FAIL] docker")
    assert result.exit_code == 1


@pytest.mark.llama_server
def test_doctor_warns_that_a_server_without_a_slot_save_path_prefills_every_task(llama_binary, llama_state_dir):
    preset = build_preset(PresetRequest(ctx_size=1024, port=free_port(), extra_args=list(TEST_THREADS)))
    preset = preset.model_copy(update={"slot_save_path": None})
    state = start_server(preset, binary=llama_binary, state_dir=llama_state_dir, ready_timeout_s=READY_TIMEOUT_S)
    try:
        results = _by_name(run_doctor(DoctorOptions(server_url=state.url, check_docker=False)))
    finally:
        stop_server(state.port, state_dir=llama_state_dir)
    status, message = results["slot-save"]
    assert status == "warn" and "--slot-save-path" in message, message
