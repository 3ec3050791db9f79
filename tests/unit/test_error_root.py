"""One error root: every exception scalebot defines derives from `ScalebotError` and names its
category, and each front door decides from the category in one place.

The first test imports every module of `engine/` and `bot/` and looks at every exception class
defined there, so a new one that forgets the root fails here rather than falling through a front
door's mapping (a CLI traceback, an incident ID in Slack, no retry in the runner).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import bot
import engine
from bot.cli import main as cli
from bot.slack import dispatch
from engine.domain.errors import Category, ScalebotError
from engine.kube import errors as kube_errors
from engine.operations import runner
from engine.operations.service import UserError
from engine.pools.base import PoolNotFound
from engine.store.base import StoreError
from engine.store.claims import Fenced


def _modules(package: ModuleType) -> list[ModuleType]:
    names = [
        info.name
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
        if not info.name.endswith(".__main__")  # running it is what importing it does
    ]
    return [package, *(importlib.import_module(name) for name in names)]


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for module in [*_modules(engine), *_modules(bot)]:
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found.append(value)
    return found


def test_every_exception_in_engine_and_bot_derives_from_the_root_and_names_a_category() -> None:
    classes = _exception_classes()
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    # The walk reaches the exceptions of every layer (or it proves nothing).
    assert {
        "engine.store.claims.LockConflict",
        "engine.kube.errors.TransportError",
        "engine.pools.base.PoolNotFound",
        "bot.config.document.SettingsError",
        "bot.text.commands.UsageError",
        "bot.cli.common.CliError",
    } <= names
    assert len(classes) >= 40
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, ScalebotError))
    assert outside == []
    rooted = [c for c in classes if issubclass(c, ScalebotError)]
    assert [c.__qualname__ for c in rooted if not isinstance(c.category, Category)] == []


def test_the_root_keeps_the_builtin_bases_callers_catch() -> None:
    """Adding the root changes no `except` clause: a bad setting is still a ValueError, a missing
    pool a LookupError, a store failure a RuntimeError."""
    assert issubclass(UserError, ValueError) and issubclass(PoolNotFound, LookupError)
    assert issubclass(StoreError, RuntimeError) and issubclass(kube_errors.NotFound, kube_errors.KubeError)


def test_each_front_door_maps_the_category() -> None:
    """The CLI, as kubectl: usage and configuration exit 2, a cluster's refusal or failure 1 (an
    internal error's traceback is the report).
    The runner: an API server's refusal and a transient failure retry the step; nothing else does.
    Slack: a usage error is shown as it is; anything else is an incident (None here)."""
    assert cli.EXIT_CODES == {
        Category.USAGE: 2,
        Category.CONFIGURATION: 2,
        Category.CLUSTER: 1,
        Category.TRANSIENT: 1,
    }
    assert {Category.CLUSTER, Category.TRANSIENT} == runner.RETRIED
    for kube_error in (kube_errors.KubeError, kube_errors.Forbidden, kube_errors.TransportError):
        assert kube_error.category in runner.RETRIED  # every API failure was retried, and still is
    assert StoreError.category not in runner.RETRIED and Fenced.category not in runner.RETRIED

    shown = dispatch.error_reply(PoolNotFound("gpu", ["web", "batch"]))
    assert shown is not None and shown.text == 'pool "gpu" not found; known pools: batch, web'
    refusal = dispatch.error_reply(UserError("viewers may not drain"))
    assert refusal is not None and "viewers may not drain" in refusal.text
    assert dispatch.error_reply(StoreError("database is locked")) is None
    assert dispatch.error_reply(kube_errors.ServerError(status=500, message="etcd timeout")) is None
    assert dispatch.error_reply(RuntimeError("a bug")) is None
