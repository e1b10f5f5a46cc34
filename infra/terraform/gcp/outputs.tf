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

output "run_uri" {
  description = "The bucket folder that holds the experiment's run folders: the chart's experiment.run_uri, and surreal run's run_uri= on a machine with access to it; null without run_storage."
  value       = var.run_storage.enabled ? "gs://${google_storage_bucket.runs[0].name}/runs" : null
}

output "helm_storage_values" {
  description = "Chart values (YAML) that mirror the release's run folders to that bucket: experiment.run_uri, the ServiceAccount run_storage binds with GKE Workload Identity's iam.gke.io/gcp-service-account annotation; make cluster-up writes them to storage-values.yaml and make deploy passes them before VALUES ({} without run_storage)."
  value = var.run_storage.enabled ? yamlencode({
    experiment     = { run_uri = "gs://${google_storage_bucket.runs[0].name}/runs" }
    serviceAccount = { name = var.run_storage.service_account, annotations = { "iam.gke.io/gcp-service-account" = google_service_account.runs[0].email } }
    runStorage     = { podLabels = {}, env = [] }
  }) : yamlencode({})
}
