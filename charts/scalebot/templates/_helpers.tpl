{{/* The objects' name: the release name, or "<release>-scalebot" when it does not say scalebot. */}}
{{- define "scalebot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: the same as manifests/base, so both select the same pods. */}}
{{- define "scalebot.selectorLabels" -}}
app.kubernetes.io/name: scalebot
{{- end -}}

{{- define "scalebot.labels" -}}
{{ include "scalebot.selectorLabels" . }}
app.kubernetes.io/part-of: scalebot
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "scalebot.subject" -}}
- kind: ServiceAccount
  name: {{ include "scalebot.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
