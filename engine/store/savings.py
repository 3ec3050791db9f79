"""The weekly savings post: the last week each cluster claimed, so no week is posted twice."""

from __future__ import annotations

from datetime import date, datetime

from engine.store.base import StoreBase


class SavingsStore(StoreBase):
    """Claim a week's post before sending it; give the claim back when Slack refused it."""

    def savings_post_week(self, cluster: str) -> date | None:
        """The Monday of the last week whose savings post `cluster` claimed (None: never)."""
        with self._lock:
            rows = list(self.db.table("savings_posts").rows_where("cluster = ?", [cluster]))
        return date.fromisoformat(rows[0]["week"]) if rows else None

    def claim_savings_week(self, cluster: str, week: date, *, at: datetime) -> bool:
        """Claim the post of `week` before sending it: False if that week (or a later one) is
        already claimed, so two ticks or a restart never post one week twice."""
        with self.transaction():
            rows = list(self.db.table("savings_posts").rows_where("cluster = ?", [cluster]))
            if rows and date.fromisoformat(rows[0]["week"]) >= week:
                return False
            self.db.table("savings_posts").upsert(
                {"cluster": cluster, "week": week.isoformat(), "claimed_at": at.isoformat()}, pk="cluster"
            )
        return True

    def release_savings_week(self, cluster: str, week: date, previous: date | None) -> None:
        """Give back the claim of a post Slack refused, so the next start tries that week again."""
        with self.transaction():
            table = self.db.table("savings_posts")
            if not list(table.rows_where("cluster = ? AND week = ?", [cluster, week.isoformat()])):
                return  # claimed again since (a later week): that claim stands
            if previous is None:
                table.delete(cluster)
            else:
                table.update(cluster, {"week": previous.isoformat()})
