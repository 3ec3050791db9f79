"""The provider registry: one table read by settings, the CLI and wiring."""

from __future__ import annotations

import pytest

from bot import cli, providers, settings, wiring
from bot.providers import Connected, Connection, Option, ProviderOptionError, ProviderSpec


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
    parser = cli.build_parser()
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
    args = cli.build_parser().parse_args(["zero", "--provider", "capi", "--pool-label", "x/y"])
    with pytest.raises(cli.CliError, match="--pool-label is not an option of --provider capi"):
        cli._provider_options(args)
    args = cli.build_parser().parse_args(["zero", "--pool-label", "x/y"])
    assert cli._provider_options(args) == {"pool_label": "x/y"}
