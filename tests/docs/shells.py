"""The shells the docs test runs blocks in: a server's shell (shell 1) and a caller's (shell 2, ...).

Rule 1: a block runs as written, but for the rewrites `Rewrites` lists (the server's
port for 8000, root-owned paths into a temporary directory) and its install commands,
which `Installs` records instead of running (pip would need the network; the venv
already holds what CI installs): every extra or pin they name must exist, and what a
Python block or `python -m` imports must come from something an install line before it
installed. Nothing else is added: a shell starts without the token and without the venv
on PATH, so a doc that forgets to export one fails.
Rule 2: this module knows nothing of markdown; blocks.py parses, the test decides.

Theory: shell 1's blocks each start a server in a fresh bash in the background (as a
reader's first shell does) and return once it logs `listening`; the next shell-1 block
stops it with SIGINT, as Ctrl-C would, unless it is the same command (a reader would
keep it). Other shells are one persistent `bash` each, fed one block at a time with
`source`, under `set -eo pipefail`, so what one block exports the next one sees.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.common.procs import free_port
from tests.hermetic import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
LISTENING = "semif-serve listening on"
BLOCK_TIMEOUT_S = 300.0  # SmolLM2 on two loaded cores: seconds per call, a minute to start
INSTALL = re.compile(r"(?:\.venv/bin/)?pip install(?P<args>[^&;|\n]*)|python3 -m venv \.venv")
# Packages of this repository and the extra each needs beyond the install itself.
OWN_EXTRAS = {"semif_serve.client": "client", "bench": "bench"}
OWN_PACKAGES = {"semif_serve", "bench", "deploy"}


class DocsError(AssertionError):
    """A block did not do what its doc says."""


class NotInstalledHere(Exception):
    """An install line names an extra this venv lacks (CI installs every extra the docs use)."""


# -- installs: recorded, checked, never run ---------------------------------------------------------


@dataclass
class Installs:
    """What the install lines run so far installed: the project's extras and pinned wheels."""

    extras: set[str] = field(default_factory=set)
    project: bool = False
    pins: set[str] = field(default_factory=set)

    def record(self, command: str, where: str) -> None:
        """One `pip install …` or `python3 -m venv .venv`; DocsError for an extra or pin that does not exist."""
        if command.startswith("python3 -m venv"):
            if not (VENV_BIN / "python").exists():
                raise DocsError(
                    f"{where}: the docs use the checkout's .venv, and {VENV_BIN} has no python"
                )
            return
        for argument in shlex.split(command.split("pip install", 1)[1]):
            if argument.startswith("-"):
                continue
            if argument.startswith(".["):
                named = set(argument[2:-1].split(","))
                unknown = named - set(
                    metadata.metadata("semif-serve").get_all("Provides-Extra") or []
                )
                if unknown:
                    raise DocsError(f"{where}: pyproject.toml has no extra {sorted(unknown)}")
                self.extras |= named
                self.project = True
                for extra in sorted(named):
                    self._check_extra(extra, where)
            elif argument == ".":
                self.project = True
            else:
                requirement = Requirement(argument)
                try:
                    version = metadata.version(requirement.name)
                except metadata.PackageNotFoundError:
                    raise DocsError(
                        f"{where}: installs {argument}, which this venv does not have"
                    ) from None
                if version not in requirement.specifier:
                    raise DocsError(f"{where}: installs {argument}, but this venv has {version}")
                self.pins.add(canonicalize_name(requirement.name))

    @staticmethod
    def _check_extra(extra: str, where: str) -> None:
        """NotInstalledHere unless every requirement of the extra is in this venv."""
        for line in metadata.requires("semif-serve") or []:
            requirement = Requirement(line)
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                try:
                    metadata.version(requirement.name)
                except metadata.PackageNotFoundError:
                    raise NotInstalledHere(
                        f"{where}: this venv lacks the {extra!r} extra ({requirement.name}): "
                        f".venv/bin/pip install -e '.[{extra}]'"
                    ) from None

    def closure(self) -> set[str]:
        """Every distribution those installs bring, following requirements (and their extras)."""
        roots: list[tuple[str, frozenset[str]]] = [(name, frozenset()) for name in self.pins]
        if self.project:
            roots.append(("semif-serve", frozenset(self.extras)))
        seen: set[tuple[str, frozenset[str]]] = set()
        while roots:
            name, extras = roots.pop()
            if (canonicalize_name(name), extras) in seen:
                continue
            seen.add((canonicalize_name(name), extras))
            try:
                requires = metadata.requires(name) or []
            except metadata.PackageNotFoundError:
                continue
            for requirement in map(Requirement, requires):
                wanted = requirement.marker is None or any(
                    requirement.marker.evaluate({"extra": extra}) for extra in extras | {""}
                )
                if wanted:
                    roots.append((requirement.name, frozenset(requirement.extras)))
        return {name for name, _ in seen}

    def check_import(self, module: str, where: str) -> None:
        """DocsError unless an install line before `where` installed what `module` needs."""
        top = module.split(".")[0]
        if top in sys.stdlib_module_names:
            return
        have = self.closure()
        if top in OWN_PACKAGES:
            if not self.project:
                raise DocsError(
                    f"{where}: uses {module}, but no install line before it installs the project"
                )
            for imported in _third_party_imports(module):
                self.check_import(imported, where)
            for prefix, extra in OWN_EXTRAS.items():
                if module == prefix or module.startswith(prefix + "."):
                    needed = {
                        canonicalize_name(Requirement(line).name)
                        for line in metadata.requires("semif-serve") or []
                        if Requirement(line).marker is not None
                        and Requirement(line).marker.evaluate({"extra": extra})
                    }
                    if not needed <= have:
                        raise DocsError(
                            f"{where}: uses {module}, which needs the {extra!r} extra "
                            f"({', '.join(sorted(needed - have))} not installed by the lines before it)"
                        )
            return
        providers = {
            canonicalize_name(name) for name in metadata.packages_distributions().get(top, [])
        }
        if not providers & have:
            raise DocsError(
                f"{where}: imports {top}, which no install line before it installs ({sorted(providers)})"
            )


