"""engine.domain.model.PdbIndex answers exactly what the plain scan (pdbs_for_pod) answers, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain.model import (
    LabelSelector,
    LabelSelectorRequirement,
    PdbIndex,
    PdbInfo,
    PodInfo,
    pdbs_for_pod,
)
from tests import builders

NAMESPACES = st.sampled_from(["a", "b"])
LABELS = st.dictionaries(st.sampled_from(["app", "tier", "team"]), st.sampled_from(["x", "y"]), max_size=3)
SELECTORS = st.builds(
    LabelSelector,
    match_labels=LABELS,
    match_expressions=st.lists(
        st.builds(
            LabelSelectorRequirement,
            key=st.sampled_from(["app", "tier"]),
            operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
            values=st.tuples(st.sampled_from(["x", "y"])),
        ),
        max_size=2,
    ).map(tuple),
)
PDBS = st.lists(
    st.builds(PdbInfo, namespace=NAMESPACES, name=st.sampled_from(["p1", "p2", "p3"]), selector=SELECTORS),
    max_size=6,
)
PODS = st.lists(
    st.builds(
        PodInfo,
        namespace=NAMESPACES,
        name=st.just("pod"),
        uid=st.just("u1"),
        node_name=st.just("n1"),
        labels=LABELS,
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(pdbs=PDBS, pods=PODS)
def test_the_index_matches_the_plain_scan(pdbs: list[PdbInfo], pods: list[PodInfo]) -> None:
    index = PdbIndex(pdbs)
    for pod in pods:
        assert index.for_pod(pod) == pdbs_for_pod(pod, pdbs)


def test_an_empty_selector_selects_nothing_through_the_index_too() -> None:
    pod = builders.pod("web", namespace="a", labels={"app": "x"})
    empty = builders.pdb("all", namespace="a", match_labels={})
    web = builders.pdb("web", namespace="a", match_labels={"app": "x"})
    other_ns = builders.pdb("web", namespace="b", match_labels={"app": "x"})
    assert PdbIndex([empty, web, other_ns]).for_pod(pod) == [web]
