"""One drain with the semantics of `kubectl drain` and Cluster API's machine drain: the pod filters,
the passes over a set of nodes, their report, pacing, adaptive eviction concurrency, the pod feed, and
the forced run's rules (what a plain drain refuses, the force scope's guard).

Owns: what to evict, delete, skip or wait for, and doing it through the `KubeApi` port. Must not:
know about operations, approvals, pools or Slack; it is driven by the operations runner and the CLI.
"""
