"""The cluster port and its adapters: `KubeApi` (every Kubernetes call the engine makes), the real
client over the official `kubernetes` package, its client-side rate limit, errors translated once,
Events, the leader Lease, the field-policy check, pod-list projection, and the in-memory fake.

Owns: talking to the API server. Must not: decide anything about drains, pools or operations.
"""
