# AKS: a resource group and VNet, a cluster with Entra ID-only access, workload identity and Cilium network
# policy, a small system pool, and a CPU, a GPU and an optional (spot) actor user pool whose labels and taints
# come from the shared contract module. AKS installs the GPU driver; the NVIDIA device plugin is installed with Helm.
# Plain azurerm resources: Azure's AKS module (Azure/aks/azurerm) is being retired and its AVM successor is
# still pre-1.0 and azapi-based.

locals {
  pools            = module.contract.pools
  private_cluster  = length(var.control_plane_authorized_cidrs) == 0
  tags             = merge({ "surreal.dev/cluster" = var.name, "managed-by" = "terraform" }, var.tags)
  node_pool_zones  = length(var.zones) > 0 ? var.zones : null
  aks_rbac_admin   = "Azure Kubernetes Service RBAC Cluster Admin"
  network_operator = "Network Contributor"
}

data "azurerm_client_config" "current" {}

module "contract" {
  source = "../modules/contract"

  cloud      = "azure"
  cpu_pool   = var.cpu_pool
  gpu_pool   = var.gpu_pool
  actor_pool = var.actor_pool
}

resource "azurerm_resource_group" "this" {
  name     = "${var.name}-rg"
  location = var.location
  tags     = local.tags
}

resource "azurerm_virtual_network" "this" {
  name                = "${var.name}-vnet"
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  address_space       = [var.vnet_cidr]
  tags                = local.tags
}

resource "azurerm_subnet" "nodes" {
  name                 = "nodes"
  resource_group_name  = azurerm_resource_group.this.name
  virtual_network_name = azurerm_virtual_network.this.name
  address_prefixes     = [var.nodes_cidr]
  # Pods reach the run folders' storage account (storage.tf) through this subnet, which its network rules admit.
  service_endpoints = ["Microsoft.Storage"]
}

# Only the defaults (VNet-internal and Azure load balancer traffic in, anything out): AKS adds the rules its load
# balancers need to the node resource group's NSG, not here.
resource "azurerm_network_security_group" "nodes" {
  name                = "${var.name}-nodes"
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = local.tags
}

resource "azurerm_subnet_network_security_group_association" "nodes" {
  subnet_id                 = azurerm_subnet.nodes.id
  network_security_group_id = azurerm_network_security_group.nodes.id
}

# The control plane's identity (no service principal secret); it manages load balancers and IPs in the VNet.
resource "azurerm_user_assigned_identity" "control_plane" {
  name                = "${var.name}-control-plane"
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = local.tags
}

resource "azurerm_role_assignment" "control_plane_network" {
  scope                = azurerm_virtual_network.this.id
  role_definition_name = local.network_operator
  principal_id         = azurerm_user_assigned_identity.control_plane.principal_id
}

resource "azurerm_kubernetes_cluster" "this" {
  # checkov:skip=CKV_AZURE_4:Container Insights bills per ingested GB; the roles serve Prometheus /metrics and the learner writes TensorBoard and metrics.jsonl. Add an oms_agent block to opt in.
  # checkov:skip=CKV_AZURE_117:OS and data disks are encrypted at rest with platform-managed keys; a customer-managed key needs a Key Vault and disk encryption set whose lifecycle outlives this cluster.
  # checkov:skip=CKV_AZURE_172:The Key Vault Secrets Store CSI add-on is not enabled, so there is no secret rotation to configure.
  # checkov:skip=CKV_AZURE_226:The system pool's default size (D2s_v5) has no local temp disk to hold an ephemeral OS disk; managed OS disks work for every size a user picks.
  # checkov:skip=CKV_AZURE_227:Encryption at host needs the EncryptionAtHost feature registered on the subscription; it is the host_encryption_enabled variable (off by default so a fresh subscription can apply).
  name                = var.name
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  dns_prefix          = var.name
  kubernetes_version  = var.kubernetes_version
  sku_tier            = var.sku_tier
  tags                = local.tags

  automatic_upgrade_channel = "patch"
  node_os_upgrade_channel   = "NodeImage"

  # No public API server unless someone was given access to it.
  private_cluster_enabled = local.private_cluster
  dynamic "api_server_access_profile" {
    for_each = local.private_cluster ? [] : [1]
    content {
      authorized_ip_ranges = var.control_plane_authorized_cidrs
    }
  }

  # Entra ID sign-in with Azure RBAC only; no static admin certificate.
  local_account_disabled = true
  azure_active_directory_role_based_access_control {
    azure_rbac_enabled = true
    tenant_id          = data.azurerm_client_config.current.tenant_id
  }

  # Workload identity: pods get Azure tokens through federated service accounts, nodes hold no keys.
  oidc_issuer_enabled       = true
  workload_identity_enabled = true
  azure_policy_enabled      = true

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.control_plane.id]
  }

  default_node_pool {
    name                         = "system"
    vm_size                      = var.system_pool.machine_type
    auto_scaling_enabled         = true
    min_count                    = var.system_pool.min_nodes
    max_count                    = var.system_pool.max_nodes
    vnet_subnet_id               = azurerm_subnet.nodes.id
    zones                        = local.node_pool_zones
    only_critical_addons_enabled = true
    temporary_name_for_rotation  = "systemtmp"
    max_pods                     = 50
    host_encryption_enabled      = var.host_encryption_enabled
    tags                         = local.tags

    upgrade_settings {
      max_surge = "10%"
    }
  }

  # Azure CNI overlay with Cilium: pods off the VNet's address space, the chart's NetworkPolicy enforced.
  network_profile {
    network_plugin      = "azure"
    network_plugin_mode = "overlay"
    network_data_plane  = "cilium"
    network_policy      = "cilium"
    pod_cidr            = var.pods_cidr
    service_cidr        = var.services_cidr
    dns_service_ip      = cidrhost(var.services_cidr, 10)
    load_balancer_sku   = "standard"
    outbound_type       = "loadBalancer"
  }

  depends_on = [azurerm_role_assignment.control_plane_network]
}

