provider "azurerm" {
  features {}
  subscription_id = var.subscription_id
}

# Installs the NVIDIA device plugin into the new cluster, authenticating through Entra ID like kubectl does
# (kubelogin with the az CLI's login; local accounts are disabled). Needs network access to the API server
# (see control_plane_authorized_cidrs).
provider "helm" {
  kubernetes = {
    host                   = azurerm_kubernetes_cluster.this.kube_config[0].host
    cluster_ca_certificate = base64decode(azurerm_kubernetes_cluster.this.kube_config[0].cluster_ca_certificate)
    exec = {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "kubelogin"
      # 6dae42f8-...: the application ID of the AKS AAD server, the same for every AKS cluster.
      args = ["get-token", "--login", "azurecli", "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
    }
  }
}
