{{/*
Names. The release's full name prefixes every object; each role appends its name
(<fullname>-learner, -replay, -ps, -actor).
*/}}
{{- define "surreal.name" -}}surreal{{- end -}}

{{/* <release>-surreal, or the release name alone when it already says surreal. */}}
{{- define "surreal.fullname" -}}
{{- if contains "surreal" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-surreal" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<role>; 40 + 8 characters leave room for StatefulSet pod names and revision hashes. */}}
{{- define "surreal.roleName" -}}
{{- printf "%s-%s" (include "surreal.fullname" .root) .role -}}
{{- end -}}

{{/* Selector labels (Bitnami's split): name + instance only, never anything that changes on upgrade. */}}
{{- define "surreal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "surreal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "surreal.labels" -}}
{{ include "surreal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: surreal
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A role's selector labels: the release's plus app.kubernetes.io/component. */}}
{{- define "surreal.roleSelectorLabels" -}}
{{ include "surreal.selectorLabels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "surreal.roleLabels" -}}
{{ include "surreal.labels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "surreal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "surreal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The image of a role: {root, role ("actor"|"learner"|"replay"), override (the role block's image)}.
registry/repository:tag, or @digest when one is set (the role's, else the global one).
*/}}
{{- define "surreal.image" -}}
{{- $img := .root.Values.image -}}
{{- $override := .override | default dict -}}
{{- $repository := $override.repository | default (get $img .role) -}}
{{- $tag := $override.tag | default $img.tag | default .root.Chart.AppVersion -}}
{{- $digest := $override.digest | default $img.digest -}}
{{- $name := $repository -}}
{{- if $img.registry -}}{{- $name = printf "%s/%s" (trimSuffix "/" $img.registry) $repository -}}{{- end -}}
{{- if $digest -}}
{{- printf "%s@%s" $name $digest -}}
{{- else -}}
{{- printf "%s:%s" $name (toString $tag) -}}
{{- end -}}
{{- end -}}

{{/* DNS names of the Services (namespace-qualified, resolved through the pod's search path). */}}
{{/* The learner's address for the ps and `helm test`: its Service, or with learner.replicas > 1 rank 0's pod (the
ranks after it neither publish nor count updates), which is also the group's MASTER_ADDR. */}}
{{- define "surreal.learnerHost" -}}
{{- $name := include "surreal.roleName" (dict "root" . "role" "learner") -}}
{{- if gt (int .Values.learner.replicas) 1 -}}
{{- printf "%s-0.%s.%s.svc" $name $name .Release.Namespace -}}
{{- else -}}
{{- printf "%s.%s.svc" $name .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "surreal.psHost" -}}
{{- printf "%s.%s.svc" (include "surreal.roleName" (dict "root" . "role" "ps")) .Release.Namespace -}}
{{- end -}}

{{/* Every replay shard by its stable pod DNS name under the headless Service, with its ports. */}}
{{- define "surreal.replayAddrs" -}}
{{- $name := include "surreal.roleName" (dict "root" . "role" "replay") -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.replay.shards) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc:%d:%d" $name $i $name $.Release.Namespace (int $.Values.ports.experience) (int $.Values.ports.sample)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/*
Every inference worker (inference.replicas > 0: topology.inference=central) by its stable pod DNS name under the
headless Service, with its port: SURREAL_INFERENCE_ADDRS of the actors, which ask them in turn.
*/}}
{{- define "surreal.inferenceAddrs" -}}
{{- $name := include "surreal.roleName" (dict "root" . "role" "inference") -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.inference.replicas) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc:%d" $name $i $name $.Release.Namespace (int $.Values.ports.inference)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/*
The experiment as the ConfigMap holds it: the values' `experiment` plus the topology of the workloads. With
inference.replicas > 0 the topology is central inference with that many workers; with 0 it says nothing of inference
(the config's default, per_actor), so a rendering without workers is what it was before they existed.
*/}}
{{- define "surreal.experiment" -}}
{{- $experiment := deepCopy .Values.experiment -}}
{{- $topology := dict "actors" (int .Values.actors.replicas) "envs_per_actor" (int .Values.actors.envsPerActor) "replay_shards" (int .Values.replay.shards) "ps_replicas" (int .Values.ps.replicas) -}}
{{- if gt (int .Values.inference.replicas) 0 -}}
{{- $algo := .Values.experiment.algo | default dict -}}
{{- if or (ne (include "surreal.algoName" .) "ppo") (and (kindIs "map" $algo) $algo.recurrent) -}}
{{- fail (printf "inference.replicas > 0 (topology.inference=central) runs PPO's MLP policy only (got algo %s%s): set inference.replicas=0" (include "surreal.algoName" .) (ternary " with algo.recurrent" "" (ne (include "surreal.algoName" .) "ppo" | not))) -}}
{{- end -}}
{{- if .Values.experiment.deterministic -}}
{{- fail "inference.replicas > 0 (topology.inference=central) needs experiment.deterministic false (serial mode has no workers)" -}}
{{- end -}}
{{- $_ := set $topology "inference" "central" -}}
{{- $_ := set $topology "inference_workers" (int .Values.inference.replicas) -}}
{{- end -}}
{{- $_ := set $experiment "topology" $topology -}}
{{- $learner := deepCopy (default (dict) $experiment.learner) -}}
{{- if and (hasKey $learner "replicas") (ne (int $learner.replicas) (int .Values.learner.replicas)) -}}
{{- fail "experiment.learner.replicas comes from learner.replicas (the learner StatefulSet's pods): set learner.replicas" -}}
{{- end -}}
{{- if gt (int .Values.learner.replicas) 1 -}}
{{- $_ := set $learner "replicas" (int .Values.learner.replicas) -}}
{{- $_ := set $experiment "learner" $learner -}}
{{- end -}}
{{- toYaml $experiment -}}
{{- end -}}

{{- define "surreal.configMountPath" -}}/etc/surreal{{- end -}}
{{- define "surreal.curveMountPath" -}}/etc/surreal-curve{{- end -}}

{{/*
CURVE keys (values.yaml `curve`; docs/security.md): the Secret every role mounts at surreal.curveMountPath and reads
through SURREAL_CURVE_DIR. Its name: curve.existingSecret, else the one the chart makes (templates/curve-secret.yaml).
*/}}
{{- define "surreal.curveSecretName" -}}
{{- .Values.curve.existingSecret | default (include "surreal.roleName" (dict "root" . "role" "curve")) -}}
{{- end -}}

{{/*
The keys' data as the cluster has it (base64 values, as a Secret's `data`): the Secret already there (an upgrade keeps
its keys; `helm template` and client-side dry runs see none), else, for the chart's own Secret, two fresh 32-byte keys
(Sprig's randBytes, a CSPRNG). Worked out once per rendering and remembered, so the Secret and every pod's checksum
see the same keys. Empty: a Secret of the user's that is not there yet (the pods wait for it).
*/}}
{{- define "surreal.curveData" -}}
{{- if not (hasKey .Values.curve "renderedData") -}}
{{- $found := lookup "v1" "Secret" .Release.Namespace (include "surreal.curveSecretName" .) -}}
{{- $data := dict -}}
{{- if and $found $found.data -}}
{{- $data = pick $found.data "server.secret" "client.secret" -}}
{{- else if not .Values.curve.existingSecret -}}
{{- $data = dict "server.secret" (randBytes 32) "client.secret" (randBytes 32) -}}
{{- end -}}
{{- $_ := set .Values.curve "renderedData" $data -}}
{{- end -}}
{{- with .Values.curve.renderedData }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The pod annotation that restarts every role when the keys change (a rotation); nothing for keys not known yet. */}}
{{- define "surreal.curveChecksum" -}}
{{- if .Values.curve.enabled -}}
{{- with include "surreal.curveData" . }}
checksum/curve: {{ . | sha256sum }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- define "surreal.configPath" -}}/etc/surreal/experiment.yaml{{- end -}}

{{/*
What every role's container shares: SURREAL_* identity-free settings, the config mount, scratch space,
security context. {root, role (values key), block (the role's values)}.
*/}}
{{- define "surreal.commonEnv" -}}
- name: SURREAL_CONFIG
  value: {{ include "surreal.configPath" .root | quote }}
- name: SURREAL_BIND_HOST
  value: "0.0.0.0"
- name: SURREAL_METRICS_PORT
  value: {{ .root.Values.ports.metrics | int | quote }}
- name: HOME
  value: /tmp
- name: MPLCONFIGDIR
  value: /tmp/matplotlib
- name: PYTHONUNBUFFERED
  value: "1"
{{- if .root.Values.curve.enabled }}
- name: SURREAL_CURVE_DIR
  value: {{ include "surreal.curveMountPath" .root | quote }}
{{- end }}
{{- end -}}

{{- define "surreal.podSecurityContext" -}}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.podSecurityContext) (.block.podSecurityContext | default dict)) -}}
{{- end -}}

