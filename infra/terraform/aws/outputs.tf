# The same output names on gcp/, aws/ and azure/ (tests/test_terraform_stacks.py checks it).

output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = module.eks.cluster_name
}

output "cluster_endpoint" {
  description = "The API server's endpoint (resolves privately inside the VPC; publicly only for control_plane_authorized_cidrs)."
  value       = module.eks.cluster_endpoint
  sensitive   = true
}

output "kubeconfig_command" {
  description = "Shell command that writes credentials for this cluster into $KUBECONFIG (needs the aws CLI)."
  value       = "aws eks update-kubeconfig --name ${module.eks.cluster_name} --region ${var.region}"
}

output "cpu_pool_labels" {
  description = "Labels on the CPU node group's nodes that the contract defines."
  value       = module.contract.node_labels.cpu
}

output "cpu_pool_taints" {
  description = "Taints on the CPU node group's nodes (Kubernetes form)."
  value       = module.contract.node_taints.cpu
}

output "gpu_pool_labels" {
  description = "Labels on the GPU node group's nodes that the contract defines."
  value       = module.contract.node_labels.gpu
}

output "gpu_pool_taints" {
  description = "Taints on the GPU node group's nodes (Kubernetes form)."
  value       = module.contract.node_taints.gpu
}

output "actor_pool_labels" {
  description = "Labels on the actor node group's nodes that the contract defines (EKS adds eks.amazonaws.com/capacityType itself); null without an actor node group."
  value       = try(module.contract.node_labels.actor, null)
}

output "actor_pool_taints" {
  description = "Taints on the actor node group's nodes (Kubernetes form); null without an actor node group."
  value       = try(module.contract.node_taints.actor, null)
}

output "helm_pool_values" {
  description = "Chart values (YAML) that place each role on its pool; make cluster-up writes them to pool-values.yaml and make deploy passes them before VALUES."
  value       = module.contract.helm_values_yaml
}

output "workload_identity" {
  description = "How pods get cloud credentials: the IAM OIDC provider that IRSA roles trust."
  value       = module.eks.oidc_provider_arn
}

output "kueue_chart_version" {
  description = "The Kueue chart (and release) installed into kueue-system for the chart's `scheduling: kueue`; null unless kueue.enabled."
  value       = one(helm_release.kueue[*].version)
}

output "run_uri" {
  description = "The bucket folder that holds the experiment's run folders: the chart's experiment.run_uri, and surreal run's run_uri= on a machine with access to it; null without run_storage."
  value       = var.run_storage.enabled ? "s3://${aws_s3_bucket.runs[0].bucket}/runs" : null
}

output "helm_storage_values" {
  description = "Chart values (YAML) that mirror the release's run folders to that bucket: experiment.run_uri, the ServiceAccount run_storage binds with IRSA's eks.amazonaws.com/role-arn annotation, and the bucket's region; make cluster-up writes them to storage-values.yaml and make deploy passes them before VALUES ({} without run_storage)."
  value = var.run_storage.enabled ? yamlencode({
    experiment     = { run_uri = "s3://${aws_s3_bucket.runs[0].bucket}/runs" }
    serviceAccount = { name = var.run_storage.service_account, annotations = { "eks.amazonaws.com/role-arn" = module.runs_irsa.arn } }
    runStorage     = { podLabels = {}, env = [{ name = "AWS_REGION", value = var.region }] }
  }) : yamlencode({})
}
