"""Is scalebot's field-level admission policy in force on a cluster?

manifests/base/admission-policy.yaml ships a ValidatingAdmissionPolicy `scalebot-fields` and its
binding (admissionregistration.k8s.io/v1, Kubernetes 1.30 and later): it limits what scalebot's
ServiceAccount may change inside the objects RBAC lets it patch. Where it is absent (an older
cluster, an install without it, or no right to read it), a leaked token can rewrite those objects
whole; `scalebot run` says so at start and /readyz shows it (`field_policy_status`).

The answer is read, never acted on: scalebot only GETs the two objects by name (rbac.yaml grants
`get` on those names only) and never creates or changes them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engine.kube import errors

POLICY_NAME = "scalebot-fields"
GROUP_VERSION = "admissionregistration.k8s.io/v1"
POLICY_PATH = f"/apis/{GROUP_VERSION}/validatingadmissionpolicies/{POLICY_NAME}"
BINDING_PATH = f"/apis/{GROUP_VERSION}/validatingadmissionpolicybindings/{POLICY_NAME}"
RECHECK_SECONDS = 300.0
"""How long /readyz shows one reading before asking the API server again."""


class PathReader(Protocol):
    def request_json(
        self, method: str, path: str, *, verb: str, resource: str, timeout: float | None = None
    ) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    in_force: bool
    detail: str
    answered: bool = True
    """False when the API server did not answer: its own start-up warning already says so."""


def judge(policy: Mapping[str, Any] | None, binding: Mapping[str, Any] | None) -> PolicyStatus:
    """Pure: what the two objects (None: not found) say about the policy being in force."""
    if policy is None:
        return PolicyStatus(False, f"ValidatingAdmissionPolicy {POLICY_NAME} is not installed")
    if binding is None:
        return PolicyStatus(False, f"ValidatingAdmissionPolicyBinding {POLICY_NAME} is not installed")
    spec = binding.get("spec") or {}
    if spec.get("policyName") != POLICY_NAME:
        return PolicyStatus(
            False, f"ValidatingAdmissionPolicyBinding {POLICY_NAME} binds {spec.get('policyName')!r}"
        )
    if "Deny" not in (spec.get("validationActions") or ()):
        return PolicyStatus(False, f"ValidatingAdmissionPolicyBinding {POLICY_NAME} does not Deny")
    return PolicyStatus(True, f"ValidatingAdmissionPolicy {POLICY_NAME} in force")


def read_status(api: PathReader, *, timeout: float | None = None) -> PolicyStatus:
    """GET the policy and its binding by name; a cluster that cannot answer is named as such."""
    try:
        policy = _get_or_none(api, POLICY_PATH, "validatingadmissionpolicies", timeout)
        binding = _get_or_none(api, BINDING_PATH, "validatingadmissionpolicybindings", timeout)
    except errors.Forbidden:
        why = f"cannot tell: no right to read ValidatingAdmissionPolicy {POLICY_NAME} (rbac.yaml grants get)"
        return PolicyStatus(False, why)
    except errors.TransportError as exc:
        return PolicyStatus(False, f"cannot tell: {exc}", answered=False)
    except errors.KubeError as exc:
        return PolicyStatus(False, f"cannot tell: {exc}")
    return judge(policy, binding)


def _get_or_none(
    api: PathReader, path: str, resource: str, timeout: float | None
) -> Mapping[str, Any] | None:
    try:
        return api.request_json("GET", path, verb="get", resource=resource, timeout=timeout)
    except errors.NotFound:
        # Also what a server older than 1.30 answers: it does not serve admissionregistration/v1 policies.
        return None


def start_line(cluster: str, status: PolicyStatus) -> str | None:
    """The one line `scalebot run` prints at start for a cluster without the policy; None with it."""
    if status.in_force or not status.answered:
        return None
    return (
        f"warning: clusters.{cluster}: field-level admission policy not in force ({status.detail}): "
        "scalebot's credentials can change whole objects it patches; install "
        "manifests/base/admission-policy.yaml (Kubernetes 1.30 or later, see the README's Install section)"
    )


class StatusCache:
    """The readiness detail: one reading per cluster, refreshed at most every RECHECK_SECONDS."""

    def __init__(
        self,
        read: Callable[[], PolicyStatus],
        *,
        first: PolicyStatus | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._clock = clock
        self._lock = threading.Lock()
        self._status = first
        self._at = clock() if first is not None else 0.0

    def __call__(self) -> str:
        """A readiness check that always passes (scalebot works either way) and says which it is."""
        with self._lock:
            if self._status is None or self._clock() - self._at >= RECHECK_SECONDS:
                self._status = self._read()
                self._at = self._clock()
            status = self._status
        return status.detail if status.in_force else f"absent: {status.detail}"
