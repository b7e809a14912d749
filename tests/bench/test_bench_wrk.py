"""bench/load/wrk.py's parsing of wrk's report and the marked RESULTS.md sections (no wrk needed)."""

from __future__ import annotations

from bench.common.report import section, splice
from bench.load.wrk import parse, script

WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:4000/decide
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    11.50ms    3.10ms  40.00ms   80.00%
    Req/Sec   721.00     50.00   800.00     70.00%
  Latency Distribution
     50%  850.00us
     75%   12.00ms
     90%   15.00ms
     99%    1.20s
  1442 requests in 2.00s, 1.00MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 5
Requests/sec:    721.00
Transfer/sec:    512.00KB
"""


def test_parse_reads_rate_percentiles_in_their_units_and_failures() -> None:
    assert parse(WRK_OUTPUT) == {
        "rps": 721.0,
        "p50_ms": 0.85,
        "p99_ms": 1200.0,
        "non_2xx": 5,
        "socket_errors": 3,
        "requests": 1442,
    }


def test_a_post_script_carries_the_body_verbatim_and_the_token() -> None:
    text = script("POST", {"id": 'a"b', "s": "x\\y"}, "tok")
    assert 'wrk.body = [==[{"id": "a\\"b", "s": "x\\\\y"}]==]' in text and '"Bearer tok"' in text
    assert script("GET", None, "tok") == 'wrk.method = "GET"\n'


def test_splice_replaces_a_marked_section_and_keeps_the_rest() -> None:
    first = splice("# Results\n\nbody\n", "wrk", "old figures")
    assert section(first, "wrk") == "old figures" and first.startswith("# Results\n\nbody\n")
    second = splice(first + "after\n", "wrk", "new figures")
    assert (
        section(second, "wrk") == "new figures"
        and "old figures" not in second
        and second.endswith("after\n")
    )
    assert section("no marks", "wrk") is None
