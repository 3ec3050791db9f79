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

{{/* The admission policy's pool label keys, as a CEL list: every cluster's `pool_label` (the
labels provider's default when unset). Only label-key characters pass, so config text never
becomes CEL. */}}
{{- define "scalebot.poolLabels" -}}
{{- $labels := list -}}
{{- range $name, $cluster := .Values.config.clusters -}}
{{- $label := default "scalebot.io/pool" $cluster.pool_label -}}
{{- if regexMatch "^[A-Za-z0-9][-A-Za-z0-9_./]*$" $label -}}
{{- $labels = append $labels $label -}}
{{- end -}}
{{- end -}}
[{{- range $i, $label := $labels | uniq | sortAlpha }}{{ if $i }}, {{ end }}'{{ $label }}'{{ end -}}]
{{- end -}}