def _third_party_imports(module: str) -> list[str]:
    """What the module's own file imports at its top level from outside this repository (one level
    deep: a package's `__main__` too, as `python -m` runs it; lazily imported modules are the
    OWN_EXTRAS' job)."""
    files = []
    for name in (module, f"{module}.__main__"):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            continue
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            files.append(Path(spec.origin))
    imported = []
    for path in files:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                imported += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.append(node.module)
    return [name for name in imported if name.split(".")[0] not in OWN_PACKAGES | {"__future__"}]


def modules_used(block_text: str, language: str) -> list[str]:
    """What a block imports (Python) or runs with `python -m` / `semif-serve ask` (bash)."""
    if language == "python":
        used: list[str] = []
        for node in ast.walk(ast.parse(block_text)):
            if isinstance(node, ast.Import):
                used += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                used.append(node.module)
        return used
    return re.findall(r"python3? -m ([\w.]+)", block_text) + (
        ["semif_serve.client"] if "semif-serve ask" in block_text else []
    )


# -- rewrites: what a block needs to run here, and only that ---------------------------------------


@dataclass
class Rewrites:
    """The reader's port 8000 becomes the test server's; root-owned paths move under `tmp`."""

    tmp: Path
    port: int = 0

    def apply(self, text: str) -> str:
        text = re.sub(r"\b(?:localhost|127\.0\.0\.1):8000\b", f"127.0.0.1:{self.port}", text)
        for path in ("/etc/nginx", "/var/lib/semif-nginx"):
            text = text.replace(path, str(self.tmp / path.lstrip("/")))
        return text


def without_installs(text: str, installs: Installs, where: str) -> str:
    """The block with each install command recorded and replaced by `:` (a no-op)."""

    def record(found: re.Match[str]) -> str:
        installs.record(found.group(0).removeprefix(".venv/bin/").strip(), where)
        return ":"

    return INSTALL.sub(record, text)


