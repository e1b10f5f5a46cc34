provider "google" {
  project = var.project_id
  region  = var.region
}

# Installs Kueue into the new cluster when kueue.enabled, authenticating like kubectl does (gke-gcloud-auth-plugin
# with gcloud's login): no token in the state. Needs network access to the API server (see
# control_plane_authorized_cidrs); the endpoint is the private one unless a public one was opened.
provider "helm" {
  kubernetes = {
    host                   = "https://${module.gke.endpoint}"
    cluster_ca_certificate = base64decode(module.gke.ca_certificate)
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "gke-gcloud-auth-plugin"
    }
  }
}
