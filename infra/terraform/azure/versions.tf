terraform {
  # One floor for every stack: 1.9 for cross-variable validation in the contract module, 1.10 for S3-native
  # state locking on aws/.
  required_version = ">= 1.10, < 2.0"

  required_providers {
    # 4.x: auto_scaling_enabled, gpu_driver and the azure_rbac-only AAD block used below.
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.81"
    }
    # 3.x: the `kubernetes = { ... }` attribute syntax used in providers.tf.
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.1"
    }
  }

  # Local state by default. For shared state in an Azure Storage container, copy backend.tf.example to backend.tf
  # and run `make cluster-up CLOUD=azure BACKEND_CONFIG=backend.hcl` (see README.md, "Remote state").
}
