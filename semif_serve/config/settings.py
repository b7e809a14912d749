"""The settings: each one's variable, parser, default (with its range, in the parser) and help
declared once, on its `Settings` field; `load` reads every field through that declaration.

Rules: a setting is a `Settings` field whose metadata is `env(...)`; nothing else names a setting's
variable or parses it, so `Settings(api_token=t)` and `load({"SEMIF_API_TOKEN": t})` agree on every
default by construction. A rule between two settings is a check in CHECKS, run on the built
`Settings`. Files a setting names (the tokens file, the calibration) are read by their own modules
when the server starts, not here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..decisions import methods
from . import parsers, semif_compat
from .parsers import TOKEN_RECIPE, TOKEN_RULE, Parser

DEFAULT_MODEL = "Qwen/Qwen3.5-4B"
DEFAULT_REVISION = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"
SCORERS = ("semif_phase1", "fastjev", "stub")
# How much of the pinned snapshot is proved before the weights load (engine/snapshot_verify.py).
VERIFY_MODES = ("hash", "presence")
LOG_FORMATS = ("text", "json")  # ops/logs.py formats each
CPU_DTYPES = ("float32", "bfloat16")
# The names /v1/systemone accepts in `model` by default: SemIf's server's own (its Jev aliases and its alias).
DEFAULT_ALIASES = ("jev-latest", "jev-preview", "jev-1.13.0", "semif-latest")
SETTING = "setting"  # the metadata key of a field's Env


@dataclass(frozen=True)
class Env:
    """How one setting is read: its variable, the parser that judges its text, what it is for
    (`secret`: never printed)."""

    variable: str
    parse: Parser
    help: str
    secret: bool = False


def env(variable: str, parse: Parser, help: str, *, secret: bool = False) -> dict[str, Env]:
    """A field's metadata: the one declaration of its setting."""
    return {SETTING: Env(variable, parse, help, secret)}


