"""The llama-server binary found on this machine: it runs and knows the flags the presets rely on (marker
`llama_server`)."""

import pytest

from agent.server.binary import binary_version, supported_flags


@pytest.mark.llama_server
def test_binary_runs_and_knows_the_dspark_flags(llama_binary):
    assert binary_version(llama_binary)
    flags = supported_flags(llama_binary)
    assert {"--spec-type", "--spec-draft-n-max", "--fit", "--no-cache-idle-slots", "--cache-ram", "--metrics"} <= flags
