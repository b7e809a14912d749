"""deploy/container/probe.py: the container check's assertions go red on what they guard.

The check itself runs in .ci/run (deploy/container/check.sh), not here; these prove that
each assertion it relies on can fail: parity on one differing logit or prompt hash, the
log check on a text line or a leaked token, the confinement check on a writable path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deploy.container import probe

TOKEN = "k" * 40
ANSWER = {
    "option_ids": ["yes", "no"],
    "option_logits": [1.25, -0.5],
    "prompt_sha256": "ab" * 32,
    "timing": {"ms": 3},
}


def write(path: Path, answer: dict[str, object]) -> Path:
    path.write_text(json.dumps(answer))
    return path


def test_parity_holds_on_equal_answers_whatever_their_timing(tmp_path: Path) -> None:
    other = {**ANSWER, "timing": {"ms": 9}}
    probe.same(write(tmp_path / "a", ANSWER), write(tmp_path / "b", other))


@pytest.mark.parametrize(
    "field, value",
    [
        ("option_logits", [1.25, -0.5000001]),
        ("prompt_sha256", "cd" * 32),
        ("option_ids", ["no", "yes"]),
        ("option_logits", None),
    ],
)
def test_parity_fails_on_any_difference(tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(probe.Failed, match=field):
        probe.same(write(tmp_path / "a", {**ANSWER, field: value}), write(tmp_path / "b", ANSWER))


@pytest.fixture()
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SEMIF_API_TOKEN", TOKEN)
    return TOKEN


def test_json_log_lines_pass(tmp_path: Path, token: str) -> None:
    log = tmp_path / "log"
    log.write_text('{"level": "info", "msg": "listening"}\n\n{"level": "info", "msg": "stopped"}\n')
    probe.logs(log)


@pytest.mark.parametrize(
    "line, why",
    [
        ("listening on 0.0.0.0:8000", "not JSON"),
        ('["a list"]', "not an object"),
        (f'{{"msg": "Bearer {TOKEN}"}}', "token"),
        ("", "no log lines"),
    ],
)
def test_a_text_line_or_a_token_in_the_log_fails(
    tmp_path: Path, token: str, line: str, why: str
) -> None:
    log = tmp_path / "log"
    log.write_text(('{"msg": "ok"}\n' if why != "no log lines" else "") + line + "\n")
    with pytest.raises(probe.Failed, match=why):
        probe.logs(log)


def test_confinement_fails_on_a_writable_path_or_another_uid(tmp_path: Path) -> None:
    """On the host the test's own directory is writable: the check must say so."""
    writable = tmp_path / "rw"
    writable.mkdir()
    pid1_uid = int(
        next(
            line
            for line in Path("/proc/1/status").read_text().splitlines()
            if line.startswith("Uid:")
        ).split()[1]
    )
    with pytest.raises(probe.Failed, match="is writable"):
        probe.confined(pid1_uid, [writable], writable)
    with pytest.raises(probe.Failed, match="not"):
        probe.confined(pid1_uid + 1, [], writable)
    assert not list(writable.iterdir()), os.listdir(writable)
