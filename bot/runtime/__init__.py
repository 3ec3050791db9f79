"""The composition root: `scalebot run` wires every adapter (clusters, store, operations, Slack, the
APScheduler timer, health and metrics) and serves until SIGTERM; the built-in simulated cluster.

Owns: wiring and process lifetime. Must not: hold rules; they live in the engine.
"""
