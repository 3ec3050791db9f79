"""Runner claims (one runner per operation, fenced by a token each claim bumps) and the locks an
operation holds on its pools."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from engine.domain.errors import Category, ScalebotError
from engine.store.base import StoreBase


class Fenced(ScalebotError, RuntimeError):
    """A runner's claim on an operation was taken over: its writes are refused (nothing written)."""

    category = Category.INTERNAL


class ClaimHeld(ScalebotError, RuntimeError):
    """Another live runner holds the operation; the message names it."""

    category = Category.TRANSIENT

    def __init__(self, claim: RunnerClaim, *, now: datetime, ttl_seconds: float) -> None:
        self.claim = claim
        heard = max(0.0, (now - claim.heartbeat_at).total_seconds())
        super().__init__(
            f"operation {claim.op_id} is being run by {claim.owner} (pid {claim.pid} on {claim.host}, "
            f"last heard from {heard:.0f} s ago): not starting a second runner; if that process is "
            f"gone, its claim lapses {ttl_seconds:.0f} s after it was last heard from"
        )


@dataclass(frozen=True, slots=True)
class RunnerId:
    """Who runs an operation: a display name (the pod or host), the host, the pid, a per-process nonce."""

    owner: str
    host: str
    pid: int
    nonce: str


@dataclass(frozen=True, slots=True)
class RunnerClaim:
    """The one runner allowed to act on an operation, and its fencing token (bumped by each claim)."""

    op_id: str
    owner: str
    host: str
    pid: int
    nonce: str
    token: int
    heartbeat_at: datetime


class LockConflict(ScalebotError):
    category = Category.TRANSIENT

    def __init__(self, key: str, op_id: str) -> None:
        self.key = key
        self.op_id = op_id
        super().__init__(f"{key} is locked by operation {op_id}")


_RELEASED_AT = "1970-01-01T00:00:00+00:00"


class ClaimsStore(StoreBase):
    """Who runs an operation, and what it holds locked."""

    # -- runner claims (one runner per operation, fencing) ----------------------------------------

    def claim_operation(
        self,
        op_id: str,
        me: RunnerId,
        *,
        now: datetime,
        ttl_seconds: float,
        gone: Callable[[RunnerClaim], bool],
    ) -> int:
        """Become the operation's one runner; returns the new fencing token.

        Raises ClaimHeld while another runner holds it: heard from within `ttl_seconds` and not
        `gone` (the caller's liveness test, e.g. a dead pid on this host). Each claim bumps the
        token, so every write of the previous holder is refused from then on (`fenced`).
        """
        with self.transaction():
            current = self.runner_claim(op_id)
            if current is not None and current.nonce and current.nonce != me.nonce:
                fresh = (now - current.heartbeat_at).total_seconds() < ttl_seconds
                if fresh and not gone(current):
                    raise ClaimHeld(current, now=now, ttl_seconds=ttl_seconds)
            token = (current.token if current is not None else 0) + 1
            self.db.table("runner_claims").upsert(
                {
                    "op_id": op_id,
                    "owner": me.owner,
                    "host": me.host,
                    "pid": me.pid,
                    "nonce": me.nonce,
                    "token": token,
                    "heartbeat_at": now.isoformat(),
                },
                pk="op_id",
            )
            return token

    def runner_claim(self, op_id: str) -> RunnerClaim | None:
        with self._lock:
            rows = list(self.db.table("runner_claims").rows_where("op_id = ?", [op_id]))
        if not rows:
            return None
        r = rows[0]
        return RunnerClaim(
            r["op_id"],
            r["owner"],
            r["host"],
            int(r["pid"]),
            r["nonce"],
            int(r["token"]),
            datetime.fromisoformat(r["heartbeat_at"]),
        )

    def renew_claims(self, tokens: Mapping[str, int], *, now: datetime) -> set[str]:
        """Heartbeat the claims still ours; returns the operations whose claim another runner took."""
        lost = set()
        with self.transaction():
            for op_id, token in tokens.items():
                cursor = self._conn.execute(
                    "UPDATE runner_claims SET heartbeat_at = ? WHERE op_id = ? AND token = ?",
                    [now.isoformat(), op_id, token],
                )
                if cursor.rowcount == 0:
                    lost.add(op_id)
        return lost

    def release_claim(self, op_id: str, token: int) -> None:
        """Give the claim up (the operation ended, or this runner stops): the next runner need not
        wait for it to lapse. The row stays, so tokens only ever grow and a stale one never matches."""
        with self.transaction():
            self._conn.execute(
                "UPDATE runner_claims SET nonce = '', heartbeat_at = ? WHERE op_id = ? AND token = ?",
                [_RELEASED_AT, op_id, token],
            )

    @contextmanager
    def fenced(self, op_id: str, token: int) -> Iterator[None]:
        """One write transaction that happens only while `token` is still the operation's claim.

        Raises Fenced (nothing written) once another runner has claimed the operation.
        """
        with self.transaction():
            row = self._conn.execute("SELECT token FROM runner_claims WHERE op_id = ?", [op_id]).fetchone()
            if row is None or int(row[0]) != token:
                raise Fenced(
                    f"operation {op_id} was claimed by another runner: this runner's writes are refused"
                )
            yield

    # -- locks ------------------------------------------------------------------------------------

    def acquire_locks(self, keys: Sequence[str], op_id: str, *, at: datetime) -> None:
        """All or nothing: raises LockConflict naming the operation that holds a key."""
        with self.transaction():
            for key in keys:
                held = list(self.db.table("locks").rows_where("key = ?", [key]))
                if held and held[0]["op_id"] != op_id:
                    raise LockConflict(key, held[0]["op_id"])
            for key in keys:
                self.db.table("locks").upsert({"key": key, "op_id": op_id, "at": at.isoformat()}, pk="key")

    def lock_holder(self, keys: Sequence[str]) -> tuple[str, str] | None:
        """(key, operation) of the first of `keys` an operation holds, if any."""
        with self._lock:
            for key in keys:
                held = list(self.db.table("locks").rows_where("key = ?", [key]))
                if held:
                    return key, held[0]["op_id"]
        return None

    def release_locks(self, op_id: str) -> None:
        with self.transaction():
            self.db.table("locks").delete_where("op_id = ?", [op_id])
