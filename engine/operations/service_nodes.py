"""The operations service's actions on nodes outside an operation: cordon and uncordon, and the
kubectl-style drain of `scalebot drain` with its preview and server dry run.

The drain by hand goes through the rules of the service as an operation's drain does: the operator
role, the channel rule, approval where the policy asks for it (a person in Slack asks for a `drain`
operation instead; `cli:` holds the kubeconfig and confirms at its terminal), refused while an
operation holds a node or its pool, an audit row before it starts and one when it ends, and a
forced drain (`--force`, `--disable-eviction`) removes what a plain drain refuses only within the
force scope that was shown (`engine.domain.force_scope`): a Pod outside it (a bare Pod bound to the
node after the confirmation, a DaemonSet deleted meanwhile) is refused, naming its owner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engine.domain import force_scope
from engine.domain.clock import Clock
from engine.domain.model import NodeInfo, parse_label_selector
from engine.domain.operation import DrainProgress, OpKind, Outcome
from engine.domain.reasons import NeedsApprovalInstead
from engine.domain.settings import DrainSettings
from engine.drain import driver, filters, force_rules
from engine.drain import passes as drain
from engine.drain.driver import DrainOutcome
from engine.drain.progress import after_pass
from engine.drain.report import DrainReport
from engine.kube.api import ServerDryRunApi
from engine.kube.errors import InvalidRequest, KubeError
from engine.operations import policy
from engine.operations.service_rules import Rules, UserError, busy_text
from engine.planning import preflight
from engine.store.claims import LockConflict
from engine.store.ports import PoolLocks

__all__ = [
    "Cordoned",
    "DrainFlags",
    "DrainOutcome",
    "DrainPreview",
    "DrainReport",
    "DryRunLine",
    "NodeActions",
    "forcing",
]
"""With the drain's own values it answers with (`DrainOutcome`, `DrainReport`), which its callers read."""


@dataclass(frozen=True, slots=True)
class Cordoned:
    """A cordon or uncordon by hand: the person's answer and the nodes whose flag it changed."""

    outcome: Outcome
    changed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DrainFlags:
    """kubectl drain's flags as a person gives them (`scalebot drain`, `plan drain`)."""

    force: bool = False
    ignore_daemonsets: bool = True
    delete_emptydir_data: bool = True
    disable_eviction: bool = False
    pod_selector: str | None = None
    """A label selector as text: only the matching pods are drained."""
    grace_period_seconds: int | None = None

    def options(self) -> filters.DrainOptions:
        """The drain's options; an invalid pod selector raises UserError naming the flag."""
        try:
            selector = parse_label_selector(self.pod_selector) if self.pod_selector else None
        except ValueError as exc:
            raise UserError(f"--pod-selector: {exc}") from exc
        options = filters.DrainOptions.kubectl(
            force=self.force,
            ignore_daemonsets=self.ignore_daemonsets,
            delete_emptydir_data=self.delete_emptydir_data,
        )
        return replace(
            options,
            pod_selector=selector,
            disable_eviction=self.disable_eviction,
            grace_period_seconds=self.grace_period_seconds,
        )


@dataclass(frozen=True, slots=True)
class DrainPreview:
    """What a drain by hand would do (the pre-flight), and for a forced one the force scope that
    going on consents to: the drain forces nothing outside it."""

    plan: preflight.DrainPlan
    force_scope: force_scope.ForceScope | None = None
    forcing: tuple[str, ...] = ()
    """The forcing options (`engine.domain.force_scope`'s words) the scope is for."""

    def to_text(self) -> str:
        if self.force_scope is None:
            return self.plan.to_text()
        heading = force_scope.heading(self.forcing)
        lines = [heading, *(f"  {line}" for line in force_scope.describe(self.force_scope))]
        return "\n".join([self.plan.to_text(), *lines])


@dataclass(frozen=True, slots=True)
class DryRunLine:
    """One line of a server dry run, and whether it says the server or a rule would refuse."""

    text: str
    refused: bool = False


def forcing(options: filters.DrainOptions) -> bool:
    """A drain that may remove what a plain drain refuses, or bypass PodDisruptionBudgets."""
    return options.force or options.disable_eviction


