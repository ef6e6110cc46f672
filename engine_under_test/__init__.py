"""engine_under_test: an async block-speculation engine for looped (Ouro-style) models.

p is the target law (full depth R), q the draft law (depth d < R), K the drafts per
round. Public API (docs/contracts.md, section 2)::

    from engine_under_test import LLM, SamplingParams, SpeculativeConfig, ModelConfig
"""

from .config import DEFAULT_PROMPT, PRESET_NAMES, InitConfig, ModelConfig, SpeculativeConfig
from .llm import LLM
from .params import SamplingParams
from .runners.outputs import (
    FailedRound,
    GenerateOutputs,
    GenerateReport,
    RequestError,
    RequestOutput,
    RoundStat,
    RoundTrace,
    draw_streams,
)

__all__ = [
    "DEFAULT_PROMPT",
    "FailedRound",
    "GenerateOutputs",
    "GenerateReport",
    "LLM",
    "PRESET_NAMES",
    "RequestError",
    "InitConfig",
    "ModelConfig",
    "RequestOutput",
    "RoundStat",
    "RoundTrace",
    "SamplingParams",
    "SpeculativeConfig",
    "draw_streams",
]
