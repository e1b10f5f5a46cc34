# The same output names on gcp/, aws/ and azure/ (tests/test_terraform_stacks.py checks it).

output "cluster_name" {
  description = "Name of the AKS cluster."
  value       = azurerm_kubernetes_cluster.this.name
}

output "cluster_endpoint" {
  description = "The API server's endpoint (a private FQDN unless control_plane_authorized_cidrs opened a public one)."
  value       = azurerm_kubernetes_cluster.this.kube_config[0].host
  sensitive   = true
}

output "kubeconfig_command" {
  description = "Shell command that writes credentials for this cluster into $KUBECONFIG (needs the az CLI and kubelogin)."
  value       = "az aks get-credentials --resource-group ${azurerm_resource_group.this.name} --name ${azurerm_kubernetes_cluster.this.name} --subscription ${var.subscription_id} --file \"$KUBECONFIG\" --overwrite-existing && kubelogin convert-kubeconfig --login azurecli"
}

output "cpu_pool_labels" {
  description = "Labels on the CPU pool's nodes that the contract defines (plus AKS's spot label when spot)."
  value       = module.contract.node_labels.cpu
}

output "cpu_pool_taints" {
  description = "Taints on the CPU pool's nodes (Kubernetes form)."
  value       = module.contract.node_taints.cpu
}

output "gpu_pool_labels" {
  description = "Labels on the GPU pool's nodes that the contract defines (plus AKS's spot label when spot)."
  value       = module.contract.node_labels.gpu
}

output "gpu_pool_taints" {
  description = "Taints on the GPU pool's nodes (Kubernetes form)."
  value       = module.contract.node_taints.gpu
}

output "actor_pool_labels" {
  description = "Labels on the actor pool's nodes that the contract defines (plus AKS's spot label when spot); null without an actor pool."
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
  description = "How pods get cloud credentials: the cluster's OIDC issuer that federated identity credentials trust."
  value       = azurerm_kubernetes_cluster.this.oidc_issuer_url
}

output "kueue_chart_version" {
  description = "The Kueue chart (and release) installed into kueue-system for the chart's `scheduling: kueue`; null unless kueue.enabled."
  value       = one(helm_release.kueue[*].version)
}

output "run_uri" {
  description = "The bucket folder that holds the experiment's run folders: the chart's experiment.run_uri, and surreal run's run_uri= on a machine with access to it; null without run_storage."
  value       = var.run_storage.enabled ? "az://${azurerm_storage_container.runs[0].name}/runs" : null
}

output "helm_storage_values" {
  description = "Chart values (YAML) that mirror the release's run folders to that bucket: experiment.run_uri, the ServiceAccount run_storage binds with AKS workload identity's client-id annotation and azure.workload.identity/use pod label, and the storage account's name; make cluster-up writes them to storage-values.yaml and make deploy passes them before VALUES ({} without run_storage)."
  value = var.run_storage.enabled ? yamlencode({
    experiment     = { run_uri = "az://${azurerm_storage_container.runs[0].name}/runs" }
    serviceAccount = { name = var.run_storage.service_account, annotations = { "azure.workload.identity/client-id" = azurerm_user_assigned_identity.runs[0].client_id } }
    runStorage     = { podLabels = { "azure.workload.identity/use" = "true" }, env = [{ name = "AZURE_STORAGE_ACCOUNT_NAME", value = azurerm_storage_account.runs[0].name }] }
  }) : yamlencode({})
}
