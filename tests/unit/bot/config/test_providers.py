"""The provider registry: one table read by settings, the CLI and wiring."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.cli.common import CliError
from bot.cli.operations_from_flags import _provider_options
from bot.cli.parser import build_parser
from bot.config import providers, settings
from bot.config.providers import Connected, Connection, Option, ProviderOptionError, ProviderSpec
from bot.runtime import wiring


def _never(connection: Connection) -> Connected:
    raise AssertionError("not connected in these tests")


def _no_slash(value: str) -> None:
    if "/" in value:
        raise ProviderOptionError("expected a name without '/'")


SPEC = ProviderSpec(
    name="demo",
    summary="a test provider",
    connect=_never,
    options=(
        Option("mode", "how", default="gentle", choices=("gentle", "firm")),
        Option("target", "what", check=_no_slash),
    ),
)


def test_resolve_fills_defaults_and_validates() -> None:
    assert SPEC.resolve({}) == {"mode": "gentle", "target": ""}
    assert SPEC.resolve({"mode": "firm", "target": "a"}) == {"mode": "firm", "target": "a"}
    with pytest.raises(ProviderOptionError, match=r"^mode: 'rough' is not one of: gentle, firm$"):
        SPEC.resolve({"mode": "rough"})
    with pytest.raises(ProviderOptionError, match=r"^target: expected a name without '/'$"):
        SPEC.resolve({"target": "a/b"})
    with pytest.raises(
        ProviderOptionError, match=r"^colour: not an option of provider demo \(its options: mode, target\)$"
    ):
        SPEC.resolve({"colour": "red"})


def test_every_consumer_reads_the_one_table() -> None:
    names = providers.names()
    assert names[0] == providers.DEFAULT_PROVIDER
    parser = build_parser()
    zero = parser.parse_args(["zero", "--provider", names[-1]])
    assert zero.provider == names[-1]
    with pytest.raises(SystemExit):
        parser.parse_args(["zero", "--provider", "nimbus"])
    # Every option of every provider is a CLI flag and a config key.
    for option in providers.all_options().values():
        assert parser.parse_args(["zero", option.flag, "x"]) is not None
    with pytest.raises(wiring.WiringError, match="unknown provider 'nimbus'"):
        wiring.connect_cluster("x", provider="nimbus")
    assert not hasattr(settings, "PROVIDERS") and not hasattr(wiring, "PROVIDERS")


def test_cli_refuses_another_providers_flag() -> None:
    args = build_parser().parse_args(["zero", "--provider", "capi", "--pool-label", "x/y"])
    with pytest.raises(CliError, match="--pool-label is not an option of --provider capi"):
        _provider_options(args)
    args = build_parser().parse_args(["zero", "--pool-label", "x/y"])
    assert _provider_options(args) == {"pool_label": "x/y"}


EKS_ENV = {"SLACK_BOT_TOKEN": "xoxb-1-secret", "SLACK_SIGNING_SECRET": "s3cr3t-signing"}


def _eks_settings(tmp_path: Path, entry: str) -> settings.Settings:
    path = tmp_path / "scalebot.yaml"
    path.write_text(f"clusters:\n  prod:\n    provider: eks\n{entry}", encoding="utf-8")
    return settings.load(path, EKS_ENV)


def test_eks_settings_are_read_with_their_defaults(tmp_path: Path) -> None:
    loaded = _eks_settings(tmp_path, "    eks_cluster: prod-eu\n    node_groups: web, batch_2\n")
    assert loaded.clusters["prod"].options == {
        "eks_cluster": "prod-eu",
        "node_groups": "web, batch_2",
        "aws_region": "",
        "aws_endpoint_url": "",
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("    node_groups: web\n", "clusters.prod.eks_cluster: required (the EKS cluster"),
        ("    eks_cluster: prod/eu\n", "clusters.prod.eks_cluster: 'prod/eu' is not an EKS cluster name"),
        (
            "    eks_cluster: prod\n    node_groups: web,,batch\n",
            "clusters.prod.node_groups: 'web,,batch' has an empty name",
        ),
        (
            "    eks_cluster: prod\n    node_groups: web, -x\n",
            "clusters.prod.node_groups: '-x' is not an EKS node group name",
        ),
        (
            "    eks_cluster: prod\n    aws_region: Europe\n",
            "clusters.prod.aws_region: 'Europe' is not an AWS",
        ),
        (
            "    eks_cluster: prod\n    aws_endpoint_url: localhost:5000\n",
            "clusters.prod.aws_endpoint_url: 'localhost:5000' is not an http(s) URL",
        ),
        (
            "    eks_cluster: prod\n    pool_label: x/y\n",
            "clusters.prod.pool_label: a setting of provider labels",
        ),
    ],
)
def test_bad_eks_settings_name_the_key(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(settings.SettingsError) as info:
        _eks_settings(tmp_path, entry)
    assert message in str(info.value)


def test_eks_cli_flags_and_a_missing_cluster_in_wiring() -> None:
    args = build_parser().parse_args(
        ["zero", "--provider", "eks", "--eks-cluster", "prod", "--node-groups", "web"]
    )
    assert _provider_options(args) == {"eks_cluster": "prod", "node_groups": "web"}
    with pytest.raises(wiring.WiringError, match="eks_cluster: required"):
        wiring.connect_cluster("x", provider="eks", options={"node_groups": "web"})


@pytest.mark.parametrize(
    "options",
    [
        {"shoot": "eu1", "shoot_kubeconfig": "/k"},  # a bare name needs the project
        {"shoot": "garden-dev/eu1", "project": "dev", "shoot_kubeconfig": "/k"},  # one or the other
    ],
)
def test_gardener_takes_namespace_slash_name_or_a_project_and_a_name(options: dict[str, str]) -> None:
    with pytest.raises(wiring.WiringError, match="or the Shoot's name alone with project"):
        wiring.connect_cluster("shoot", kubeconfig="/nonexistent", provider="gardener", options=options)


def test_eks_without_the_aws_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # boto3 is the eks extra: a runtime install (scripts/scalebot) does not carry it.
    monkeypatch.setitem(sys.modules, "boto3", None)
    monkeypatch.delitem(sys.modules, "engine.pools.eks_aws", raising=False)
    with pytest.raises(wiring.WiringError) as refused:
        wiring.connect_cluster("x", provider="eks", options={"eks_cluster": "prod"})
    assert str(refused.value) == (
        "provider eks needs the AWS SDK (boto3), which is not installed: pip install 'scalebot[eks]' "
        "(the container image and scripts/test's .venv have it)"
    )


GKE = "    gke_project: acme-prod\n    gke_location: europe-west1\n    gke_cluster: prod-eu\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("    gke_location: europe-west1\n    gke_cluster: prod\n", "clusters.prod.gke_project: required"),
        (
            GKE.replace("acme-prod", "Acme"),
            "clusters.prod.gke_project: 'Acme' is not a Google Cloud project ID",
        ),
        (GKE.replace("europe-west1", "Europe"), "clusters.prod.gke_location: 'Europe' is not a Google Cloud"),
        (GKE + "    node_pools: web,,batch\n", "clusters.prod.node_pools: 'web,,batch' has an empty name"),
        (
            GKE + "    node_pools: web, Pool_1\n",
            "clusters.prod.node_pools: 'Pool_1' is not a GKE node pool name",
        ),
        (
            GKE + "    gke_endpoint_url: localhost\n",
            "clusters.prod.gke_endpoint_url: 'localhost' is not an http",
        ),
    ],
)
def test_bad_gke_settings_name_the_key(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "scalebot.yaml"
    path.write_text(f"clusters:\n  prod:\n    provider: gke\n{entry}", encoding="utf-8")
    with pytest.raises(settings.SettingsError) as info:
        settings.load(path, EKS_ENV)
    assert message in str(info.value)


def test_gke_without_the_google_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first import of the adapter's: the SDK may already be loaded by another test.
    monkeypatch.setitem(sys.modules, "google.api_core", None)
    monkeypatch.delitem(sys.modules, "engine.pools.gke_google", raising=False)
    options = {"gke_project": "acme-prod", "gke_location": "europe-west1", "gke_cluster": "prod"}
    with pytest.raises(wiring.WiringError, match=r"pip install 'scalebot\[gke\]'"):
        wiring.connect_cluster("x", provider="gke", options=options)


AKS = (
    "    aks_subscription: 00000000-0000-4000-8000-000000000001\n"
    "    aks_resource_group: rg-prod\n    aks_cluster: prod-eu\n"
)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("    aks_resource_group: rg\n    aks_cluster: prod\n", "clusters.prod.aks_subscription: required"),
        (
            AKS.replace("00000000-0000-4000-8000-000000000001", "prod"),
            "clusters.prod.aks_subscription: 'prod' is not a",
        ),
        (
            AKS + "    agent_pools: user1,,user2\n",
            "clusters.prod.agent_pools: 'user1,,user2' has an empty name",
        ),
        (
            AKS + "    agent_pools: User_1\n",
            "clusters.prod.agent_pools: 'User_1' is not an AKS agent pool name",
        ),
        (
            AKS + "    aks_endpoint_url: localhost\n",
            "clusters.prod.aks_endpoint_url: 'localhost' is not an http",
        ),
    ],
)
def test_bad_aks_settings_name_the_key(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "scalebot.yaml"
    path.write_text(f"clusters:\n  prod:\n    provider: aks\n{entry}", encoding="utf-8")
    with pytest.raises(settings.SettingsError) as info:
        settings.load(path, EKS_ENV)
    assert message in str(info.value)


def test_aks_without_the_azure_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "azure.core.exceptions", None)
    monkeypatch.delitem(sys.modules, "engine.pools.aks_azure", raising=False)
    options = {
        "aks_subscription": "00000000-0000-4000-8000-000000000001",
        "aks_resource_group": "rg",
        "aks_cluster": "c",
    }
    with pytest.raises(wiring.WiringError, match=r"pip install 'scalebot\[aks\]'"):
        wiring.connect_cluster("x", provider="aks", options=options)