resource "azurerm_kubernetes_cluster_node_pool" "pool" {
  # checkov:skip=CKV_AZURE_227:Encryption at host needs the EncryptionAtHost feature registered on the subscription; it is the host_encryption_enabled variable (off by default so a fresh subscription can apply).
  for_each = local.pools

  name                    = each.key
  kubernetes_cluster_id   = azurerm_kubernetes_cluster.this.id
  mode                    = "User"
  vm_size                 = each.value.machine_type
  os_sku                  = "Ubuntu"
  os_disk_size_gb         = each.value.disk_size_gb
  vnet_subnet_id          = azurerm_subnet.nodes.id
  zones                   = local.node_pool_zones
  max_pods                = 50
  host_encryption_enabled = var.host_encryption_enabled
  tags                    = local.tags

  auto_scaling_enabled = true
  min_count            = each.value.min_nodes
  max_count            = each.value.max_nodes
  node_count           = each.value.min_nodes

  # AKS requires a spot pool to declare its scalesetpriority label and taint; the contract adds them.
  priority        = each.value.spot ? "Spot" : "Regular"
  eviction_policy = each.value.spot ? "Delete" : null
  spot_max_price  = each.value.spot ? -1 : null

  node_labels = each.value.labels
  node_taints = each.value.declared_taints_aks

  # AKS installs the NVIDIA driver on GPU VM sizes; the device plugin comes from helm_release.nvidia_device_plugin.
  gpu_driver = each.key == "gpu" ? "Install" : null

  lifecycle {
    # The autoscaler owns the node count once the pool exists.
    ignore_changes = [node_count]
  }
}

# Whoever runs terraform administers the cluster through Azure RBAC (there are no local accounts).
resource "azurerm_role_assignment" "deployer_cluster_admin" {
  scope                = azurerm_kubernetes_cluster.this.id
  role_definition_name = local.aks_rbac_admin
  principal_id         = data.azurerm_client_config.current.object_id
}

resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  namespace  = "kube-system"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = var.nvidia_device_plugin_chart_version

  values = [yamlencode({
    # The chart's default affinity waits for Node Feature Discovery labels; place it by the contract instead.
    affinity = {
      nodeAffinity = {
        requiredDuringSchedulingIgnoredDuringExecution = {
          nodeSelectorTerms = [{
            matchExpressions = [for key, value in local.pools.gpu.node_selector : { key = key, operator = "In", values = [value] }]
          }]
        }
      }
    }
    # The GPU pool's taints (GPU, and spot when the pool is spot), plus the chart's own default.
    tolerations = concat([{ key = "CriticalAddonsOnly", operator = "Exists" }], local.pools.gpu.tolerations)
  })]

  depends_on = [azurerm_kubernetes_cluster_node_pool.pool, azurerm_role_assignment.deployer_cluster_admin]
}

# Kueue (kueue.enabled), the job queue of the chart's `scheduling: kueue`: its default integrations include the plain
# pods the chart's gang and actors are. It admits nothing until an admin adds a ClusterQueue (infra/kueue/).
resource "helm_release" "kueue" {
  count            = var.kueue.enabled ? 1 : 0
  name             = "kueue"
  namespace        = "kueue-system"
  create_namespace = true
  repository       = "oci://registry.k8s.io/kueue/charts"
  chart            = "kueue"
  version          = var.kueue.chart_version

  values = [yamlencode({
    # On the stable CPU pool: its webhooks are in the path of every pod a managed namespace creates, so it must not
    # go down with a spot node or wait for a GPU one.
    controllerManager = {
      nodeSelector = local.pools.cpu.node_selector
      tolerations  = local.pools.cpu.tolerations
    }
  })]

  depends_on = [azurerm_kubernetes_cluster_node_pool.pool, azurerm_role_assignment.deployer_cluster_admin]
}
