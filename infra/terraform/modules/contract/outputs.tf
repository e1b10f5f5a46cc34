output "pools" {
  description = "Per pool (cpu, gpu, and actor when actor_pool.enabled): the validated sizing inputs, the labels to declare, the taints its nodes carry, the taints the stack must declare (Kubernetes form, GKE/EKS enum form, AKS string form), and the nodeSelector and tolerations that land a pod there."
  value       = local.pools
}

output "node_labels" {
  description = "Labels the stack declares on each pool's nodes: { cpu = {...}, gpu = {...} } (and actor = {...} when actor_pool.enabled)."
  value       = { for name, pool in local.pools : name => pool.labels }
}

output "node_taints" {
  description = "Taints each pool's nodes carry (declared by the stack or added by the cloud), as Kubernetes taints { key, value, effect }."
  value       = { for name, pool in local.pools : name => pool.taints }
}

output "helm_values" {
  description = "The chart values that place each role on its pool: { learner|actors|replay|ps = { nodeSelector, tolerations } }; actors also carries pool (actor or cpu), the chart's actors.pool."
  value       = local.helm_values
}

output "helm_values_yaml" {
  description = "helm_values as a YAML values file (helm upgrade -f)."
  value       = yamlencode(local.helm_values)
}
