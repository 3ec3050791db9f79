"""The placement simulator: examples for each rule, and properties over random clusters (hypothesis).

The properties check every placement the simulator makes against an independent reading of the
rules: a node never holds more than its allocatable, a pod never lands on a taint it does not
tolerate, a node its selector or affinity excludes, next to a pod its anti-affinity (or the other
pod's) forbids, or on a host port already taken. The simulator against the real kube-scheduler is
tests/e2e/test_placement_scheduler.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.domain.model import LabelSelector, NodeInfo, PodInfo, Taint
from engine.domain.scheduling import (
    AffinityTerm,
    NodeRequirement,
    NodeSelectorTerm,
    PodScheduling,
    SpreadConstraint,
    Toleration,
)
from engine.planning.placement import HOSTNAME_KEY, ZONE_KEY, place
from tests.builders import typed_pod

GiB = 1024**3


# Own builders, not tests/builders.py's: the planners read every label, toleration and request, and the
# shared kwok node and pause pod carry kwok's labels, annotation and toleration; each scenario here
# states exactly what its nodes offer and its pods ask.
def node(name: str, cpu: int = 4000, mem: int = 8 * GiB, pods: int = 110, **kw: object) -> NodeInfo:
    labels = {HOSTNAME_KEY: name, **dict(kw.pop("labels", {}))}  # type: ignore[call-overload]
    return NodeInfo(name=name, allocatable={"cpu": cpu, "memory": mem, "pods": pods}, labels=labels, **kw)  # type: ignore[arg-type]


def pod(
    name: str,
    cpu: int = 500,
    mem: int = GiB,
    ns: str = "shop",
    node: str = "",
    labels: dict[str, str] | None = None,
    **scheduling: object,
) -> PodInfo:
    asks = PodScheduling(requests={"cpu": cpu, "memory": mem}, **scheduling)  # type: ignore[arg-type]
    return PodInfo(namespace=ns, name=name, uid=name, node_name=node, labels=labels or {}, scheduling=asks)


# -- examples --------------------------------------------------------------------------------------


def test_pods_fill_the_fullest_node_first_and_report_the_schedulers_reason_when_nothing_is_left() -> None:
    nodes = [node("a", cpu=2000), node("b", cpu=2000)]
    result = place(nodes, [], [pod(f"p{i}", cpu=600) for i in range(7)])
    assert Counter(result.assignments.values()) == {"a": 3, "b": 3}
    assert result.unplaced == {"shop/p6": "0/2 nodes are available: 2 Insufficient cpu."}
    assert not result.fits


def test_residents_use_their_nodes_and_residents_elsewhere_are_ignored() -> None:
    nodes = [node("a", cpu=1000)]
    residents = [pod("ds-a", cpu=800, node="a"), pod("gone", cpu=1000, node="removed")]
    result = place(nodes, residents, [pod("x", cpu=300)])
    assert result.unplaced == {"shop/x": "0/1 nodes are available: 1 Insufficient cpu."}


def test_max_pods_counts() -> None:
    result = place(
        [node("a", pods=2)], [pod("r", node="a", cpu=0, mem=0)], [pod("x", cpu=0), pod("y", cpu=0)]
    )
    assert len(result.assignments) == 1
    assert "Too many pods" in result.unplaced["shop/y"]


def test_taints_need_tolerations_and_a_cordoned_node_takes_nothing_unless_tolerated() -> None:
    tainted = node("gpu", taints=(Taint("nvidia.com/gpu", "NoSchedule", "true"),))
    soft = node("soft", taints=(Taint("x", "PreferNoSchedule"),))
    cordoned = node("c", unschedulable=True)
    assert place([tainted], [], [pod("p")]).unplaced == {
        "shop/p": "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: true}."
    }
    assert place([soft], [], [pod("p")]).assignments == {"shop/p": "soft"}
    tolerant = pod(
        "t", tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
    )
    assert place([tainted], [], [tolerant]).fits
    assert place([cordoned], [], [pod("p")]).unplaced["shop/p"].endswith("1 node(s) were unschedulable.")
    # A key-less Exists toleration tolerates everything, the unschedulable taint included.
    assert place([cordoned, tainted], [], [pod("any", tolerations=(Toleration(operator="Exists"),))]).fits


def test_node_selector_and_required_affinity() -> None:
    nodes = [node("a", labels={"pool": "web", "gen": "3"}), node("b", labels={"pool": "batch", "gen": "5"})]
    assert place(nodes, [], [pod("s", node_selector={"pool": "batch"})]).assignments == {"shop/s": "b"}
    newer = NodeSelectorTerm((NodeRequirement("gen", "Gt", ("4",)),))
    named = NodeSelectorTerm((NodeRequirement("metadata.name", "In", ("a",), field=True),))
    assert place(nodes, [], [pod("g", node_affinity=(newer,))]).assignments == {"shop/g": "b"}
    assert place(nodes, [], [pod("n", node_affinity=(named,))]).assignments == {"shop/n": "a"}
    nowhere = NodeSelectorTerm((NodeRequirement("pool", "In", ("gpu",)),))
    assert (
        "didn't match Pod's node affinity/selector"
        in place(nodes, [], [pod("x", node_affinity=(nowhere,))]).unplaced["shop/x"]
    )


def test_anti_affinity_holds_in_both_directions() -> None:
    nodes = [node("a"), node("b")]
    apart = AffinityTerm(LabelSelector(match_labels={"app": "db"}), frozenset({"shop"}), HOSTNAME_KEY)
    dbs = [pod(f"db-{i}", labels={"app": "db"}, anti_affinity=(apart,)) for i in range(3)]
    result = place(nodes, [], dbs)
    assert sorted(result.assignments.values()) == ["a", "b"]
    assert list(result.unplaced.values()) == [
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    ]
    # A resident's term keeps a matching newcomer (without terms of its own) off its node.
    resident = pod("db-r", labels={"app": "db"}, anti_affinity=(apart,), node="a")
    assert place(nodes, [resident], [pod("plain", labels={"app": "db"})]).assignments == {"shop/plain": "b"}
    # Another namespace is not selected.
    assert place([node("a")], [resident], [pod("other", ns="blog", labels={"app": "db"})]).fits


def test_topology_spread_on_zones_with_max_skew_one() -> None:
    nodes = [node(f"n{i}", cpu=100_000, labels={ZONE_KEY: z}) for i, z in enumerate("aab")]
    spread = SpreadConstraint(1, ZONE_KEY, LabelSelector(match_labels={"app": "web"}))
    web = [pod(f"w{i}", labels={"app": "web"}, spread=(spread,)) for i in range(4)]
    result = place(nodes, [], web)
    zones = Counter(
        next(n.labels[ZONE_KEY] for n in nodes if n.name == where) for where in result.assignments.values()
    )
    assert result.fits and zones == {"a": 2, "b": 2}


def test_spread_counts_only_nodes_the_pod_may_use_and_min_domains() -> None:
    nodes = [node("a", labels={ZONE_KEY: "z1"}), node("b", labels={ZONE_KEY: "z2"})]
    spread = SpreadConstraint(1, ZONE_KEY, LabelSelector(match_labels={"app": "web"}), min_domains=3)
    residents = [pod("w0", labels={"app": "web"}, node="a")]
    # Two domains < minDomains 3: the global minimum is 0, so zone z1 (1 pod) takes no second one.
    result = place(
        nodes, residents, [pod("w1", labels={"app": "web"}, spread=(spread,), node_selector={ZONE_KEY: "z1"})]
    )
    assert "topology spread" in result.unplaced["shop/w1"]


def test_host_ports_conflict() -> None:
    nodes = [node("a")]
    result = place(
        nodes,
        [pod("r", host_ports=(("TCP", 80),), node="a")],
        [pod("x", host_ports=(("TCP", 80),)), pod("y", host_ports=(("UDP", 80),))],
    )
    assert result.assignments == {"shop/y": "a"}
    assert "free ports" in result.unplaced["shop/x"]


def test_what_is_not_modelled_never_fits() -> None:
    raw = {
        "metadata": {"namespace": "shop", "name": "p"},
        "spec": {
            "containers": [{"name": "c"}],
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOSTNAME_KEY}]
                }
            },
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    result = place([node("a")], [], [typed_pod(raw)])
    why = "not modelled, so not assumed to fit: required pod affinity; volume data may be bound to a zone"
    assert result.unplaced == {"shop/p": why}


def test_effective_requests_follow_the_scheduler_for_init_and_sidecar_containers() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "200m", "memory": "100Mi"}}},
            {"resources": {"limits": {"cpu": "1"}}},
        ],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"resources": {"requests": {"cpu": "2", "memory": "50Mi"}}},
        ],
        "overhead": {"cpu": "10m"},
    }
    # app 200m + 1000m + sidecar 100m = 1300m; init 2000m + the sidecar before it = 2100m; + 10m overhead.
    assert typed_pod({"spec": spec}).scheduling.requests == {"cpu": 2110, "memory": 100 * 1024**2}


def test_the_adapters_read_what_the_api_returns() -> None:
    n = NodeInfo.from_raw(
        {
            "metadata": {"name": "w1", "labels": {ZONE_KEY: "z"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoExecute"}]},
            "status": {"allocatable": {"cpu": "3500m", "memory": "7Gi", "pods": "58", "nvidia.com/gpu": "1"}},
        }
    )
    assert n.allocatable == {"cpu": 3500, "memory": 7 * GiB, "pods": 58, "nvidia.com/gpu": 1}
    assert n.labels == {ZONE_KEY: "z"} and n.unschedulable and n.taints == (Taint("k", "NoExecute"),)
    p = typed_pod(
        {
            "metadata": {"namespace": "shop", "name": "web-1", "labels": {"app": "web", "rev": "7"}},
            "spec": {
                "nodeName": "w1",
                "containers": [{
                    "resources": {"requests": {"cpu": "250m"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                }],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev"]},
                    {"maxSkew": 1, "topologyKey": HOSTNAME_KEY, "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {"app": "web"}}},
                ],
            },
        }
    )  # fmt: skip
    asks = p.scheduling
    assert p.node_name == "w1" and asks.requests == {"cpu": 250} and asks.host_ports == (("TCP", 8080),)
    assert asks.tolerations == (Toleration(key="k", operator="Exists"),)
    assert asks.spread == (
        SpreadConstraint(1, ZONE_KEY, LabelSelector(match_labels={"app": "web", "rev": "7"})),
    )


def test_a_node_without_the_hostname_label_counts_as_its_own_domain() -> None:
    bare = [NodeInfo(name=name, allocatable={"cpu": 4000, "memory": 8 * GiB}) for name in ("a", "b")]
    apart = AffinityTerm(LabelSelector(match_labels={"app": "db"}), frozenset({"shop"}), HOSTNAME_KEY)
    dbs = [pod(f"db-{i}", labels={"app": "db"}, anti_affinity=(apart,)) for i in range(2)]
    assert sorted(place(bare, [], dbs).assignments.values()) == ["a", "b"]


# -- properties ------------------------------------------------------------------------------------

LABELS = {"pool": ("web", "batch"), ZONE_KEY: ("z1", "z2")}
TOLERATIONS = (Toleration("dedicated", "Equal", "gpu"), Toleration("spot", "Exists"))
TAINTS = (
    Taint("dedicated", "NoSchedule", "gpu"),
    Taint("spot", "NoExecute", "true"),
    Taint("soft", "PreferNoSchedule"),
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeInfo], list[PodInfo], list[PodInfo]]:
    nodes = []
    for i in range(draw(st.integers(1, 5))):
        labels = {key: draw(st.sampled_from(values)) for key, values in LABELS.items()}
        nodes.append(
            node(
                f"n{i}",
                cpu=draw(st.sampled_from((1000, 2000, 4000))),
                mem=draw(st.sampled_from((2, 4, 8))) * GiB,
                pods=draw(st.integers(2, 8)),
                labels=labels,
                taints=tuple(draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True))),
                unschedulable=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    apart = AffinityTerm(LabelSelector(match_labels={"app": "db"}), frozenset({"shop"}), HOSTNAME_KEY)
    in_z1 = NodeSelectorTerm((NodeRequirement(ZONE_KEY, "In", ("z1",)),))

    def some_pod(name: str, on: str = "") -> PodInfo:
        app = draw(st.sampled_from(("web", "db", "batch")))
        return pod(
            name,
            cpu=draw(st.sampled_from((0, 100, 500, 1500))),
            mem=draw(st.sampled_from((0, 1, 3))) * GiB,
            labels={"app": app},
            node_selector=draw(st.sampled_from(({}, {"pool": "web"}, {"pool": "batch"}))),
            node_affinity=draw(st.sampled_from((None, (in_z1,)))),
            tolerations=tuple(draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2))),
            anti_affinity=(apart,) if app == "db" and draw(st.booleans()) else (),
            host_ports=draw(st.sampled_from(((), (("TCP", 80),)))),
            node=on,
        )

    residents = [
        some_pod(f"r{i}", on=draw(st.sampled_from([n.name for n in nodes])))
        for i in range(draw(st.integers(0, 4)))
    ]
    incoming = [some_pod(f"p{i}") for i in range(draw(st.integers(1, 10)))]
    return nodes, residents, incoming


def _violations(
    nodes: Sequence[NodeInfo], residents: Sequence[PodInfo], placed: Mapping[str, PodInfo]
) -> list[str]:
    """Every rule broken by the final arrangement, read independently of the simulator."""
    by_name = {n.name: n for n in nodes}
    on_node: dict[str, list[PodInfo]] = {
        n.name: [p for p in residents if p.node_name == n.name] for n in nodes
    }
    for where, p in placed.items():
        on_node[where.split("@")[1]].append(p)
    problems = []
    for name, pods in on_node.items():
        n = by_name[name]
        for resource in ("cpu", "memory"):
            if sum(p.scheduling.requests.get(resource, 0) for p in pods) > n.allocatable[resource]:
                problems.append(f"{name}: {resource} over allocatable")
        if len(pods) > n.allocatable["pods"]:
            problems.append(f"{name}: too many pods")
    for where, p in placed.items():
        n = by_name[where.split("@")[1]]
        blocking = [t for t in n.taints if t.effect in ("NoSchedule", "NoExecute")]
        if n.unschedulable:
            blocking.append(Taint("node.kubernetes.io/unschedulable", "NoSchedule"))
        for t in blocking:
            if not any(tol.tolerates(t) for tol in p.scheduling.tolerations):
                problems.append(f"{p.key} on {n.name}: untolerated {t}")
        if any(n.labels.get(k) != v for k, v in p.scheduling.node_selector.items()):
            problems.append(f"{p.key} on {n.name}: node selector")
        if p.scheduling.node_affinity is not None and not any(
            all(n.labels.get(r.key) in r.values for r in term.requirements)
            for term in p.scheduling.node_affinity
        ):
            problems.append(f"{p.key} on {n.name}: node affinity")
        others = [o for o in on_node[n.name] if o is not p]
        for o in others:
            if any(
                t.selector.matches(o.labels) and o.namespace in t.namespaces
                for t in p.scheduling.anti_affinity
            ) or any(
                t.selector.matches(p.labels) and p.namespace in t.namespaces
                for t in o.scheduling.anti_affinity
            ):
                problems.append(f"{p.key} and {o.key} on {n.name}: anti-affinity")
            if set(p.scheduling.host_ports) & set(o.scheduling.host_ports):
                problems.append(f"{p.key} and {o.key} on {n.name}: host port")
    return problems


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_placement_respects_allocatable_taints_selectors_anti_affinity_and_ports(
    cluster: tuple[list[NodeInfo], list[PodInfo], list[PodInfo]],
) -> None:
    nodes, residents, incoming = cluster
    result = place(nodes, residents, incoming)
    assert set(result.assignments) | set(result.unplaced) == {p.key for p in incoming}
    assert not set(result.assignments) & set(result.unplaced)
    by_key = {p.key: p for p in incoming}
    placed = {f"{key}@{where}": by_key[key] for key, where in result.assignments.items()}
    # Residents that broke a rule before the simulation are not the simulator's doing: only count
    # violations that involve a placed pod.
    before = set(_violations(nodes, residents, {}))
    assert [v for v in _violations(nodes, residents, placed) if v not in before] == []


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_other_pods_never_make_room_for_a_pod_that_fits_nowhere_alone(
    cluster: tuple[list[NodeInfo], list[PodInfo], list[PodInfo]],
) -> None:
    nodes, residents, incoming = cluster
    result = place(nodes, residents, incoming)
    for p in incoming:
        if not place(nodes, residents, [p]).fits:
            assert p.key in result.unplaced
