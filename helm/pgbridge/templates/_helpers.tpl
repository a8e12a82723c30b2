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
The configuration file: the user's `config` with what the chart decides. http.port comes from
`http.port` (the containerPort); with activeStandby, ha.leader_election is on. buffer.spill_dir is NOT
in the file: the image sets PGBRIDGE_BUFFER__SPILL_DIR and the environment wins over the file, so the
chart sets that variable from spill.mountPath instead (pgbridge.env) and the schema refuses
config.buffer.spill_dir.
*/}}
{{- define "pgbridge.configFile" -}}
{{- $fixed := dict "http" (dict "port" (int .Values.http.port)) -}}
{{- if .Values.activeStandby.enabled -}}
{{- $_ := set $fixed "ha" (dict "leader_election" true) -}}
{{- end -}}
{{- $config := mustMergeOverwrite (deepCopy .Values.config) $fixed -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
The container environment, shared by the Deployment and the slot-drop Job: the configuration file,
the spill directory and the Secret references.
*/}}
{{- define "pgbridge.env" -}}
- name: PGBRIDGE_CONFIG
  value: /etc/pgbridge/pgbridge.yaml
- name: PGBRIDGE_BUFFER__SPILL_DIR
  value: {{ .Values.spill.mountPath | quote }}
- name: PGBRIDGE_POSTGRES__DSN
  valueFrom:
    secretKeyRef:
      name: {{ include "pgbridge.postgresSecretName" . }}
      key: {{ .Values.secrets.postgres.dsnKey }}
{{- range $property, $key := .Values.secrets.kafka.properties }}
- name: {{ printf "PGBRIDGE_KAFKA__PROPERTIES__%s" (upper $property) }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.secrets.kafka.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- if .Values.secrets.schemaRegistry.existingSecret }}
- name: PGBRIDGE_SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO
  valueFrom:
    secretKeyRef:
      name: {{ .Values.secrets.schemaRegistry.existingSecret }}
      key: {{ .Values.secrets.schemaRegistry.basicAuthUserInfoKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Volume mounts and volumes shared by the Deployment and the slot-drop Job.
*/}}
{{- define "pgbridge.volumeMounts" -}}
- name: config
  mountPath: /etc/pgbridge/pgbridge.yaml
  subPath: pgbridge.yaml
  readOnly: true
- name: spill
  mountPath: {{ .Values.spill.mountPath }}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "pgbridge.volumes" -}}
- name: config
  configMap:
    name: {{ include "pgbridge.fullname" . }}
- name: spill
  emptyDir:
    {{- with .Values.spill.medium }}
    medium: {{ . }}
    {{- end }}
    sizeLimit: {{ .Values.spill.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
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
{{- if and .Values.activeStandby.enabled (hasKey (.Values.config.ha | default dict) "leader_election") (not .Values.config.ha.leader_election) -}}
{{- fail "activeStandby.enabled needs leader election: remove config.ha.leader_election=false (the chart turns it on)" -}}
{{- end -}}
{{- if and .Values.slotDrop.enabled (gt (int .Values.replicaCount) 0) -}}
{{- fail "slotDrop.enabled needs replicaCount=0: the slot can only be dropped once no pgbridge pod streams from it (set both in the same helm upgrade)" -}}
{{- end -}}
{{- end -}}

{{/*
Labels of the slot-drop Job and its pod: deliberately not the Deployment's selector labels.
*/}}
{{- define "pgbridge.slotDropLabels" -}}
helm.sh/chart: {{ include "pgbridge.chart" . }}
app.kubernetes.io/name: {{ printf "%s-slot-drop" (include "pgbridge.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: decommission
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
