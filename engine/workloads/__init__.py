"""Workloads provider: put Deployments, StatefulSets, CronJobs and KEDA ScaledObjects to sleep and back.

Public surface (issue 4, "Workloads"). Modules:
  model       PURE  kinds, WorkloadInfo/NamespaceInfo/HpaInfo from raw JSON, WorkloadRecord, StoredOriginals
  selectors   PURE  label selector text → LabelSelector
  config      PURE  WorkloadConfig: namespace selection, exclusion defaults, kinds
  exclusions  PURE  exclusion verdicts: annotations (scalebot.io/*, downscaler/*), expiry, precedence
  plan        PURE  plan_sleep / plan_wake → WorkloadPlan of Decisions with their merge patches
  patches     PURE  the JSON merge patches (one field per kind, resourceVersion; replicas via /scale)
  report      PURE  WorkloadReport ("61/61 workloads restored"), Availability ("61/61 workloads available")
  order       PURE  the `scalebot.io/wake-order` annotation: wake groups (lowest first), the sleep's reverse
  api               WorkloadApi port
  kube              its adapter over engine.kube.client.KubeClient (the only module importing kubernetes)
  scaler            WorkloadScaler: snapshot (+ originals ConfigMap) → plan → patches (409-safe) → report

Importing this package does not import `kubernetes`; `WorkloadScaler.from_kube_client` loads the adapter.
"""

from engine.workloads.api import WorkloadApi
from engine.workloads.config import SYSTEM_NAMESPACES, WorkloadConfig
from engine.workloads.exclusions import parse_until
from engine.workloads.model import (
    FIELD_MANAGER,
    KEDA_PAUSED_ANNOTATION,
    KINDS,
    ORIGINAL_ANNOTATION,
    HpaInfo,
    Kind,
    NamespaceInfo,
    WorkloadInfo,
    WorkloadRecord,
)
from engine.workloads.plan import Decision, WorkloadPlan, WorkloadSnapshot, decide_wake, plan_sleep, plan_wake
from engine.workloads.report import Availability, Outcome, WorkloadReport, compute_availability
from engine.workloads.scaler import WorkloadScaler
from engine.workloads.selectors import parse_selector

__all__ = [
    "FIELD_MANAGER",
    "KEDA_PAUSED_ANNOTATION",
    "KINDS",
    "ORIGINAL_ANNOTATION",
    "SYSTEM_NAMESPACES",
    "Availability",
    "Decision",
    "HpaInfo",
    "Kind",
    "NamespaceInfo",
    "Outcome",
    "WorkloadApi",
    "WorkloadConfig",
    "WorkloadInfo",
    "WorkloadPlan",
    "WorkloadRecord",
    "WorkloadReport",
    "WorkloadScaler",
    "WorkloadSnapshot",
    "compute_availability",
    "decide_wake",
    "parse_selector",
    "parse_until",
    "plan_sleep",
    "plan_wake",
]
