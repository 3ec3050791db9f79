"""Pure values every engine package shares: pods, nodes and PDBs as the engine sees them, operations
and their plans, durations, reasons, the force scope, drain state, progress figures, the clock port,
the error root with its categories, and the engine's settings (drain, runner, consolidation).

Owns: dataclasses and enums with their own small pure methods. Must not: import any other engine
package (it is the bottom layer), talk to Kubernetes, SQLite or Slack, or read the wall clock.
"""
