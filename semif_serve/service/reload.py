"""Reload without a restart (SIGHUP): the tokens file and SEMIF_CALIBRATION re-read, checked as at
startup, and swapped into the service whole.

Rule 1: all or nothing, per file. A file that fails any check startup runs changes nothing: the old
table keeps serving and the reason is logged, naming the file and the entry.
Rule 2: a swap is one attribute assignment on the event loop. A request reads the callers once (its
head) and the calibration once (its parse) and keeps what it read to its response, so no request
sees two tables, and a token valid when its request was admitted never fails it halfway.
Rule 3: the calibration is re-read by startup's own reader (decisions/calibration_file.py), checked
against the loaded model (the binding) and then against System One's defaults where the service
builds its policy from it (systemone/defaults.py); nothing here repeats a check.
"""

from __future__ import annotations

import logging

from ..decisions import calibration_file
from . import callers
from .head_policy import Service

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


def calibration(service: Service) -> str | None:
    """Re-read SEMIF_CALIBRATION into the service; the outcome, or None when it is not set."""
    path = service.settings.calibration_path
    if path is None:
        log.info("SIGHUP: SEMIF_CALIBRATION is not set; no calibration to reload")
        return None
    try:
        loaded = calibration_file.read(path)
        calibration_file.check_binding(
            loaded.table,
            service.settings.model,
            service.settings.revision,
            service.prompt_version,
            service.dtype,
        )
        current = service.calibrated(loaded.table, loaded.sha256)
    except calibration_file.Refused as error:
        log.error("SIGHUP: the calibration is unchanged: %s", error)
        return INVALID
    service.calibration = current
    log.info("SIGHUP: %s reloaded (sha256 %s)", path, loaded.sha256)
    return OK
