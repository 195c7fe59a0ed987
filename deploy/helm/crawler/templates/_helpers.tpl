{{/* The roles this chart runs, one Deployment each: `crawler <role>`. */}}
{{- define "crawler.roles" -}}
frontier fetcher parser dedup api render
{{- end -}}

{{- define "crawler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "crawler.fullname" -}}
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

{{- define "crawler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "crawler.labels" -}}
helm.sh/chart: {{ include "crawler.chart" . }}
{{ include "crawler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: crawler
{{- end -}}

{{- define "crawler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "crawler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one role: call with (dict "root" $ "role" "fetcher"). */}}
{{- define "crawler.roleLabels" -}}
{{ include "crawler.labels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "crawler.roleSelectorLabels" -}}
{{ include "crawler.selectorLabels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "crawler.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- /* The render role's image: the crawler's plus a browser (Dockerfile target render). */ -}}
{{- define "crawler.renderImage" -}}
{{- $img := .Values.services.render.image -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "crawler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "crawler.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "crawler.apiSecretName" -}}
{{- default (printf "%s-api" (include "crawler.fullname" .)) .Values.api.existingSecret -}}
{{- end -}}

{{- define "crawler.apiSecretKey" -}}
{{- if .Values.api.existingSecret -}}{{ .Values.api.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "crawler.claimName" -}}
{{- default (printf "%s-warc" (include "crawler.fullname" .)) .Values.storage.existingClaim -}}
{{- end -}}

{{/*
One setting value as the environment carries it: lists comma separated, booleans
true/false, whole numbers without an exponent (values arrive as float64).
*/}}
{{- define "crawler.settingValue" -}}
{{- $v := . -}}
{{- if kindIs "slice" $v -}}
{{- $parts := list -}}
{{- range $v }}{{ $parts = append $parts (toString .) }}{{ end -}}
{{- join "," $parts -}}
{{- else if kindIs "bool" $v -}}
{{- ternary "true" "false" $v -}}
{{- else if and (kindIs "float64" $v) (eq $v (floor $v)) -}}
{{- $v | int64 -}}
{{- else if kindIs "invalid" $v -}}
{{- "" -}}
{{- else -}}
{{- toString $v -}}
{{- end -}}
{{- end -}}
