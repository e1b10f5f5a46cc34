terraform {
  # 1.9 for cross-variable validation in the contract module; 1.10 for S3-native state locking (use_lockfile).
  required_version = ">= 1.10, < 2.0"

  required_providers {
    # eks 21.19.0, vpc 6.6.0 and iam 6.5.0 require aws >= 6.28.
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.28"
    }
    # 3.x: the `kubernetes = { ... }` attribute syntax used in providers.tf.
    helm = {
      source  = "hashicorp/helm"
      version = "~> 3.1"
    }
  }

  # Local state by default. For shared state in S3 with locking, copy backend.tf.example to backend.tf and run
  # `make cluster-up CLOUD=aws BACKEND_CONFIG=backend.hcl` (see README.md, "Remote state").
}
