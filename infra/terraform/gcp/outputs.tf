# The same output names on gcp/, aws/ and azure/ (tests/test_terraform_stacks.py checks it).

output "cluster_name" {
  description = "Name of the GKE cluster."
  value       = module.gke.name
}

output "cluster_endpoint" {
  description = "The control plane's endpoint (private IP unless control_plane_authorized_cidrs opened a public one)."
  value       = module.gke.endpoint
  sensitive   = true
}

output "kubeconfig_command" {
  description = "Shell command that writes credentials for this cluster into $KUBECONFIG (needs gcloud and gke-gcloud-auth-plugin)."
  value       = "gcloud container clusters get-credentials ${module.gke.name} --location ${module.gke.location} --project ${var.project_id}${local.private_endpoint ? " --internal-ip" : ""}"
}

output "cpu_pool_labels" {
  description = "Labels on the CPU pool's nodes that the contract defines."
  value       = module.contract.node_labels.cpu
}

output "cpu_pool_taints" {
  description = "Taints on the CPU pool's nodes (Kubernetes form)."
  value       = module.contract.node_taints.cpu
}

output "gpu_pool_labels" {
  description = "Labels on the GPU pool's nodes that the contract defines."
  value       = module.contract.node_labels.gpu
}

output "gpu_pool_taints" {
  description = "Taints on the GPU pool's nodes (Kubernetes form; on GKE the GPU taint is put there by GKE)."
  value       = module.contract.node_taints.gpu
}

output "actor_pool_labels" {
  description = "Labels on the actor pool's nodes that the contract defines (GKE adds cloud.google.com/gke-spot=true to Spot nodes itself); null without an actor pool."
  value       = try(module.contract.node_labels.actor, null)
}

output "actor_pool_taints" {
  description = "Taints on the actor pool's nodes (Kubernetes form); null without an actor pool."
  value       = try(module.contract.node_taints.actor, null)
}

output "helm_pool_values" {
  description = "Chart values (YAML) that place each role on its pool; make cluster-up writes them to pool-values.yaml and make deploy passes them before VALUES."
  value       = module.contract.helm_values_yaml
}

output "workload_identity" {
  description = "How pods get cloud credentials: the Workload Identity pool Kubernetes service accounts are bound in."
  value       = module.gke.identity_namespace
}

output "kueue_chart_version" {
  description = "The Kueue chart (and release) installed into kueue-system for the chart's `scheduling: kueue`; null unless kueue.enabled."
  value       = one(helm_release.kueue[*].version)
}
