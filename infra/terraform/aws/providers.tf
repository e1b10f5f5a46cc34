provider "aws" {
  region = var.region

  default_tags {
    tags = merge({ "surreal.dev/cluster" = var.name, "managed-by" = "terraform" }, var.tags)
  }
}

# Installs the cluster autoscaler into the new cluster, authenticating like kubectl does (aws eks get-token):
# no long-lived token in the state. Needs network access to the API server (see control_plane_authorized_cidrs).
provider "helm" {
  kubernetes = {
    host                   = module.eks.cluster_endpoint
    cluster_ca_certificate = base64decode(module.eks.cluster_certificate_authority_data)
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", module.eks.cluster_name, "--region", var.region]
    }
  }
}
