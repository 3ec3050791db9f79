"""The audit heads kept outside the database: each committed audit row's head becomes a Kubernetes
Event on scalebot's Lease, written as scalebot's ServiceAccount (`bot.runtime.run.publish_audit_heads`,
wired by `scalebot run`), where someone with write access to the database cannot reach it; a
rolled-back row publishes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.runtime.run import AUDIT_HEAD_REASON, publish_audit_heads
from engine.kube import events
from engine.store.database import Store
from engine.store.readonly import verify_audit_file
from localcluster import rest

pytestmark = pytest.mark.e2e

AT = datetime(2026, 3, 2, 16, 0, tzinfo=UTC)


@pytest.fixture
def recorder(scalebot_api: Any) -> Iterator[events.EventRecorder]:
    rec = events.EventRecorder(scalebot_api, instance="scalebot-test-pod")
    yield rec
    rec.close()


def test_each_committed_audit_head_is_an_event_on_scalebots_lease(
    recorder: events.EventRecorder, admin_api: Any, namespace: str, tmp_path: Path
) -> None:
    db = tmp_path / "scalebot.db"
    store = Store(db, audit_key=None)
    heads: list[tuple[int, str]] = []
    try:
        publish_audit_heads(store, recorder, namespace)
        store.on_audit_head(lambda row, head: heads.append((row, head)))
        store.audit(at=AT, actor=f"U0{namespace}", action="request", cluster="prod")
        with pytest.raises(RuntimeError), store.transaction():
            store.audit(at=AT, actor=f"U0{namespace}", action="approve", cluster="prod")
            raise RuntimeError("the rest of the decision failed")
        store.audit(at=AT, actor=f"U0{namespace}", action="approve", cluster="prod")
    finally:
        store.close()
    assert recorder.flush(10)

    selector = "involvedObject.kind=Lease,involvedObject.name=scalebot"
    found = rest.list_items(admin_api, f"/api/v1/namespaces/{namespace}/events", field_selector=selector)
    published = sorted(e["message"] for e in found if e["reason"] == AUDIT_HEAD_REASON)
    assert [row for row, _ in heads] == [1, 2], "the rolled-back row was never published"
    assert published == sorted(f"audit head {head} (row {row})" for row, head in heads)
    assert all(e["source"]["component"] == "scalebot" for e in found)
    # A head read back from the cluster checks the file.
    assert verify_audit_file(str(db), expect_head=heads[-1][1]).expected_row == 2
