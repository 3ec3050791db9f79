"""The EKS provider's pure parts, and its calls in order against in-memory AWS and Kubernetes sides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pytest

from engine.domain.clock import FakeClock
from engine.pools.base import PoolNotFound, PoolSizeError, RestoreRecord
from engine.pools.cloud import CloudNode, CloudOperationTimeout
from engine.pools.common import NodeRemovalError
from engine.pools.eks import (
    NODEGROUP_LABEL,
    AutoScalingGroup,
    EksPoolProvider,
    GroupInstance,
    Nodegroup,
    NodegroupNotFound,
    NodegroupUpdateError,
    Scaling,
    UpdateStatus,
    instance_id,
    plan_removal,
    progress_text,
    record_name,
    scaling_for,
)

NOW = datetime(2026, 11, 25, 20, 0, tzinfo=UTC)


def _group(name: str, desired: int, *ids: str, states: dict[str, str] | None = None) -> AutoScalingGroup:
    states = states or {}
    instances = tuple(GroupInstance(i, "eu-west-1a", states.get(i, "InService")) for i in ids)
    return AutoScalingGroup(name, 0, 10, desired, instances)


DAY = Scaling(1, 5, 3)


def _nodegroup(name: str = "web", *, scaling: Scaling = DAY, status: str = "ACTIVE") -> Nodegroup:
    return Nodegroup(name, status, scaling, (f"eks-{name}",))


# A CloudNode (what the provider reads of a Node: its node group label and providerID), not a
# Kubernetes Node: the shared builders in tests/builders.py make the cluster's side.
def _node(name: str, nodegroup: str = "web", instance: str = "") -> CloudNode:
    return CloudNode(
        name, nodegroup, f"aws:///eu-west-1a/{instance or f'i-{name.encode().hex()}'}", ready=True
    )


# -- pure parts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        ("aws:///eu-west-1a/i-0123456789abcdef0", "i-0123456789abcdef0"),
        ("aws:///us-east-1b/i-0a1", "i-0a1"),
        ("aws://eu-west-1a/i-0a1/", "i-0a1"),
        ("aws:///eu-west-1a/fargate-ip-10-0-0-1.compute.internal", ""),
        ("kwok://node-1", ""),
        ("gce://project/zone/i-0a1", ""),
        ("", ""),
    ],
)
def test_instance_id_from_provider_id(provider_id: str, expected: str) -> None:
    assert instance_id(provider_id) == expected


def test_node_from_raw_reads_label_provider_id_and_readiness() -> None:
    raw = {
        "metadata": {"name": "n1", "labels": {"eks.amazonaws.com/nodegroup": "web"}},
        "spec": {"providerID": "aws:///eu-west-1a/i-0abc"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    node = CloudNode.from_raw(raw, NODEGROUP_LABEL)
    assert node == CloudNode("n1", "web", "aws:///eu-west-1a/i-0abc", ready=True)
    assert instance_id(node.provider_id) == "i-0abc"
    assert CloudNode.from_raw({"metadata": {"name": "n2"}}, NODEGROUP_LABEL) == CloudNode(
        "n2", "", "", ready=False
    )


def test_removal_terminates_exactly_the_chosen_nodes_instances() -> None:
    nodes = [_node("a", instance="i-0a"), _node("b", instance="i-0b"), _node("c", instance="i-0c")]
    groups = [_group("eks-web", 3, "i-0a", "i-0b", "i-0c")]
    removal = plan_removal(_nodegroup(), groups, nodes, ["c", "b"])
    assert removal.terminate == ("i-0b", "i-0c")
    assert removal.already_gone == ()
    assert removal.lower_min_first is None, "3 → 1 stays within minSize 1"
    assert removal.after == Scaling(1, 5, 1)


def test_removal_below_the_minimum_lowers_it_first() -> None:
    nodes = [_node("a", instance="i-0a"), _node("b", instance="i-0b")]
    groups = [_group("eks-web", 2, "i-0a", "i-0b")]
    removal = plan_removal(_nodegroup(scaling=Scaling(2, 4, 2)), groups, nodes, ["a", "b"])
    # The Auto Scaling group refuses to decrement below its MinSize: minSize goes to 0 first,
    # desired unchanged (the terminations lower it).
    assert removal.lower_min_first == Scaling(0, 4, 2)
    assert removal.after == Scaling(0, 4, 0)


def test_a_repeated_removal_skips_instances_already_leaving_or_gone() -> None:
    nodes = [_node("a", instance="i-0a"), _node("b", instance="i-0b"), _node("c", instance="i-0c")]
    # After a crash: i-0b is terminating, i-0c already left the group (the ASG's desired says 1).
    groups = [_group("eks-web", 1, "i-0a", "i-0b", states={"i-0b": "Terminating:Wait"})]
    removal = plan_removal(_nodegroup(), groups, nodes, ["b", "c"])
    assert removal.terminate == ()
    assert removal.already_gone == ("b", "c")
    assert removal.after == Scaling(1, 5, 1)


def test_the_asg_desired_capacity_counts_over_a_stale_node_group_desired_size() -> None:
    nodes = [_node("a", instance="i-0a"), _node("b", instance="i-0b")]
    # EKS still says 3; the group is at 2 (cluster-autoscaler or an earlier terminate).
    groups = [_group("eks-web", 2, "i-0a", "i-0b")]
    removal = plan_removal(_nodegroup(), groups, nodes, ["b"])
    assert removal.after == Scaling(1, 5, 1)


def test_removal_refuses_nodes_of_another_group_or_without_an_instance() -> None:
    groups = [_group("eks-web", 2, "i-0a", "i-0b")]
    other = [_node("a", instance="i-0a"), _node("x", nodegroup="batch", instance="i-0b")]
    with pytest.raises(NodeRemovalError, match=r"nodes not in node group web: x \(batch\)"):
        plan_removal(_nodegroup(), groups, other, ["a", "x"])
    unlabelled = [CloudNode("y", "", "aws:///eu-west-1a/i-0b", ready=True)]
    with pytest.raises(NodeRemovalError, match=r"y \(no node group label\)"):
        plan_removal(_nodegroup(), groups, unlabelled, ["y"])
    fargate = [CloudNode("f", "web", "aws:///eu-west-1a/fargate-ip-10-0-0-1.compute.internal", ready=True)]
    with pytest.raises(NodeRemovalError, match=r"without an EC2 instance in spec\.providerID"):
        plan_removal(_nodegroup(), groups, fargate, ["f"])


def _record(desired: int, min_size: int, max_size: int | None) -> RestoreRecord:
    return RestoreRecord(desired, min_size, max_size, NOW, "op-1")


@pytest.mark.parametrize(
    ("size", "current", "record", "expected"),
    [
        (0, Scaling(1, 5, 3), None, Scaling(0, 5, 0)),
        (0, Scaling(0, 0, 0), None, Scaling(0, 1, 0)),
        # wake: exactly what was recorded
        (3, Scaling(0, 5, 0), _record(3, 1, 5), Scaling(1, 5, 3)),
        (3, Scaling(0, 2, 0), _record(3, 2, 6), Scaling(2, 6, 3)),
        # a size below the recorded minimum lowers it only that far
        (1, Scaling(0, 5, 0), _record(3, 2, 5), Scaling(1, 5, 1)),
        # no record: min/max move only when the size is outside them
        (4, Scaling(1, 5, 3), None, Scaling(1, 5, 4)),
        (7, Scaling(1, 5, 3), None, Scaling(1, 7, 7)),
        (1, Scaling(2, 5, 3), None, Scaling(1, 5, 1)),
    ],
)
def test_scaling_for_a_size(
    size: int, current: Scaling, record: RestoreRecord | None, expected: Scaling
) -> None:
    assert scaling_for(size, current, record) == expected


def test_scaling_for_a_negative_size_is_refused() -> None:
    with pytest.raises(PoolSizeError, match="size must be 0 or more"):
        scaling_for(-1, Scaling(0, 1, 0), None)


def test_record_names_are_valid_object_names() -> None:
    assert record_name("web") == "scalebot-eks-web"
    odd = record_name("Web_Nodes")
    assert odd.startswith("scalebot-eks-web-nodes-") and odd == odd.lower()
    assert record_name("Web_Nodes") != record_name("web-nodes")


def test_progress_text() -> None:
    groups = [_group("eks-web", 3, "i-1", "i-2", "i-3", states={"i-2": "Pending", "i-3": "Terminating"})]
    text = progress_text(_nodegroup(status="UPDATING"), groups)
    assert text == "node group UPDATING; 1 of 3 instances InService, 1 launching, 1 terminating"


# -- the provider against in-memory sides --------------------------------------------------------


@dataclass
class FakeAws:
    """NodegroupApi in memory; every call is appended to `calls`."""

    nodegroups: dict[str, Nodegroup]
    groups: dict[str, AutoScalingGroup]
    cluster: str = "prod"
    serves_describe_update: bool = True
    group_lag: int = 0
    """Reads of the Auto Scaling groups before an update reaches them (EKS applies it later)."""
    update_status: str = "Successful"
    calls: list[tuple[str, object]] = field(default_factory=list)
    updates: int = 0
    pending: Scaling = DAY

    def list_nodegroups(self) -> list[str]:
        return list(self.nodegroups)

    def describe_nodegroup(self, name: str) -> Nodegroup:
        self.calls.append(("DescribeNodegroup", name))
        if name not in self.nodegroups:
            raise NodegroupNotFound(name)
        return self.nodegroups[name]

    def update_scaling(self, name: str, scaling: Scaling) -> str:
        self.calls.append(("UpdateNodegroupConfig", scaling))
        self.nodegroups[name] = replace(self.nodegroups[name], scaling=scaling)
        self.pending = scaling
        if self.group_lag:
            self.updates += 1
            return f"u-{self.updates}"
        self._to_groups(name, scaling)
        self.updates += 1
        return f"u-{self.updates}"

    def _to_groups(self, name: str, scaling: Scaling) -> None:
        for group_name in self.nodegroups[name].autoscaling_groups:
            group = self.groups[group_name]
            self.groups[group_name] = replace(
                group, min_size=scaling.min_size, max_size=scaling.max_size, desired=scaling.desired
            )

    def describe_update(self, name: str, update_id: str) -> UpdateStatus | None:
        self.calls.append(("DescribeUpdate", update_id))
        if not self.serves_describe_update:
            return None
        return UpdateStatus(update_id, self.update_status, ("NodeCreationFailure: no capacity",))

    def describe_groups(self, names: Sequence[str]) -> list[AutoScalingGroup]:
        self.calls.append(("DescribeAutoScalingGroups", tuple(names)))
        if self.group_lag:
            self.group_lag -= 1
            if not self.group_lag:
                self._to_groups("web", self.pending)
        return [self.groups[n] for n in names]

    def terminate_instance(self, instance_id: str) -> None:
        self.calls.append(("TerminateInstanceInAutoScalingGroup", instance_id))
        for name, group in self.groups.items():
            kept = tuple(i for i in group.instances if i.instance_id != instance_id)
            if len(kept) != len(group.instances):
                if group.desired - 1 < group.min_size:
                    raise AssertionError(f"{instance_id}: would violate the group's min size")
                self.groups[name] = replace(group, instances=kept, desired=group.desired - 1)


@dataclass
class FakeKube:
    node_list: list[CloudNode]
    stored: dict[str, RestoreRecord] = field(default_factory=dict)

    def nodes(self, nodegroup: str | None) -> list[CloudNode]:
        return [n for n in self.node_list if nodegroup is None or n.pool == nodegroup]

    def named_nodes(self, names: Sequence[str]) -> list[CloudNode]:
        return [n for n in self.node_list if n.name in names]

    def read_record(self, pool: str) -> RestoreRecord | None:
        return self.stored.get(pool)

    def records(self) -> dict[str, RestoreRecord]:
        return dict(self.stored)

    def write_record(self, pool: str, record: RestoreRecord) -> bool:
        if pool in self.stored:
            return False
        self.stored[pool] = record
        return True

    def clear_record(self, pool: str) -> None:
        self.stored.pop(pool, None)


READS = ("DescribeNodegroup", "DescribeAutoScalingGroups")


def _changes(aws: FakeAws) -> list[tuple[str, object]]:
    """The calls that change something, and DescribeUpdate (which follows a change)."""
    return [c for c in aws.calls if c[0] not in READS]


def _world(scaling: Scaling = DAY) -> tuple[FakeAws, FakeKube, EksPoolProvider]:
    ids = [f"i-0{k}" for k in range(scaling.desired)]
    group = _group("eks-web", scaling.desired, *ids)
    aws = FakeAws(
        {"web": _nodegroup(scaling=scaling)}, {"eks-web": replace(group, min_size=scaling.min_size)}
    )
    kube = FakeKube([_node(f"n{k}", instance=i) for k, i in enumerate(ids)])
    provider = EksPoolProvider(aws, kube, clock=FakeClock(NOW), operation_timeout_seconds=30)
    return aws, kube, provider


def test_a_pool_is_a_node_group_with_its_nodes_and_sizes() -> None:
    aws, kube, provider = _world()
    kube.node_list.append(_node("other", nodegroup="batch", instance="i-0f"))
    pool = provider.get_pool("web")
    assert (pool.desired, pool.min_size, pool.max_size) == (3, 1, 5)
    assert pool.nodes == ("n0", "n1", "n2") == pool.ready_nodes
    assert pool.progress == "node group ACTIVE; 3 of 3 instances InService"
    assert not pool.settling
    with pytest.raises(PoolNotFound, match='pool "batch" not found; known pools: web'):
        provider.get_pool("batch")
    limited = EksPoolProvider(aws, kube, pools=["web"])
    assert [p.name for p in limited.list_pools()] == ["web"]
    aws.nodegroups["spare"] = _nodegroup("spare")
    with pytest.raises(PoolNotFound, match="known pools: web"):
        limited.get_pool("spare")


def test_remove_nodes_terminates_the_drained_instances_then_sets_the_config() -> None:
    aws, _, provider = _world()
    provider.remove_nodes("web", ["n2", "n1"])
    calls = _changes(aws)
    assert calls == [
        ("TerminateInstanceInAutoScalingGroup", "i-01"),
        ("TerminateInstanceInAutoScalingGroup", "i-02"),
        ("UpdateNodegroupConfig", Scaling(1, 5, 1)),
        ("DescribeUpdate", "u-1"),
    ]
    assert [i.instance_id for i in aws.groups["eks-web"].instances] == ["i-00"]
    # Repeating it (a retried step) changes nothing.
    aws.calls.clear()
    provider.remove_nodes("web", ["n2", "n1"])
    assert _changes(aws) == []


def test_to_zero_the_minimum_is_lowered_and_followed_before_any_termination() -> None:
    aws, _, provider = _world()
    provider.remove_nodes("web", ["n0", "n1", "n2"])
    calls = _changes(aws)
    assert calls[:2] == [("UpdateNodegroupConfig", Scaling(0, 5, 3)), ("DescribeUpdate", "u-1")]
    assert [c[1] for c in calls[2:5]] == ["i-00", "i-01", "i-02"]
    assert aws.nodegroups["web"].scaling == Scaling(0, 5, 0)


def test_terminations_wait_until_the_group_minimum_allows_them() -> None:
    aws, _, provider = _world()
    aws.group_lag = 3  # the group sees the lowered minSize at the third read after the update
    provider.remove_nodes("web", ["n0", "n1", "n2"])
    names = [c[0] for c in aws.calls if c[0] not in ("DescribeNodegroup", "DescribeUpdate")]
    first = names.index("TerminateInstanceInAutoScalingGroup")
    assert names[:first] == [
        "DescribeAutoScalingGroups",
        "UpdateNodegroupConfig",
        *["DescribeAutoScalingGroups"] * 2,
    ]
    assert aws.groups["eks-web"].desired == 0 and aws.nodegroups["web"].scaling == Scaling(0, 5, 0)


def test_wake_restores_min_max_and_desired_exactly() -> None:
    aws, kube, provider = _world()
    assert provider.record_restore("web", _record(3, 1, 5)) is True
    assert provider.record_restore("web", _record(0, 0, 5)) is False, "an existing record is kept"
    provider.remove_nodes("web", ["n0", "n1", "n2"])
    assert aws.nodegroups["web"].scaling == Scaling(0, 5, 0)
    assert provider.get_pool("web").restore == _record(3, 1, 5)
    provider.set_size("web", 3)
    assert aws.nodegroups["web"].scaling == Scaling(1, 5, 3)
    provider.clear_restore("web")
    assert kube.stored == {}


def test_without_describe_update_the_node_group_is_polled_until_it_matches() -> None:
    aws, _, provider = _world()
    aws.serves_describe_update = False
    provider.set_size("web", 4)  # DescribeUpdate answers "not served": polls from then on
    assert ("DescribeUpdate", "u-1") in aws.calls
    aws.calls.clear()
    settled = aws.nodegroups["web"]
    answers = iter(
        [
            settled,  # set_size reads the node group
            replace(settled, status="UPDATING"),  # the update not applied yet
            replace(settled, status="UPDATING", scaling=Scaling(1, 5, 5)),  # applied, still updating
        ]
    )
    original = aws.describe_nodegroup

    def describe(name: str) -> Nodegroup:
        answer = next(answers, None)
        if answer is None:
            return original(name)
        aws.calls.append(("DescribeNodegroup", name))
        return answer

    aws.describe_nodegroup = describe  # type: ignore[method-assign]
    provider.set_size("web", 5)
    assert ("DescribeUpdate", "u-2") not in aws.calls, "not asked again once it was missing"
    # read, not applied, still updating, then settled with the new scalingConfig
    assert [c[0] for c in aws.calls].count("DescribeNodegroup") == 4
    assert aws.nodegroups["web"].scaling == Scaling(1, 5, 5)


def test_a_failed_or_stuck_update_raises_with_the_reason() -> None:
    aws, _, provider = _world()
    aws.update_status = "Failed"
    with pytest.raises(NodegroupUpdateError, match=r"update u-1 .*Failed: NodeCreationFailure: no capacity"):
        provider.set_size("web", 4)
    aws.update_status = "InProgress"
    with pytest.raises(CloudOperationTimeout, match=r"not finished after 30 s"):
        provider.set_size("web", 2)


def test_prepare_removal_refuses_nodes_of_another_node_group() -> None:
    aws, kube, provider = _world()
    kube.node_list.append(_node("x", nodegroup="batch", instance="i-0f"))
    with pytest.raises(NodeRemovalError, match="nodes not in node group web: x"):
        provider.prepare_removal("web", ["n0", "x"])
    assert not _changes(aws)
