# `terraform test` of the node-pool contract (no providers: runs offline). Each run applies the module with
# other inputs and checks the labels, taints and chart values the stacks and the chart rely on.

variables {
  cloud    = "gcp"
  cpu_pool = { machine_type = "n2-standard-8" }
  gpu_pool = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4" }
}

run "defaults_match_the_agreed_contract" {
  command = apply

  assert {
    condition     = output.node_labels == { cpu = { "surreal.dev/pool" = "cpu" }, gpu = { "surreal.dev/pool" = "gpu" } }
    error_message = "default pools must carry exactly surreal.dev/pool=cpu|gpu"
  }
  assert {
    condition     = length(output.node_taints.cpu) == 0
    error_message = "the CPU pool must not be tainted by default"
  }
  assert {
    condition     = output.node_taints.gpu == [{ key = "nvidia.com/gpu", value = "present", effect = "NoSchedule" }]
    error_message = "GPU nodes must carry exactly nvidia.com/gpu=present:NoSchedule"
  }
  assert {
    condition     = output.helm_values.learner.nodeSelector == { "surreal.dev/pool" = "gpu" }
    error_message = "the learner must select the GPU pool"
  }
  assert {
    condition     = output.helm_values.learner.tolerations == [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    error_message = "the learner must tolerate the GPU taint, and nothing else"
  }
  assert {
    condition     = alltrue([for role in ["actors", "replay", "ps"] : output.helm_values[role].nodeSelector == { "surreal.dev/pool" = "cpu" } && length(output.helm_values[role].tolerations) == 0])
    error_message = "actors, replay and ps must select the CPU pool and tolerate nothing"
  }
  assert {
    condition     = keys(output.helm_values) == ["actors", "learner", "ps", "replay"]
    error_message = "helm_values must cover exactly the four roles"
  }
  assert {
    condition     = yamldecode(output.helm_values_yaml) == output.helm_values
    error_message = "helm_values_yaml must be the YAML of helm_values"
  }
}

run "gke_adds_the_gpu_taint_itself" {
  command = apply

  assert {
    condition     = length(output.pools.gpu.declared_taints) == 0 && length(output.pools.gpu.declared_taints_enum) == 0
    error_message = "on GKE the stack must not declare nvidia.com/gpu (GKE taints GPU nodes itself)"
  }
  assert {
    condition     = output.pools.gpu.accelerator_type == "nvidia-l4" && output.pools.gpu.accelerator_count == 1
    error_message = "the GPU pool must pass its accelerator through"
  }
  assert {
    condition     = output.pools.gpu.min_nodes == 0 && output.pools.gpu.max_nodes == 2 && output.pools.cpu.min_nodes == 1 && output.pools.cpu.max_nodes == 10
    error_message = "default bounds: GPU pool from 0 to 2, CPU pool from 1 to 10"
  }
  assert {
    condition     = output.pools.cpu.accelerator_count == 0 && output.pools.cpu.accelerator_type == ""
    error_message = "the CPU pool has no accelerator"
  }
}

run "gke_spot_adds_nothing_to_tolerate" {
  command = apply

  variables {
    cpu_pool = { machine_type = "n2-standard-8", spot = true }
    gpu_pool = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4", spot = true }
  }

  assert {
    condition     = output.pools.cpu.spot && output.pools.gpu.spot
    error_message = "spot must pass through"
  }
  assert {
    condition     = output.node_labels.cpu == { "surreal.dev/pool" = "cpu" } && length(output.helm_values.actors.tolerations) == 0
    error_message = "GKE spot nodes are only labelled by GKE; the contract adds no label or toleration"
  }
}

run "eks_declares_the_gpu_taint_in_enum_form" {
  command = apply

  variables {
    cloud    = "aws"
    cpu_pool = { machine_type = "m6i.2xlarge", spot = true }
    gpu_pool = { machine_type = "g6.2xlarge", spot = true }
  }

  assert {
    condition     = output.pools.gpu.declared_taints_enum == [{ key = "nvidia.com/gpu", value = "present", effect = "NO_SCHEDULE" }]
    error_message = "EKS must declare the GPU taint with effect NO_SCHEDULE"
  }
  assert {
    condition     = length(output.pools.cpu.declared_taints_enum) == 0 && length(output.node_taints.cpu) == 0
    error_message = "EKS spot adds no taint to the CPU pool"
  }
  assert {
    condition     = output.helm_values.learner.tolerations == [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    error_message = "EKS spot must not change the learner's tolerations"
  }
}

run "aks_declares_the_gpu_taint_as_a_string" {
  command = apply

  variables {
    cloud    = "azure"
    cpu_pool = { machine_type = "Standard_D8s_v5" }
    gpu_pool = { machine_type = "Standard_NC8as_T4_v3" }
  }

  assert {
    condition     = output.pools.gpu.declared_taints_aks == ["nvidia.com/gpu=present:NoSchedule"] && length(output.pools.cpu.declared_taints_aks) == 0
    error_message = "AKS must declare nvidia.com/gpu=present:NoSchedule on the GPU pool only"
  }
  assert {
    condition     = output.node_labels.gpu == { "surreal.dev/pool" = "gpu" }
    error_message = "AKS on-demand pools carry only the contract label"
  }
}

run "aks_spot_pools_carry_and_tolerate_the_scalesetpriority_taint" {
  command = apply

  variables {
    cloud    = "azure"
    cpu_pool = { machine_type = "Standard_D8s_v5", spot = true }
    gpu_pool = { machine_type = "Standard_NC8as_T4_v3", spot = true }
  }

  assert {
    condition     = output.node_labels.cpu == { "surreal.dev/pool" = "cpu", "kubernetes.azure.com/scalesetpriority" = "spot" }
    error_message = "AKS spot pools must declare the scalesetpriority label"
  }
  assert {
    condition     = output.pools.cpu.declared_taints_aks == ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule"]
    error_message = "an AKS spot CPU pool must declare the spot taint"
  }
  assert {
    condition     = output.pools.gpu.declared_taints_aks == ["nvidia.com/gpu=present:NoSchedule", "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"]
    error_message = "an AKS spot GPU pool must declare the GPU and the spot taint"
  }
  assert {
    condition     = alltrue([for role in ["actors", "replay", "ps"] : output.helm_values[role].tolerations == [{ key = "kubernetes.azure.com/scalesetpriority", operator = "Exists", effect = "NoSchedule" }]])
    error_message = "CPU roles must tolerate the AKS spot taint when the CPU pool is spot"
  }
  assert {
    condition     = output.helm_values.learner.tolerations == [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }, { key = "kubernetes.azure.com/scalesetpriority", operator = "Exists", effect = "NoSchedule" }]
    error_message = "the learner must tolerate the GPU and the spot taint on an AKS spot GPU pool"
  }
  assert {
    condition     = output.helm_values.learner.nodeSelector == { "surreal.dev/pool" = "gpu" }
    error_message = "spot must not change the nodeSelector"
  }
}

run "aks_spot_gpu_only_leaves_the_cpu_roles_alone" {
  command = apply

  variables {
    cloud    = "azure"
    cpu_pool = { machine_type = "Standard_D8s_v5" }
    gpu_pool = { machine_type = "Standard_NC8as_T4_v3", spot = true }
  }

  assert {
    condition     = length(output.helm_values.actors.tolerations) == 0 && length(output.node_taints.cpu) == 0
    error_message = "an on-demand CPU pool stays untainted when only the GPU pool is spot"
  }
}

run "no_actor_pool_unless_enabled" {
  command = apply

  assert {
    condition     = keys(output.pools) == ["cpu", "gpu"] && keys(output.node_labels) == ["cpu", "gpu"]
    error_message = "the actor pool must not exist unless actor_pool.enabled"
  }
  assert {
    condition     = output.helm_values.actors.pool == "cpu"
    error_message = "without an actor pool the chart must pin the actors to the CPU pool"
  }
}

run "gke_actor_pool_is_spot_and_tainted_for_actors_only" {
  command = apply

  variables {
    actor_pool = { enabled = true, machine_type = "n2-standard-8" }
  }

  assert {
    condition     = output.node_labels.actor == { "surreal.dev/pool" = "actor" }
    error_message = "actor nodes must carry exactly surreal.dev/pool=actor on GKE (GKE adds its own spot label)"
  }
  assert {
    condition     = output.node_taints.actor == [{ key = "surreal.dev/pool", value = "actor", effect = "NoSchedule" }]
    error_message = "actor nodes must carry exactly surreal.dev/pool=actor:NoSchedule"
  }
  assert {
    condition     = output.pools.actor.declared_taints_enum == [{ key = "surreal.dev/pool", value = "actor", effect = "NO_SCHEDULE" }]
    error_message = "GKE does not add the actor taint: the stack must declare it"
  }
  assert {
    condition     = output.pools.actor.spot && output.pools.actor.min_nodes == 0 && output.pools.actor.max_nodes == 20 && output.pools.actor.accelerator_count == 0
    error_message = "the actor pool is spot by default, scales from 0 to 20 and has no accelerator"
  }
  assert {
    condition     = output.helm_values.actors == { pool = "actor", nodeSelector = { "surreal.dev/pool" = "actor" }, tolerations = [{ key = "surreal.dev/pool", operator = "Exists", effect = "NoSchedule" }] }
    error_message = "the actors must select the actor pool and tolerate its taint"
  }
  assert {
    condition     = alltrue([for role in ["replay", "ps"] : output.helm_values[role].nodeSelector == { "surreal.dev/pool" = "cpu" } && length(output.helm_values[role].tolerations) == 0])
    error_message = "replay and ps stay on the CPU pool and tolerate nothing"
  }
  assert {
    condition     = output.helm_values.learner.tolerations == [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    error_message = "the learner must not tolerate the actor pool"
  }
  assert {
    condition     = output.node_taints.cpu == [] && output.node_labels.cpu == { "surreal.dev/pool" = "cpu" }
    error_message = "an actor pool leaves the CPU pool as it was"
  }
}

run "eks_actor_pool_declares_its_taint_in_enum_form" {
  command = apply

  variables {
    cloud      = "aws"
    gpu_pool   = { machine_type = "g6.2xlarge" }
    actor_pool = { enabled = true, machine_type = "m6i.2xlarge", min_nodes = 1, max_nodes = 50 }
  }

  assert {
    condition     = output.pools.actor.declared_taints_enum == [{ key = "surreal.dev/pool", value = "actor", effect = "NO_SCHEDULE" }]
    error_message = "EKS spot adds no taint: the actor pool declares only its own"
  }
  assert {
    condition     = output.pools.actor.min_nodes == 1 && output.pools.actor.max_nodes == 50
    error_message = "actor pool bounds must pass through"
  }
}

run "aks_spot_actor_pool_carries_and_tolerates_both_taints" {
  command = apply

  variables {
    cloud      = "azure"
    cpu_pool   = { machine_type = "Standard_D8s_v5" }
    gpu_pool   = { machine_type = "Standard_NC8as_T4_v3" }
    actor_pool = { enabled = true, machine_type = "Standard_D8s_v5" }
  }

  assert {
    condition     = output.node_labels.actor == { "surreal.dev/pool" = "actor", "kubernetes.azure.com/scalesetpriority" = "spot" }
    error_message = "an AKS spot actor pool must declare the scalesetpriority label"
  }
  assert {
    condition     = output.pools.actor.declared_taints_aks == ["surreal.dev/pool=actor:NoSchedule", "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"]
    error_message = "an AKS spot actor pool must declare the actor and the spot taint"
  }
  assert {
    condition     = output.helm_values.actors.tolerations == [{ key = "surreal.dev/pool", operator = "Exists", effect = "NoSchedule" }, { key = "kubernetes.azure.com/scalesetpriority", operator = "Exists", effect = "NoSchedule" }]
    error_message = "the actors must tolerate the actor and the AKS spot taint"
  }
  assert {
    condition     = alltrue([for role in ["learner", "replay", "ps"] : !contains([for t in output.helm_values[role].tolerations : t.key], "kubernetes.azure.com/scalesetpriority")])
    error_message = "replay, ps and the learner must not tolerate spot nodes"
  }
}

run "aks_on_demand_actor_pool_has_no_spot_taint" {
  command = apply

  variables {
    cloud      = "azure"
    cpu_pool   = { machine_type = "Standard_D8s_v5" }
    gpu_pool   = { machine_type = "Standard_NC8as_T4_v3" }
    actor_pool = { enabled = true, machine_type = "Standard_F8s_v2", spot = false }
  }

  assert {
    condition     = output.pools.actor.declared_taints_aks == ["surreal.dev/pool=actor:NoSchedule"] && output.node_labels.actor == { "surreal.dev/pool" = "actor" }
    error_message = "an on-demand actor pool carries only its own label and taint"
  }
}

run "rejects_an_enabled_actor_pool_without_machine_type" {
  command = plan
  variables {
    actor_pool = { enabled = true }
  }
  expect_failures = [var.actor_pool]
}

run "rejects_an_actor_pool_that_cannot_scale_up" {
  command = plan
  variables {
    actor_pool = { enabled = true, machine_type = "n2-standard-8", max_nodes = 0 }
  }
  expect_failures = [var.actor_pool]
}

run "rejects_an_unknown_cloud" {
  command = plan
  variables {
    cloud = "openstack"
  }
  expect_failures = [var.cloud]
}

run "rejects_min_above_max" {
  command = plan
  variables {
    gpu_pool = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4", min_nodes = 3, max_nodes = 2 }
  }
  expect_failures = [var.gpu_pool]
}

run "rejects_a_cpu_pool_that_scales_to_zero" {
  command = plan
  variables {
    cpu_pool = { machine_type = "n2-standard-8", min_nodes = 0 }
  }
  expect_failures = [var.cpu_pool]
}

run "rejects_fractional_bounds" {
  command = plan
  variables {
    cpu_pool = { machine_type = "n2-standard-8", max_nodes = 2.5 }
  }
  expect_failures = [var.cpu_pool]
}

run "rejects_a_gke_gpu_pool_without_accelerator_type" {
  command = plan
  variables {
    gpu_pool = { machine_type = "g2-standard-8" }
  }
  expect_failures = [var.gpu_pool]
}

run "accepts_no_accelerator_type_off_gke" {
  command = plan
  variables {
    cloud    = "aws"
    gpu_pool = { machine_type = "g6.2xlarge" }
  }
  assert {
    condition     = output.pools.gpu.machine_type == "g6.2xlarge"
    error_message = "EKS and AKS derive the GPU from the instance type"
  }
}

run "rejects_zero_gpus_per_node" {
  command = plan
  variables {
    gpu_pool = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4", accelerator_count = 0 }
  }
  expect_failures = [var.gpu_pool]
}

run "rejects_an_empty_machine_type" {
  command = plan
  variables {
    cpu_pool = { machine_type = " " }
  }
  expect_failures = [var.cpu_pool]
}
