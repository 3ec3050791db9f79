"""Pure decisions over a snapshot of the cluster: pre-flight plans, a conservative scheduler model
(placement), consolidation (which nodes could go) and scale-up advice.

Owns: answers computed from listed objects. Must not: change anything, or import the Kubernetes
client, the store or the runner (an import contract checks it).
"""
