# The node-pool contract: which labels and taints each pool's nodes carry, which of them the stack has to declare
# (some the cloud adds by itself), and the nodeSelector/tolerations the chart's roles need to land on them.
# Every stack (gcp/, aws/, azure/) feeds its pools through this module, and tests/test_pool_contract.py compares
# its outputs with the chart's default values, so the three clouds and the chart cannot drift apart.

locals {
  pool_label_key = "surreal.dev/pool"

  # GPU nodes are tainted so that only pods asking for a GPU pool land there. GKE adds exactly this taint to every
  # GPU node itself; on EKS and AKS the stack declares it.
  gpu_taint = { key = "nvidia.com/gpu", value = "present", effect = "NoSchedule" }

  # The actor pool is tainted with its own label on every cloud, so that only the actors (the one role that
  # tolerates it) land there: GKE and EKS spot nodes carry no taint of their own, and without this one replay
  # shards, ps, the learner's helpers or the cluster's system pods could be scheduled onto preemptible nodes.
  actor_taint = { key = local.pool_label_key, value = "actor", effect = "NoSchedule" }

  # AKS puts this label and taint on every spot node and requires a spot pool to declare both. GKE (label
  # cloud.google.com/gke-spot) and EKS (label eks.amazonaws.com/capacityType) only label spot nodes: nothing to
  # tolerate there, and the contract adds nothing.
  aks_spot_label = { "kubernetes.azure.com/scalesetpriority" = "spot" }
  aks_spot_taint = { key = "kubernetes.azure.com/scalesetpriority", value = "spot", effect = "NoSchedule" }

  spot_labels = { for name, pool in local.inputs : name => (var.cloud == "azure" && pool.spot ? local.aks_spot_label : {}) }
  spot_taints = { for name, pool in local.inputs : name => (var.cloud == "azure" && pool.spot ? [local.aks_spot_taint] : []) }

  # The actor pool exists only when enabled; every per-pool output then has an `actor` entry.
  inputs = merge(
    { cpu = var.cpu_pool, gpu = var.gpu_pool },
    { for name, pool in { actor = var.actor_pool } : name => pool if pool.enabled },
  )

  # Taints every node of the pool carries, whoever puts them there (Kubernetes form).
  own_taints = { cpu = [], gpu = [local.gpu_taint], actor = [local.actor_taint] }
  taints     = { for name, pool in local.inputs : name => concat(local.own_taints[name], local.spot_taints[name]) }
  # Taints the cloud applies without being asked, so declaring them would only make a perpetual diff.
  cloud_applied_taints = { for name, pool in local.inputs : name => (name == "gpu" && var.cloud == "gcp" ? [local.gpu_taint] : []) }
  declared_taints = {
    for name, taints in local.taints : name => [for taint in taints : taint if !contains(local.cloud_applied_taints[name], taint)]
  }

  # GKE's and EKS's APIs spell taint effects as enums.
  effect_enum = { NoSchedule = "NO_SCHEDULE", PreferNoSchedule = "PREFER_NO_SCHEDULE", NoExecute = "NO_EXECUTE" }

  pools = {
    for name, pool in local.inputs : name => {
      name              = name
      machine_type      = pool.machine_type
      accelerator_type  = name == "gpu" ? pool.accelerator_type : ""
      accelerator_count = name == "gpu" ? pool.accelerator_count : 0
      min_nodes         = pool.min_nodes
      max_nodes         = pool.max_nodes
      spot              = pool.spot
      disk_size_gb      = pool.disk_size_gb

      labels        = merge({ (local.pool_label_key) = name }, local.spot_labels[name])
      taints        = local.taints[name]
      node_selector = { (local.pool_label_key) = name }
      # One toleration per taint, by key and effect: the value is the cloud's business.
      tolerations = [for taint in local.taints[name] : { key = taint.key, operator = "Exists", effect = taint.effect }]

      declared_taints      = local.declared_taints[name]
      declared_taints_enum = [for taint in local.declared_taints[name] : merge(taint, { effect = local.effect_enum[taint.effect] })]
      declared_taints_aks  = [for taint in local.declared_taints[name] : "${taint.key}=${taint.value}:${taint.effect}"]
    }
  }

  # The chart's roles, each with the pool it runs on: the actors on the actor pool when there is one. Replay, ps
  # and the learner never move there (they do not tolerate its taint).
  role_pools = { learner = "gpu", actors = var.actor_pool.enabled ? "actor" : "cpu", replay = "cpu", ps = "cpu" }
  placement  = { for role, pool in local.role_pools : role => { nodeSelector = local.pools[pool].node_selector, tolerations = local.pools[pool].tolerations } }
  # actors.pool tells the chart which pool the nodeSelector means (the chart's own default, `auto`, is for
  # clusters it knows nothing about); see infra/helm/surreal-chart/values.yaml.
  helm_values = merge(local.placement, { actors = merge(local.placement.actors, { pool = local.role_pools.actors }) })
}
