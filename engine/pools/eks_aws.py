"""The AWS adapter of the EKS provider: `NodegroupApi` over boto3 (EKS and Auto Scaling clients).

Credentials and region come from the standard AWS chain (environment, shared config and credential
files, web identity / IRSA, container and instance metadata); `region` overrides the chain's region.
`endpoint_url` sends both clients to another endpoint: for tests against a local AWS stand-in only.

Errors: throttling, 5xx answers and connection failures become `engine.kube.errors.TransportError`
(the runner retries a step on it, as for the API server); anything else is an `AwsCallError` that
names the call and, for AccessDenied, the IAM permission it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from engine.domain.errors import Category, ScalebotError
from engine.kube import errors
from engine.pools.eks import (
    AutoScalingGroup,
    GroupInstance,
    Nodegroup,
    NodegroupNotFound,
    Scaling,
    UpdateStatus,
)

TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ServerException",
        "InternalFailure",
        "ResourceContention",
        "ResourceInUseException",
    }
)
"""Worth retrying: throttled, the service failed, or the node group is busy with another update."""
PERMISSIONS = {
    "ListNodegroups": "eks:ListNodegroups",
    "DescribeNodegroup": "eks:DescribeNodegroup",
    "UpdateNodegroupConfig": "eks:UpdateNodegroupConfig",
    "DescribeUpdate": "eks:DescribeUpdate",
    "DescribeAutoScalingGroups": "autoscaling:DescribeAutoScalingGroups",
    "TerminateInstanceInAutoScalingGroup": "autoscaling:TerminateInstanceInAutoScalingGroup",
}


class AwsCallError(ScalebotError, RuntimeError):
    """An AWS call that failed for a reason a retry does not fix; the message says which and why."""

    category = Category.CONFIGURATION


class Boto3Nodegroups:
    """NodegroupApi for the EKS cluster `cluster` (see the module docstring)."""

    def __init__(
        self,
        cluster: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        session: Any = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.cluster = cluster
        session = session or boto3.session.Session(region_name=region or None)
        config = Config(
            connect_timeout=timeout_seconds,
            read_timeout=timeout_seconds,
            retries={"mode": "standard", "max_attempts": 3},
        )
        try:
            self._eks = session.client("eks", endpoint_url=endpoint_url or None, config=config)
            self._autoscaling = session.client(
                "autoscaling", endpoint_url=endpoint_url or None, config=config
            )
        except NoRegionError:
            raise AwsCallError(
                "no AWS region: set aws_region in the cluster's settings, or AWS_REGION / a profile's region"
            ) from None

    def list_nodegroups(self) -> list[str]:
        names: list[str] = []
        token = ""
        while True:
            kwargs = {"nextToken": token} if token else {}
            page = self._call("ListNodegroups", self._eks.list_nodegroups, clusterName=self.cluster, **kwargs)
            names.extend(str(n) for n in page.get("nodegroups") or ())
            token = str(page.get("nextToken") or "")
            if not token:
                return names

    def describe_nodegroup(self, name: str) -> Nodegroup:
        try:
            page = self._call(
                "DescribeNodegroup",
                self._eks.describe_nodegroup,
                clusterName=self.cluster,
                nodegroupName=name,
            )
        except _NotFound:
            raise NodegroupNotFound(name) from None
        raw = page.get("nodegroup") or {}
        scaling = raw.get("scalingConfig") or {}
        resources = raw.get("resources") or {}
        issues = tuple(
            f"{i.get('code', '')}: {i.get('message', '')}".strip(": ")
            for i in (raw.get("health") or {}).get("issues") or ()
        )
        return Nodegroup(
            name=str(raw.get("nodegroupName") or name),
            status=str(raw.get("status") or ""),
            scaling=Scaling(
                min_size=int(scaling.get("minSize") or 0),
                max_size=int(scaling.get("maxSize") or 0),
                desired=int(scaling.get("desiredSize") or 0),
            ),
            autoscaling_groups=tuple(
                str(g["name"]) for g in resources.get("autoScalingGroups") or () if g.get("name")
            ),
            health_issues=issues,
        )

    def update_scaling(self, name: str, scaling: Scaling) -> str:
        page = self._call(
            "UpdateNodegroupConfig",
            self._eks.update_nodegroup_config,
            clusterName=self.cluster,
            nodegroupName=name,
            scalingConfig={
                "minSize": scaling.min_size,
                "maxSize": scaling.max_size,
                "desiredSize": scaling.desired,
            },
        )
        return str((page.get("update") or {}).get("id") or "")

    def describe_update(self, name: str, update_id: str) -> UpdateStatus | None:
        try:
            page = self._call(
                "DescribeUpdate",
                self._eks.describe_update,
                name=self.cluster,
                nodegroupName=name,
                updateId=update_id,
            )
        except _NotServed:
            return None
        raw = page.get("update") or {}
        problems = tuple(
            f"{e.get('errorCode', '')}: {e.get('errorMessage', '')}".strip(": ")
            for e in raw.get("errors") or ()
        )
        return UpdateStatus(str(raw.get("id") or update_id), str(raw.get("status") or ""), problems)

    def describe_groups(self, names: Sequence[str]) -> list[AutoScalingGroup]:
        if not names:
            return []
        groups: list[AutoScalingGroup] = []
        token = ""
        while True:
            kwargs = {"NextToken": token} if token else {}
            page = self._call(
                "DescribeAutoScalingGroups",
                self._autoscaling.describe_auto_scaling_groups,
                AutoScalingGroupNames=list(names),
                **kwargs,
            )
            for raw in page.get("AutoScalingGroups") or ():
                instances = tuple(
                    GroupInstance(
                        instance_id=str(i.get("InstanceId") or ""),
                        zone=str(i.get("AvailabilityZone") or ""),
                        lifecycle_state=str(i.get("LifecycleState") or ""),
                    )
                    for i in raw.get("Instances") or ()
                )
                groups.append(
                    AutoScalingGroup(
                        name=str(raw.get("AutoScalingGroupName") or ""),
                        min_size=int(raw.get("MinSize") or 0),
                        max_size=int(raw.get("MaxSize") or 0),
                        desired=int(raw.get("DesiredCapacity") or 0),
                        instances=instances,
                    )
                )
            token = str(page.get("NextToken") or "")
            if not token:
                return groups

    def terminate_instance(self, instance_id: str) -> None:
        self._call(
            "TerminateInstanceInAutoScalingGroup",
            self._autoscaling.terminate_instance_in_auto_scaling_group,
            InstanceId=instance_id,
            ShouldDecrementDesiredCapacity=True,
        )

    def _call(self, operation: str, method: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = method(**kwargs)
        except ClientError as exc:
            raise _translate(operation, exc, self.cluster) from exc
        except NoCredentialsError:
            raise AwsCallError(
                f"{operation}: no AWS credentials found (environment, shared credentials file, web "
                "identity / IRSA, or instance role)"
            ) from None
        except BotoCoreError as exc:  # connection refused, timeouts, unreadable answers
            raise errors.TransportError(message=f"AWS {operation}: {exc}") from exc
        return answer


class _NotFound(AwsCallError):
    pass


class _NotServed(AwsCallError):
    pass


def _translate(operation: str, exc: ClientError, cluster: str) -> Exception:
    error = exc.response.get("Error") or {}
    code = str(error.get("Code") or "")
    message = " ".join(str(error.get("Message") or "").split())
    status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    if code in TRANSIENT_CODES or status >= 500:
        return errors.TransportError(message=f"AWS {operation}: {code}: {message}")
    if code == "ResourceNotFoundException":
        return _NotFound(f"{operation} (EKS cluster {cluster}): {message}")
    if status == 404 or code in ("UnknownOperationException", "InvalidAction"):
        # The endpoint has no such operation (an answer that is no AWS error at all).
        return _NotServed(f"{operation}: not served by this endpoint (HTTP {status} {code})")
    if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
        return AwsCallError(
            f"{operation} denied for EKS cluster {cluster}: scalebot's IAM role needs "
            f"{PERMISSIONS.get(operation, operation)} ({message})"
        )
    return AwsCallError(f"{operation} (EKS cluster {cluster}): {code}: {message}")
