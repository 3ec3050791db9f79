"""Scale-up advice: cluster-autoscaler's estimate and least-waste expander, with its log line."""

from __future__ import annotations

from engine.domain.model import NodeInfo, PodInfo, Taint
from engine.domain.scheduling import PodScheduling, Toleration
from engine.planning.advice import PoolTemplate, advise_scale_up

GiB = 1024**3


def template(
    pool: str, cpu: int, mem_gib: int, *, size: int = 1, max_size: int | None = None, **kw: object
) -> PoolTemplate:
    node = NodeInfo(
        name=f"{pool}-0",
        allocatable={"cpu": cpu, "memory": mem_gib * GiB, "pods": 110},
        labels={"pool": pool},
        taints=kw.pop("taints", ()),  # type: ignore[arg-type]
    )
    return PoolTemplate(
        pool=pool,
        node=node,
        capacity={"cpu": cpu, "memory": mem_gib * GiB},
        size=size,
        max_size=max_size,
        **kw,  # type: ignore[arg-type]
    )


def pending(name: str, cpu: int, mem_gib: float, **kw: object) -> PodInfo:
    asks = PodScheduling(requests={"cpu": cpu, "memory": int(mem_gib * GiB)}, **kw)  # type: ignore[arg-type]
    return PodInfo(namespace="shop", name=name, uid=name, scheduling=asks)


def test_the_waste_line_matches_cluster_autoscaler() -> None:
    # One 4-CPU / 16 GiB node for pods requesting 3 CPU / 8 GiB.
    advice = advise_scale_up([pending("a", 2000, 4), pending("b", 1000, 4)], [template("web", 4000, 16)])
    assert advice.best is not None
    assert advice.best.nodes == 1
    assert (
        advice.best.describe()
        == "Expanding Node Group web would waste 25.00% CPU, 50.00% Memory, 37.50% Blended"
    )


def test_the_pool_that_wastes_least_wins_and_each_option_counts_its_nodes() -> None:
    pods = [pending(f"p{i}", 1500, 3) for i in range(4)]
    advice = advise_scale_up(pods, [template("big", 16000, 64), template("small", 4000, 8)])
    by_pool = {o.pool: o for o in advice.options}
    assert by_pool["small"].nodes == 2  # two 1.5-CPU pods per 4-CPU node
    assert by_pool["big"].nodes == 1
    assert advice.best is not None and advice.best.pool == "small"
    assert by_pool["small"].score < by_pool["big"].score
    assert advice.unhelped == {}


def test_the_pool_maximum_and_taints_limit_what_a_pool_can_take() -> None:
    gpu = template("gpu", 8000, 32, taints=(Taint("nvidia.com/gpu", "NoSchedule", "true"),))
    capped = template("capped", 2000, 4, size=3, max_size=4)
    pods = [pending(f"p{i}", 1500, 1) for i in range(3)]
    advice = advise_scale_up(pods, [gpu, capped])
    assert [o.pool for o in advice.options] == ["capped"]
    [option] = advice.options
    assert option.nodes == 1 and len(option.pods) == 1 and option.limited_by_max
    assert set(advice.unhelped) == {"shop/p1", "shop/p2"}
    assert "untolerated taint {nvidia.com/gpu: true}" in advice.unhelped["shop/p1"]
    tolerant = [pending("t", 1500, 1, tolerations=(Toleration("nvidia.com/gpu", "Exists"),))]
    assert advise_scale_up(tolerant, [gpu]).best is not None


def test_daemonsets_on_new_nodes_take_room() -> None:
    ds = PodInfo(
        namespace="kube-system", name="agent", uid="agent", scheduling=PodScheduling(requests={"cpu": 1000})
    )
    advice = advise_scale_up([pending("p", 3500, 1)], [template("web", 4000, 8, daemonsets=(ds,))])
    assert advice.best is None
    assert advice.unhelped["shop/p"] == "pool web: a new node: 0/1 nodes are available: 1 Insufficient cpu."
