"""One drain with the semantics of `kubectl drain` and Cluster API's machine drain: the drain rules
(each one's filter and what force lifts, registered once), the passes over a set of nodes, their
report, pacing, adaptive eviction concurrency, the pod feed, and the forced run's measure against a
plain drain (what needs force, the force scope's guard).

Owns: what to evict, delete, skip or wait for, and doing it through the `KubeApi` port. Must not:
know about operations, approvals, pools or Slack; it is driven by the operations runner and the CLI.
"""
