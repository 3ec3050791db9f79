{{/* The chart's name, or nameOverride. */}}
{{- define "scalebot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, else the release name, or "<release>-<name>" when it does
not contain the name. */}}
{{- define "scalebot.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "scalebot.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount scalebot runs as: serviceAccount.name, else the full name (created by the
chart unless serviceAccount.create is false). The admission policies match this name. */}}
{{- define "scalebot.serviceAccountName" -}}
{{- default (include "scalebot.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The image: repository@digest when a digest is given (immutable), else repository:tag. */}}
{{- define "scalebot.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
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
  name: {{ include "scalebot.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The admission policy's pool label keys, as a CEL list: the `pool_label` of every cluster of
the labels provider (its default when unset), the only provider that deletes Node objects. Only label-key characters pass, so config text never
becomes CEL. */}}
{{- define "scalebot.poolLabels" -}}
{{- $labels := list -}}
{{- range $name, $cluster := .Values.config.clusters -}}
{{- if eq (default "labels" $cluster.provider) "labels" -}}
{{- $label := default "scalebot.io/pool" $cluster.pool_label -}}
{{- if regexMatch "^[A-Za-z0-9][-A-Za-z0-9_./]*$" $label -}}
{{- $labels = append $labels $label -}}
{{- end -}}
{{- end -}}
{{- end -}}
[{{- range $i, $label := $labels | uniq | sortAlpha }}{{ if $i }}, {{ end }}'{{ $label }}'{{ end -}}]
{{- end -}}
