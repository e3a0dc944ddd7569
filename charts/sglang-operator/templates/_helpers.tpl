{{/* The chart's name, overridable. */}}
{{- define "sglang-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; the release name alone when it already contains the chart's name. */}}
{{- define "sglang-operator.fullname" -}}
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

{{- define "sglang-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sglang-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sglang-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sglang-operator.labels" -}}
helm.sh/chart: {{ include "sglang-operator.chart" . }}
{{ include "sglang-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sglang-operator
{{- end }}

{{- define "sglang-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sglang-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sglang-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
Permissions on namespaced resources: exactly the API calls the operator (controller/*.py) and kopf make.
  pods               kopf watches them cluster-wide (list, watch) to wake the reconcile loop; reconcile lists
                     them; apply.py creates, annotates (patch) and deletes them. Never read one by name.
  services           kopf watches them (list, watch: the index reconcile reads instead of the API); reconcile
                     reads them by name (get); apply.py creates and patches them, and deletes one it owns that is
                     no longer rendered (nnodes back to 1, router turned off)
  deployments        the same, for the router Deployment
  secrets            the Secrets a CR names (router API key, prometheusAuth): get by name only, no list
  events             Kubernetes events on the CR, posted by the operator and by kopf
  sglangdeployments  kopf lists and watches them and patches its finalizer and annotations; reconcile gets one
  .../status         one status patch per reconcile pass
  podmonitors        the optional prometheus-operator PodMonitor (list, watch, get, create, patch, delete like
                     other children)
  networkpolicies    the optional per-fleet NetworkPolicy (spec.networkPolicy.enabled): the same verbs
  inferencepools     the optional Gateway API Inference Extension InferencePool (spec.inferencePool.enabled): the
                     same verbs
  sglangworkergroups a worker group's scale target (read; its status written), never created or deleted
*/}}
{{- define "sglang-operator.namespacedRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch", "get", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "get", "create", "patch", "delete"]
{{- /* a router pod's ReplicaSet, read to check it belongs to the router slot's own Deployment (by uid) */}}
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["sglang.ai"]
  resources: ["sglangdeployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["sglang.ai"]
  resources: ["sglangdeployments/status"]
  verbs: ["patch"]
- apiGroups: ["sglang.ai"]
  resources: ["sglangworkergroups"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["sglang.ai"]
  resources: ["sglangworkergroups/status"]
  verbs: ["patch"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["list", "watch", "get", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "watch", "get", "create", "patch", "delete"]
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["list", "watch", "get", "create", "patch", "delete"]
{{- end }}

{{/* A map as the `k=v,k2=v2` text the `run` label flags take (keys sorted, as `range` sorts them). */}}
{{- define "sglang-operator.labelsFlag" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