class NodeActions:
    """What a person does to nodes by hand, outside an operation: cordon, uncordon and drain."""

    def __init__(
        self, locks: PoolLocks, rules: Rules, *, policies: Mapping[str, policy.ClusterPolicy], clock: Clock
    ) -> None:
        """`locks`: the operations' pool and node locks (a node an operation holds is refused)."""
        self.locks = locks
        self.rules = rules
        self.policies = policies
        self.clock = clock

    def cordon(
        self,
        cluster: str,
        nodes: Sequence[str],
        *,
        by: str,
        unschedulable: bool,
        groups: Sequence[str] = (),
        channel: str = "",
    ) -> Cordoned:
        """Cordon or uncordon nodes by hand: operator role; refused on a protected cluster or where
        the policy lists the verb among what needs approval (ask for a `drain` instead, which is
        approved like any operation); refused while an operation holds the node or its pool. The
        answer names the nodes whose flag changed (the CLI prints one line per node)."""
        handle = self.rules.handle(cluster)
        verb = "cordon" if unschedulable else "uncordon"
        refusal = self._by_hand_refusal(cluster, verb, by=by, groups=groups, channel=channel)
        if refusal is not None:
            return Cordoned(refusal)
        known = {n.name for n in handle.api.list_nodes()}
        missing = [n for n in nodes if n not in known]
        if missing or not nodes:
            return Cordoned(
                self.rules.refuse(
                    by,
                    verb,
                    cluster,
                    f"node(s) not found: {', '.join(missing) or '(none given)'}; "
                    f"nodes: {', '.join(sorted(known)[:20])}",
                )
            )
        busy = self._held_nodes(cluster, nodes, by=by, what=verb)
        if busy is not None:
            return Cordoned(busy)
        changed: list[str] = []
        try:
            for n in nodes:
                # Uncordon takes our draining taint too: a node left tainted would stay unusable.
                if (
                    handle.api.set_unschedulable(n, True)
                    if unschedulable
                    else drain.uncordon_node(handle.api, n)
                ):
                    changed.append(n)
        except Exception as exc:
            if changed:  # what did change is said (both front doors read the note) and audited
                exc.add_note(f"already {verb}ed before the failure: {', '.join(changed)}")
                self.rules.audit(by, verb, cluster=cluster, detail=", ".join(changed) + " (then failed)")
            raise
        self.rules.audit(by, verb, cluster=cluster, detail=", ".join(nodes))
        outcome = Outcome(
            True,
            f"{verb}ed: {', '.join(changed) or 'nothing (already ' + verb + 'ed)'}",
            changed=bool(changed),
        )
        return Cordoned(outcome, tuple(changed))

    def _by_hand_refusal(
        self,
        cluster: str,
        verb: str,
        *,
        by: str,
        groups: Sequence[str],
        channel: str = "",
        tags: frozenset[str] = frozenset(),
    ) -> Outcome | None:
        """The rules of a change to nodes by hand (`verb`, with the policy `tags` it also carries):
        the operator role, the channel rule, and no approval needed, since nothing here waits for one
        (a protected cluster, or the policy lists the verb or a tag: ask for an operation instead).
        `cli:` holds the cluster's kubeconfig and acts as admin. None: it may go on."""
        pol = self.policies[cluster]
        role = self.rules.role(cluster, by, groups)
        if role is None or role < policy.Role.OPERATOR:
            return self.rules.refuse(by, verb, cluster, f"{verb} needs the operator role on {cluster}")
        elsewhere = self.rules.origin_refusal(cluster, by=by, channel=channel, what=verb)
        if elsewhere is not None:
            return elsewhere
        listed = sorted(({verb} | tags) & pol.approval_required_for)
        if by.startswith("cli:") or not (pol.protected or listed):
            return None
        why = "a protected cluster" if pol.protected else f"its policy lists {listed[0]} as needing approval"
        return self.rules.refuse(
            by,
            verb,
            cluster,
            f"{verb} on {cluster} needs approval ({why}); request a drain instead",
            NeedsApprovalInstead(verb, cluster, why),
        )

    def _held_nodes(self, cluster: str, nodes: Sequence[str], *, by: str, what: str) -> Outcome | None:
        """The audited refusal when an operation holds one of `nodes` or its pool; None when free."""
        pool_of = {n: p.name for p in self.rules.handle(cluster).pools.list_pools() for n in p.nodes}
        keys = [f"node:{cluster}/{n}" for n in nodes] + [
            f"pool:{cluster}/{pool_of[n]}" for n in nodes if n in pool_of
        ]
        holder = self.locks.lock_holder(keys)
        if holder is None:
            return None
        busy = self.rules.busy(LockConflict(*holder))
        return self.rules.refuse(by, what, cluster, busy_text(busy), busy)

    # -- the drain by hand (`scalebot drain`) -------------------------------------------------------

    def select_nodes(
        self, cluster: str, names: Sequence[str], selector: str | None, *, by: str, groups: Sequence[str] = ()
    ) -> list[NodeInfo]:
        """The nodes a command acts on, by name and label selector, sorted by name; an unknown name
        or an empty selection raises UserError naming the known nodes."""
        refusal = self.rules.may_view(cluster, by=by, groups=groups, what="nodes")
        if refusal:
            raise UserError(refusal)
        if not names and not selector:
            raise UserError("name at least one node, or select nodes with -l/--selector")
        api = self.rules.handle(cluster).api
        try:
            selected = api.list_nodes(label_selector=selector) if selector else []
        except InvalidRequest as exc:
            raise UserError(f'invalid selector "{selector}": {exc}') from exc
        if selector and not selected:
            raise UserError(f'no node matches the selector "{selector}"')
        known = {n.name: n for n in api.list_nodes()} if names else {}
        missing = [n for n in names if n not in known]
        if missing:
            hint = ", ".join(sorted(known)[:10]) + (" ..." if len(known) > 10 else "")
            raise UserError(f"node(s) not found: {', '.join(missing)}; known nodes: {hint or 'none'}")
        chosen = {n.name: n for n in selected}
        chosen.update({n: known[n] for n in names})
        return [chosen[n] for n in sorted(chosen)]

    def drain_preview(
        self,
        cluster: str,
        nodes: Sequence[NodeInfo],
        flags: DrainFlags,
        *,
        by: str,
        groups: Sequence[str] = (),
    ) -> DrainPreview:
        """What a drain of `nodes` with `options` would evict, delete, skip or be refused, and why;
        for a forced drain also the force scope it would be confined to. A read, limited like `plan`."""
        options = flags.options()
        self.rules.allow_read(cluster, by=by, groups=groups, what="plan")
        return self._drain_preview(cluster, nodes, options)

    def _drain_preview(
        self, cluster: str, nodes: Sequence[NodeInfo], options: filters.DrainOptions
    ) -> DrainPreview:
        api = self.rules.handle(cluster).api
        ctx = filters.DrainContext(
            options=options,
            now=self.clock.now(),
            daemonset_keys=api.list_daemonset_keys(),
            unreachable_nodes=frozenset(n.name for n in nodes if n.is_unreachable),
        )
        pods = api.list_pods(node_names=[n.name for n in nodes])
        plan = preflight.plan_drain(nodes, pods, api.list_pdbs(), ctx)
        if not forcing(options):
            return DrainPreview(plan)
        plain = replace(ctx, options=_plain(options))
        scope = force_scope.build_scope(force_rules.needing_force(pods, plain, ctx))
        return DrainPreview(plan, scope, _forcing_words(options))

    def drain_server_dry_run(
        self,
        cluster: str,
        nodes: Sequence[NodeInfo],
        flags: DrainFlags,
        *,
        by: str,
        groups: Sequence[str] = (),
    ) -> list[DryRunLine]:
        """`--dry-run=server`: the plan's evictions and deletions sent with dryRun=All, in kubectl's
        words, in order; a line is `refused` when the server (a PDB, admission) or a rule would
        refuse. Changes nothing."""
        api = self.rules.handle(cluster).api
        if not isinstance(api, ServerDryRunApi):
            raise UserError("--dry-run=server needs a Kubernetes API server")
        drain_plan = self.drain_preview(cluster, nodes, flags, by=by, groups=groups).plan
        live = {p.key: p for p in api.list_pods(node_names=[n.name for n in nodes])}
        lines = [DryRunLine(f"node/{node.name} cordoned (server dry run)") for node in nodes]
        # A rule kubectl applies itself refuses at once; what the plan only predicts (a budget at 0)
        # is asked of the server, which has the last word.
        refused = [p for p in drain_plan.pods if p.action == "block"]
        lines += [DryRunLine(f"error: cannot delete {s.reason}: {s.pod}", refused=True) for s in refused]
        for step in drain_plan.pods:
            pod = live.get(step.pod)
            if step.action not in ("evict", "blocked", "delete") or pod is None:
                continue
            evict = step.action != "delete"
            verb = "evicting" if evict else "deleting"
            try:
                api.dry_run_remove(pod, evict=evict, grace_seconds=flags.grace_period_seconds)
            except KubeError as exc:
                lines.append(DryRunLine(f"error when {verb} pod {step.pod} (server dry run): {exc}", True))
                continue
            lines.append(DryRunLine(f"{verb} pod {step.pod} (server dry run)"))
        return lines

    def drain_nodes(
        self,
        cluster: str,
        nodes: Sequence[str],
        flags: DrainFlags,
        settings: DrainSettings,
        *,
        by: str,
        groups: Sequence[str] = (),
        approved: force_scope.ForceScope | None = None,
        on_report: Callable[[DrainReport], None] | None = None,
        on_progress: Callable[[DrainProgress, DrainReport], None] | None = None,
        cancel: threading.Event | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> DrainOutcome:
        """Cordon and drain `nodes` now, with kubectl's semantics, under the service's rules (the
        module docstring). `approved`: the force scope the person saw and confirmed; without one a
        forced drain is confined to the scope of a preview made as it starts. Raises UserError,
        audited, when a rule refuses (nothing changed).

        `on_report`: each pass's report whose condition message changed; `on_progress`: after every
        pass, the drain's figures (`engine.domain.progress_figures`) and its report; `on_start`: once
        the rules let it go on, just before the cordon."""
        options = flags.options()
        tags = frozenset({"force"} if forcing(options) else ())
        refusal = self._by_hand_refusal(cluster, OpKind.DRAIN.value, by=by, groups=groups, tags=tags)
        if refusal is None:
            refusal = self._held_nodes(cluster, nodes, by=by, what=OpKind.DRAIN.value)
        if refusal is not None:
            raise UserError(refusal.reply)
        handle = self.rules.handle(cluster)
        pod_filters = None
        detail = ", ".join(nodes)
        if forcing(options):
            if approved is None:
                listed = [n for n in handle.api.list_nodes() if n.name in set(nodes)]
                approved = self._drain_preview(cluster, listed, options).force_scope
            scope = approved or force_scope.ForceScope()
            pod_filters = (force_rules.scope_guard(scope, _plain(options)), *filters.default_filters())
            words = ", ".join(_forcing_words(options))
            detail += f"; forced ({words}) within the scope: {', '.join(scope.units) or 'no unit'}"
        self.rules.audit(by, OpKind.DRAIN.value, cluster=cluster, detail=detail)
        if on_start is not None:
            on_start()
        progress = DrainProgress()

        def on_pass(result: drain.PassResult, now: datetime) -> None:
            nonlocal progress
            progress = after_pass(
                progress,
                nodes=nodes,
                state=result.state,
                report=result.report,
                busy_nodes=result.busy_nodes,
                now=now,
            )
            if on_progress is not None:
                on_progress(progress, result.report)

        outcome = driver.drain_nodes(
            handle.api,
            list(nodes),
            options=options,
            clock=self.clock,
            settings=settings,
            on_report=on_report,
            on_pass=on_pass,
            cancel=cancel,
            pod_filters=pod_filters,
        )
        self.rules.audit(by, "drain_finished", cluster=cluster, detail=_ending(nodes, outcome))
        return outcome


def _plain(options: filters.DrainOptions) -> filters.DrainOptions:
    """The plain drain a forced one is measured against, over the same pods (`--pod-selector`)."""
    return replace(force_rules.plain_drain(), pod_selector=options.pod_selector)


def _forcing_words(options: filters.DrainOptions) -> tuple[str, ...]:
    words = (force_scope.FORCE,) if options.force else ()
    return words + ((force_scope.DISABLE_EVICTION,) if options.disable_eviction else ())


def _ending(nodes: Sequence[str], outcome: DrainOutcome) -> str:
    """How a drain by hand ended, for its audit row."""
    if outcome.cancelled:
        return f"{', '.join(nodes)}: interrupted"
    if outcome.timed_out:
        return f"{', '.join(nodes)}: timed out"
    refused = "; ".join(f"{n}: {why}" for n, why in sorted(outcome.failed_nodes.items()))
    drained = [n for n in nodes if n not in outcome.failed_nodes]
    return f"drained: {', '.join(drained) or 'none'}" + (f"; refused: {refused}" if refused else "")
