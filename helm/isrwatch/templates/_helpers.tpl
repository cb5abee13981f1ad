{{/* Chart name, possibly overridden. */}}
{{- define "isrwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name: the release name, with the chart name unless it already contains it. */}}
{{- define "isrwatch.fullname" -}}
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

{{/* Name of a component's objects: fullname-suffix, within 63 characters. */}}
{{- define "isrwatch.componentName" -}}
{{- printf "%s-%s" (include "isrwatch.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "isrwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "isrwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "isrwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "isrwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: isrwatch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "isrwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The API's store URL, without the password (libpq reads it from PGPASSWORD): the server of store.* in
production, the demo pod's PostgreSQL through its Service in demo mode. */}}
{{- define "isrwatch.storeUrl" -}}
{{- if eq .Values.mode "demo" -}}
{{- include "isrwatch.demoStoreUrl" (dict "root" . "host" (include "isrwatch.demoDatabase" .)) -}}
{{- else -}}
{{- with .Values.store -}}
{{- printf "postgresql://%s@%s:%d/%s?sslmode=%s" .user .host (int .port) .database .sslMode -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key holding the store's password (PGPASSWORD): store.passwordSecret, or the demo's own. */}}
{{- define "isrwatch.passwordSecretName" -}}
{{- if eq .Values.mode "demo" -}}
{{- include "isrwatch.demoDatabase" . -}}
{{- else -}}
{{- .Values.store.passwordSecret.name -}}
{{- end -}}
{{- end -}}

{{- define "isrwatch.passwordSecretKey" -}}
{{- if eq .Values.mode "demo" -}}
password
{{- else -}}
{{- .Values.store.passwordSecret.key -}}
{{- end -}}
{{- end -}}

{{/* `--set KEY=JSON` arguments, one list item each, for a dict of isrwatch configuration keys. */}}
{{- define "isrwatch.configArgs" -}}
{{- range $key, $value := . }}
- --set
- {{ printf "%s=%s" $key (toJson $value) | quote }}
{{- end }}
{{- end -}}

{{/* The demo's PostgreSQL: its Service and password Secret, its user and database, its URL from `host`. */}}
{{- define "isrwatch.demoDatabase" -}}
{{- include "isrwatch.componentName" (dict "root" . "component" "demo-postgresql") -}}
{{- end -}}

{{- define "isrwatch.demoDatabaseUser" -}}
isrwatch
{{- end -}}

{{- define "isrwatch.demoStoreUrl" -}}
{{- $user := include "isrwatch.demoDatabaseUser" .root -}}
{{- printf "postgresql://%s@%s:5432/%s?sslmode=disable" $user .host $user -}}
{{- end -}}

{{/* The demo's isrwatch configuration: `config` over demo.config. */}}
{{- define "isrwatch.demoConfig" -}}
{{- toJson (mergeOverwrite (deepCopy .Values.demo.config) .Values.config) -}}
{{- end -}}

{{/* Production values in demo mode are a mistake (an old values file without `mode: production`?): say so
instead of installing a demo in place of the stream they describe. */}}
{{- define "isrwatch.checkDemoValues" -}}
{{- $set := list -}}
{{- if .Values.kafka.bootstrapServers }}{{ $set = append $set "kafka.bootstrapServers" }}{{ end -}}
{{- if .Values.kafka.topics }}{{ $set = append $set "kafka.topics" }}{{ end -}}
{{- if .Values.store.host }}{{ $set = append $set "store.host" }}{{ end -}}
{{- if .Values.store.passwordSecret.name }}{{ $set = append $set "store.passwordSecret.name" }}{{ end -}}
{{- if $set -}}
{{- fail (printf "mode is demo (the default), but %s %s set: that is production configuration. Add mode: production to run the stream on Kafka and your PostgreSQL (deploy/README.md), or leave %s out for the demo." (join ", " $set) (ternary "is" "are" (eq (len $set) 1)) (ternary "it" "them" (eq (len $set) 1))) -}}
{{- end -}}
{{- end -}}

{{- define "isrwatch.streamServiceAccount" -}}
{{- if .Values.stream.serviceAccount.create -}}
{{- default (include "isrwatch.componentName" (dict "root" . "component" "stream")) .Values.stream.serviceAccount.name -}}
{{- else -}}
{{- required "stream.serviceAccount.name is required when stream.serviceAccount.create is false" .Values.stream.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "isrwatch.checkpointClaim" -}}
{{- default (include "isrwatch.componentName" (dict "root" . "component" "checkpoint")) .Values.stream.checkpoint.persistentVolumeClaim.existingClaim -}}
{{- end -}}

{{/* Where `isrwatch run --checkpoint` writes: the object-store URL, else a directory on the claim. */}}
{{- define "isrwatch.checkpointLocation" -}}
{{- if .Values.stream.checkpoint.url -}}
{{- .Values.stream.checkpoint.url -}}
{{- else -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.stream.checkpoint.mountPath) (include "isrwatch.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The URL the alerts' runbook_url starts with (the API serves the runbook at /runbooks): prometheusRule.runbookBaseUrl,
else the API's first ingress host (https with TLS), else its Service's in-cluster URL. */}}
{{- define "isrwatch.runbookBaseUrl" -}}
{{- $api := .Values.api -}}
{{- if .Values.prometheusRule.runbookBaseUrl -}}
{{- .Values.prometheusRule.runbookBaseUrl -}}
{{- else if and $api.ingress.enabled $api.ingress.hosts -}}
{{- printf "%s://%s" (ternary "https" "http" (not (empty $api.ingress.tls))) (first $api.ingress.hosts).host -}}
{{- else -}}
{{- $service := include "isrwatch.componentName" (dict "root" . "component" "api") -}}
{{- printf "http://%s.%s.svc:%d" $service .Release.Namespace (int $api.service.port) -}}
{{- end -}}
{{- end -}}
