"""Who may do what to a schedule, and from where: roles (`authorise`, the approver's rule of a
pre-approval and of force), the clusters and schedules a person may see (someone without a role on a
cluster gets, for its schedules and its name, the answer an unknown one gets), and the channel rule
of typed requests. Each refusal is audited here or by its caller, as its docstring says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.operations import policy
from engine.operations.service import Operations
from engine.schedules.book import ScheduleBook
from engine.schedules.core.model import APPROVAL_MODES, Schedule, ScheduleOutcome, refused
from engine.schedules.core.spec import Occurrence
from engine.schedules.core.text import DOING


class ScheduleAccess:
    """Roles, visibility and the channel rule over the schedule book."""

    def __init__(self, book: ScheduleBook, ops: Operations) -> None:
        self.book = book
        self.ops = ops

    def authorise(
        self,
        cluster: str,
        by: str,
        groups: Sequence[str],
        verb: str,
        *,
        need: policy.Role = policy.Role.OPERATOR,
        detail: str = "",
    ) -> str:
        """ "" when `by` holds `need` on `cluster`; otherwise the audited refusal."""
        role = self.ops.role(cluster, by, groups)
        if role is not None and role >= need:
            return ""
        self.book.audit(by, f"refused_schedule_{verb}", cluster, detail)
        have = f"you are {role.label}" if role is not None else "you have no role there"
        return f"{DOING.get(verb, verb)} needs the {need.label} role on {cluster}; {have}"

    def check_cluster(self, cluster: str, by: str, groups: Sequence[str]) -> str:
        """ "" for a cluster `by` has a role on. Otherwise one answer whether it exists or not, naming
        only the clusters they have a role on (as `whoami`): nobody learns of the others here. The
        caller audits the refusal."""
        if cluster in self.ops.clusters() and self.ops.role(cluster, by, groups) is not None:
            return ""
        visible = [c for c in self.ops.clusters() if self.ops.role(c, by, groups) is not None]
        return f'unknown cluster "{cluster[:63]}"; clusters: {", ".join(visible) or "none"}'

    def visible(self, name: str, by: str, groups: Sequence[str], verb: str) -> Schedule | None:
        """The schedule `name` if `by` has a role on its cluster; None (an unknown schedule's answer)
        otherwise, so a person without a role there learns nothing of it, not even that it exists."""
        sched = self.book.load(name)
        if sched is None or self.ops.role(sched.cluster, by, groups) is not None:
            return sched
        self.book.audit(by, f"refused_schedule_{verb}", sched.cluster, f"{name}: no role on the cluster")
        return None

    def unknown_schedule(self, name: str, by: str, groups: Sequence[str]) -> str:
        """The answer to a schedule `by` may not see or that does not exist: the same, listing only
        the schedules of clusters they have a role on."""
        visible = {c for c in self.ops.clusters() if self.ops.role(c, by, groups) is not None}
        names = [s.name for s in self.book.schedules(enabled_only=False) if s.cluster in visible]
        return f'no schedule "{name[:63]}"; schedules: {", ".join(names) or "none"}'

    def check_creator(self, cluster: str, by: str, groups: Sequence[str], mode: str) -> str:
        if mode not in APPROVAL_MODES:
            return f'unknown approval mode "{mode[:40]}": use pre_approved or per_run'
        refusal = self.authorise(cluster, by, groups, "add")
        if refusal or mode == "per_run":
            return refusal
        # Pre-approval is the approval of every run to come: only an approver may give it.
        return self.authorise(cluster, by, groups, "pre_approve", need=policy.Role.APPROVER)

    def misplaced(self, cluster: str, by: str, channel: str, verb: str) -> ScheduleOutcome | None:
        """The channel rule of typed requests (`Operations.origin_refusal`), for schedule changes."""
        elsewhere = self.ops.origin_refusal(cluster, by=by, channel=channel, what=f"schedule_{verb}")
        return None if elsewhere is None else replace(refused(elsewhere.reply), reason=elsewhere.reason)

    def clicked(
        self, key: str, by: str, channel: str, verb: str, groups: Sequence[str]
    ) -> tuple[Schedule, Occurrence] | ScheduleOutcome:
        """The schedule and occurrence a button names, or the refusal: unknown (or on a cluster the
        clicker has no role on: the same answer), or clicked where the cluster is not operated from."""
        found = self.book.resolve(key, named=lambda name: self.visible(name, by, groups, verb))
        if isinstance(found, str):
            return refused(found, key=key)
        misplaced = self.misplaced(found[0].cluster, by, channel, verb)
        return found if misplaced is None else replace(misplaced, key=key)

    def may_pre_approve(self, sched: Schedule, by: str, groups: Sequence[str]) -> bool:
        role = self.ops.role(sched.cluster, by, groups)
        pol = self.ops.policies[sched.cluster]
        return policy.can_pre_approve(pol, voter=by, voter_role=role, created_by=sched.created_by).allowed

    def force_refusal(self, sched: Schedule, by: str, groups: Sequence[str]) -> str:
        """Who may approve force on a schedule (a run's or a standing scope): the rule of a
        pre-approval (approver role now; not its creator unless self-approval is allowed). ""
        when `by` may."""
        pol = self.ops.policies[sched.cluster]
        role = self.ops.role(sched.cluster, by, groups)
        decision = policy.can_pre_approve(pol, voter=by, voter_role=role, created_by=sched.created_by)
        if decision.allowed:
            return ""
        why = decision.reason.replace("pre-approve a schedule", "approve force for a schedule")
        return why.replace("pre-approving a schedule", "approving force for a schedule")

    def may_force(self, sched: Schedule, user: str) -> bool:
        """Whether `user` may approve force on `sched` now, their groups looked up again (Slack;
        a failed look-up grants nothing)."""
        try:
            groups = tuple(self.ops.groups_of(user))
        except Exception:  # fail closed, as the run's check does
            groups = ()
        return not self.force_refusal(sched, user, groups)
