"""A real local Kubernetes control plane (etcd, kube-apiserver, controller manager, scheduler, kwok).

Used by scalebot's end-to-end tests and by `scalebot sandbox up`. Binaries come from
scripts/build-control-plane.sh (built from pinned Go modules, cached); this package starts them on
loopback, applies scalebot's own RBAC and builds cluster shapes. It never imports `bot` or `engine`.
"""