@dataclass(frozen=True)
class Settings:
    """The validated settings of one server process."""

    api_token: str = field(
        repr=False,
        metadata=env(
            "SEMIF_API_TOKEN",
            parsers.token,
            "the bearer token of the one caller `default`; empty with a tokens file",
            secret=True,
        ),
    )
    api_tokens_file: str | None = field(
        default=None,
        metadata=env(
            "SEMIF_API_TOKENS_FILE",
            parsers.path,
            "extension: named callers and their tokens, read (and on SIGHUP re-read) by "
            "service/callers.py, instead of SEMIF_API_TOKEN",
        ),
    )
    model: str = field(
        default=DEFAULT_MODEL,
        metadata=env("SEMIF_MODEL", parsers.nonempty, "the model served, from the hub cache"),
    )
    revision: str = field(
        default=DEFAULT_REVISION,
        metadata=env("SEMIF_REVISION", parsers.nonempty, "the model's pinned revision"),
    )
    device: str = field(
        default="cuda",
        metadata=env(
            "SEMIF_DEVICE", parsers.device, "cuda, cuda:N or cpu; never a fallback to the CPU"
        ),
    )
    cpu_dtype: str = field(
        default="float32",
        metadata=env(
            "SEMIF_CPU_DTYPE",
            parsers.choice(*CPU_DTYPES),
            "extension: the CPU's dtype, the operator's choice, never the host's (CUDA: bfloat16)",
        ),
    )
    vram_cap_gib: float | None = field(
        default=None,
        metadata=env(
            "SEMIF_VRAM_CAP_GIB",
            parsers.optional_positive_float,
            "the process's share of the card (empty: uncapped)",
        ),
    )
    max_tokens: int = field(
        default=4096,
        metadata=env("SEMIF_MAX_TOKENS", parsers.positive_int, "a prompt's length in tokens"),
    )
    max_decisions: int = field(
        default=64,
        metadata=env(
            "SEMIF_MAX_DECISIONS",
            parsers.positive_int,
            "rows per request after order expansion",
        ),
    )
    max_body_bytes: int = field(
        default=1 << 20,
        metadata=env("SEMIF_MAX_BODY_BYTES", parsers.positive_int, "a request body's bytes"),
    )
    max_queue: int = field(
        default=32,
        metadata=env(
            "SEMIF_MAX_QUEUE", parsers.positive_int, "POSTs in progress (queued + scoring)"
        ),
    )
    max_queue_per_caller: int | None = field(
        default=None,
        metadata=env(
            "SEMIF_MAX_QUEUE_PER_CALLER",
            parsers.positive_int,
            "extension: the POSTs in progress one caller may hold, 1..SEMIF_MAX_QUEUE "
            "(unset: SEMIF_MAX_QUEUE)",
        ),
    )
    max_wait_s: float | None = field(
        default=None,
        metadata=env(
            "SEMIF_MAX_WAIT_S",
            parsers.optional_positive_float,
            "extension: admission by a wait budget, checked once the body's rows are known "
            "(empty: off)",
        ),
    )
    calibration_path: str | None = field(
        default=None,
        metadata=env(
            "SEMIF_CALIBRATION",
            parsers.text,
            "the calibration file, read by decisions/calibration_file.py at startup and "
            "(extension) on SIGHUP",
        ),
    )
    verify_weights: str = field(
        default="hash",
        metadata=env(
            "SEMIF_VERIFY_WEIGHTS",
            parsers.choice(*VERIFY_MODES),
            "how much of the pinned snapshot is proved before the weights load",
        ),
    )
    scorer: str = field(
        default="semif_phase1",
        metadata=env("SEMIF_SCORER", parsers.choice(*SCORERS), "the scorer package, or the stub"),
    )
    stub_delay_ms: int = field(
        default=0,
        metadata=env("SEMIF_STUB_DELAY_MS", parsers.non_negative_int, "the stub's time per call"),
    )
    host: str = field(
        default="127.0.0.1",
        metadata=env("SEMIF_HOST", parsers.nonempty, "the address it listens on"),
    )
    port: int = field(
        default=8000, metadata=env("SEMIF_PORT", parsers.port, "the port it listens on")
    )
    metrics_port: int | None = field(
        default=None,
        metadata=env(
            "SEMIF_METRICS_PORT",
            parsers.port,
            "extension: a second listener that answers /metrics alone and stays open through a "
            "drain, so Prometheus watches a replica leave (unset: /metrics only on SEMIF_PORT)",
        ),
    )
    # Deadlines and connection limits: slow clients are cut off before they can pin a connection
    # or a file descriptor indefinitely.
    header_timeout: float = field(
        default=10.0,
        metadata=env(
            "SEMIF_HEADER_TIMEOUT_S", parsers.positive_float, "seconds for a request's head"
        ),
    )
    body_timeout: float = field(
        default=30.0,
        metadata=env("SEMIF_BODY_TIMEOUT_S", parsers.positive_float, "seconds for a body"),
    )
    idle_timeout: float = field(
        default=60.0,
        metadata=env(
            "SEMIF_IDLE_TIMEOUT_S", parsers.positive_float, "seconds a keep-alive may idle"
        ),
    )
    max_connections: int = field(
        default=512,
        metadata=env("SEMIF_MAX_CONNECTIONS", parsers.positive_int, "open connections"),
    )
    shutdown_grace: float = field(
        default=30.0,
        metadata=env(
            "SEMIF_SHUTDOWN_GRACE_S",
            parsers.positive_float,
            "seconds in-flight work gets on SIGTERM",
        ),
    )
    log_format: str = field(
        default="text",
        metadata=env("SEMIF_LOG_FORMAT", parsers.choice(*LOG_FORMATS), "text or JSON lines"),
    )
    access_log: bool = field(
        default=True,
        metadata=env("SEMIF_ACCESS_LOG", parsers.switch, "one line per request: on or off"),
    )
    metrics: bool = field(
        default_factory=parsers.auto_metrics,
        metadata=env(
            "SEMIF_METRICS",
            parsers.metrics,
            "GET /metrics: auto (on when prometheus_client is installed), on, off",
        ),
    )
    log_flush_s: float = field(
        default=0.5,
        metadata=env(
            "SEMIF_LOG_FLUSH_S",
            parsers.log_flush,
            "extension: seconds an access line may wait in the buffer (0: written at once)",
        ),
    )
    event_loop: str = field(
        default_factory=parsers.auto_event_loop,
        metadata=env(
            "SEMIF_EVENT_LOOP",
            parsers.event_loop,
            "extension: auto (uvloop when installed), asyncio, uvloop",
        ),
    )
    model_aliases: tuple[str, ...] = field(
        default=DEFAULT_ALIASES,
        metadata=env(
            "SEMIF_MODEL_ALIASES",
            parsers.aliases,
            "extension: the names /v1/systemone's `model` may carry besides the served id "
            "(empty: none)",
        ),
    )
    systemone_orderings: str = field(
        default="none",
        metadata=env(
            "SEMIF_SYSTEMONE_ORDERINGS",
            parsers.choice(*methods.ORDERINGS),
            "extension: the averaging a System One caller gets without asking",
        ),
    )
    systemone_workload: str | None = field(
        default=None,
        metadata=env(
            "SEMIF_SYSTEMONE_WORKLOAD",
            parsers.optional_text,
            "extension: the calibration workload a System One caller gets without asking "
            "(empty: none)",
        ),
    )
    # Extension: audits, a sampled share of the decisions served with the prior scored under their other
    # rotations on idle capacity (service/audits.py): a label-free check of the prior against traffic.
    audit_rate: float = field(
        default=0.0,
        metadata=env(
            "SEMIF_AUDIT_RATE",
            parsers.fraction,
            "extension: the share of decisions served from one row with the prior (prior, or adaptive "
            "not escalated) audited under their other rotations when the engine is idle, 0..1 (0: off)",
        ),
    )
    audit_max_pending: int = field(
        default=64,
        metadata=env(
            "SEMIF_AUDIT_MAX_PENDING",
            parsers.positive_int,
            "extension: audits waiting for idle capacity; beyond it the oldest is dropped",
        ),
    )
    audit_max_pending_bytes: int = field(
        default=8 << 20,
        metadata=env(
            "SEMIF_AUDIT_MAX_PENDING_BYTES",
            parsers.positive_int,
            "extension: the bytes of the rows those audits hold in memory; beyond it the oldest "
            "is dropped",
        ),
    )
    audit_max_options: int = field(
        default=8,
        metadata=env(
            "SEMIF_AUDIT_MAX_OPTIONS",
            parsers.positive_int,
            "extension: a decision over more options is not audited (its n-1 rows cost too much)",
        ),
    )
    pid_file: str | None = field(
        default=None,
        metadata=env(
            "SEMIF_PID_FILE",
            parsers.path,
            "extension: where the ready server writes its pid, as nginx's pid file (ops/pid_file.py)",
        ),
    )

    def __post_init__(self) -> None:
        if self.max_queue_per_caller is None:
            object.__setattr__(self, "max_queue_per_caller", self.max_queue)


