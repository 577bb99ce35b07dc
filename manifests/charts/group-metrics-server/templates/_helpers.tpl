{{/* The chart's name, or nameOverride. */}}
{{- define "gms.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of the release's objects: fullnameOverride, else the release name
when it holds the chart's name, else <release>-<name>. As metrics-server's
chart names its objects, so `helm install group-metrics-server` gives the
names of manifests/base.
*/}}
{{- define "gms.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gms.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{- define "gms.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object. Only app.kubernetes.io/name is also in
manifests/; the others say which release and chart made the object.
*/}}
{{- define "gms.labels" -}}
{{- include "gms.labelsNamed" (list . (include "gms.name" .)) }}
{{- end }}

{{/* gms.labels with another app.kubernetes.io/name: (list $ name). */}}
{{- define "gms.labelsNamed" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ include "gms.chart" $ }}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ $.Release.Name }}
{{- if $.Chart.AppVersion }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
{{- with $.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The server's pod labels and selector: the selector of manifests/base, so
a Deployment applied from manifests/ can be adopted by a release (a
Deployment's selector cannot change).
*/}}
{{- define "gms.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gms.name" . }}
{{- end }}

{{- define "gms.controllerName" -}}
{{- printf "%s-cert-controller" (include "gms.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gms.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-cert-controller" (include "gms.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gms.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gms.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gms.controllerServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gms.controllerName" .) .Values.certController.serviceAccountName }}
{{- else }}
{{- default "default" .Values.certController.serviceAccountName }}
{{- end }}
{{- end }}

{{- define "gms.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}

{{/* The Secret with the serving pair the server mounts. */}}
{{- define "gms.servingSecret" -}}
{{- if and (eq .Values.tls.type "existingSecret") .Values.tls.existingSecret.name }}
{{- .Values.tls.existingSecret.name }}
{{- else }}
{{- printf "%s-serving-cert" (include "gms.fullname" .) }}
{{- end }}
{{- end }}

{{- define "gms.caSecret" -}}
{{- printf "%s-ca" (include "gms.fullname" .) }}
{{- end }}

{{/* The names the serving certificate covers. */}}
{{- define "gms.dnsNames" -}}
{{- $host := printf "%s.%s.svc" (include "gms.fullname" .) (include "gms.namespace" .) }}
{{- list $host (printf "%s.%s" $host .Values.tls.clusterDomain) | join "," }}
{{- end }}

{{/* The APIServices of the release, comma-separated. */}}
{{- define "gms.apiServices" -}}
{{- $names := list "v1beta1.metrics.k8s.io" "v1.metrics.k8s.io" }}
{{- if .Values.customMetrics.enabled }}
{{- $names = concat $names (list "v1beta1.custom.metrics.k8s.io" "v1beta2.custom.metrics.k8s.io") }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/* The pod placement both Deployments share. */}}
{{- define "gms.podPlacement" -}}
{{- with .Values.schedulerName }}
schedulerName: {{ . }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The sources the server runs, comma-separated: sources, with ukpd added
when the relays are enabled and sources does not name it.
*/}}
{{- define "gms.sources" -}}
{{- $sources := .Values.sources }}
{{- if and .Values.ukpdRelay.enabled (not (has "ukpd" $sources)) }}
{{- $sources = append $sources "ukpd" }}
{{- end }}
{{- join "," $sources }}
{{- end }}

{{/* The ukpd relays' DaemonSet and ServiceAccount. */}}
{{- define "gms.relayName" -}}
{{- printf "%s-ukpd-relay" (include "gms.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The relays' pod labels and selector, as manifests/components/ukpd-relay has them. */}}
{{- define "gms.relaySelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-ukpd-relay" (include "gms.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gms.relayTokenSecret" -}}
{{- default (printf "%s-token" (include "gms.relayName" .)) .Values.ukpdRelay.tokenSecret }}
{{- end }}

{{- define "gms.relayTLSSecret" -}}
{{- default (printf "%s-tls" (include "gms.relayName" .)) .Values.ukpdRelay.tlsSecret }}
{{- end }}

{{- define "gms.relayCAConfigMap" -}}
{{- default (printf "%s-ca" (include "gms.relayName" .)) .Values.ukpdRelay.caConfigMap }}
{{- end }}
