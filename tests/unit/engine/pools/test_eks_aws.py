"""The EKS provider's AWS adapter against moto in server mode (a real HTTP endpoint on 127.0.0.1).

Also pins down what moto does not do, which the provider and the e2e harness cover: moto serves no
DescribeUpdate (HTTP 404, not an AWS error: the adapter answers None and the provider polls
DescribeNodegroup), and a node group's Auto Scaling group does not exist in moto's Auto Scaling
backend (the e2e bridge creates it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from engine.kube import errors
from engine.pools.eks import NodegroupNotFound, Scaling
from engine.pools.eks_aws import AwsCallError, Boto3Nodegroups
from tests.aws_endpoint import REGION, aws_environment, moto_endpoint

ROLE = "arn:aws:iam::123456789012:role/eks"


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    aws_environment(monkeypatch, tmp_path)
    with moto_endpoint() as url:
        yield url


def _client(service: str, url: str) -> Any:
    return boto3.client(service, endpoint_url=url, region_name=REGION)


def _cluster(url: str) -> None:
    eks = _client("eks", url)
    eks.create_cluster(name="prod", roleArn=ROLE, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    for name, scaling in (("web", (1, 5, 3)), ("batch", (0, 2, 0))):
        eks.create_nodegroup(
            clusterName="prod",
            nodegroupName=name,
            nodeRole=ROLE,
            subnets=["subnet-1"],
            scalingConfig=dict(zip(("minSize", "maxSize", "desiredSize"), scaling, strict=True)),
        )


def test_node_groups_are_read_and_updated_through_the_standard_chain(endpoint: str) -> None:
    _cluster(endpoint)
    aws = Boto3Nodegroups("prod", endpoint_url=endpoint)  # region and credentials: the environment
    assert sorted(aws.list_nodegroups()) == ["batch", "web"]
    web = aws.describe_nodegroup("web")
    assert (web.name, web.status, web.scaling) == ("web", "ACTIVE", Scaling(1, 5, 3))
    assert len(web.autoscaling_groups) == 1 and web.autoscaling_groups[0].startswith("eks-")
    update = aws.update_scaling("web", Scaling(0, 5, 0))
    assert update
    assert aws.describe_nodegroup("web").scaling == Scaling(0, 5, 0)
    with pytest.raises(NodegroupNotFound):
        aws.describe_nodegroup("nope")


def test_moto_serves_no_describe_update_and_no_node_group_asg(endpoint: str) -> None:
    _cluster(endpoint)
    aws = Boto3Nodegroups("prod", endpoint_url=endpoint)
    update = aws.update_scaling("web", Scaling(1, 5, 2))
    assert aws.describe_update("web", update) is None, "moto gained DescribeUpdate: drop the fallback note"
    web = aws.describe_nodegroup("web")
    assert aws.describe_groups(web.autoscaling_groups) == [], "moto now creates the node group's ASG"


def test_instances_are_terminated_with_decrement(endpoint: str) -> None:
    autoscaling = _client("autoscaling", endpoint)
    autoscaling.create_launch_configuration(
        LaunchConfigurationName="lc", ImageId="ami-12c6146b", InstanceType="m5.large"
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="eks-web",
        LaunchConfigurationName="lc",
        MinSize=1,
        MaxSize=5,
        DesiredCapacity=3,
        AvailabilityZones=[f"{REGION}a"],
    )
    aws = Boto3Nodegroups("prod", endpoint_url=endpoint)
    [group] = aws.describe_groups(["eks-web"])
    assert (group.min_size, group.max_size, group.desired, len(group.instances)) == (1, 5, 3, 3)
    assert {i.lifecycle_state for i in group.instances} == {"InService"}
    assert {i.zone for i in group.instances} == {f"{REGION}a"}
    doomed = group.instances[2].instance_id
    aws.terminate_instance(doomed)
    [after] = aws.describe_groups(["eks-web"])
    assert after.desired == 2
    assert [i.instance_id for i in after.instances] == [i.instance_id for i in group.instances[:2]]


def test_an_unreachable_endpoint_is_a_transport_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    aws_environment(monkeypatch, tmp_path)
    refused = Boto3Nodegroups("prod", endpoint_url="http://127.0.0.1:9", region="eu-west-1")
    with pytest.raises(errors.TransportError, match="AWS DescribeNodegroup"):
        refused.describe_nodegroup("web")


def test_no_credentials_is_an_actionable_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    aws_environment(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    aws = Boto3Nodegroups("prod", endpoint_url="http://127.0.0.1:9", region="eu-west-1")
    with pytest.raises(AwsCallError, match="no AWS credentials found"):
        aws.list_nodegroups()
