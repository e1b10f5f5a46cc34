# The experiment's run folders in object storage (the chart's experiment.run_uri, az://runs/...): a storage account
# reachable only from the node subnet (and run_storage.allowed_cidrs), Entra ID only (no shared keys), with a
# private container, and a user-assigned identity that may read and write its blobs, federated with the release's
# Kubernetes ServiceAccount through AKS workload identity (the pods exchange their projected token; no secret).

locals {
  # Storage account names are global: 3-24 lowercase letters and digits.
  run_account_name = var.run_storage.bucket_name != "" ? var.run_storage.bucket_name : "${substr(replace(var.name, "-", ""), 0, 12)}runs${substr(sha1(azurerm_resource_group.this.id), 0, 8)}"
}

resource "azurerm_storage_account" "runs" {
  # checkov:skip=CKV2_AZURE_1:Blobs are encrypted at rest with Microsoft-managed keys; a customer-managed key needs a Key Vault whose lifecycle outlives these run folders.
  # checkov:skip=CKV2_AZURE_33:Pods reach the account through the node subnet's Microsoft.Storage service endpoint; a private endpoint adds a private DNS zone this stack does not run.
  # checkov:skip=CKV_AZURE_59:Public network access stays on for the network rules to apply: only the node subnet and allowed_cidrs get through (default deny).
  # checkov:skip=CKV_AZURE_33:The account serves blobs only; there is no queue service to log.
  # checkov:skip=CKV_AZURE_206:ZRS keeps three copies across the region's zones; geo-replication would double the cost of run folders a run can write again.
  # checkov:skip=CKV_AZURE_43:The name is computed (local.run_account_name): var.name's letters and digits, at most 12, then runs and 8 hex digits, so 3-24 lowercase characters.
  count = var.run_storage.enabled ? 1 : 0

  name                              = local.run_account_name
  resource_group_name               = azurerm_resource_group.this.name
  location                          = azurerm_resource_group.this.location
  account_tier                      = "Standard"
  account_replication_type          = "ZRS"
  min_tls_version                   = "TLS1_2"
  https_traffic_only_enabled        = true
  allow_nested_items_to_be_public   = false
  shared_access_key_enabled         = false
  default_to_oauth_authentication   = true
  local_user_enabled                = false
  infrastructure_encryption_enabled = true
  tags                              = local.tags

  sas_policy {
    expiration_period = "01.00:00:00"
  }

  # A checkpoint or metrics file overwritten or deleted by mistake comes back for a week.
  blob_properties {
    versioning_enabled = true
    delete_retention_policy {
      days = 7
    }
    container_delete_retention_policy {
      days = 7
    }
  }

  network_rules {
    default_action             = "Deny"
    bypass                     = ["AzureServices"]
    virtual_network_subnet_ids = [azurerm_subnet.nodes.id]
    ip_rules                   = var.run_storage.allowed_cidrs
  }
}

resource "azurerm_storage_container" "runs" {
  # checkov:skip=CKV2_AZURE_21:Blob read logging goes to a Log Analytics workspace this stack does not create; the activity log records the account's management.
  count = var.run_storage.enabled ? 1 : 0

  name                  = "runs"
  storage_account_id    = azurerm_storage_account.runs[0].id
  container_access_type = "private"
}

resource "azurerm_user_assigned_identity" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  name                = "${var.name}-runs"
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = local.tags
}

# Read, write, list and delete blobs in that container only (mirroring deletes rotated checkpoints and snapshots).
resource "azurerm_role_assignment" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  scope                = azurerm_storage_container.runs[0].id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_user_assigned_identity.runs[0].principal_id
}

# Workload identity: tokens the cluster issues to the release's ServiceAccount are exchanged for the identity's.
resource "azurerm_federated_identity_credential" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  name      = "${var.name}-runs"
  parent_id = azurerm_user_assigned_identity.runs[0].id
  audience  = ["api://AzureADTokenExchange"]
  issuer    = azurerm_kubernetes_cluster.this.oidc_issuer_url
  subject   = "system:serviceaccount:${var.run_storage.namespace}:${var.run_storage.service_account}"
}
