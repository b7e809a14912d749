"""deploy/grafana/semif-serve.json: one row per question an operator asks, every panel on
the Prometheus datasource variable and filtered by the job/instance variables.

Offline and structural; that each expression parses and returns data against a live
server is tests/deploy/test_prometheus_live.py's, and that each name it reads is exposed
is tests/deploy/test_prometheus_rules.py's.
"""

from __future__ import annotations

from collections import defaultdict

from tests import promql

QUESTIONS = [
    "Is it up and serving?",
    "Are callers being refused?",
    "How long do decisions take?",
    "Is the card's memory safe?",
    "What is it serving?",
    "Is the prior still right?",
]


def by_row() -> dict[str, list[dict]]:
    """Panels under the row above them, in the order Grafana shows them."""
    rows: dict[str, list[dict]] = defaultdict(list)
    current = None
    for panel in promql.dashboard()["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            rows[current].extend(panel.get("panels", []))  # a collapsed row holds its own
        else:
            assert current is not None, f"{panel['title']} sits above every row"
            rows[current].append(panel)
    return rows


def test_one_row_per_question_each_with_panels() -> None:
    rows = by_row()
    assert list(rows) == QUESTIONS
    assert all(rows[question] for question in QUESTIONS)


def test_the_variables_are_a_prometheus_datasource_a_job_and_its_instances() -> None:
    variables = {v["name"]: v for v in promql.dashboard()["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource"
        and variables["datasource"]["query"] == "prometheus"
    )
    for name in ("job", "instance"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    assert "$job" in variables["instance"]["query"]["query"]
    assert variables["instance"]["multi"] and variables["instance"]["includeAll"]


def test_every_panel_queries_the_datasource_variable_filtered_by_job_and_instance() -> None:
    for panel in promql.panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            expr = target["expr"]
            assert 'job="$job"' in expr, (panel["title"], expr)
            # the budget is one number per job; every other series is per replica
            assert 'instance=~"$instance"' in expr or promql.metric_names(expr) <= {
                "job:semif_scorer_call_duration_seconds:p99_budget"
            }, (panel["title"], expr)


def test_what_is_it_serving_reads_build_info() -> None:
    (serving,) = by_row()["What is it serving?"]
    assert {"semif_build_info"} == set().union(
        *(promql.metric_names(t["expr"]) for t in serving["targets"])
    )


def test_panel_ids_are_unique_and_panels_do_not_overlap() -> None:
    panels = promql.dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine
