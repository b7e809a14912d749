"""SemIf's own System One server's settings, as an operator coming from it writes them.

*Extension:* an operator coming from SemIf's server (`src/semif_api/runtime.py` in SemIf) keeps
its environment. Where SemIf's name means what ours means it is read as ours (SEMIF_NAMES; both
names set to different values is refused); where it does not, the value is refused naming our
setting (SEMIF_ONLY), never silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import excerpt

# Our setting -> SemIf's name for the same thing; either is read (a value set under both must agree).
SEMIF_NAMES = {"SEMIF_API_TOKEN": "SEMIF_API_KEY", "SEMIF_MAX_TOKENS": "SEMIF_MAX_INPUT_TOKENS"}
# SemIf's settings that mean something we do not do -> (the one value that is what we do, or None; what to set here).
SEMIF_ONLY: dict[str, tuple[str | None, str]] = {
    "SEMIF_BACKEND": (
        "torch",
        "SEMIF_SCORER picks the torch scorer package; other backends are not served",
    ),
    "SEMIF_MODE": (
        "auto",
        "routing is always auto: one question direct, several shared (no serial fallback)",
    ),
    "SEMIF_DTYPE": (
        None,
        "CUDA serves bfloat16; on the CPU set SEMIF_CPU_DTYPE (float32, the default, or bfloat16)",
    ),
    "SEMIF_ACCEPT_JEV_ALIASES": (
        None,
        "SEMIF_MODEL_ALIASES lists the names accepted (empty: none)",
    ),
    "SEMIF_TEMPERATURE": (
        None,
        "SEMIF_CALIBRATION holds temperatures per workload, SEMIF_SYSTEMONE_WORKLOAD picks one",
    ),
    "SEMIF_PROMPT_VERSION": (
        None,
        "the scorer package (SEMIF_SCORER) fixes the prompt version; /healthz reports it",
    ),
    **{
        name: (None, "SEMIF_SCORER: only the torch scorers are served")
        for name in (
            "SEMIF_GGUF",
            "SEMIF_LLAMA_THREADS",
            "SEMIF_MLX_BITS",
            "SEMIF_MLX_CACHE_LIMIT_MIB",
        )
    },
}


def named(env: Mapping[str, str], ours: str) -> str:
    """The name a setting is read under: ours, or SemIf's when only that is set (so a refusal names
    what the operator wrote). Both set to different values is refused: which one was meant is unknowable."""
    theirs = SEMIF_NAMES.get(ours)
    if theirs is None or theirs not in env:
        return ours
    if ours in env and env[ours] != env[theirs]:
        raise ValueError(
            f"{ours} and {theirs} (SemIf's name for it) are set to different values; set one"
        )
    return theirs


def refuse_semif_only(env: Mapping[str, str]) -> None:
    """Refuse a SemIf setting that would otherwise be ignored, naming what to set here."""
    for name, (same, instead) in SEMIF_ONLY.items():
        value = env.get(name)
        if value is not None and value != same:
            raise ValueError(
                f"{name}={excerpt(value, 40)!r} is SemIf's setting and is not read here: {instead}"
            )
