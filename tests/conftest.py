"""Shared pytest wiring: the local control plane for e2e tests, and the benchmark opt-in.

Fixtures (all lazy: nothing starts unless a test asks for it):
  control_plane        session-scoped ControlPlane (etcd, apiserver, controller manager, scheduler,
                       kwok, scalebot's RBAC, Cluster API CRDs); built on first use, stopped at exit
  admin_api            session-scoped kubernetes ApiClient as admin (system:masters)
  scalebot_kubeconfig  Path of the kubeconfig holding scalebot's ServiceAccount token
  scalebot_api         session-scoped kubernetes ApiClient as the scalebot ServiceAccount
  namespace            a fresh namespace per test (default ServiceAccount present), deleted after
  unique_name          a short unique DNS-1123 name per test, for node pools and other objects
  node_pool            factory: node_pool(count, **create_node_pool kwargs) -> node names; the nodes
                       are deleted after the test

Every `engine.operations.runner.Runner` a test builds (directly or inside `Operations`) is stopped when
the test ends, also when it failed, and the run fails loudly if a non-daemon thread outlives it (such a thread
would keep pytest from exiting after its summary).

Benchmarks (marker `bench`) are deselected unless `--run-bench` is given. e2e tests (marker `e2e`)
run in the default suite; a machine that cannot build the control plane fails them with the reason.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from localcluster.controlplane import ControlPlane

_STARTUP_NOTES: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-bench",
        action="store_true",
        default=False,
        help="also run benchmarks (marker `bench`); they print figures and take minutes",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # scripts/test runs the tests not marked e2e while the control plane is still building: a test
    # that starts the control plane must say so with the marker, or it would build it a second time.
    unmarked = [
        item.nodeid for item in items if _needs_control_plane(item) and not item.get_closest_marker("e2e")
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the control plane but are not marked e2e (add pytest.mark.e2e): "
            + ", ".join(unmarked)
        )
    if config.getoption("--run-bench"):
        return
    selected: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        (deselected if item.get_closest_marker("bench") else selected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def _needs_control_plane(item: pytest.Item) -> bool:
    return "control_plane" in getattr(item, "fixturenames", ())


def note_in_summary(line: str) -> None:
    """A line for the end of the run, after the results: what passed but deserves a look."""
    _STARTUP_NOTES.append(line)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for note in _STARTUP_NOTES:
        terminalreporter.write_line(note)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """An e2e test that failed gets a "cluster state at failure" section (tests/cluster_state.py):
    its pods, events and nodes as they were, read before the fixtures' teardown deletes them."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    funcargs = getattr(item, "funcargs", {})
    api = funcargs.get("admin_api")
    if report.when != "call" or not report.failed or api is None:
        return
    from tests.cluster_state import read_cluster_state

    try:
        state = read_cluster_state(api, funcargs.get("namespace"), funcargs.get("unique_name"))
    except Exception as exc:  # the report must not hide the test's own failure
        state = f"could not read the cluster: {exc!r}"
    report.sections.append(("cluster state at failure", state))


