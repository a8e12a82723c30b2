{{/*
Chart name, truncated to the 63 characters a DNS label allows.
*/}}
{{- define "pgbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified app name: the release name, prefixed to the chart name unless it already holds it.
*/}}
{{- define "pgbridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pgbridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pgbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pgbridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pgbridge.labels" -}}
helm.sh/chart: {{ include "pgbridge.chart" . }}
{{ include "pgbridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: cdc
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "pgbridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pgbridge.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "pgbridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) -}}
{{- end -}}

{{- define "pgbridge.postgresSecretName" -}}
{{- default (printf "%s-postgres" (include "pgbridge.fullname" .)) .Values.secrets.postgres.existingSecret -}}
{{- end -}}

{{/*
The configuration file: the user's `config` with the two settings the pod layout decides.
*/}}
{{- define "pgbridge.configFile" -}}
{{- $fixed := dict "http" (dict "port" (int .Values.http.port)) "buffer" (dict "spill_dir" .Values.spill.mountPath) -}}
{{- $config := mustMergeOverwrite (deepCopy .Values.config) $fixed -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
At most one streaming pod per replication slot (see replicaCount in values.yaml).
*/}}
{{- define "pgbridge.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.activeStandby.enabled) -}}
{{- fail "replicaCount > 1 needs activeStandby.enabled=true: a replication slot has exactly one consumer, so extra pods can only be standbys" -}}
{{- end -}}
{{- if and .Values.secrets.kafka.properties (not .Values.secrets.kafka.existingSecret) -}}
{{- fail "secrets.kafka.properties is set but secrets.kafka.existingSecret is empty" -}}
{{- end -}}
{{- end -}}
