"""Node pools: the `PoolProvider` port and one module per provider (Cluster API, Karpenter, EKS,
Gardener, label pools, the simulated cluster), plus the victim order when a pool shrinks.

Owns: reading a pool's size and nodes, shrinking it, removing machines, restoring it. Must not:
import another provider (an import contract checks it), or approve anything.
"""
