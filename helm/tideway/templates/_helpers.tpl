{{/* Names, labels and the image, shared by every template. */}}

{{- define "tideway.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tideway.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tideway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tideway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include with (list . "agent"). */}}
{{- define "tideway.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "tideway.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "tideway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Spread replicas over nodes unless an affinity is given: include with (list . "dns" .Values.dns.affinity). */}}
{{- define "tideway.affinity" -}}
{{- $root := index . 0 -}}
{{- $given := index . 2 -}}
{{- if $given -}}
{{ toYaml $given }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "tideway.selector" (list $root (index . 1)) | nindent 10 }}
{{- end -}}
{{- end -}}

{{/* The Secret component COMPONENT ("operator", "agent", "dns") serves HTTPS with: include
     with (list . COMPONENT). tls.COMPONENT.secretName, else the generated
     `<fullname>-COMPONENT-tls` when tls.enabled, else empty (plain HTTP). Each component has
     its own certificate and key: the agents on every node hold only theirs. */}}
{{- define "tideway.tlsSecret" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- if $root.Values.tls.secretName -}}
{{- fail "tls.secretName was replaced by one Secret per component: tls.operator.secretName, tls.agent.secretName and tls.dns.secretName (see the chart README, \"Upgrading\")" -}}
{{- end -}}
{{- $own := (index $root.Values.tls $component).secretName -}}
{{- if $own -}}
{{- $own -}}
{{- else if $root.Values.tls.enabled -}}
{{- printf "%s-%s-tls" (include "tideway.fullname" $root) $component -}}
{{- end -}}
{{- end -}}

{{/* The server name each component's certificate carries (README.md, "HTTPS"): include with
     (list . "operator"), "agent" or "dns". */}}
{{- define "tideway.serverName" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- if eq $component "operator" -}}
{{- printf "%s-operator.%s.svc" (include "tideway.fullname" $root) $root.Release.Namespace -}}
{{- else if eq $component "agent" -}}
{{- printf "%s-agent-metrics.%s.svc" (include "tideway.fullname" $root) $root.Release.Namespace -}}
{{- else -}}
{{- printf "%s.%s.svc" $root.Values.dns.service.name $root.Values.dns.namespace -}}
{{- end -}}
{{- end -}}

{{/* HTTPS: the flags, the mount and the volume of a container serving it (include them inside
     `if include "tideway.tlsSecret" (list . COMPONENT)`). */}}
{{- define "tideway.tlsArgs" -}}
- --tls-cert=/etc/tideway/tls/tls.crt
- --tls-key=/etc/tideway/tls/tls.key
{{- end -}}

{{- define "tideway.tlsMount" -}}
- {name: tls, mountPath: /etc/tideway/tls, readOnly: true}
{{- end -}}

{{/* The volume of COMPONENT's Secret: include with (list . COMPONENT). */}}
{{- define "tideway.tlsVolume" -}}
- name: tls
  secret: {secretName: {{ include "tideway.tlsSecret" . }}}
{{- end -}}

{{/* The API server's address the agents use, HOST:PORT: apiServer.address, or with `auto` the
     server of kube-public/cluster-info's kubeconfig (kubeadm publishes it). */}}
{{- define "tideway.apiServer" -}}
{{- $address := .Values.apiServer.address -}}
{{- if eq $address "auto" -}}
{{- $info := lookup "v1" "ConfigMap" "kube-public" "cluster-info" -}}
{{- if not $info -}}
{{- fail "apiServer.address=auto reads the API server's address from kube-public/cluster-info, which this cluster lacks or `helm template` cannot read: set apiServer.address=HOST:PORT (the control plane's endpoint, not the kubernetes Service's ClusterIP)" -}}
{{- end -}}
{{- $kubeconfig := fromYaml (index $info.data "kubeconfig") -}}
{{- $server := (index $kubeconfig.clusters 0).cluster.server -}}
{{- $address = trimPrefix "https://" $server -}}
{{- end -}}
{{- if not (regexMatch "^[^:/]+:[0-9]+$|^\\[[0-9a-fA-F:]+\\]:[0-9]+$" $address) -}}
{{- fail (printf "apiServer.address %q is not HOST:PORT" $address) -}}
{{- end -}}
{{- $address -}}
{{- end -}}

{{/* The Secret holding the gossip key (key `keys`). */}}
{{- define "tideway.gossipSecret" -}}
{{- .Values.gossip.existingSecret | default (printf "%s-gossip" (include "tideway.fullname" .)) -}}
{{- end -}}

{{/* The gossip key file, mounted read-only at /etc/tideway/gossip (volume + mount + flag). */}}
{{- define "tideway.gossipArgs" -}}
- --gossip-key-file=/etc/tideway/gossip/keys
{{- if ne (toString .Values.gossip.timeScale) "1" }}
- --gossip-time-scale={{ .Values.gossip.timeScale }}
{{- end }}
{{- end -}}
{{- define "tideway.gossipMount" -}}
- {name: gossip-key, mountPath: /etc/tideway/gossip, readOnly: true}
{{- end -}}
{{- define "tideway.gossipVolume" -}}
- name: gossip-key
  secret: {secretName: {{ include "tideway.gossipSecret" . }}, defaultMode: 0400}
{{- end -}}

{{/* A Pod's nodeSelector: Linux nodes (no Tideway component runs on others) and the value's
labels. Argument: the value (a map). */}}
{{- define "tideway.nodeSelector" -}}
nodeSelector:
  {{- toYaml (merge (dict) . (dict "kubernetes.io/os" "linux")) | nindent 2 }}
{{- end }}

