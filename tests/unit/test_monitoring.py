"""The chart's alerts and dashboard (charts/scalebot/files/) against scalebot's metrics.

Covers: every alert names the case it is for; every expression parses as PromQL and reads only
metrics and labels that scalebot exposes (a fully fed `Metrics`; tests/e2e/test_slack_run.py checks
the same against a real run's /metrics); a query on a metric or label that does not exist is
reported; the chart renders both (PrometheusRule and the dashboard's ConfigMap).
"""

from __future__ import annotations

from prometheus_client.exposition import generate_latest

from localcluster.binaries import ensure_go_tool
from tests import monitoring
from tests.unit.bot.runtime import test_metrics


def fed() -> str:
    """The exposition of a `Metrics` in which every series has a sample."""
    return generate_latest(test_metrics.fed().registry).decode()


def test_every_alert_and_panel_query_reads_exposed_metrics_and_labels() -> None:
    assert len(monitoring.queries()) >= 20
    assert monitoring.problems(fed()) == []


def test_the_alerts_cover_the_cases_operators_asked_for() -> None:
    alerts = {
        q.where.removeprefix("alert "): q.expr for q in monitoring.queries() if q.where.startswith("alert ")
    }
    assert "scalebot_operations_total" in alerts["ScalebotOperationFailed"]
    assert "scalebot_operation_oldest_update_timestamp_seconds" in alerts["ScalebotOperationStuck"]
    assert "scalebot_wakes_short_total" in alerts["ScalebotWakeShortOfSize"]
    assert "scalebot_leader_lost_total" in alerts["ScalebotLeaseLost"]
    assert "scalebot_slack_api_errors_total" in alerts["ScalebotSlackErrors"]


def test_a_missing_metric_or_label_is_reported() -> None:
    exposition = fed()
    without_leader = "\n".join(line for line in exposition.splitlines() if "scalebot_leader_lost" not in line)
    assert monitoring.problems(without_leader + "\n") == [
        "alert ScalebotLeaseLost: scalebot_leader_lost_total is not exposed",
        "panel 'Leader' B: scalebot_leader_lost_total is not exposed",
    ]
    no_cluster = exposition.replace('cluster="prod",', "").replace('{cluster="prod"}', "")
    assert any("has no label cluster" in p for p in monitoring.problems(no_cluster))


def test_no_leader_fires_when_no_scalebot_runs_at_all() -> None:
    """Prometheus' own engine over three states: a leader (quiet), only standbys (fires), and no
    scalebot series at all, as when no pod runs or none is scraped (fires through absent())."""
    (expr,) = [q.expr for q in monitoring.queries() if q.where == "alert ScalebotNoLeader"]
    exposition = fed()
    assert "\nscalebot_leader 1.0\n" in exposition
    standby = exposition.replace("\nscalebot_leader 1.0\n", "\nscalebot_leader 0.0\n")
    gone = "\n".join(line for line in exposition.splitlines() if not line.startswith("scalebot_")) + "\n"
    engine = ensure_go_tool("promql")
    series = [
        monitoring.evaluate(engine, monitoring.load_text(text), [expr])[0].series
        for text in (exposition, standby, gone)
    ]
    assert series == [0, 1, 1]
