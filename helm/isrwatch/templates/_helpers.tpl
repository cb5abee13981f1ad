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

{{/* The store URL without the password: libpq reads it from PGPASSWORD. */}}
{{- define "isrwatch.storeUrl" -}}
{{- with .Values.store -}}
{{- printf "postgresql://%s@%s:%d/%s?sslmode=%s" .user .host (int .port) .database .sslMode -}}
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