def environment(home: Path, extra_path: list[str]) -> dict[str, str]:
    """A new terminal's environment: no settings (tests/hermetic.py's, which the suite may have set
    since), no venv on PATH, HOME under tmp."""
    drop = (str(VENV_BIN), os.path.dirname(sys.executable))
    path = [
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and entry not in drop
    ]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith((*SETTINGS, "VIRTUAL_ENV", "PYTHON", "PYTEST"))
    }
    from semif_serve.builders import (
        smollm2,  # where the suite's SmolLM2 build lives, under the real HOME
    )

    # One torch thread per process: the server and the suite share two cores (tests/conftest.py does the same).
    env.update(
        PATH=os.pathsep.join([*path, *extra_path]),
        HOME=str(home),
        SEMIF_SMOLLM2_HOME=str(smollm2.default_out()),
        OMP_NUM_THREADS="1",
    )
    return env


# -- the shells -----------------------------------------------------------------------------------


class Server:
    """Shell 1: one block, in the background, until its server logs that it listens."""

    def __init__(self, key: str, text: str, env: dict[str, str], where: str) -> None:
        self.key, self.where, self.lines = key, where, []
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", text],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        ready = threading.Event()
        threading.Thread(target=self._read, args=(ready,), daemon=True).start()
        if not ready.wait(BLOCK_TIMEOUT_S) or self.proc.poll() is not None:
            self.stop()
            raise DocsError(
                f"{where}: the server never logged {LISTENING!r}:\n{''.join(self.lines[-30:])}"
            )

    def _read(self, ready: threading.Event) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if LISTENING in line:
                ready.set()
        ready.set()  # it exited: the waiter sees poll() is not None

    def stop(self) -> None:
        """SIGINT to its process group (Ctrl-C), then SIGKILL if it has not drained in 45 s."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(45)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Shell:
    """A caller's shell: one bash for the whole doc, each block sourced, its stdout kept."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self.work, self.count = work, 0
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._send("set -eo pipefail\n")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def run(self, text: str, language: str, where: str) -> str:
        """The block's stdout; DocsError with its stderr when it fails (or the shell exits)."""
        self.count += 1
        script, out, err, status = (
            self.work / f"block{self.count}.{name}" for name in ("sh", "out", "err", "status")
        )
        if language == "python":
            text = f"python - <<'DOCS_TEST_PYTHON'\n{text}DOCS_TEST_PYTHON\n"
        script.write_text(text)
        self._send(
            f"source {shlex.quote(str(script))} >{shlex.quote(str(out))} 2>{shlex.quote(str(err))}; "
            f"echo $? >{shlex.quote(str(status))}\n"
        )
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while not (status.exists() and status.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                failed = (
                    "exited" if self.proc.returncode not in (None, -signal.SIGKILL) else "timed out"
                )
                raise DocsError(
                    f"{where}: the block failed (its shell {failed}):\n"
                    f"{err.read_text() if err.exists() else ''}{out.read_text() if out.exists() else ''}"
                )
            time.sleep(0.05)
        if status.read_text().strip() != "0":
            raise DocsError(
                f"{where}: the block exited {status.read_text().strip()}:\n{err.read_text()}"
            )
        return out.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@dataclass
class Servers:
    """Shell 1's current server, kept across docs while the next one asks for the same command."""

    current: Server | None = None
    port: int = field(default_factory=free_port)

    def start(
        self, block: str, text: str, env: dict[str, str], rewrites: Rewrites, where: str
    ) -> None:
        """Serve `text` (the block `block` as prepared), unless that very block already serves."""
        if (
            self.current is not None
            and self.current.key == block
            and self.current.proc.poll() is None
        ):
            rewrites.port = self.port
            return
        self.stop()
        self.port = free_port()
        self.current = Server(block, text, {**env, "SEMIF_PORT": str(self.port)}, where)
        rewrites.port = self.port

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None
