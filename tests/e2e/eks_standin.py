"""Test-only stand-in for what EKS and EC2 do around a managed node group, over moto in server mode.

moto answers the EKS and Auto Scaling APIs scalebot calls, but it does not connect them: the Auto
Scaling group a node group names (`resources.autoScalingGroups`) does not exist in moto's Auto
Scaling backend, a changed `scalingConfig` reaches no group, and no instance ever becomes a Node.
`EksStandIn` plays those parts, nothing more:
- `create_nodegroup` creates the node group in moto and its Auto Scaling group (same name, same
  min/max/desired) in moto's Auto Scaling backend, which launches the instances (EC2 in moto);
- `reconcile()` (EKS's part) pushes a changed node group `scalingConfig` to the group's
  MinSize/MaxSize/DesiredCapacity, as EKS does after UpdateNodegroupConfig. Only a change of the
  node group is pushed: real EKS also copies the group's desired capacity back into
  `desiredSize` after a TerminateInstanceInAutoScalingGroup with decrement, which this stand-in
  does not (scalebot sets `desiredSize` itself after its terminations);
- `reconcile()` (the kubelet's and cloud node controller's part) makes each InService instance a
  kwok Node `<node group>-<instance id>` labelled `eks.amazonaws.com/nodegroup=<node group>` with
  `spec.providerID: aws:///<zone>/<instance id>`, and deletes the Node of an instance that left the
  group. kwok makes the Nodes Ready.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import boto3

from engine.pools.eks import NODEGROUP_LABEL
from localcluster import waits
from tests.aws_endpoint import REGION
from tests.e2e.cloud_standin import KeepsNodes, Machine, StandInNodes
from tests.e2e.support import StandInLoop

STANDIN_LABEL = "scalebot.test/eks-standin"
ROLE = "arn:aws:iam::123456789012:role/eks-standin"
IMAGE = "ami-12c6146b"
"""An image moto knows (its default AMIs), for the launch configuration."""
ZONE = f"{REGION}a"


@dataclass
class EksStandIn(KeepsNodes):
    kube: Any
    """An admin ApiClient: the stand-in creates and deletes Nodes."""
    endpoint: str
    cluster: str
    errors: list[Exception] = field(default_factory=list)
    _pushed: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        def client(service: str) -> Any:
            return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION)

        self.eks = client("eks")
        self.autoscaling = client("autoscaling")
        self.eks.create_cluster(
            name=self.cluster, roleArn=ROLE, resourcesVpcConfig={"subnetIds": ["subnet-1"]}
        )

    def create_nodegroup(self, name: str, min_size: int, max_size: int, desired: int) -> None:
        scaling = {"minSize": min_size, "maxSize": max_size, "desiredSize": desired}
        created = self.eks.create_nodegroup(
            clusterName=self.cluster,
            nodegroupName=name,
            nodeRole=ROLE,
            subnets=["subnet-1"],
            scalingConfig=scaling,
            labels={"team": "web"},
        )["nodegroup"]
        group = created["resources"]["autoScalingGroups"][0]["name"]
        self.autoscaling.create_launch_configuration(
            LaunchConfigurationName=f"lc-{name}", ImageId=IMAGE, InstanceType="m5.large"
        )
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=group,
            LaunchConfigurationName=f"lc-{name}",
            MinSize=min_size,
            MaxSize=max_size,
            DesiredCapacity=desired,
            AvailabilityZones=[ZONE],
        )
        with self._lock:
            self._pushed[name] = (min_size, max_size, desired)
        self.reconcile()
        waits.wait_for_nodes_ready(self.kube, self.node_names(name))

    # -- what tests read ---------------------------------------------------------------------------

    def scaling(self, name: str) -> tuple[int, int, int]:
        """The node group's (minSize, maxSize, desiredSize)."""
        raw = self.eks.describe_nodegroup(clusterName=self.cluster, nodegroupName=name)["nodegroup"]
        config = raw["scalingConfig"]
        return config["minSize"], config["maxSize"], config["desiredSize"]

    def group(self, name: str) -> dict[str, Any]:
        """The node group's Auto Scaling group as DescribeAutoScalingGroups shows it."""
        raw = self.eks.describe_nodegroup(clusterName=self.cluster, nodegroupName=name)["nodegroup"]
        group_name = raw["resources"]["autoScalingGroups"][0]["name"]
        answer = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group_name])
        found: dict[str, Any] = answer["AutoScalingGroups"][0]
        return found

    def instances(self, name: str) -> list[str]:
        """Instance ids of the node group's group, in launch order."""
        return [i["InstanceId"] for i in self.group(name)["Instances"]]

    @property
    def _nodes(self) -> StandInNodes:
        return StandInNodes(self.kube, STANDIN_LABEL, self.cluster, NODEGROUP_LABEL)

    @staticmethod
    def node_name(nodegroup: str, instance: str) -> str:
        return f"{nodegroup}-{instance}"

    # -- the stand-in's work -----------------------------------------------------------------------

    def reconcile(self) -> None:
        with self._lock:
            for name in self.eks.list_nodegroups(clusterName=self.cluster)["nodegroups"]:
                self._push_scaling(name)
                self._converge_nodes(name)

    def _push_scaling(self, name: str) -> None:
        scaling = self.scaling(name)
        if self._pushed.get(name) == scaling:
            return
        group = self.group(name)["AutoScalingGroupName"]
        min_size, max_size, desired = scaling
        self.autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=group, MinSize=min_size, MaxSize=max_size, DesiredCapacity=desired
        )
        self._pushed[name] = scaling

    def _converge_nodes(self, name: str) -> None:
        serving = [
            Machine(
                self.node_name(name, i["InstanceId"]),
                f"aws:///{i['AvailabilityZone']}/{i['InstanceId']}",
                {"topology.kubernetes.io/zone": i["AvailabilityZone"], "team": "web"},
            )
            for i in self.group(name)["Instances"]
            if i["LifecycleState"] == "InService"
        ]
        self._nodes.converge(name, serving)


def standin_loop(standin: EksStandIn) -> StandInLoop:
    """The stand-in reconciled in a thread, as its controller would run."""
    return StandInLoop(standin, name="eks-standin", interval=0.3)
