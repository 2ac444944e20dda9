{{/*
The objects' name: the release name, with the chart's name appended unless it holds
it already; fullnameOverride replaces it. With the release attachdetach-controller
the objects get the kustomize base's names.
*/}}
{{- define "attachdetach-controller.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The pods' selector. It holds the name only, as the base's does: a Deployment's
selector cannot change, and one controller per cluster is all there may be.
*/}}
{{- define "attachdetach-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "attachdetach-controller.labels" -}}
{{ include "attachdetach-controller.selectorLabels" . }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The image reference: by digest when one is given, else by tag. */}}
{{- define "attachdetach-controller.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Lease's name, the controller's default unless leaderElection.leaseName sets it. */}}
{{- define "attachdetach-controller.leaseName" -}}
{{- .Values.leaderElection.leaseName | default "attachdetach-controller" -}}
{{- end -}}

{{/*
The container's arguments: those of the base, then each flag a value sets (null
leaves the controller's default), then extraArgs. Integers are printed as such,
whatever number type the values arrived as.
*/}}
{{- define "attachdetach-controller.args" -}}
- --leader-elect={{ .Values.leaderElection.enabled }}
- --leader-elect-resource-namespace=$(POD_NAMESPACE)
- --http-endpoint=:{{ int64 .Values.httpPort }}
{{- if .Values.httpEndpoint.insecure }}
- --http-endpoint-insecure
{{- end }}
{{- if .Values.httpEndpoint.tlsSecretName }}
- --tls-cert-file=/etc/attachdetach-controller/tls/tls.crt
- --tls-private-key-file=/etc/attachdetach-controller/tls/tls.key
{{- end }}
- --v={{ int64 .Values.logging.verbosity }}
{{- with .Values.logging.format }}
- --logging-format={{ . }}
{{- end }}
{{- with .Values.leaderElection.leaseName }}
- --leader-elect-resource-name={{ . }}
{{- end }}
{{- $c := .Values.controller }}
{{- $le := .Values.leaderElection }}
{{- range list
    (list "leader-elect-lease-duration" $le.leaseDuration)
    (list "leader-elect-renew-deadline" $le.renewDeadline)
    (list "leader-elect-retry-period" $le.retryPeriod)
    (list "max-wait-for-unmount" $c.maxWaitForUnmount)
    (list "disable-force-detach-on-timeout" $c.disableForceDetachOnTimeout)
    (list "detach-on-shutdown-taint" $c.detachOnShutdownTaint)
    (list "attach-detach-reconcile-sync-period" $c.reconcileSyncPeriod)
    (list "disable-attach-detach-reconcile-sync" $c.disableReconcileSync)
    (list "operation-timeout" $c.operationTimeout)
    (list "status-min-batch-window" $c.statusMinBatchWindow)
    (list "kube-api-content-type" $c.kubeAPIContentType)
    (list "kube-api-qps" $c.kubeAPIQPS)
    (list "event-qps" $c.eventQPS)
    (list "shadow" $c.shadow)
    (list "shadow-grace" $c.shadowGrace)
    (list "enable-pprof" $c.enablePprof) }}
{{- if not (kindIs "invalid" (index . 1)) }}
- --{{ index . 0 }}={{ index . 1 }}
{{- end }}
{{- end }}
{{- range list
    (list "workers" $c.workers)
    (list "status-workers" $c.statusWorkers)
    (list "kube-api-burst" $c.kubeAPIBurst)
    (list "event-burst" $c.eventBurst) }}
{{- if not (kindIs "invalid" (index . 1)) }}
- --{{ index . 0 }}={{ int64 (index . 1) }}
{{- end }}
{{- end }}
{{- with $c.maxWaitForUnmountPerDriver }}
{{- $policies := list }}
{{- range $driver, $wait := . }}
{{- $policies = append $policies (printf "%s=%s" $driver $wait) }}
{{- end }}
- --max-wait-for-unmount-per-driver={{ join "," $policies }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