{{- define "surreal.securityContext" -}}
{{- toYaml (mergeOverwrite (deepCopy .root.Values.securityContext) (.block.securityContext | default dict)) -}}
{{- end -}}

{{/* The pod-level fields every role shares: service account, placement, priority, security, volumes of scratch and config. */}}
{{- define "surreal.podCommon" -}}
serviceAccountName: {{ include "surreal.serviceAccountName" .root }}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- include "surreal.podSecurityContext" . | nindent 2 }}
terminationGracePeriodSeconds: {{ .block.terminationGracePeriodSeconds }}
{{- with include "surreal.schedulingPodSpec" . }}
{{ . }}
{{- end }}
{{- with .root.Values.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with .block.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .block.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .block.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "surreal.volumes" -}}
- name: experiment
  configMap:
    name: {{ include "surreal.roleName" (dict "root" .root "role" "experiment") }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .root.Values.tmpSizeLimit }}
{{- if .root.Values.curve.enabled }}
- name: curve
  secret:
    secretName: {{ include "surreal.curveSecretName" .root }}
    defaultMode: 288  # 0440: the pods' fsGroup reads them, nobody else
    items:
      - key: server.secret
        path: server.secret
      - key: client.secret
        path: client.secret
{{- end }}
{{- end -}}

{{- define "surreal.volumeMounts" -}}
- name: experiment
  mountPath: {{ include "surreal.configMountPath" .root }}
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .root.Values.curve.enabled }}
- name: curve
  mountPath: {{ include "surreal.curveMountPath" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Probes on the metrics endpoint, which every role serves from a thread of its own. */}}
{{- define "surreal.probes" -}}
startupProbe:
  httpGet:
    path: /metrics
    port: metrics
  periodSeconds: 5
  failureThreshold: 60
