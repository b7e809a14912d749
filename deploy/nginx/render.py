"""Render deploy/nginx/nginx.conf.template for N local replicas.

Rules: this module only fills the template; every nginx choice, and why, is a
comment in the template itself. Stdlib only, so an operator runs it with any
Python: `python -m deploy.nginx.render --listen 127.0.0.1:8080 --replica
127.0.0.1:8001 --replica 127.0.0.1:8002 --run-dir /run/semif-nginx > nginx.conf`.

Theory: placeholders are `{{name}}` (nginx's own `$variables` stay untouched); an
unknown or unfilled placeholder is an error, never a silently broken config.
Each replica becomes a primary `server` line with passive failure detection and a
`backup` line that is never marked down (the template says why).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "nginx.conf.template"
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
# Passive failure detection on the primaries: one failure takes a replica out for 1 s.
MAX_FAILS = 1
FAIL_TIMEOUT_S = 1
DEFAULT_MAX_BODY_BYTES = 1 << 20  # SEMIF_MAX_BODY_BYTES' default


@dataclass(frozen=True)
class Edge:
    """What varies between deployments of the same template."""

    listen: str
    replicas: tuple[str, ...]
    run_dir: Path
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    workers: str = "auto"

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError("at least one replica is needed")
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError("each replica once")


def server_lines(replicas: tuple[str, ...]) -> str:
    """Primaries with passive failure detection, then the same replicas as never-down backups."""
    primaries = [
        f"        server {r} max_fails={MAX_FAILS} fail_timeout={FAIL_TIMEOUT_S}s;"
        for r in replicas
    ]
    backups = [f"        server {r} backup max_fails=0;" for r in replicas]
    return "\n".join(primaries + backups)


def render(edge: Edge, template: str | None = None) -> str:
    """The nginx.conf text for `edge`; KeyError on a placeholder this module does not fill."""
    values = {
        "listen": edge.listen,
        "servers": server_lines(edge.replicas),
        "run_dir": str(edge.run_dir),
        "max_body_bytes": str(edge.max_body_bytes),
        "workers": edge.workers,
        "tries": str(len(edge.replicas)),  # each replica at most once per request
    }
    text = TEMPLATE.read_text() if template is None else template
    return PLACEHOLDER.sub(lambda found: values[found.group(1)], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.nginx.render", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--listen", default="127.0.0.1:8080", help="address:port nginx listens on")
    parser.add_argument(
        "--replica", action="append", required=True, help="host:port of one replica (repeat)"
    )
    parser.add_argument(
        "--run-dir", type=Path, required=True, help="pid, logs and temp files (writable by nginx)"
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="= SEMIF_MAX_BODY_BYTES"
    )
    parser.add_argument("--workers", default="auto", help="worker_processes (default auto)")
    args = parser.parse_args(argv)
    edge = Edge(args.listen, tuple(args.replica), args.run_dir, args.max_body_bytes, args.workers)
    sys.stdout.write(render(edge))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
