"""The tokens file (SEMIF_API_TOKENS_FILE) read and checked, and a presented token told to its caller: each
refusal with its message (naming the file and the line, never a token), and the same comparisons made
whichever token matches, or none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from semif_serve.config import TOKEN_RULE
from semif_serve.service import callers
from semif_serve.service.callers import MAX_CALLERS, Callers

ALICE = "a" * 31 + "-alice-token"
BOB = "B" * 32 + "~!bob"
CAROL = "c" * 32


def written(tmp_path: Path, text: str, mode: int = 0o600, name: str = "tokens") -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def refusal(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = written(tmp_path, text, mode)
    with pytest.raises(ValueError) as refused:
        callers.load(path)
    message = str(refused.value)
    assert message.startswith(f"SEMIF_API_TOKENS_FILE {path}")
    for token in (ALICE, BOB, CAROL):  # Rule 1: never a token in a message
        assert token not in message
    return message.removeprefix(f"SEMIF_API_TOKENS_FILE {path}")


def test_a_file_of_callers_with_comments_blank_lines_and_any_whitespace(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        f"# callers of the ranking replica\n\nalice {ALICE}\n  \t\nbob\t\t{BOB}  \n   # indented comment\n"
        f"svc.batch_2-x {CAROL}",
        0o640,  # group read is allowed
    )
    loaded = callers.load(path)
    assert loaded.names == ("alice", "bob", "svc.batch_2-x") and loaded.source == path
    assert ALICE not in repr(loaded) and "alice" in repr(loaded)


def test_each_of_several_tokens_is_its_callers_and_near_misses_are_no_one(tmp_path: Path) -> None:
    loaded = callers.load(written(tmp_path, f"alice {ALICE}\nbob {BOB}\ncarol {CAROL}\n"))
    assert [loaded.identify(t.encode()) for t in (ALICE, BOB, CAROL)] == ["alice", "bob", "carol"]
    for wrong in (
        "x" * 40,
        ALICE[:-1],  # a right prefix
        ALICE + "x",  # the right token and one character more
        "",
        BOB.lower(),
    ):
        assert loaded.identify(wrong.encode()) is None, wrong


def test_every_check_compares_every_slot_whichever_token_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No exit that depends on the match, nor on how many tokens there are: always MAX_CALLERS compares."""
    compared: list[int] = []
    real = callers.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(callers.hmac, "compare_digest", counting)
    few = Callers.of([("alice", ALICE)])
    many = Callers.of([("alice", ALICE), ("bob", BOB), ("carol", CAROL)])
    counts = []
    for table, token in ((few, ALICE), (few, "x" * 32), (many, ALICE), (many, CAROL), (many, "")):
        compared.clear()
        table.identify(token.encode())
        counts.append(len(compared))
    assert counts == [MAX_CALLERS] * 5


@pytest.mark.parametrize(
    "text,message",
    [
        (f"alice {ALICE} extra\n", " line 1: 3 field(s); each line is one `name token` pair"),
        (
            f"# x\nalice {ALICE}\nbob\n",
            " line 3: a name without a token; each line is one `name token` pair",
        ),
        (
            f"- {ALICE}\n",
            " line 1: a caller's name must match [A-Za-z0-9._-]{1,64} and not be '-' alone",
        ),
        (
            f"{'n' * 65} {ALICE}\n",
            " line 1: a caller's name must match [A-Za-z0-9._-]{1,64} and not be '-' alone",
        ),
        (
            f"al/ice {ALICE}\n",
            " line 1: a caller's name must match [A-Za-z0-9._-]{1,64} and not be '-' alone",
        ),
        (
            f"alice {ALICE}\nalice {BOB}\n",
            " line 2: caller 'alice' is named twice (first on line 1)",
        ),
        (f"alice {ALICE}\n\nbob {ALICE}\n", " line 3: caller 'bob' has the same token as line 1"),
        (
            "alice " + "s" * 31 + "\n",
            " line 1: caller 'alice''s token must be at least 32 characters of visible ASCII (33-126)",
        ),
        (
            "alice " + "é" * 40 + "\n",
            " line 1: caller 'alice''s token must be at least 32 characters of visible ASCII (33-126)",
        ),
        ("", " holds no caller (only blank lines and # comments)"),
        ("# only a comment\n\n  \n", " holds no caller (only blank lines and # comments)"),
        (
            "".join(f"c{k} {k:040d}\n" for k in range(MAX_CALLERS + 1)),
            f" holds more than {MAX_CALLERS} callers",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_line(tmp_path: Path, text: str, message: str) -> None:
    assert refusal(tmp_path, text) == message


def test_exactly_max_callers_are_accepted(tmp_path: Path) -> None:
    text = "".join(f"c{k} {k:040d}\n" for k in range(MAX_CALLERS))
    assert len(callers.load(written(tmp_path, text)).names) == MAX_CALLERS


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o666])
def test_a_file_other_users_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    assert refusal(tmp_path, f"alice {ALICE}\n", mode) == (
        f" is readable or writable by other users (mode {mode:04o}): chmod o-rw it (in Kubernetes, "
        "set the Secret volume's defaultMode: 0440)"
    )


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match=rf"^SEMIF_API_TOKENS_FILE {missing} is unreadable: "):
        callers.load(missing)
    with pytest.raises(ValueError, match="is unreadable: Is a directory"):
        callers.load(str(tmp_path))
    if os.geteuid() != 0:  # root reads a 0o000 file anyway
        with pytest.raises(ValueError, match="is unreadable: Permission denied"):
            callers.load(written(tmp_path, f"alice {ALICE}\n", 0o000))


def test_a_symlink_is_followed_and_its_target_judged(tmp_path: Path) -> None:
    """A Kubernetes Secret volume: ..data/tokens behind a link (the link itself is 0777)."""
    target = written(tmp_path, f"alice {ALICE}\n", 0o440, "real")
    link = tmp_path / "tokens"
    link.symlink_to(target)
    assert callers.load(str(link)).names == ("alice",)
    Path(target).chmod(0o644)
    with pytest.raises(ValueError, match="readable or writable by other users"):
        callers.load(str(link))


def test_bytes_that_are_not_utf_8_are_refused_naming_the_line_not_a_codec(tmp_path: Path) -> None:
    """A token file saved in another encoding (or binary) fails the token rule on its line, as any
    other bad token does, at startup and on reload alike, never with a decoding error."""
    path = tmp_path / "tokens"
    path.write_bytes(f"alice {ALICE}\nbob ".encode() + b"\xff" * 40 + b"\n")
    path.chmod(0o600)
    with pytest.raises(callers.TokensFileError) as refused:
        callers.load(str(path))
    assert str(refused.value) == (
        f"SEMIF_API_TOKENS_FILE {path} line 2: caller 'bob''s token must be {TOKEN_RULE}"
    )