readinessProbe:
  httpGet:
    path: /metrics
    port: metrics
  periodSeconds: 10
  timeoutSeconds: 5
livenessProbe:
  httpGet:
    path: /metrics
    port: metrics
  periodSeconds: 20
  timeoutSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* checkov suppressions every workload shares, one reason each (README: "checkov"). */}}
{{- define "surreal.checkovSkips" -}}
checkov.io/skip1: "CKV_K8S_43=image digests are optional (image.digest); make images tags every build with its immutable git sha"
checkov.io/skip2: "CKV_K8S_15=tags are immutable git shas, so IfNotPresent is safe and lets kind run the images it loaded"
{{- end -}}

{{/* The algorithm's name: `experiment.algo` is a name or a mapping with `name` (ppo when absent, as read_config). */}}
{{- define "surreal.algoName" -}}
{{- $algo := .Values.experiment.algo | default "ppo" -}}
{{- if kindIs "map" $algo -}}{{- $algo.name | default "ppo" -}}{{- else -}}{{- $algo -}}{{- end -}}
{{- end -}}

{{/*
Where the actors run (values.yaml, actors.pool): nodeSelector, tolerations and affinity as YAML, the pool's
placement first and the actors block's own on top. Only actors ever tolerate the actor pool's taint and the
clouds' spot taints: replay, ps and the learner keep their state and must not be preempted.
*/}}
{{- define "surreal.actorPoolTolerations" -}}
- key: surreal.dev/pool                       # the actor pool's own taint (surreal.dev/pool=actor), every cloud
  operator: Exists
  effect: NoSchedule
- key: kubernetes.azure.com/scalesetpriority  # AKS taints every spot node with it
  operator: Exists
  effect: NoSchedule
- key: cloud.google.com/gke-spot              # GKE taints Spot pools it creates itself (node auto-provisioning)
  operator: Exists
  effect: NoSchedule
{{- end -}}

