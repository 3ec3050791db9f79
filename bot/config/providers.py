"""The pool provider registry: every kind of pool scalebot can drive, in one table.

Settings (`clusters.<name>.provider` and the provider's own keys), the CLI (`--provider` and one
flag per option) and wiring (building the ClusterHandle) all read `PROVIDERS`; nothing else names
a provider.

Adding a provider:
1. write `engine/pools/<name>.py`, a `PoolProvider` (engine/pools/base.py);
2. add one `ProviderSpec` to `PROVIDERS` below: its name, a one-line summary, its options (each is
   a config key `clusters.<name>.<key>` and a CLI flag `--<key with dashes>`), and a `connect`
   function that builds the provider from a `Connection`;
3. a README section (RBAC it needs, what scale/zero/wake do, what it cannot do) and tests.

Options are text values, validated here (choices or a `check` function) so a bad value fails at
start with its key path; the provider's `connect` receives them with defaults filled in. Imports of
the engine's adapters stay inside the `connect` functions so that reading settings or building the
CLI parser loads no Kubernetes client.

One module over 600 lines on purpose: it is the one table of providers, and each provider's option
checks and `connect` sit beside its row, so adding a provider touches this file once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from engine.domain.errors import Category, ScalebotError
from engine.kube.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from engine.pools.base import POOL_LABEL

if TYPE_CHECKING:
    from engine.kube.client import KubeClient
    from engine.kube.inline_kubeconfig import InlineKubeconfig
    from engine.pools.base import PoolProvider


class ProviderOptionError(ScalebotError, ValueError):
    """An option value the provider refuses; the message says what is expected."""

    category = Category.CONFIGURATION


@dataclass(frozen=True, slots=True)
class Option:
    key: str
    """Config key under `clusters.<name>`; the CLI flag is `--` + key with '_' as '-'."""
    help: str
    default: str = ""
    choices: tuple[str, ...] = ()
    check: Callable[[str], None] | None = None
    """Raises ProviderOptionError for a bad value (beyond `choices`)."""
    required: bool = False
    """The provider cannot work without a value (no default makes sense)."""

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def validate(self, value: str) -> str:
        if self.required and not value:
            raise ProviderOptionError(f"required ({self.help})")
        if self.choices and value not in self.choices:
            raise ProviderOptionError(f"'{value}' is not one of: {', '.join(self.choices)}")
        if self.check is not None and value:
            self.check(value)
        return value


@dataclass(frozen=True, slots=True)
class Connection:
    """What a provider's `connect` gets: the cluster entry, validated options, client settings."""

    cluster: str
    kubeconfig: str | None
    context: str | None
    options: Mapping[str, str]
    """Every option of the provider, defaults filled in."""
    namespace: str = "scalebot"
    """scalebot's own namespace (where the labels provider keeps its pool records)."""
    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def kube(self, *, kubeconfig: str | None, context: str | None) -> KubeClient:
        """A client for an API server, with this cluster's rate limits."""
        from engine.kube.client import KubeClient

        return KubeClient.from_config(kubeconfig=kubeconfig, context=context, qps=self.qps, burst=self.burst)

    def workload(self) -> KubeClient:
        """The cluster entry's own kubeconfig/context: where the Nodes and Pods are."""
        return self.kube(kubeconfig=self.kubeconfig, context=self.context)


@dataclass(frozen=True, slots=True)
class Connected:
    api: KubeClient
    """The workload cluster: Nodes and Pods, drained here."""
    pools: PoolProvider


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    name: str
    summary: str
    connect: Callable[[Connection], Connected]
    options: tuple[Option, ...] = field(default=())

    def option_keys(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.options)

    def resolve(self, given: Mapping[str, str]) -> dict[str, str]:
        """The provider's options from `given` (validated), defaults for the rest.

        Raises ProviderOptionError naming the key for an unknown key or a bad value.
        """
        known = {o.key: o for o in self.options}
        for key in given:
            if key not in known:
                theirs = ", ".join(known) or "none"
                raise ProviderOptionError(
                    f"{key}: not an option of provider {self.name} (its options: {theirs})"
                )
        resolved: dict[str, str] = {}
        for option in self.options:
            value = given.get(option.key, option.default)
            try:
                resolved[option.key] = option.validate(value)
            except ProviderOptionError as exc:
                raise ProviderOptionError(f"{option.key}: {exc}") from None
        return resolved


