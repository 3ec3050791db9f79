"""Benchmarks at cluster scale, on the real local control plane (issue 8; issue 3's drain benchmark).

Run from the repository root (`python -m tests.bench --help`):

    .venv/bin/python -m tests.bench --size small                      # 100 nodes / 3,000 pods
    .venv/bin/python -m tests.bench --size full --write docs/benchmarks.md   # 1,000 / 30,000

Every scenario gets a fresh control plane and the same `localcluster.populate` shape, so
scalebot and its baselines face identical clusters. scalebot runs in a child process of its own
(`tests.bench.child`) as the `scalebot` ServiceAccount, through the production wiring
(`bot.runtime.wiring.connect_cluster`, `engine.operations.service.Operations`), so its memory is its
own and API
Priority and Fairness treats it as in production. Figures are printed; nothing here asserts a
speed target. Modules:

  cluster    fresh control planes, populate, /metrics and /proc readings
  child      the measured processes: scalebot's zero-scale, planning, the bare eviction loop
  scenarios  one function per scenario run, returning plain result records
  report     rows, the printed table and docs/benchmarks.md
  runner     the command line (`python -m tests.bench`)
  night      the realistic night (`--scenario night`): scalebot's sleep and wake with workloads, and
             the anchor's workload half (`downscaler`, kube-downscaler's cycle) with its node
             half modelled (`night_model`, pure: cluster-autoscaler's defaults, tuned, Karpenter)
  soak       a randomized soak with the stateful test's invariants (`python -m tests.bench.soak`)

and, apart from the control plane, `drain_client` (the drain's client CPU per eviction and
evictions in flight against a local TLS stub, two trees side by side).
"""
