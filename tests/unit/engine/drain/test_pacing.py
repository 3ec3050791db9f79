"""The one timing decision between drain passes, shared by the CLI drain loop and the runner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine.domain.settings import PassPacing
from engine.drain.pacing import MIN_WAIT_SECONDS, PassFacts, next_pass

T0 = datetime(2026, 11, 25, 20, 0, tzinfo=UTC)
PACING = PassPacing(interval=timedelta(seconds=20), settle=timedelta(seconds=5))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_work_left_waits_the_interval_when_nothing_is_due_sooner() -> None:
    decision = next_pass(PACING, PassFacts(now=at(100), completed=False, settled_from=at(0)))
    assert not decision.done and not decision.deadline_reached
    assert decision.wake_at == at(120)


def test_a_retry_or_an_expected_end_brings_the_next_pass_forward() -> None:
    decision = next_pass(
        PACING, PassFacts(now=at(100), completed=False, settled_from=at(0), next_retry_at=at(103))
    )
    assert decision.wake_at == at(103)
    assert decision.wait_seconds(at(101)) == 2.0


def test_nothing_left_is_done_only_once_settled_and_wakes_at_the_settle_instant() -> None:
    early = next_pass(PACING, PassFacts(now=at(102), completed=True, settled_from=at(100)))
    assert not early.done
    assert early.wake_at == at(105)
    late = next_pass(PACING, PassFacts(now=at(105), completed=True, settled_from=at(100)))
    assert late.done


def test_work_left_is_never_done_however_long_it_has_settled() -> None:
    assert not next_pass(PACING, PassFacts(now=at(1000), completed=False, settled_from=at(0))).done


def test_the_deadline_caps_the_wait_and_is_reported_once_reached() -> None:
    before = next_pass(PACING, PassFacts(now=at(50), completed=False, settled_from=at(0), deadline=at(60)))
    assert before.wake_at == at(60) and not before.deadline_reached
    reached = next_pass(PACING, PassFacts(now=at(60), completed=False, settled_from=at(0), deadline=at(60)))
    assert reached.deadline_reached


def test_again_at_once_runs_the_next_pass_after_the_floor_only() -> None:
    decision = next_pass(
        PACING, PassFacts(now=at(10), completed=False, settled_from=at(0), again_at_once=True)
    )
    assert decision.wake_at == at(10)
    assert decision.wait_seconds(at(10)) == MIN_WAIT_SECONDS


def test_a_wake_in_the_past_never_spins() -> None:
    decision = next_pass(
        PACING, PassFacts(now=at(10), completed=False, settled_from=at(0), next_retry_at=at(1))
    )
    assert decision.wait_seconds(at(30)) == MIN_WAIT_SECONDS