def _connect_labels(connection: Connection) -> Connected:
    from engine.pools.labels import LabelPoolProvider

    api = connection.workload()
    pools = LabelPoolProvider(
        api,
        api.api_client,
        label=connection.options["pool_label"],
        namespace=connection.namespace,
        node_removal=connection.options["node_removal"],
    )
    return Connected(api, pools)


def _namespaced_name(value: str) -> None:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ProviderOptionError(f"'{value}' is not namespace/name (e.g. clusters/dev-eu)")


def _connect_capi(connection: Connection) -> Connected:
    """The entry's kubeconfig/context reach the management cluster (the Machines); with a
    `capi_cluster`, the workload cluster comes from the options or the Cluster's kubeconfig Secret."""
    from engine.kube.client import KubeClient
    from engine.pools.capi import ClusterApiPoolProvider, WorkloadKubeconfigError, workload_kubeconfig

    management = connection.workload()
    if not connection.options["capi_cluster"]:
        # Self-hosted (management = workload) and every MachineDeployment it holds.
        return Connected(management, ClusterApiPoolProvider(management.api_client, node_api=management))
    namespace, _, name = connection.options["capi_cluster"].partition("/")
    kubeconfig, context = connection.options["workload_kubeconfig"], connection.options["workload_context"]
    if kubeconfig or context:
        workload = connection.kube(kubeconfig=kubeconfig or None, context=context or None)
    else:
        try:
            inline = workload_kubeconfig(management.api_client, namespace, name)
        except WorkloadKubeconfigError as exc:
            raise ProviderOptionError(f"cluster {namespace}/{name}: {exc}") from exc
        workload = KubeClient.from_inline_kubeconfig(
            inline,
            qps=connection.qps,
            burst=connection.burst,
            # Rotated or expired credentials (a 401): read the Secret again, as clusterctl would.
            reread=lambda: _reread_workload_kubeconfig(management, namespace, name),
        )
    pools = ClusterApiPoolProvider(
        management.api_client, namespace=namespace, cluster=name, node_api=workload
    )
    return Connected(workload, pools)


def _reread_workload_kubeconfig(management: KubeClient, namespace: str, name: str) -> InlineKubeconfig:
    """The Secret read and checked again after a 401; a Secret that is gone or now refused (a
    program, a file path, another server) makes that request's 401 name why (KubeConfigError)."""
    from engine.kube.config import KubeConfigError
    from engine.pools.capi import WorkloadKubeconfigError, workload_kubeconfig

    try:
        return workload_kubeconfig(management.api_client, namespace, name)
    except WorkloadKubeconfigError as exc:
        raise KubeConfigError(str(exc)) from exc


def _connect_karpenter(connection: Connection) -> Connected:
    from engine.pools.karpenter import KarpenterPoolProvider

    api = connection.workload()
    return Connected(api, KarpenterPoolProvider(api.api_client, node_api=api))


def _shoot_ref(value: str) -> None:
    if "/" in value:
        _namespaced_name(value)


def _project_namespace(garden: KubeClient, project: str) -> str:
    from engine.pools.gardener import ProjectNamespaceError, project_namespace

    try:
        return project_namespace(garden.api_client, project)
    except ProjectNamespaceError as exc:
        raise ProviderOptionError(f"project: {exc}") from exc


def _connect_gardener(connection: Connection) -> Connected:
    """The entry's kubeconfig/context reach the garden cluster (the Shoot); the shoot cluster's own
    kubeconfig is given (its admin kubeconfig from `shoots/adminkubeconfig` is short-lived)."""
    from engine.pools.gardener import GardenerPoolProvider

    if not connection.options["shoot"]:
        raise ProviderOptionError("shoot: required for provider gardener (garden-<project>/<shoot>)")
    project = connection.options["project"]
    if bool(project) == ("/" in connection.options["shoot"]):
        raise ProviderOptionError(
            "shoot: <namespace>/<name> (e.g. garden-dev/eu1), or the Shoot's name alone with project "
            "(the namespace is then read from the Project)"
        )
    if not (connection.options["shoot_kubeconfig"] or connection.options["shoot_context"]):
        raise ProviderOptionError("shoot_kubeconfig or shoot_context: required (the shoot cluster's Nodes)")
    garden = connection.workload()
    shoot = connection.kube(
        kubeconfig=connection.options["shoot_kubeconfig"] or None,
        context=connection.options["shoot_context"] or None,
    )
    if project:
        namespace, name = _project_namespace(garden, project), connection.options["shoot"]
    else:
        namespace, _, name = connection.options["shoot"].partition("/")
    return Connected(
        shoot, GardenerPoolProvider(garden.api_client, namespace=namespace, shoot=name, node_api=shoot)
    )