@pytest.fixture(autouse=True)
def _stop_every_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stop the operation runners a test made, whatever happened in it.

    A runner left going after a failed assertion keeps retrying its step against objects the test's
    teardown deletes, and its worker threads (non-daemon, as ThreadPoolExecutor makes them) keep the
    interpreter from exiting. Tests still stop their runners themselves; this is the net under them.
    """
    from engine.operations import runner as runner_module

    made: list[runner_module.Runner] = []
    original_init = runner_module.Runner.__init__

    def recording_init(self: runner_module.Runner, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(runner_module.Runner, "__init__", recording_init)
    yield
    for runner in made:
        runner.stop()


# How long stragglers get to finish their step at the end of the run (a child run in
# tests/unit/test_suite_hygiene.py shortens it).
_LEAK_GRACE_SECONDS = float(os.environ.get("SCALEBOT_TEST_THREAD_GRACE_SECONDS", "15"))


def _lingering_threads() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _release_idle_executor_workers() -> None:
    """Do now what the interpreter's exit hook for concurrent.futures does before it joins workers.

    An idle ThreadPoolExecutor worker is non-daemon but harmless: at exit it receives a wake-up and
    leaves. Sending that wake-up here (the module's own shutdown flag and sentinel) leaves only the
    workers that are busy, which are the ones that would hang the exit.
    """
    from concurrent.futures import thread as executor_threads

    with executor_threads._global_shutdown_lock:  # type: ignore[attr-defined]
        executor_threads._shutdown = True  # type: ignore[attr-defined]
    for work_queue in list(executor_threads._threads_queues.values()):  # type: ignore[attr-defined]
        work_queue.put(None)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Fail the run, and still exit, if a non-daemon thread outlived the tests.

    Such a thread makes the interpreter wait for it forever after pytest printed its summary, so CI
    would run into its time limit instead of failing. Give stragglers a grace period to finish their
    step, then name them and leave with a failing status.
    """
    _release_idle_executor_workers()
    end = time.monotonic() + _LEAK_GRACE_SECONDS
    for thread in _lingering_threads():
        thread.join(max(0.0, end - time.monotonic()))
    leaked = _lingering_threads()
    if not leaked:
        return
    names = ", ".join(f"{t.name} ({getattr(t, '_target', None)})" for t in leaked)
    sys.stderr.write(f"\nFAILED: {len(leaked)} non-daemon thread(s) still alive after the tests: {names}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(3)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    from localcluster.binaries import build_summary, ensure_binaries
    from localcluster.controlplane import ControlPlane

    # ControlPlaneUnavailable propagates: the test errors with what is missing (Go, the module
    # proxy, ...); it is never skipped.
    cache_dir = ensure_binaries()
    _STARTUP_NOTES.append(build_summary(cache_dir))
    cp = ControlPlane(cache_dir, install_capi_crds=True, echo=_STARTUP_NOTES.append)
    with cp:
        yield cp


@pytest.fixture(scope="session")
def karpenter(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane with Karpenter's CRDs and its kwok cloud provider running.

    Opt-in: started by the first test that asks, stopped with the control plane. Nodes it creates
    carry `type=kwok` (from their NodePool's template) so the kwok simulator makes them Ready.
    """
    control_plane.start_karpenter()
    return control_plane


@pytest.fixture(scope="session")
def admin_api(control_plane: ControlPlane) -> Iterator[Any]:
    api = control_plane.admin_api_client(pool_size=32)
    yield api
    api.close()


@pytest.fixture(scope="session")
def scalebot_kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.scalebot_kubeconfig


@pytest.fixture(scope="session")
def scalebot_api(control_plane: ControlPlane) -> Iterator[Any]:
    api = control_plane.scalebot_api_client(pool_size=32)
    yield api
    api.close()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """`<test name, shortened>-<random>`: a valid name for namespaces, nodes and pools."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_")).strip("-")[:30]
    return f"{base.strip('-') or 't'}-{secrets.token_hex(3)}"


@pytest.fixture
def pool_key(unique_name: str) -> str:
    """A node label key of this test's own: its pools are the only pools of "the cluster"."""
    return f"{unique_name}.scalebot.test/pool"


@pytest.fixture
def kube(scalebot_kubeconfig: Path) -> Iterator[Any]:
    """scalebot's own client (`engine.kube.client.KubeClient`), from its ServiceAccount kubeconfig."""
    from engine.kube.client import KubeClient

    client = KubeClient.from_config(kubeconfig=str(scalebot_kubeconfig))
    yield client
    client.close()


@pytest.fixture
def namespace(admin_api: Any, unique_name: str) -> Iterator[str]:
    from localcluster import faults, objects

    name = f"e2e-{unique_name}"
    objects.create_namespace(admin_api, name)
    yield name
    # Let pods held by the test finalizer go, then delete without waiting (namespaces are unique).
    faults.release_namespace(admin_api, name)
    objects.delete_namespace(admin_api, name)


@pytest.fixture
def throttled_evictions(admin_api: Any, namespace: str, unique_name: str) -> Iterator[str]:
    """A priority level of one share that rejects what it cannot seat, for scalebot's evictions in
    the test's namespace only (`tests.e2e.support.evictions_rejected_beyond_one_share`)."""
    from tests.e2e import support

    with support.evictions_rejected_beyond_one_share(admin_api, namespace, f"{unique_name}-tiny") as level:
        yield level


@pytest.fixture(params=["in-process", "worker process"])
def eviction_route(request: pytest.FixtureRequest) -> Iterator[str]:
    """Evictions and pod deletions sent by the test's process, or by a worker process
    (`runner.eviction_processes`, `engine.kube.offload`), which is stopped after the test."""
    from engine.kube import offload

    if request.param == "in-process":
        yield request.param
        return
    with offload.Offload(1) as workers:
        offload.install(workers)
        try:
            yield request.param
        finally:
            offload.install(None)


@pytest.fixture
def node_pool(admin_api: Any, unique_name: str) -> Iterator[Callable[..., list[str]]]:
    from localcluster import objects

    created: list[str] = []
    counter = [0]

    def make(count: int, **kwargs: Any) -> list[str]:
        name = kwargs.pop("name", None) or f"{unique_name}-p{counter[0]}"
        counter[0] += 1
        names = objects.create_node_pool(admin_api, name, count, **kwargs)
        created.extend(names)
        return names

    yield make
    objects.delete_nodes(admin_api, created)
