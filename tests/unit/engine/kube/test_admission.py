"""engine.kube.admission: whether scalebot's field-level admission policy is in force, as read
through the API (the answers a cluster gives: both objects, one missing, a server older than 1.30
that does not serve them, no right to read them), the start-up line and the /readyz detail."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from engine.kube import admission, errors

POLICY = {"metadata": {"name": "scalebot-fields"}}
BINDING = {"spec": {"policyName": "scalebot-fields", "validationActions": ["Deny"]}}


class Reader:
    def __init__(self, answers: Mapping[str, Any]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def request_json(
        self, method: str, path: str, *, verb: str, resource: str, timeout: float | None = None
    ) -> Mapping[str, Any]:
        assert (method, verb) == ("GET", "get"), "read-only"
        self.calls.append(resource)
        answer = self.answers[resource]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


def reader(policy: Any = POLICY, binding: Any = BINDING) -> Reader:
    return Reader({"validatingadmissionpolicies": policy, "validatingadmissionpolicybindings": binding})


GONE = errors.NotFound(status=404, message="not found")


@pytest.mark.parametrize(
    ("policy", "binding", "in_force", "detail"),
    [
        (POLICY, BINDING, True, "ValidatingAdmissionPolicy scalebot-fields in force"),
        (GONE, GONE, False, "ValidatingAdmissionPolicy scalebot-fields is not installed"),
        (POLICY, GONE, False, "ValidatingAdmissionPolicyBinding scalebot-fields is not installed"),
        (POLICY, {"spec": {"policyName": "other", "validationActions": ["Deny"]}}, False, "binds 'other'"),
        (
            POLICY,
            {"spec": {"policyName": "scalebot-fields", "validationActions": ["Audit"]}},
            False,
            "not Deny",
        ),
        (
            errors.Forbidden(status=403, message="forbidden"),
            BINDING,
            False,
            "cannot tell: no right to read ValidatingAdmissionPolicy scalebot-fields",
        ),
        (errors.ServerError(status=500, message="etcd down"), BINDING, False, "cannot tell: "),
    ],
)
def test_read_status(policy: Any, binding: Any, in_force: bool, detail: str) -> None:
    status = admission.read_status(reader(policy, binding))
    assert status.in_force is in_force and detail in status.detail


def test_start_line_only_without_the_policy() -> None:
    assert admission.start_line("prod", admission.read_status(reader())) is None
    line = admission.start_line("prod", admission.read_status(reader(GONE, GONE)))
    assert line is not None and "\n" not in line
    assert line.startswith("warning: clusters.prod: field-level admission policy not in force")
    assert "admission-policy.yaml" in line and "1.30" in line
    silent = admission.read_status(reader(errors.TransportError(message="connection refused"), BINDING))
    assert not silent.in_force and admission.start_line("prod", silent) is None, (
        "an API server that does not answer has its own start-up warning"
    )


def test_readiness_detail_is_cached_and_rechecked() -> None:
    now = [0.0]
    cluster = reader(GONE, GONE)
    first = admission.read_status(cluster)
    check = admission.StatusCache(lambda: admission.read_status(cluster), first=first, clock=lambda: now[0])
    assert check() == "absent: ValidatingAdmissionPolicy scalebot-fields is not installed"
    assert len(cluster.calls) == 2, "the start-up reading is reused"
    cluster.answers = {"validatingadmissionpolicies": POLICY, "validatingadmissionpolicybindings": BINDING}
    now[0] = admission.RECHECK_SECONDS - 1
    assert check().startswith("absent")
    now[0] = admission.RECHECK_SECONDS
    assert check() == "ValidatingAdmissionPolicy scalebot-fields in force"