def declared() -> dict[str, Env]:
    """Every setting's field name and its declaration, in field order."""
    return {item.name: item.metadata[SETTING] for item in fields(Settings)}


def variables() -> set[str]:
    """Every variable the server reads: each setting's, and SemIf's names that are read or refused."""
    return {
        *(setting.variable for setting in declared().values()),
        *semif_compat.SEMIF_NAMES.values(),
        *semif_compat.SEMIF_ONLY,
    }


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting; raise ValueError naming the first bad one."""
    environ = os.environ if environ is None else environ
    semif_compat.refuse_semif_only(environ)
    values: dict[str, Any] = {}
    for name, setting in declared().items():
        variable = semif_compat.named(environ, setting.variable)
        raw = environ.get(variable)
        if raw is not None:
            values[name] = setting.parse(variable, raw)
    given = frozenset(values)
    settings = Settings(**values, **_bearer(environ, given))
    for check in CHECKS:
        check(settings, given)
    return settings


def _bearer(environ: Mapping[str, str], given: frozenset[str]) -> dict[str, Any]:
    """Exactly one bearer form: SEMIF_API_TOKEN (or SEMIF_API_KEY), the one caller `default`, or
    SEMIF_API_TOKENS_FILE, named callers (its file is read and checked by the server before the
    model loads: service/callers.py)."""
    name = semif_compat.named(environ, "SEMIF_API_TOKEN")
    if "api_token" in given and "api_tokens_file" in given:
        raise ValueError(
            f"{name} and SEMIF_API_TOKENS_FILE are both set; set one (the file's callers replace the one token)"
        )
    if "api_tokens_file" in given:
        return {"api_token": ""}
    if "api_token" not in given:
        raise ValueError(
            f"SEMIF_API_TOKEN is required: {TOKEN_RULE} ({TOKEN_RECIPE}), "
            "or SEMIF_API_TOKENS_FILE for named callers"
        )
    return {}


# A rule between settings: the built settings, and the fields whose variable was set.
Check = Callable[[Settings, frozenset[str]], None]


def _share_within_queue(settings: Settings, given: frozenset[str]) -> None:
    """SEMIF_MAX_QUEUE_PER_CALLER is at most SEMIF_MAX_QUEUE (its default): a larger share never applies."""
    share = settings.max_queue_per_caller
    if share is not None and share > settings.max_queue:
        raise ValueError(
            f"SEMIF_MAX_QUEUE_PER_CALLER must be at most SEMIF_MAX_QUEUE ({settings.max_queue}), "
            f"got {share}: a larger share never applies"
        )


def _cpu_dtype_on_the_cpu(settings: Settings, given: frozenset[str]) -> None:
    """SEMIF_CPU_DTYPE only with SEMIF_DEVICE=cpu: on CUDA it would be ignored, and an ignored
    setting is refused. Which dtype is faster depends on the CPU, so the host never picks."""
    if "cpu_dtype" in given and settings.device != "cpu":
        raise ValueError("SEMIF_CPU_DTYPE needs SEMIF_DEVICE=cpu (CUDA serves bfloat16)")


def _metrics_port_of_its_own(settings: Settings, given: frozenset[str]) -> None:
    """SEMIF_METRICS_PORT never SEMIF_PORT's, and only with metrics on: a listener that could
    answer nothing but 404 would hide the mistake."""
    if settings.metrics_port is None:
        return
    if settings.metrics_port == settings.port:
        raise ValueError(f"SEMIF_METRICS_PORT must differ from SEMIF_PORT ({settings.port})")
    if not settings.metrics:
        raise ValueError(
            "SEMIF_METRICS_PORT needs metrics on (SEMIF_METRICS is off or prometheus_client "
            "is not installed: pip install 'semif-serve[metrics]')"
        )


def _prior_needs_a_workload(settings: Settings, given: frozenset[str]) -> None:
    """A default method that needs priors needs a default workload (whether the calibration file
    holds them is checked where the file is read: systemone/defaults.py)."""
    orderings = settings.systemone_orderings
    if settings.systemone_workload is None and methods.BY_NAME[orderings].needs_prior:
        raise ValueError(
            f"SEMIF_SYSTEMONE_ORDERINGS={orderings} needs SEMIF_SYSTEMONE_WORKLOAD naming a workload "
            "with priors in SEMIF_CALIBRATION"
        )


CHECKS: tuple[Check, ...] = (
    _share_within_queue,
    _cpu_dtype_on_the_cpu,
    _metrics_port_of_its_own,
    _prior_needs_a_workload,
)
