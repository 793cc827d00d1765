"""Server presets: every llama-server flag the product relies on, spelled out once.

docs/llama-server.md explains each flag of the `dspark` preset; keep the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.server.binary import find_embedded_model
from agent.server.errors import LaunchError
from agent.server.paths import default_kv_cache_dir

PresetName = Literal["dspark", "embedded"]

# 256k tokens hold a mid-size repository (about 1 MB of source) plus the conversation. The model allows 1M, but
# the KV cache grows linearly with -c and dominates memory at that length: raise it deliberately with --ctx.
DSPARK_DEFAULT_CTX = 262_144
# The V4 DSpark drafter's trained block; larger values are clamped to it anyway.
DSPARK_DRAFT_N_MAX = 5
# A 100+ GB GGUF read from disk takes minutes before /health turns ok.
DEFAULT_READY_TIMEOUT_S = 1800.0
# SmolLM2-135M was trained on 8192 tokens; its KV cache costs ~23 KB per token.
EMBEDDED_MAX_CTX = 8192
# The embedded model's replies end here (--n-predict; a request's own max_tokens, `run --max-tokens`, overrides it):
# the README's first run ends in about a minute on two cores instead of SmolLM2 babbling thousands of tokens. At the
# slowest decode measured under load (2.1 tok/s) 192 tokens take 91 s; the first run stays under two minutes.
EMBEDDED_REPLY_TOKENS = 192


class PresetError(LaunchError):
    pass


class ServerPreset(BaseModel):
    """A complete llama-server configuration; `arguments()` is the exact command line after the binary."""

    name: str
    model: Path
    draft: Path | None = None
    ctx_size: int = Field(gt=0, description="the whole context: parallel slots of ctx_size / parallel tokens each")
    gpu_layers: str = Field(description="an exact number of layers, or 'all'")
    spec_type: str | None = None
    spec_draft_n_max: int | None = Field(None, ge=1)
    fit: bool | None = Field(None, description="None leaves llama-server's default (on)")
    flash_attn: Literal["on", "off", "auto"] | None = None
    jinja: bool = True
    metrics: bool = True
    parallel: int = Field(1, ge=1, description="slots: tasks served at once (run --parallel), each pinned to one")
    cache_idle_slots: bool = False
    cache_ram_mib: int | None = None
    repack: bool = True
    slot_save_path: Path | None = Field(None, description="--slot-save-path: lets the agent save and restore prefixes")
    n_predict: int | None = Field(None, ge=1, description="--n-predict: a reply's cap when a request sets none")
    temperature: float = 1.0
    top_p: float = 0.95
    min_p: float = 0.0
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    extra_args: list[str] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def drafting(self) -> bool:
        return self.spec_type is not None

    def arguments(self) -> list[str]:
        arguments = ["--model", str(self.model)]
        if self.draft is not None:
            arguments += ["--model-draft", str(self.draft)]
        if self.spec_type is not None:
            arguments += ["--spec-type", self.spec_type]
        if self.spec_draft_n_max is not None:
            arguments += ["--spec-draft-n-max", str(self.spec_draft_n_max)]
        if self.fit is not None:
            arguments += ["--fit", "on" if self.fit else "off"]
        arguments += ["--ctx-size", str(self.ctx_size), "--n-gpu-layers", self.gpu_layers]
        if self.flash_attn is not None:
            arguments += ["--flash-attn", self.flash_attn]
        arguments.append("--jinja" if self.jinja else "--no-jinja")
        if self.metrics:
            arguments.append("--metrics")
        arguments += ["--parallel", str(self.parallel)]
        if self.parallel > 1:
            # Each slot gets ctx_size / parallel tokens of its own, never a share of one pool that a long task
            # could take from the others (with an explicit --parallel this is llama-server's default too).
            arguments.append("--no-kv-unified")
        arguments.append("--cache-idle-slots" if self.cache_idle_slots else "--no-cache-idle-slots")
        if self.cache_ram_mib is not None:
            arguments += ["--cache-ram", str(self.cache_ram_mib)]
        if not self.repack:
            arguments.append("--no-repack")
        if self.slot_save_path is not None:
            arguments += ["--slot-save-path", str(self.slot_save_path)]
        if self.n_predict is not None:
            arguments += ["--n-predict", str(self.n_predict)]
        arguments += ["--temp", str(self.temperature), "--top-p", str(self.top_p), "--min-p", str(self.min_p)]
        arguments += ["--host", self.host, "--port", str(self.port)]
        return arguments + self.extra_args

    def command(self, binary: Path) -> list[str]:
        return [str(binary), *self.arguments()]


class PresetRequest(BaseModel):
    """What `server start` (or the embedded fallback) asks for; `build_preset` turns it into a ServerPreset."""

    preset: PresetName = "embedded"
    model: Path | None = None
    draft: Path | None = None
    ctx_size: int | None = Field(None, gt=0, description="per slot: one task's window")
    gpu_layers: str | None = None
    self_draft: bool = False
    parallel: int = Field(1, ge=1, description="slots, for `run --parallel N`: the context is N times --ctx")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    slot_save_path: Path | None = None  # None: the launcher's default_kv_cache_dir()
    extra_args: list[str] = []


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise PresetError(f"{what} not found: {path}")
    return path


def dspark_preset(request: PresetRequest) -> ServerPreset:
    if request.model is None or request.draft is None:
        raise PresetError(
            "preset dspark needs --model (the DeepSeek V4 Flash 0731 GGUF, first shard) "
            "and --draft (its DSpark drafter GGUF)"
        )
    return ServerPreset(
        name="dspark",
        model=_existing(request.model, "model"),
        draft=_existing(request.draft, "draft model"),
        ctx_size=(request.ctx_size or DSPARK_DEFAULT_CTX) * request.parallel,
        parallel=request.parallel,
        gpu_layers=request.gpu_layers or "all",
        spec_type="draft-dspark",
        spec_draft_n_max=DSPARK_DRAFT_N_MAX,
        fit=False,
        flash_attn="on",
        cache_ram_mib=0,
        slot_save_path=request.slot_save_path or default_kv_cache_dir(),
        host=request.host,
        port=request.port,
        extra_args=request.extra_args,
    )


def embedded_preset(request: PresetRequest) -> ServerPreset:
    if request.draft is not None:
        raise PresetError("preset embedded drafts only with its own model: use --self-draft instead of --draft")
    ctx_size = request.ctx_size or EMBEDDED_MAX_CTX
    if ctx_size > EMBEDDED_MAX_CTX:
        raise PresetError(f"preset embedded: --ctx {ctx_size} exceeds SmolLM2-135M's {EMBEDDED_MAX_CTX}-token window")
    model = _existing(request.model, "model") if request.model is not None else find_embedded_model()
    return ServerPreset(
        name="embedded",
        model=model,
        draft=model if request.self_draft else None,
        ctx_size=ctx_size * request.parallel,
        parallel=request.parallel,
        gpu_layers=request.gpu_layers or "0",
        spec_type="draft-simple" if request.self_draft else None,
        spec_draft_n_max=DSPARK_DRAFT_N_MAX if request.self_draft else None,
        # Repacked weights run AMX kernels that die with SIGILL on VMs advertising AMX without enabling it
        # (Firecracker); a 135M Q4_1 model gains nothing measurable from repacking.
        repack=False,
        slot_save_path=request.slot_save_path or default_kv_cache_dir(),
        n_predict=EMBEDDED_REPLY_TOKENS,
        host=request.host,
        port=request.port,
        extra_args=request.extra_args,
    )


def build_preset(request: PresetRequest) -> ServerPreset:
    return dspark_preset(request) if request.preset == "dspark" else embedded_preset(request)