{{- define "surreal.actorPlacement" -}}
{{- $actors := .Values.actors -}}
{{- $key := "surreal.dev/pool" -}}
{{- $nodeSelector := deepCopy ($actors.nodeSelector | default dict) -}}
{{- $affinity := deepCopy ($actors.affinity | default dict) -}}
{{- $tolerations := list -}}
{{- if has $actors.pool (list "auto" "actor") -}}
{{- $tolerations = include "surreal.actorPoolTolerations" . | fromYamlArray -}}
{{- end -}}
{{- range $actors.tolerations -}}
{{- if not (has . $tolerations) -}}{{- $tolerations = append $tolerations . -}}{{- end -}}
{{- end -}}
{{- if eq $actors.pool "auto" -}}
{{- if not (hasKey $affinity "nodeAffinity") -}}
{{- $required := dict "nodeSelectorTerms" (list (dict "matchExpressions" (list (dict "key" $key "operator" "In" "values" (list "actor" "cpu"))))) -}}
{{- $preferred := list (dict "weight" 100 "preference" (dict "matchExpressions" (list (dict "key" $key "operator" "In" "values" (list "actor"))))) -}}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" $required "preferredDuringSchedulingIgnoredDuringExecution" $preferred) -}}
{{- end -}}
{{- else if ne $actors.pool "none" -}}
{{- $_ := set $nodeSelector $key $actors.pool -}}
{{- end -}}
{{- toYaml (dict "nodeSelector" $nodeSelector "tolerations" $tolerations "affinity" $affinity) -}}
{{- end -}}

{{/* "true" when experiment.chaos schedules anything (ChaosConfig.active): kills, or a window holding actors down. */}}
{{- define "surreal.chaosActive" -}}
{{- $chaos := .Values.experiment.chaos | default dict -}}
{{- $kills := gt ($chaos.kill_every_s | default 0 | float64) 0.0 -}}
{{- $window := and (not (kindIs "invalid" $chaos.alive)) (gt ($chaos.window_s | default 0 | float64) 0.0) -}}
{{- if or $kills $window -}}true{{- end -}}
{{- end -}}

{{/*
Scheduling (values.yaml `scheduling`; docs/kubernetes.md, "Scheduling"). The core (learner, replay, ps) holds the
experiment's state and is useless in part: a learner without its shards idles on a GPU. So it is admitted as one
gang of 1 + replay.shards + ps.replicas pods at the core priority. Actors and the evaluator hold nothing and work
alone: each pod is admitted on its own as room allows (elastic), at the lower priority, preemptible.
{root, role}: "core" or "actors".
*/}}
{{- define "surreal.schedulingTier" -}}
{{- if has .role (list "learner" "replay" "ps") -}}core{{- else -}}actors{{- end -}}
{{- end -}}

{{/* The gang's name: Kueue's pod group (and so its Workload), Volcano's PodGroup, Kubernetes' PodGroup. */}}
{{- define "surreal.gangName" -}}
{{- printf "%s-core" (include "surreal.fullname" .) -}}
{{- end -}}

{{- define "surreal.gangSize" -}}
{{- add (int .Values.learner.replicas) (int .Values.replay.shards) (int .Values.ps.replicas) -}}
{{- end -}}

{{/*
The PriorityClass of a tier {root, tier} (in kueue mode also the WorkloadPriorityClass of the same name):
priorityClasses.<tier>.name, else <fullname>-<tier> when the chart creates them.
*/}}
{{- define "surreal.priorityClassName" -}}
{{- $classes := .root.Values.priorityClasses -}}
{{- $class := get $classes .tier -}}
{{- if $class.name -}}
{{- $class.name -}}
{{- else if $classes.create -}}
{{- printf "%s-%s" (include "surreal.fullname" .root) .tier -}}
{{- else -}}
{{- fail (printf "priorityClasses.create is false: set priorityClasses.%s.name to a PriorityClass the cluster has" .tier) -}}
{{- end -}}
{{- end -}}

