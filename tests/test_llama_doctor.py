"""`doctor` against real llama-servers: one configured right, one whose drafter never drafts."""

import json

import pytest
import typer
from typer.testing import CliRunner

from agent.server.cli import doctor
from agent.server.doctor import CheckResult, DoctorOptions, failed, run_doctor
from agent.server.launcher import start_server, stop_server
from agent.server.presets import PresetRequest, build_preset

from llama_fixtures import READY_TIMEOUT_S, free_port

pytestmark = pytest.mark.llama_server


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("doctor")(doctor)

    @app.callback()
    def _root() -> None:
        """Keeps `doctor` a named subcommand, as in the real CLI."""

    return app


def _by_name(results: list[CheckResult]) -> dict[str, tuple[str, str]]:
    return {result.name: (result.status, result.message) for result in results}


def test_doctor_passes_on_a_well_configured_server(llama_server):
    checks = run_doctor(DoctorOptions(server_url=llama_server.url, check_docker=False))
    assert not failed(checks)
    results = _by_name(checks)
    assert list(results) == [
        "server",
        "build",
        "context",
        "template",
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


def test_doctor_fails_when_the_drafter_makes_no_drafts(llama_server_misconfigured):
    results = _by_name(run_doctor(DoctorOptions(server_url=llama_server_misconfigured.url, check_docker=False)))
    status, message = results["speculation"]
    assert status == "fail"
    assert message.startswith("draft model loaded but no drafts made: is --fit off set?")
    assert results["acceptance"][0] == "fail"
    assert results["server"][0] == "ok"


def test_doctor_cli_exits_1_and_prints_json_on_failure(llama_server_misconfigured):
    result = CliRunner().invoke(_cli(), ["doctor", "--server", llama_server_misconfigured.url, "--json"])
    assert result.exit_code == 1
    checks = {entry["name"]: entry["status"] for entry in json.loads(result.stdout)}
    assert checks["speculation"] == "fail"
    assert "docker" in checks


def test_doctor_cli_prints_one_line_per_check(llama_server):
    result = CliRunner().invoke(_cli(), ["doctor", "--server", llama_server.url, "--image", "no-such-image:never"])
    lines = result.stdout.strip().splitlines()
    assert [line.split()[1] for line in lines] == [
        "server",
        "build",
        "context",
        "template",
        "speculation",
        "acceptance",
        "prompt-cache",
        "slot-save",
        "docker",
    ]
    # The missing image is the one failure, and it alone makes the exit code 1.
    assert lines[-1].startswith("[FAIL] docker")
    assert result.exit_code == 1


def test_doctor_warns_that_a_server_without_a_slot_save_path_prefills_every_task(llama_binary, llama_state_dir):
    preset = build_preset(PresetRequest(ctx_size=1024, port=free_port(), extra_args=["--threads", "1"]))
    preset = preset.model_copy(update={"slot_save_path": None})
    state = start_server(preset, binary=llama_binary, state_dir=llama_state_dir, ready_timeout_s=READY_TIMEOUT_S)
    try:
        results = _by_name(run_doctor(DoctorOptions(server_url=state.url, check_docker=False)))
    finally:
        stop_server(state.port, state_dir=llama_state_dir)
    status, message = results["slot-save"]
    assert status == "warn" and "--slot-save-path" in message, message
