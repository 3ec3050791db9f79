"""The pure workload planner: selection, exclusions (expiry, precedence), sleep and wake decisions.

Every expectation is exact: the category, the reason text and the JSON merge patch that would be
sent. Covers engine-semantics §7 and checklist items 31-33 at the decision level; the e2e test
proves the same rules against the real API server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.domain.model import OwnerRef
from engine.workloads import (
    KEDA_PAUSED_ANNOTATION,
    ORIGINAL_ANNOTATION,
    Availability,
    HpaInfo,
    Kind,
    NamespaceInfo,
    Outcome,
    WorkloadConfig,
    WorkloadInfo,
    WorkloadRecord,
    WorkloadReport,
    WorkloadSnapshot,
    compute_availability,
    decide_wake,
    parse_selector,
    parse_until,
    plan_sleep,
    plan_wake,
)
from engine.workloads.exclusions import annotation_verdict
from engine.workloads.model import Condition, StoredOriginals
from engine.workloads.plan import Decision, WorkloadPlan, originals_after_wake

NOW = datetime(2026, 5, 4, 18, 0, tzinfo=UTC)
AT = "2026-05-04T18:00:00Z"
EARLIER = datetime(2026, 5, 4, 17, 0, tzinfo=UTC)


def ns(name: str, labels: Mapping[str, str] | None = None, **annotations: str) -> NamespaceInfo:
    return NamespaceInfo(name, labels or {}, _annotations(annotations))


def _annotations(kwargs: Mapping[str, str]) -> dict[str, str]:
    """Keyword arguments with `__` for `/` and `_` for `-`: scalebot_io__exclude → scalebot.io/exclude."""
    return {k.replace("__", "/").replace("_io", ".io").replace("_", "-"): v for k, v in kwargs.items()}


def deploy(
    namespace: str,
    name: str,
    replicas: int,
    *,
    kind: Kind = Kind.DEPLOYMENT,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    rv: str = "11",
    uid: str = "",
    controller: OwnerRef | None = None,
) -> WorkloadInfo:
    return WorkloadInfo(
        kind=kind,
        namespace=namespace,
        name=name,
        value=replicas,
        uid=uid or f"uid-{name}",
        resource_version=rv,
        labels=labels or {},
        annotations=annotations or {},
        controller=controller,
    )


def cronjob(namespace: str, name: str, suspend: bool, **kwargs: Any) -> WorkloadInfo:
    info = deploy(namespace, name, 0, kind=Kind.CRONJOB, **kwargs)
    return WorkloadInfo(**{**_fields(info), "value": suspend})


def scaledobject(namespace: str, name: str, paused: str | None, target: str, **kwargs: Any) -> WorkloadInfo:
    extra = dict(kwargs.pop("annotations", None) or {})
    if paused is not None:
        extra[KEDA_PAUSED_ANNOTATION] = paused
    info = deploy(namespace, name, 0, kind=Kind.SCALEDOBJECT, annotations=extra, **kwargs)
    return WorkloadInfo(**{**_fields(info), "value": paused, "scale_target": ("Deployment", target)})


def _fields(info: WorkloadInfo) -> dict[str, Any]:
    return {name: getattr(info, name) for name in WorkloadInfo.__dataclass_fields__}


def snap(
    *workloads: WorkloadInfo, namespaces: tuple[NamespaceInfo, ...] | None = None, **kw: Any
) -> WorkloadSnapshot:
    if namespaces is None:
        namespaces = tuple(ns(n) for n in sorted({w.namespace for w in workloads}))
    return WorkloadSnapshot(namespaces=namespaces, workloads=workloads, **kw)


def by_key(plan: WorkloadPlan) -> dict[str, Decision]:
    return {d.key: d for d in plan.decisions}


def summary(plan: WorkloadPlan) -> list[tuple[str, str, str]]:
    return [(d.key, d.category, d.outcome.reason) for d in plan.decisions]


def original(replicas_or_value: object, target: object, field: str = "replicas", at: str = AT) -> str:
    return json.dumps({field: replicas_or_value, "set": target, "at": at}, separators=(",", ":"))


# -- selectors and dates -------------------------------------------------------------------------


def test_parse_selector_accepts_kubectl_syntax() -> None:
    selector = parse_selector("env in (dev, staging),team=shop,tier!=db,!protected,owner")
    assert selector.matches({"env": "dev", "team": "shop", "owner": "x"})
    assert selector.matches({"env": "staging", "team": "shop", "tier": "web", "owner": "x"})
    assert not selector.matches({"env": "prod", "team": "shop", "owner": "x"})
    assert not selector.matches({"env": "dev", "team": "shop", "tier": "db", "owner": "x"})
    assert not selector.matches({"env": "dev", "team": "shop", "owner": "x", "protected": ""})
    assert not selector.matches({"env": "dev", "team": "shop"})
    assert parse_selector("").matches({})
    assert parse_selector("a==b").match_labels == {"a": "b"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a=b,,c", 'invalid label selector "a=b,,c": empty requirement between commas'),
        ("a b", 'invalid label selector "a b": "a b" is not a valid label key'),
        ("a=b c", 'invalid label selector "a=b c": "a=b c" is not a valid label key'),
        (
            "env in (dev,st@ging)",
            'invalid label selector "env in (dev,st@ging)": "st@ging" is not a valid label value',
        ),
    ],
)
def test_parse_selector_names_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_selector(text)
    assert str(info.value) == message


def test_config_rejects_bad_selector_naming_the_setting() -> None:
    with pytest.raises(ValueError, match=r'^exclude_selector: invalid label selector "x in \(": '):
        WorkloadConfig(exclude_selector="x in (")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-10", datetime(2026, 5, 10, tzinfo=UTC)),
        ("2026-05-10T06:30:00Z", datetime(2026, 5, 10, 6, 30, tzinfo=UTC)),
        ("2026-05-10T08:30:00+02:00", datetime(2026, 5, 10, 6, 30, tzinfo=UTC)),
        ("2026-05-10T06:30", datetime(2026, 5, 10, 6, 30, tzinfo=UTC)),
        ("2026-05-10 06:30", datetime(2026, 5, 10, 6, 30, tzinfo=UTC)),
    ],
)
def test_parse_until(text: str, expected: datetime) -> None:
    assert parse_until(text) == expected


@pytest.mark.parametrize("text", ["tomorrow", "20260510", "2026-13-01", ""])
def test_parse_until_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_until(text)


# -- annotation verdicts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "excluded", "reason", "expired"),
    [
        ({}, None, "", ()),
        ({"scalebot.io/exclude": "true"}, True, "annotation scalebot.io/exclude=true", ()),
        ({"scalebot.io/exclude": "False"}, False, "annotation scalebot.io/exclude=false", ()),
        (
            {"scalebot.io/exclude": "yes"},
            True,
            'annotation scalebot.io/exclude="yes" is not true or false (treated as excluded)',
            (),
        ),
        (
            {"scalebot.io/exclude-until": "2026-05-05"},
            True,
            "annotation scalebot.io/exclude-until=2026-05-05 (excluded until 2026-05-05T00:00:00Z)",
            (),
        ),
        (
            {"scalebot.io/exclude-until": "2026-05-04T18:00:00Z"},
            None,
            "",
            ("scalebot.io/exclude-until=2026-05-04T18:00:00Z expired at 2026-05-04T18:00:00Z",),
        ),
        (
            {"scalebot.io/exclude-until": "soon"},
            True,
            'annotation scalebot.io/exclude-until="soon" is unreadable (treated as excluded)',
            (),
        ),
        ({"downscaler/exclude": "true"}, True, "annotation downscaler/exclude=true", ()),
        (
            {"downscaler/exclude-until": "2026-06-01"},
            True,
            "annotation downscaler/exclude-until=2026-06-01 (excluded until 2026-06-01T00:00:00Z)",
            (),
        ),
        # scalebot's vocabulary is read first and wins over kube-downscaler's.
        (
            {"scalebot.io/exclude": "false", "downscaler/exclude": "true"},
            False,
            "annotation scalebot.io/exclude=false",
            (),
        ),
        # An expired scalebot date does not hide a standing kube-downscaler exclusion.
        (
            {"scalebot.io/exclude-until": "2026-01-01", "downscaler/exclude": "true"},
            True,
            "annotation downscaler/exclude=true",
            ("scalebot.io/exclude-until=2026-01-01 expired at 2026-01-01T00:00:00Z",),
        ),
        # A permanent flag next to an expired date still excludes.
        (
            {"scalebot.io/exclude-until": "2026-01-01", "scalebot.io/exclude": "true"},
            True,
            "annotation scalebot.io/exclude=true",
            ("scalebot.io/exclude-until=2026-01-01 expired at 2026-01-01T00:00:00Z",),
        ),
    ],
)
def test_annotation_verdict(
    annotations: dict[str, str], excluded: bool | None, reason: str, expired: tuple[str, ...]
) -> None:
    verdict = annotation_verdict(annotations, now=NOW, level="annotation")
    assert (verdict.excluded, verdict.reason, verdict.expired) == (excluded, reason, expired)


# -- sleep: what changes and the exact patches ---------------------------------------------------


def test_sleep_changes_each_kind_and_writes_no_original_on_the_object() -> None:
    plan = plan_sleep(
        snap(
            deploy("shop", "web", 3, rv="101"),
            deploy("shop", "db", 2, kind=Kind.STATEFULSET, rv="102"),
            cronjob("shop", "report", False, rv="103"),
            scaledobject("shop", "queue", "2", "worker", rv="104"),
            scaledobject("shop", "events", None, "consumer", rv="105"),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        ("CronJob/shop/report", "change", "suspend=false → suspend=true"),
        ("Deployment/shop/web", "change", "3 replicas → 0 replicas"),
        ("ScaledObject/shop/events", "change", 'no paused-replicas → paused-replicas="0"'),
        ("ScaledObject/shop/queue", "change", 'paused-replicas="2" → paused-replicas="0"'),
        ("StatefulSet/shop/db", "change", "2 replicas → 0 replicas"),
    ]
    d = by_key(plan)
    # Replicas go to the scale subresource: the patch holds replicas and the guard only. The
    # originals are the records (the caller's database and scalebot's ConfigMap), never annotations.
    assert d["Deployment/shop/web"].patch == {
        "metadata": {"resourceVersion": "101"},
        "spec": {"replicas": 0},
    }
    assert d["StatefulSet/shop/db"].patch == {
        "metadata": {"resourceVersion": "102"},
        "spec": {"replicas": 0},
    }
    assert d["CronJob/shop/report"].patch == {
        "metadata": {"resourceVersion": "103"},
        "spec": {"suspend": True},
    }
    assert d["ScaledObject/shop/queue"].patch == {
        "metadata": {"annotations": {KEDA_PAUSED_ANNOTATION: "0"}, "resourceVersion": "104"}
    }
    assert d["ScaledObject/shop/events"].patch == {
        "metadata": {"annotations": {KEDA_PAUSED_ANNOTATION: "0"}, "resourceVersion": "105"}
    }
    assert d["Deployment/shop/web"].record == WorkloadRecord(
        Kind.DEPLOYMENT, "shop", "web", 3, 0, NOW, "uid-web"
    )
    assert d["ScaledObject/shop/events"].record == WorkloadRecord(
        Kind.SCALEDOBJECT, "shop", "events", None, "0", NOW, "uid-events"
    )
    assert plan.preview().records == tuple(d.record for d in plan.decisions)
    assert plan.preview().headline == "5/5 workloads put to sleep"


def test_objects_already_at_night_value_stay_as_their_owner_left_them() -> None:
    plan = plan_sleep(
        snap(
            deploy("shop", "idle", 0),
            deploy("shop", "batch", 0, kind=Kind.STATEFULSET),
            cronjob("shop", "paused", True),
            scaledobject("shop", "off", "0", "x"),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        ("CronJob/shop/paused", "unchanged", "already suspended before sleep; stays suspended after wake"),
        ("Deployment/shop/idle", "unchanged", "already at 0 replicas before sleep; stays at 0 after wake"),
        ("ScaledObject/shop/off", "unchanged", 'already paused at "0" before sleep; stays paused after wake'),
        ("StatefulSet/shop/batch", "unchanged", "already at 0 replicas before sleep; stays at 0 after wake"),
    ]
    assert plan.writes == ()
    assert plan.preview().headline == "0/0 workloads put to sleep"


def test_second_sleep_never_overwrites_the_recorded_original() -> None:
    # Asleep since 17:00 with 3 to restore; GitOps scaled "web" back to 4 during the night.
    recorded = original(3, 0, at="2026-05-04T17:00:00Z")
    plan = plan_sleep(
        snap(
            deploy("shop", "web", 4, annotations={ORIGINAL_ANNOTATION: recorded}, rv="7"),
            deploy("shop", "api", 0, annotations={ORIGINAL_ANNOTATION: original(2, 0, at=AT)}),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        ("Deployment/shop/api", "unchanged", "already asleep (2 replicas to restore)"),
        (
            "Deployment/shop/web",
            "change",
            "4 replicas → 0 replicas again (3 replicas to restore, recorded before)",
        ),
    ]
    web = by_key(plan)["Deployment/shop/web"]
    # No annotation in the patch: the day-time value written at 17:00 stays.
    assert web.patch == {"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 0}}
    assert web.record == WorkloadRecord(Kind.DEPLOYMENT, "shop", "web", 3, 0, EARLIER, "uid-web")


def test_unreadable_original_annotation_is_reported_and_not_touched() -> None:
    plan = plan_sleep(
        snap(
            deploy("shop", "a", 3, annotations={ORIGINAL_ANNOTATION: "three"}),
            deploy("shop", "b", 3, annotations={ORIGINAL_ANNOTATION: '{"replicas":true}'}),
            deploy("shop", "c", 3, annotations={ORIGINAL_ANNOTATION: '{"suspend":false}'}),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        (
            "Deployment/shop/a",
            "skipped",
            "scalebot.io/original is not JSON: 'three'; not changed (fix or remove the annotation)",
        ),
        (
            "Deployment/shop/b",
            "skipped",
            "scalebot.io/original holds a value of the wrong type: '{\"replicas\":true}'; "
            "not changed (fix or remove the annotation)",
        ),
        (
            "Deployment/shop/c",
            "skipped",
            'scalebot.io/original has no "replicas": \'{"suspend":false}\'; '
            "not changed (fix or remove the annotation)",
        ),
    ]


def test_owned_workloads_are_skipped_and_keda_targets_left_to_keda() -> None:
    owner = OwnerRef(kind="PostgresCluster", name="pg", uid="u1", api_version="db.example/v1")
    plan = plan_sleep(
        snap(
            deploy("shop", "pg", 2, kind=Kind.STATEFULSET, controller=owner),
            deploy("shop", "worker", 4),
            scaledobject("shop", "queue", None, "worker"),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        (
            "Deployment/shop/worker",
            "unchanged",
            "scaled by KEDA ScaledObject/shop/queue; paused through the ScaledObject instead",
        ),
        ("ScaledObject/shop/queue", "change", 'no paused-replicas → paused-replicas="0"'),
        (
            "StatefulSet/shop/pg",
            "skipped",
            "managed by PostgresCluster/pg, which would undo a change here; put the owner to sleep instead",
        ),
    ]


def test_keda_target_is_protected_even_when_scaledobjects_are_not_a_configured_kind() -> None:
    plan = plan_sleep(
        snap(deploy("shop", "worker", 4), scaledobject("shop", "queue", None, "worker")),
        now=NOW,
        config=WorkloadConfig(kinds=frozenset({Kind.DEPLOYMENT})),
    )
    assert [(d.key, d.category) for d in plan.decisions] == [("Deployment/shop/worker", "unchanged")]


def test_hpas_of_changed_workloads_are_reported_and_left_alone() -> None:
    plan = plan_sleep(
        snap(
            deploy("shop", "web", 3),
            deploy("shop", "idle", 0),
            hpas=(
                HpaInfo("shop", "web", "Deployment", "web", 2, 10),
                HpaInfo("shop", "idle", "Deployment", "idle", 1, 3),
                HpaInfo("other", "web", "Deployment", "web", 1, 3),
            ),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert plan.hpa_notes == (
        Outcome(
            "HorizontalPodAutoscaler/shop/web",
            "targets Deployment/shop/web: left as it is; with 0 replicas the HPA reports ScalingDisabled "
            "and stops scaling until wake restores the replicas",
        ),
    )
    assert all(d.key.startswith("Deployment/") for d in plan.decisions)


# -- selection and exclusions --------------------------------------------------------------------


def test_namespaces_selected_by_name_and_label_selector() -> None:
    namespaces = (
        ns("dev-a", {"env": "dev"}),
        ns("dev-b", {"env": "dev"}),
        ns("prod", {"env": "prod"}),
    )
    workloads = (deploy("dev-a", "w", 1), deploy("dev-b", "w", 1), deploy("prod", "w", 1))
    by_label = plan_sleep(
        snap(*workloads, namespaces=namespaces), now=NOW, config=WorkloadConfig(namespace_selector="env=dev")
    )
    assert [d.key for d in by_label.decisions] == ["Deployment/dev-a/w", "Deployment/dev-b/w"]
    both = WorkloadConfig(namespaces=("dev-b", "prod"), namespace_selector="env=dev")
    assert [
        d.key for d in plan_sleep(snap(*workloads, namespaces=namespaces), now=NOW, config=both).decisions
    ] == ["Deployment/dev-b/w"]


def test_protected_namespaces_are_excluded_whatever_the_annotations_say() -> None:
    include = {"scalebot.io/exclude": "false"}
    namespaces = (
        ns("kube-system", scalebot_io__exclude="false"),
        ns("kube-public"),
        ns("kube-node-lease"),
        ns("scalebot"),
        ns("shop"),
    )
    plan = plan_sleep(
        snap(
            deploy("kube-system", "coredns", 2, annotations=include),
            deploy("kube-public", "x", 1),
            deploy("kube-node-lease", "x", 1),
            deploy("scalebot", "scalebot", 1, annotations=include),
            deploy("shop", "web", 1),
            namespaces=namespaces,
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        (
            "Deployment/kube-node-lease/x",
            "excluded",
            "namespace kube-node-lease is excluded by configuration",
        ),
        ("Deployment/kube-public/x", "excluded", "namespace kube-public is excluded by configuration"),
        ("Deployment/kube-system/coredns", "excluded", "namespace kube-system is excluded by configuration"),
        ("Deployment/scalebot/scalebot", "excluded", "scalebot's own namespace"),
        ("Deployment/shop/web", "change", "1 replica → 0 replicas"),
    ]
    # A different own namespace and extra configured exclusions.
    config = WorkloadConfig(own_namespace="ops", excluded_namespaces=("shop",))
    assert summary(
        plan_sleep(snap(deploy("ops", "bot", 1), deploy("shop", "web", 1)), now=NOW, config=config)
    ) == [
        ("Deployment/ops/bot", "excluded", "scalebot's own namespace"),
        ("Deployment/shop/web", "excluded", "namespace shop is excluded by configuration"),
    ]


def test_precedence_workload_annotation_over_namespace_annotation_over_config() -> None:
    namespaces = (
        ns("quiet", scalebot_io__exclude="true"),
        ns("team", {"keep": "yes"}, scalebot_io__exclude="false"),
        ns("plain"),
        ns("labelled", {"keep": "yes"}),
    )
    config = WorkloadConfig(exclude_selector="keep=yes")
    plan = plan_sleep(
        snap(
            deploy("quiet", "normal", 1),
            deploy("quiet", "opted-in", 1, annotations={"scalebot.io/exclude": "false"}),
            deploy("quiet", "ds-opt-in", 1, annotations={"downscaler/exclude": "false"}),
            deploy("team", "by-label", 1, labels={"keep": "yes"}),
            deploy("team", "normal", 1),
            deploy("plain", "by-label", 1, labels={"keep": "yes"}),
            deploy("plain", "annotated", 1, annotations={"scalebot.io/exclude": "true"}),
            deploy("plain", "normal", 1),
            deploy("labelled", "normal", 1),
            deploy("labelled", "opted-in", 1, annotations={"scalebot.io/exclude": "false"}),
            namespaces=namespaces,
        ),
        now=NOW,
        config=config,
    )
    assert summary(plan) == [
        ("Deployment/labelled/normal", "excluded", 'namespace labels match exclude_selector "keep=yes"'),
        ("Deployment/labelled/opted-in", "change", "1 replica → 0 replicas"),
        ("Deployment/plain/annotated", "excluded", "annotation scalebot.io/exclude=true"),
        ("Deployment/plain/by-label", "excluded", 'labels match exclude_selector "keep=yes"'),
        ("Deployment/plain/normal", "change", "1 replica → 0 replicas"),
        ("Deployment/quiet/ds-opt-in", "change", "1 replica → 0 replicas"),
        ("Deployment/quiet/normal", "excluded", "namespace annotation scalebot.io/exclude=true"),
        ("Deployment/quiet/opted-in", "change", "1 replica → 0 replicas"),
        # The namespace's explicit "false" outranks the configuration's label exclusion.
        ("Deployment/team/by-label", "change", "1 replica → 0 replicas"),
        ("Deployment/team/normal", "change", "1 replica → 0 replicas"),
    ]


def test_opt_in_mode_excludes_unless_annotated_false() -> None:
    plan = plan_sleep(
        snap(
            deploy("a", "default", 1),
            deploy("a", "in", 1, annotations={"scalebot.io/exclude": "false"}),
            deploy("b", "default", 1),
            namespaces=(ns("a"), ns("b", scalebot_io__exclude="false")),
        ),
        now=NOW,
        config=WorkloadConfig(exclude_by_default=True),
    )
    assert summary(plan) == [
        (
            "Deployment/a/default",
            "excluded",
            'not opted in (exclude_by_default; annotate scalebot.io/exclude: "false" to include)',
        ),
        ("Deployment/a/in", "change", "1 replica → 0 replicas"),
        ("Deployment/b/default", "change", "1 replica → 0 replicas"),
    ]


def test_exclusion_expiry_dates() -> None:
    namespaces = (
        ns("old", scalebot_io__exclude_until="2026-05-01"),
        ns("held", downscaler__exclude_until="2026-05-04T20:00:00+02:00"),
        ns("shop"),
    )
    plan = plan_sleep(
        snap(
            deploy("old", "web", 2),
            deploy("held", "web", 2),
            deploy("shop", "expired", 2, annotations={"scalebot.io/exclude-until": "2026-05-04"}),
            deploy("shop", "future", 2, annotations={"scalebot.io/exclude-until": "2026-05-05"}),
            deploy("shop", "exact", 2, annotations={"downscaler/exclude-until": "2026-05-04T18:00:00Z"}),
            deploy(
                "shop", "second-left", 2, annotations={"scalebot.io/exclude-until": "2026-05-04T18:00:01Z"}
            ),
            namespaces=namespaces,
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        # 20:00+02:00 is 18:00Z: that moment has come, so the namespace is no longer held.
        ("Deployment/held/web", "change", "2 replicas → 0 replicas"),
        ("Deployment/old/web", "change", "2 replicas → 0 replicas"),
        ("Deployment/shop/exact", "change", "2 replicas → 0 replicas"),
        ("Deployment/shop/expired", "change", "2 replicas → 0 replicas"),
        (
            "Deployment/shop/future",
            "excluded",
            "annotation scalebot.io/exclude-until=2026-05-05 (excluded until 2026-05-05T00:00:00Z)",
        ),
        (
            "Deployment/shop/second-left",
            "excluded",
            "annotation scalebot.io/exclude-until=2026-05-04T18:00:01Z (excluded until 2026-05-04T18:00:01Z)",
        ),
    ]
    assert plan.expired_exclusions == (
        Outcome(
            "Namespace/held",
            "downscaler/exclude-until=2026-05-04T20:00:00+02:00 expired at 2026-05-04T18:00:00Z",
        ),
        Outcome("Namespace/old", "scalebot.io/exclude-until=2026-05-01 expired at 2026-05-01T00:00:00Z"),
        Outcome(
            "Deployment/shop/exact",
            "downscaler/exclude-until=2026-05-04T18:00:00Z expired at 2026-05-04T18:00:00Z",
        ),
        Outcome(
            "Deployment/shop/expired", "scalebot.io/exclude-until=2026-05-04 expired at 2026-05-04T00:00:00Z"
        ),
    )


def test_expired_workload_exclusion_falls_back_to_the_namespace_level() -> None:
    plan = plan_sleep(
        snap(
            deploy("quiet", "web", 2, annotations={"scalebot.io/exclude-until": "2026-01-01"}),
            namespaces=(ns("quiet", scalebot_io__exclude="true"),),
        ),
        now=NOW,
        config=WorkloadConfig(),
    )
    assert summary(plan) == [
        ("Deployment/quiet/web", "excluded", "namespace annotation scalebot.io/exclude=true")
    ]
    assert plan.expired_exclusions == (
        Outcome(
            "Deployment/quiet/web", "scalebot.io/exclude-until=2026-01-01 expired at 2026-01-01T00:00:00Z"
        ),
    )


# -- wake ----------------------------------------------------------------------------------------


def rec(
    name: str, orig: Any, target: Any = 0, *, kind: Kind = Kind.DEPLOYMENT, uid: str = ""
) -> WorkloadRecord:
    return WorkloadRecord(kind, "shop", name, orig, target, EARLIER, uid or f"uid-{name}")


ASLEEP = {ORIGINAL_ANNOTATION: original(3, 0)}


def test_wake_restores_exact_value_through_scale_and_leaves_a_legacy_annotation() -> None:
    # A Deployment put to sleep by an earlier version carries scalebot.io/original; scalebot may
    # patch only its scale subresource now, so the annotation stays (the ConfigMap marks it used).
    live = deploy("shop", "web", 0, annotations=ASLEEP, rv="50")
    decision = decide_wake(rec("web", 3), live)
    assert (decision.category, decision.outcome.reason) == ("change", "0 replicas → 3 replicas")
    assert decision.patch == {"metadata": {"resourceVersion": "50"}, "spec": {"replicas": 3}}


def test_modified_while_asleep_is_skipped_not_clobbered() -> None:
    live = deploy("shop", "web", 5, annotations=ASLEEP, rv="51")
    decision = decide_wake(rec("web", 3), live)
    assert decision.category == "skipped"
    assert decision.outcome.reason == (
        "modified while asleep: now 5 replicas, scalebot had set 0 replicas; "
        "left as it is (original: 3 replicas; force restore applies it)"
    )
    # Nothing is written on the object: the record is dropped, so the next sleep records the new
    # day-time value.
    assert decision.patch is None

    forced = decide_wake(rec("web", 3), live, force_restore=True)
    assert (forced.category, forced.outcome.reason) == (
        "change",
        "5 replicas → 3 replicas (forced: modified while asleep)",
    )
    assert forced.patch == {"metadata": {"resourceVersion": "51"}, "spec": {"replicas": 3}}


def test_wake_edge_cases() -> None:
    back = decide_wake(rec("web", 3), deploy("shop", "web", 3, annotations=ASLEEP, rv="9"))
    assert (back.category, back.outcome.reason) == ("change", "already back at 3 replicas")
    assert back.patch is None

    # Restored by a previous wake: nothing left to write.
    done = decide_wake(rec("web", 3), deploy("shop", "web", 3))
    assert (done.category, done.patch) == ("change", None)

    was_zero = decide_wake(rec("idle", 0), deploy("shop", "idle", 2))
    assert (was_zero.category, was_zero.outcome.reason, was_zero.patch) == (
        "unchanged",
        "had 0 replicas before sleep; stays so",
        None,
    )

    gone = decide_wake(rec("web", 3), None)
    assert (gone.category, gone.outcome.reason) == ("skipped", "no longer exists; nothing to restore")

    recreated = decide_wake(rec("web", 3, uid="old"), deploy("shop", "web", 0, uid="new"))
    assert (recreated.category, recreated.outcome.reason, recreated.patch) == (
        "skipped",
        "deleted and recreated while asleep (new UID); left as it is",
        None,
    )


def test_wake_cronjob_and_keda() -> None:
    cron = decide_wake(
        rec("report", False, True, kind=Kind.CRONJOB),
        cronjob("shop", "report", True, annotations={ORIGINAL_ANNOTATION: "x"}, rv="3"),
    )
    assert (cron.outcome.reason, cron.patch) == (
        "suspend=true → suspend=false",
        {
            "metadata": {"annotations": {ORIGINAL_ANNOTATION: None}, "resourceVersion": "3"},
            "spec": {"suspend": False},
        },
    )
    unsuspended = decide_wake(rec("report", False, True, kind=Kind.CRONJOB), cronjob("shop", "report", False))
    assert (unsuspended.category, unsuspended.outcome.reason) == ("change", "already back at suspend=false")

    was_paused = decide_wake(
        rec("q", "2", "0", kind=Kind.SCALEDOBJECT), scaledobject("shop", "q", "0", "w", rv="4")
    )
    assert was_paused.patch == {
        "metadata": {"annotations": {KEDA_PAUSED_ANNOTATION: "2"}, "resourceVersion": "4"}
    }
    assert was_paused.outcome.reason == 'paused-replicas="0" → paused-replicas="2"'

    annotated = {ORIGINAL_ANNOTATION: '{"pausedReplicas":null,"set":"0"}'}
    never_paused = decide_wake(
        rec("e", None, "0", kind=Kind.SCALEDOBJECT),
        scaledobject("shop", "e", "0", "w", rv="5", annotations=annotated),
    )
    assert never_paused.patch == {
        "metadata": {
            "annotations": {ORIGINAL_ANNOTATION: None, KEDA_PAUSED_ANNOTATION: None},
            "resourceVersion": "5",
        }
    }
    assert never_paused.outcome.reason == 'paused-replicas="0" → no paused-replicas'


def test_plan_wake_from_annotations_when_the_database_is_lost() -> None:
    snapshot = snap(
        deploy("shop", "web", 0, annotations=ASLEEP, rv="1"),
        deploy("shop", "plain", 4),
        deploy("shop", "broken", 0, annotations={ORIGINAL_ANNOTATION: "{"}),
        # Excluded after it went to sleep: still restored, it is ours.
        deploy("shop", "late", 0, annotations={**ASLEEP, "scalebot.io/exclude": "true"}, rv="2"),
        deploy("other", "web", 0, annotations=ASLEEP),
        namespaces=(ns("shop", {"env": "dev"}), ns("other")),
    )
    plan = plan_wake(snapshot, None, config=WorkloadConfig(namespace_selector="env=dev"))
    assert summary(plan) == [
        ("Deployment/shop/broken", "error", "scalebot.io/original is not JSON: '{'; not restored"),
        ("Deployment/shop/late", "change", "0 replicas → 3 replicas"),
        ("Deployment/shop/web", "change", "0 replicas → 3 replicas"),
    ]
    assert plan.preview().headline == "2/3 workloads restored"


def test_plan_wake_from_records_uses_the_earliest_record_per_object() -> None:
    snapshot = snap(deploy("shop", "web", 0, rv="1"))
    later = WorkloadRecord(Kind.DEPLOYMENT, "shop", "web", 0, 0, NOW, "uid-web")
    plan = plan_wake(snapshot, [later, rec("web", 3)], config=WorkloadConfig())
    assert summary(plan) == [("Deployment/shop/web", "change", "0 replicas → 3 replicas")]


# -- records -------------------------------------------------------------------------------------


def test_record_round_trips() -> None:
    record = WorkloadRecord(Kind.SCALEDOBJECT, "shop", "q", None, "0", NOW, "u")
    assert record.annotation_value() == '{"pausedReplicas":null,"set":"0","at":"2026-05-04T18:00:00Z"}'
    live = scaledobject("shop", "q", "0", "w", uid="u")
    assert WorkloadRecord.from_annotation(live, record.annotation_value()) == record
    assert WorkloadRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    with pytest.raises(ValueError, match="bad values"):
        WorkloadRecord.from_dict({**rec("web", 3).to_dict(), "original": True})


# -- reports -------------------------------------------------------------------------------------


def test_report_rendering_is_exact_and_sorted() -> None:
    report = WorkloadReport(
        action="wake",
        changed=tuple(Outcome(f"Deployment/shop/w{i}", "0 replicas → 1 replica") for i in range(3)),
        skipped=(Outcome("Deployment/shop/web", "modified while asleep: now 5 replicas"),),
        unchanged=(Outcome("Deployment/shop/idle", "had 0 replicas before sleep; stays so"),),
        excluded=(
            Outcome("Deployment/kube-system/a", "namespace kube-system is excluded by configuration"),
            Outcome("Deployment/kube-system/b", "namespace kube-system is excluded by configuration"),
            Outcome("Deployment/kube-system/c", "namespace kube-system is excluded by configuration"),
            Outcome("CronJob/shop/x", "annotation scalebot.io/exclude=true"),
        ),
    )
    assert report.render(max_items=2) == "\n".join(
        [
            "3/4 workloads restored",
            "Skipped (1):",
            "  * Deployment/shop/web: modified while asleep: now 5 replicas",
            "Unchanged (1):",
            "  * Deployment/shop/idle: had 0 replicas before sleep; stays so",
            "Excluded (2):",
            "  * annotation scalebot.io/exclude=true: CronJob/shop/x",
            "  * namespace kube-system is excluded by configuration: "
            "Deployment/kube-system/a, Deployment/kube-system/b, ... (1 more)",
        ]
    )
    assert not report.complete
    assert WorkloadReport("wake", changed=report.changed).render() == "3/3 workloads restored"


def test_availability_counts_only_workloads_asked_to_run() -> None:
    def status(
        name: str, replicas: int, available: int, gen: int = 2, observed: int = 2, **kw: Any
    ) -> WorkloadInfo:
        info = deploy("shop", name, replicas)
        return WorkloadInfo(
            **{
                **_fields(info),
                "available_replicas": available,
                "generation": gen,
                "observed_generation": observed,
                **kw,
            }
        )

    failing = (
        Condition("Progressing", "False", "ProgressDeadlineExceeded", 'ReplicaSet "web-1" has timed out'),
    )
    result = compute_availability(
        [
            status("ok", 3, 3),
            status("zero", 0, 0),
            status("slow", 3, 1),
            status("stuck", 2, 0, conditions=failing),
            status("stale", 3, 3, gen=3, observed=2),
            cronjob("shop", "cron", False),
        ]
    )
    assert result == Availability(
        1,
        4,
        [
            ("Deployment/shop/slow", "1/3 replicas available"),
            ("Deployment/shop/stale", "generation 3 not observed yet by the controller"),
            (
                "Deployment/shop/stuck",
                '0/2 replicas available (ProgressDeadlineExceeded: ReplicaSet "web-1" has timed out)',
            ),
        ],
    )
    available, total, not_ready = result
    assert (available, total, len(not_ready)) == (1, 4, 3)
    assert result.headline == "1/4 workloads available"


def test_a_second_sleep_keeps_the_configmap_record_and_wake_drops_it() -> None:
    stored = StoredOriginals.from_data({"deployment.shop.web": rec("web", 3).to_json()})
    again = plan_sleep(
        snap(deploy("shop", "web", 4, rv="7"), stored=stored), now=NOW, config=WorkloadConfig()
    )
    (decision,) = again.decisions
    assert decision.outcome.reason == "4 replicas → 0 replicas again (3 replicas to restore, recorded before)"
    assert decision.record == rec("web", 3)

    asleep = snap(deploy("shop", "web", 0), stored=stored)
    woken = plan_wake(asleep, None, config=WorkloadConfig())
    assert summary(woken) == [("Deployment/shop/web", "change", "0 replicas → 3 replicas")]
    assert originals_after_wake(woken.decisions, asleep) == {"deployment.shop.web": None}


def test_a_configmap_record_of_an_earlier_object_of_the_same_name_is_not_used_by_sleep() -> None:
    stored = StoredOriginals.from_data({"deployment.shop.web": rec("web", 3, uid="old").to_json()})
    plan = plan_sleep(snap(deploy("shop", "web", 2), stored=stored), now=NOW, config=WorkloadConfig())
    assert summary(plan) == [("Deployment/shop/web", "change", "2 replicas → 0 replicas")]


def test_a_legacy_annotation_wakes_once_is_reported_once_and_is_never_used_again() -> None:
    live = deploy("shop", "web", 0, annotations=ASLEEP)
    first = snap(live)
    woken = plan_wake(first, None, config=WorkloadConfig())
    assert summary(woken) == [("Deployment/shop/web", "change", "0 replicas → 3 replicas")]
    (note,) = woken.warnings
    assert note.key == "Deployment/shop/web"
    assert note.reason.endswith("kubectl annotate -n shop deployment/web scalebot.io/original-")
    marker = originals_after_wake(woken.decisions, first)
    assert list(marker) == ["deployment.shop.web"] and marker["deployment.shop.web"] is not None

    used = StoredOriginals.from_data({k: v for k, v in marker.items() if v is not None})
    assert used.legacy_used == {"Deployment/shop/web": ASLEEP[ORIGINAL_ANNOTATION]}
    # Its owner scaled it to 0 later: neither a wake nor a sleep restores the stale annotation.
    later = snap(deploy("shop", "web", 0, annotations=ASLEEP), stored=used)
    again = plan_wake(later, None, config=WorkloadConfig())
    assert (again.decisions, again.warnings) == ((), ())
    sleep = plan_sleep(later, now=NOW, config=WorkloadConfig())
    assert summary(sleep) == [
        ("Deployment/shop/web", "unchanged", "already at 0 replicas before sleep; stays at 0 after wake")
    ]


def test_unreadable_configmap_keys_are_set_aside() -> None:
    stored = StoredOriginals.from_data({"deployment.shop.web": "{", "deployment.shop.db": '{"kind":"X"}'})
    assert (stored.records, stored.unreadable) == ({}, ("deployment.shop.db", "deployment.shop.web"))
