{{/* The base name of every object: the release name, with "gpulens" added unless it is in it. */}}
{{- define "gpulens.fullname" -}}
{{- if contains "gpulens" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gpulens" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The agents' namespace: the one named, else <release namespace>-agent when the chart
creates it, else the release namespace (which then needs the privileged Pod Security level). */}}
{{- define "gpulens.agentNamespace" -}}
{{- if .Values.agent.namespace.name -}}
{{- .Values.agent.namespace.name -}}
{{- else if .Values.agent.namespace.create -}}
{{- printf "%s-agent" .Release.Namespace -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpulens.labels" -}}
app.kubernetes.io/part-of: gpulens
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of the collector's and the agents' pods. */}}
{{- define "gpulens.collectorSelector" -}}
app.kubernetes.io/name: gpulens-collector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "gpulens.agentSelector" -}}
app.kubernetes.io/name: gpulens-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image reference: repository@digest, or repository:tag (the appVersion by default). */}}
{{- define "gpulens.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Secret names. */}}
{{- define "gpulens.sharedAgentToken" -}}
{{- if eq .Values.agentIdentity.mode "sharedToken" }}true{{ end -}}
{{- end -}}

{{- define "gpulens.agentTokenSecret" -}}
{{- .Values.agentToken.existingSecret | default (printf "%s-agent-token" (include "gpulens.fullname" .)) -}}
{{- end -}}
{{- define "gpulens.accessSecret" -}}
{{- .Values.access.existingSecret | default (printf "%s-access" (include "gpulens.fullname" .)) -}}
{{- end -}}

{{/* The collector's in-cluster address. */}}
{{- define "gpulens.collectorUrl" -}}
{{- printf "http://%s-collector.%s.svc:%d" (include "gpulens.fullname" .) .Release.Namespace (int .Values.collector.service.port) -}}
{{- end -}}

{{/* The agent's dcgm-exporter URL, empty when DCGM is off. */}}
{{- define "gpulens.dcgmUrl" -}}
{{- if eq .Values.agent.dcgm.mode "gpuOperator" -}}
{{- printf "http://%s-dcgm-exporter.%s.svc:9400/metrics" (include "gpulens.fullname" .) .Values.gpuOperator.namespace -}}
{{- else if eq .Values.agent.dcgm.mode "url" -}}
{{- required "agent.dcgm.url is required with agent.dcgm.mode=url" .Values.agent.dcgm.url -}}
{{- end -}}
{{- end -}}

{{/*
A secret value generated once: the value already in the cluster's Secret (on upgrade), else a
random one, 64 hex digits (SHA-256 of 64 random letters and digits): hex holds no letter past
f, so no word the collector refuses as a placeholder ("todo", "fixme", …) can turn up in it by
chance. Arguments: (list $ secretName key).
*/}}
{{- define "gpulens.generated" -}}
{{- $ctx := index . 0 -}}
{{- $old := lookup "v1" "Secret" $ctx.Release.Namespace (index . 1) -}}
{{- $data := (get (default dict $old) "data") | default dict -}}
{{- $v := get $data (index . 2) -}}
{{- if $v -}}{{ $v }}{{- else -}}{{ randAlphaNum 64 | sha256sum | b64enc }}{{- end -}}
{{- end -}}
