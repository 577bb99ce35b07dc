{{/*
The server's args: --secure-port, defaultArgs, the serving pair, then what
the values of this chart add (in the order manifests/components append
theirs), then args, which come last and so override.
*/}}
{{- define "gms.serverArgs" -}}
- --secure-port={{ .Values.containerPort }}
{{- range .Values.defaultArgs }}
- {{ . }}
{{- end }}
- --tls-cert-file=/var/run/serving-cert/tls.crt
- --tls-private-key-file=/var/run/serving-cert/tls.key
{{- if eq .Values.kubeletEndpoint "resource" }}
- --kubelet-endpoint=resource
{{- end }}
{{- $sources := include "gms.sources" . }}
{{- if ne $sources "kubelet" }}
- --sources={{ $sources }}
{{- end }}
{{- range .Values.ukpd.endpoints }}
- --ukpd-endpoint={{ . }}
{{- end }}
{{- with .Values.ukpd.existingSecret }}
- --ukpd-token-file=/var/run/ukpd-credentials/{{ $.Values.ukpd.tokenKey }}
{{- with $.Values.ukpd.caKey }}
- --ukpd-certificate-authority=/var/run/ukpd-credentials/{{ . }}
{{- end }}
{{- end }}
{{- with .Values.ukpdRelay }}
{{- if .enabled }}
- --ukpd-relay-port={{ .port }}
{{- with .serverName }}
- --ukpd-relay-server-name={{ . }}
{{- end }}
- --ukpd-relay-certificate-authority=/var/run/ukpd-relay-ca/ca.crt
{{- end }}
{{- end }}
{{- range .Values.ukpd.requiredTags }}
- --ukpd-required-tag={{ . }}
{{- end }}
{{- if ne .Values.defaultGroupPolicy "pod" }}
- --default-group-policy={{ .Values.defaultGroupPolicy }}
{{- end }}
{{- if .Values.metrics.enabled }}
- --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics
{{- end }}
{{- if .Values.customMetrics.enabled }}
- --enable-custom-metrics
{{- end }}
{{- if .Values.podMetrics.enabled }}
- --pod-metrics-config=/etc/group-metrics-server/pod-metrics/config.yaml
{{- end }}
{{- range .Values.args }}
- {{ . }}
{{- end }}
{{- end }}

{{/* The certificate controller's args. */}}
{{- define "gms.controllerArgs" -}}
{{- $ns := include "gms.namespace" . }}
{{- $ctrl := include "gms.controllerName" . }}
- cert-controller
- --namespace={{ $ns }}
- --ca-secret={{ include "gms.caSecret" . }}
- --serving-secret={{ include "gms.servingSecret" . }}
- --dns-names={{ include "gms.dnsNames" . }}
- --service={{ $ns }}/{{ include "gms.fullname" . }}
- --apiservices=v1beta1.metrics.k8s.io,v1.metrics.k8s.io
- --owner-cluster-role=system:{{ $ctrl }}
- --leader-elect-resource-namespace={{ $ns }}
- --leader-elect-resource-name={{ $ctrl }}
{{- if .Values.certController.metricsPort }}
- --metrics-bind-address=:{{ .Values.certController.metricsPort }}
{{- end }}
{{- if ne (int .Values.service.port) 443 }}
- --service-port={{ .Values.service.port }}
{{- end }}
{{- if .Values.customMetrics.enabled }}
- --apiservices=v1beta1.custom.metrics.k8s.io,v1beta2.custom.metrics.k8s.io
{{- end }}
{{- range .Values.certController.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}

{{/* Refuse values that cannot work, with the reason. */}}
{{- define "gms.validate" -}}
{{- if and .Values.hostNetwork.enabled (eq (int .Values.containerPort) 10250) }}
{{- fail "hostNetwork.enabled: the kubelet holds port 10250 in the node's network; set containerPort to another port (metrics-server's chart uses 4443)" }}
{{- end }}
{{- if and (has "ukpd" .Values.sources) (not .Values.ukpd.endpoints) (not .Values.ukpdRelay.enabled) }}
{{- fail "sources holds ukpd: set ukpd.endpoints, or ukpdRelay.enabled for per-host ukpd" }}
{{- end }}
{{- if and (eq .Values.kubeletEndpoint "resource") .Values.ukpdRelay.enabled }}
{{- fail "kubeletEndpoint resource with ukpdRelay.enabled: the relays admit the server by get nodes/stats, which resource replaces with get nodes/metrics; keep kubeletEndpoint summary" }}
{{- end }}
{{- if and .Values.ukpd.endpoints (not (has "ukpd" (splitList "," (include "gms.sources" .)))) }}
{{- fail "ukpd.endpoints is set but sources does not hold ukpd" }}
{{- end }}
{{- if and .Values.apiService.caBundle (ne .Values.tls.type "existingSecret") }}
{{- fail (printf "apiService.caBundle is for tls.type existingSecret; with %s the caBundle is written for you" .Values.tls.type) }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.enabled" }}
{{- end }}
{{- if and .Values.podMetrics.enabled (not .Values.customMetrics.enabled) }}
{{- fail "podMetrics.enabled needs customMetrics.enabled: its metrics are served on custom.metrics.k8s.io" }}
{{- end }}
{{- if and .Values.podMetrics.enabled (not .Values.podMetrics.config) }}
{{- fail "podMetrics.enabled: set podMetrics.config (the --pod-metrics-config file, docs/inference-autoscaling.md)" }}
{{- end }}
{{- if and .Values.podMetrics.endpointPickers.enabled (not .Values.podMetrics.enabled) }}
{{- fail "podMetrics.endpointPickers.enabled needs podMetrics.enabled: the pickers are listed in the pod-metrics file (podMetrics.config)" }}
{{- end }}
{{- end }}

{{/* The ukpd relay's args (manifests/components/ukpd-relay/daemonset.yaml). */}}
{{- define "gms.relayArgs" -}}
- ukpd-relay
- --node-name={{ .Values.ukpdRelay.nodeName }}
- --ukpd-url={{ .Values.ukpdRelay.ukpdURL }}
- --ukpd-token-file=/var/run/ukpd/token
- --bind-address=$(HOST_IP)
- --secure-port={{ .Values.ukpdRelay.port }}
- --tls-cert-file=/var/run/serving-cert/tls.crt
- --tls-private-key-file=/var/run/serving-cert/tls.key
{{- range .Values.ukpdRelay.extraArgs }}
- {{ . }}
{{- end }}
{{- end }}