{{/* Labels a role's pods get from the scheduling mode {root, role} (kueue only: Kueue reads pods' labels). */}}
{{- define "surreal.schedulingLabels" -}}
{{- $tier := include "surreal.schedulingTier" . -}}
{{- if eq .root.Values.scheduling "kueue" -}}
kueue.x-k8s.io/queue-name: {{ .root.Values.kueue.queueName }}
kueue.x-k8s.io/priority-class: {{ include "surreal.priorityClassName" (dict "root" .root "tier" $tier) }}
{{- if eq $tier "core" }}
kueue.x-k8s.io/pod-group-name: {{ include "surreal.gangName" .root }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
Annotations a role's pods get from the scheduling mode {root, role}. Kueue: the group's size, and "serving" (a pod
group that never finishes: a restarted pod rejoins its admitted group instead of ending it). Volcano: the PodGroup
(core) or the queue of the PodGroup Volcano makes per workload (actors, minMember 1), and who may be preempted.
*/}}
{{- define "surreal.schedulingAnnotations" -}}
{{- $tier := include "surreal.schedulingTier" . -}}
{{- $mode := .root.Values.scheduling -}}
{{- if and (eq $mode "kueue") (eq $tier "core") -}}
kueue.x-k8s.io/pod-group-total-count: {{ include "surreal.gangSize" .root | quote }}
kueue.x-k8s.io/pod-group-serving: "true"
{{- else if eq $mode "volcano" -}}
{{- if eq $tier "core" -}}
scheduling.k8s.io/group-name: {{ include "surreal.gangName" .root }}
{{ end -}}
scheduling.volcano.sh/queue-name: {{ .root.Values.volcano.queue }}
volcano.sh/preemptable: {{ ne $tier "core" | quote }}
{{- end -}}
{{- end -}}

{{/* Pod spec fields of the scheduling mode {root, role}: priority, Volcano's scheduler, the gang's PodGroup. */}}
{{- define "surreal.schedulingPodSpec" -}}
{{- $mode := .root.Values.scheduling -}}
{{- if ne $mode "none" -}}
{{- $tier := include "surreal.schedulingTier" . -}}
priorityClassName: {{ include "surreal.priorityClassName" (dict "root" .root "tier" $tier) }}
{{- if eq $mode "volcano" }}
schedulerName: {{ .root.Values.volcano.schedulerName }}
{{- end }}
{{- if and (eq $mode "gang") (eq $tier "core") }}
schedulingGroup:
  podGroupName: {{ include "surreal.gangName" .root }}
{{- end }}
{{- end -}}
{{- end -}}

{{/*
scheduling.k8s.io version of Kubernetes' PodGroup (scheduling: gang): gang.apiVersion, else the newest the cluster
serves (v1beta1 from Kubernetes 1.37, v1alpha2 on 1.36; both need the GenericWorkload feature gate and the version
enabled in the API server's --runtime-config).
*/}}
{{- define "surreal.podGroupAPIVersion" -}}
{{- if .Values.gang.apiVersion -}}
{{- .Values.gang.apiVersion -}}
{{- else if .Capabilities.APIVersions.Has "scheduling.k8s.io/v1beta1/PodGroup" -}}
scheduling.k8s.io/v1beta1
{{- else if .Capabilities.APIVersions.Has "scheduling.k8s.io/v1alpha2/PodGroup" -}}
scheduling.k8s.io/v1alpha2
{{- else -}}
{{- fail "scheduling=gang: the cluster serves no PodGroup (scheduling.k8s.io/v1beta1 from Kubernetes 1.37, v1alpha2 on 1.36, behind the GenericWorkload feature gate); set gang.apiVersion, or pass helm template --api-versions scheduling.k8s.io/v1beta1/PodGroup" -}}
{{- end -}}
{{- end -}}

{{/*
The run folder's mirror in a bucket: experiment.run_uri/<experiment.name, else the release name> (surreal/runstore.py);
"" without experiment.run_uri. A new release of the same name resumes from what the bucket holds.
*/}}
{{- define "surreal.runUri" -}}
{{- with .Values.experiment.run_uri -}}
{{- printf "%s/%s" (trimSuffix "/" .) ($.Values.experiment.name | default $.Release.Name) -}}
{{- end -}}
{{- end -}}

{{/* SURREAL_RUN_URI and runStorage.env for the roles that mirror the run folder (learner, replay, evaluator). */}}
{{- define "surreal.runStorageEnv" -}}
{{- with include "surreal.runUri" . -}}
- name: SURREAL_RUN_URI
  value: {{ . | quote }}
{{- with $.Values.runStorage.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* runStorage.podLabels on the pods that mirror the run folder (Azure workload identity's azure.workload.identity/use). */}}
{{- define "surreal.runStorageLabels" -}}
{{- if include "surreal.runUri" . -}}
{{- with .Values.runStorage.podLabels -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}
{{- end -}}
