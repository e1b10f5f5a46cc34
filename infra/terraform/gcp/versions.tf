terraform {
  # One floor for every stack: 1.9 for cross-variable validation in the contract module, 1.10 for S3-native
  # state locking on aws/.
  required_version = ">= 1.10, < 2.0"

  required_providers {
    # kubernetes-engine 44.2.0 requires google >= 7.17, < 8.
    google = {
      source  = "hashicorp/google"
      version = "~> 7.17"
    }
    # 3.x: the `kubernetes = { ... }` attribute syntax used in providers.tf.
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.1"
    }
  }

  # Local state by default. For shared state in a GCS bucket, copy backend.tf.example to backend.tf and run
  # `make cluster-up CLOUD=gcp BACKEND_CONFIG=backend.hcl` (see README.md, "Remote state").
}
