"""Reload without a restart (SIGHUP): the tokens file and SEMIF_CALIBRATION re-read, checked as at
startup, and swapped into the service whole.

Rule 1: all or nothing, per file. A file that fails any check startup runs changes nothing: the old
table keeps serving and the reason is logged, naming the file and the entry.
Rule 2: a swap is one attribute assignment on the event loop. A request reads the callers once (its
head) and the calibration once (its parse) and keeps what it read to its response, so no request
sees two tables, and a token valid when its request was admitted never fails it halfway.
Rule 3: the calibration is re-read through `config.load` on the process's own environment, so every
check across settings (the System One defaults against the table) is startup's own, then the
binding to the loaded model; nothing here repeats a check.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .. import config
from ..decisions import calibration_file
from . import callers
from .routes import Service, file_digest

log = logging.getLogger("semif_serve.reload")
OK, INVALID = "ok", "invalid"  # semif_reloads_total's outcomes


def tokens(service: Service) -> str | None:
    """Re-read SEMIF_API_TOKENS_FILE into the service; the outcome, or None when there is no file to re-read."""
    path = service.settings.api_tokens_file
    if path is None:
        log.warning("SIGHUP: the token is SEMIF_API_TOKEN, which is not reloadable; kept as it is")
        return None
    try:
        table = callers.load(path)
    except callers.TokensFileError as error:
        log.error("SIGHUP: the callers are unchanged: %s", error)
        return INVALID
    service.callers = table
    log.info(
        "SIGHUP: %s reloaded: %d callers (%s), %d tokens",
        path,
        len(table.names),
        ", ".join(table.names),
        table.tokens,
    )
    return OK


def calibration(service: Service, env: Mapping[str, str]) -> str | None:
    """Re-read SEMIF_CALIBRATION into the service; the outcome, or None when it is not set."""
    path = service.settings.calibration_path
    if path is None:
        log.info("SIGHUP: SEMIF_CALIBRATION is not set; no calibration to reload")
        return None
    try:
        before = file_digest(path)
        table = config.load(env).calibration
        calibration_file.check_binding(
            table,
            service.settings.model,
            service.settings.revision,
            service.prompt_version,
            service.dtype,
        )
        if file_digest(path) != before:
            raise ValueError(
                f"SEMIF_CALIBRATION: {path!r} changed while it was read; send SIGHUP again"
            )
    except (OSError, ValueError) as error:
        log.error("SIGHUP: the calibration is unchanged: %s", error)
        return INVALID
    service.calibration = service.calibrated(table, before)
    log.info("SIGHUP: %s reloaded (sha256 %s)", path, before)
    return OK