_EKS_NAME = re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]*")


def _eks_name(what: str, limit: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not _EKS_NAME.fullmatch(value) or len(value) > limit:
            raise ProviderOptionError(
                f"'{value}' is not an EKS {what} name (letters, digits, '-' and '_', "
                f"starting with a letter or digit, at most {limit} characters)"
            )

    return check


def _node_group_names(value: str) -> None:
    names = [n.strip() for n in value.split(",")]
    if any(not n for n in names):
        raise ProviderOptionError(f"'{value}' has an empty name (node group names separated by commas)")
    for name in names:
        _eks_name("node group", 63)(name)


def _aws_region(value: str) -> None:
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", value):
        raise ProviderOptionError(f"'{value}' is not an AWS region (e.g. eu-west-1)")


def _endpoint_url(value: str) -> None:
    parsed = urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ProviderOptionError(f"'{value}' is not an http(s) URL")


EKS_EXTRA_MISSING = (
    "provider eks needs the AWS SDK (boto3), which is not installed: pip install 'scalebot[eks]' "
    "(the container image and scripts/test's .venv have it)"
)


def _connect_eks(connection: Connection) -> Connected:
    """The entry's kubeconfig/context reach the EKS cluster's API server (Nodes, Pods, scalebot's
    ConfigMaps); the node groups are reached through AWS with the standard credential chain."""
    from engine.pools.eks import EksPoolProvider, cluster_side

    try:
        from engine.pools.eks_aws import AwsCallError, Boto3Nodegroups
    except ModuleNotFoundError as exc:  # boto3 is an extra: only EKS users carry the AWS SDK
        if (exc.name or "").split(".")[0] not in ("boto3", "botocore"):
            raise
        raise ProviderOptionError(EKS_EXTRA_MISSING) from exc

    options = connection.options
    try:
        aws = Boto3Nodegroups(
            options["eks_cluster"],
            region=options["aws_region"] or None,
            endpoint_url=options["aws_endpoint_url"] or None,
        )
    except AwsCallError as exc:
        raise ProviderOptionError(str(exc)) from exc
    api = connection.workload()
    groups = tuple(n.strip() for n in options["node_groups"].split(",") if n.strip())
    kube = cluster_side(api.api_client, namespace=connection.namespace, eks_cluster=aws.cluster)
    pools = EksPoolProvider(aws, kube, pools=groups)
    return Connected(api, pools)


def _cloud_name(what: str, pattern: str, example: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not re.fullmatch(pattern, value):
            raise ProviderOptionError(f"'{value}' is not {what} (e.g. {example})")

    return check


_GKE_NAME = r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?"
_GCP_LOCATION = r"[a-z]+-[a-z]+\d+(-[a-z])?"


def _gke_node_pools(value: str) -> None:
    names = [n.strip() for n in value.split(",")]
    if any(not n for n in names):
        raise ProviderOptionError(f"'{value}' has an empty name (node pool names separated by commas)")
    for name in names:
        _cloud_name("a GKE node pool name", _GKE_NAME, "default-pool")(name)


GKE_EXTRA_MISSING = (
    "provider gke needs the Google Cloud SDK (google-cloud-container, google-cloud-compute), which is not "
    "installed: pip install 'scalebot[gke]' (scripts/test's .venv has it)"
)


def _connect_gke(connection: Connection) -> Connected:
    """The entry's kubeconfig/context reach the GKE cluster's API server (Nodes, Pods, scalebot's
    ConfigMaps); node pools and instance groups are reached with Application Default Credentials."""
    from engine.pools.cloud import KubeRecords
    from engine.pools.gke import NODE_POOL_LABEL, GkePoolProvider

    try:
        from engine.pools.gke_google import GcpCallError, GoogleNodePools
    except ModuleNotFoundError as exc:  # an extra: only GKE users carry the Google Cloud SDK
        if (exc.name or "").split(".")[0] != "google":
            raise
        raise ProviderOptionError(GKE_EXTRA_MISSING) from exc

    options = connection.options
    try:
        google = GoogleNodePools(
            options["gke_project"],
            options["gke_location"],
            options["gke_cluster"],
            endpoint_url=options["gke_endpoint_url"] or None,
        )
    except GcpCallError as exc:
        raise ProviderOptionError(str(exc)) from exc
    api = connection.workload()
    pools = tuple(n.strip() for n in options["node_pools"].split(",") if n.strip())
    kube = KubeRecords(
        api.api_client,
        provider="gke",
        pool_label=NODE_POOL_LABEL,
        namespace=connection.namespace,
        cloud_cluster=google.cluster,
    )
    return Connected(api, GkePoolProvider(google, kube, pools=pools))


def _aks_agent_pools(value: str) -> None:
    names = [n.strip() for n in value.split(",")]
    if any(not n for n in names):
        raise ProviderOptionError(f"'{value}' has an empty name (agent pool names separated by commas)")
    for name in names:
        _cloud_name(
            "an AKS agent pool name (lowercase letters and digits, at most 12)",
            r"[a-z][a-z0-9]{0,11}",
            "user1",
        )(name)


AKS_EXTRA_MISSING = (
    "provider aks needs the Azure SDK (azure-mgmt-containerservice, azure-identity), which is not "
    "installed: pip install 'scalebot[aks]' (scripts/test's .venv has it)"
)


def _connect_aks(connection: Connection) -> Connected:
    """The entry's kubeconfig/context reach the AKS cluster's API server (Nodes, Pods, scalebot's
    ConfigMaps); agent pools are reached through Azure Resource Manager with DefaultAzureCredential."""
    from engine.pools.aks import AGENT_POOL_LABEL, AksPoolProvider
    from engine.pools.cloud import KubeRecords

    try:
        from engine.pools.aks_azure import AzureAgentPools
    except ModuleNotFoundError as exc:  # an extra: only AKS users carry the Azure SDK
        if (exc.name or "").split(".")[0] != "azure":
            raise
        raise ProviderOptionError(AKS_EXTRA_MISSING) from exc

    options = connection.options
    azure = AzureAgentPools(
        options["aks_subscription"],
        options["aks_resource_group"],
        options["aks_cluster"],
        endpoint_url=options["aks_endpoint_url"] or None,
    )
    api = connection.workload()
    pools = tuple(n.strip() for n in options["agent_pools"].split(",") if n.strip())
    kube = KubeRecords(
        api.api_client,
        provider="aks",
        pool_label=AGENT_POOL_LABEL,
        namespace=connection.namespace,
        cloud_cluster=f"{options['aks_subscription']}/{options['aks_resource_group']}/{options['aks_cluster']}",
    )
    return Connected(api, AksPoolProvider(azure, kube, pools=pools))


PROVIDERS: Mapping[str, ProviderSpec] = {
    spec.name: spec
    for spec in (
        ProviderSpec(
            name="labels",
            summary="a pool is the set of nodes sharing a label's value",
            connect=_connect_labels,
            options=(
                Option("pool_label", "node label naming the pool", default=POOL_LABEL),
                Option(
                    "node_removal",
                    "what removing a node does: auto (delete the Node object only where Karpenter, "
                    "Cluster API or kwok stops the machine behind it, else empty it), delete-node "
                    "(something here does), empty (cordon and drain, never delete)",
                    default="auto",
                    choices=("auto", "delete-node", "empty"),
                ),
            ),
        ),
        ProviderSpec(
            name="capi",
            summary="a pool is a Cluster API MachineDeployment",
            connect=_connect_capi,
            options=(
                Option(
                    "capi_cluster",
                    "the Cluster API Cluster (namespace/name) in the management cluster that kubeconfig "
                    "and context reach; unset: a self-hosted cluster, every MachineDeployment",
                    check=_namespaced_name,
                ),
                Option(
                    "workload_kubeconfig",
                    "the workload cluster's kubeconfig (default: the Cluster's <name>-kubeconfig Secret)",
                ),
                Option("workload_context", "context in workload_kubeconfig (default: its current one)"),
            ),
        ),
        ProviderSpec(
            name="karpenter",
            summary="a pool is a Karpenter NodePool (karpenter.sh/v1): sleeps and wakes, sized by demand",
            connect=_connect_karpenter,
        ),
        ProviderSpec(
            name="gardener",
            summary="a pool is a worker of a Gardener Shoot",
            connect=_connect_gardener,
            options=(
                Option(
                    "shoot",
                    "the Shoot (project namespace/name, e.g. garden-dev/eu1) in the garden cluster that "
                    "kubeconfig and context reach; with project, its name alone",
                    check=_shoot_ref,
                ),
                Option(
                    "project",
                    "the Gardener project of the Shoot: its namespace is read from the Project's "
                    "spec.namespace (needs get on that Project)",
                ),
                Option("shoot_kubeconfig", "the shoot cluster's kubeconfig (its Nodes and Pods)"),
                Option("shoot_context", "context in shoot_kubeconfig (default: its current one)"),
            ),
        ),
        ProviderSpec(
            name="eks",
            summary="a pool is an EKS managed node group; drained nodes' instances are terminated",
            connect=_connect_eks,
            options=(
                Option(
                    "eks_cluster",
                    "the EKS cluster whose managed node groups are pools (kubeconfig and context reach "
                    "its API server)",
                    check=_eks_name("cluster", 100),
                    required=True,
                ),
                Option(
                    "node_groups",
                    "the node groups that are pools, separated by commas (default: every managed node "
                    "group of the cluster)",
                    check=_node_group_names,
                ),
                Option(
                    "aws_region", "AWS region of the cluster (default: the AWS chain's)", check=_aws_region
                ),
                Option(
                    "aws_endpoint_url",
                    "for tests only: send EKS and Auto Scaling calls to this endpoint (a local AWS stand-in)",
                    check=_endpoint_url,
                ),
            ),
        ),
        ProviderSpec(
            name="gke",
            summary="a pool is a GKE node pool; drained nodes' instances are deleted from its groups",
            connect=_connect_gke,
            options=(
                Option(
                    "gke_project",
                    "the Google Cloud project of the GKE cluster",
                    check=_cloud_name(
                        "a Google Cloud project ID", r"[a-z][-a-z0-9]{4,28}[a-z0-9]", "my-project"
                    ),
                    required=True,
                ),
                Option(
                    "gke_location",
                    "the cluster's location: a region (regional cluster) or a zone (zonal cluster)",
                    check=_cloud_name("a Google Cloud region or zone", _GCP_LOCATION, "europe-west1"),
                    required=True,
                ),
                Option(
                    "gke_cluster",
                    "the GKE cluster whose node pools are pools; kubeconfig and context reach its API server",
                    check=_cloud_name("a GKE cluster name", _GKE_NAME, "prod-eu"),
                    required=True,
                ),
                Option(
                    "node_pools",
                    "the node pools that are pools, separated by commas (default: every node pool)",
                    check=_gke_node_pools,
                ),
                Option(
                    "gke_endpoint_url",
                    "for tests only: send GKE and Compute Engine calls to this endpoint (a local stand-in)",
                    check=_endpoint_url,
                ),
            ),
        ),
        ProviderSpec(
            name="aks",
            summary="a pool is an AKS agent pool; drained nodes' machines are deleted by name",
            connect=_connect_aks,
            options=(
                Option(
                    "aks_subscription",
                    "the Azure subscription ID of the AKS cluster",
                    check=_cloud_name(
                        "a subscription ID",
                        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
                        "a GUID",
                    ),
                    required=True,
                ),
                Option(
                    "aks_resource_group",
                    "the resource group of the AKS cluster",
                    check=_cloud_name("a resource group name", r"[-\w._()]{1,89}[-\w_()]", "rg-prod"),
                    required=True,
                ),
                Option(
                    "aks_cluster",
                    "the AKS cluster of the agent pools (kubeconfig and context reach its API server)",
                    check=_cloud_name(
                        "an AKS cluster name", r"[A-Za-z0-9]([-A-Za-z0-9_]{0,61}[A-Za-z0-9])?", "prod-eu"
                    ),
                    required=True,
                ),
                Option(
                    "agent_pools",
                    "the agent pools that are pools, separated by commas (default: every agent pool)",
                    check=_aks_agent_pools,
                ),
                Option(
                    "aks_endpoint_url",
                    "for tests only: send Azure Resource Manager calls to this endpoint (a local stand-in)",
                    check=_endpoint_url,
                ),
            ),
        ),
    )
}
"""Provider name -> spec. The first one is the default."""

DEFAULT_PROVIDER = "labels"


def names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def spec(name: str) -> ProviderSpec:
    """Raises ProviderOptionError naming the known providers."""
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ProviderOptionError(f"unknown provider '{name}' ({', '.join(PROVIDERS)})") from None


def all_options() -> dict[str, Option]:
    """Every option of every provider, by key (for the CLI's flags). Providers that share a key
    share its meaning, so the first declaration's help text stands for all."""
    options: dict[str, Option] = {}
    for provider in PROVIDERS.values():
        for option in provider.options:
            options.setdefault(option.key, option)
    return options
