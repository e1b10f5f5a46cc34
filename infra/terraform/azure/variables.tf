variable "subscription_id" {
  type        = string
  description = "Azure subscription that holds the cluster (az account show --query id -o tsv)."

  validation {
    condition     = can(regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", var.subscription_id))
    error_message = "subscription_id must be a subscription GUID."
  }
}

variable "name" {
  type        = string
  description = "Name of the AKS cluster; also names its resource group, VNet and identity."
  default     = "surreal"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.name))
    error_message = "name must be 2-20 lowercase letters, digits and hyphens, starting with a letter (it is also the DNS prefix)."
  }
}

variable "location" {
  type        = string
  description = "Azure region of the cluster (pick one that offers gpu_pool.machine_type)."
  default     = "eastus"
}

variable "zones" {
  type        = list(string)
  description = "Availability zones for the node pools, e.g. [\"1\", \"2\"]; empty lets Azure place nodes (GPU SKUs are not in every zone)."
  default     = []

  validation {
    condition     = alltrue([for zone in var.zones : contains(["1", "2", "3"], zone)])
    error_message = "zones must be a subset of [\"1\", \"2\", \"3\"]."
  }
}

variable "vnet_cidr" {
  type        = string
  description = "Address space of the cluster's VNet."
  default     = "10.30.0.0/16"

  validation {
    condition     = can(cidrhost(var.vnet_cidr, 0))
    error_message = "vnet_cidr must be a CIDR block."
  }
}

variable "nodes_cidr" {
  type        = string
  description = "Subnet (inside vnet_cidr) for the nodes; pods get overlay IPs from pods_cidr instead."
  default     = "10.30.0.0/20"

  validation {
    condition     = can(cidrhost(var.nodes_cidr, 0))
    error_message = "nodes_cidr must be a CIDR block."
  }
}

variable "pods_cidr" {
  type        = string
  description = "Overlay range for pod IPs (Azure CNI overlay); must not overlap the VNet."
  default     = "192.168.0.0/16"

  validation {
    condition     = can(cidrhost(var.pods_cidr, 0))
    error_message = "pods_cidr must be a CIDR block."
  }
}

variable "services_cidr" {
  type        = string
  description = "Range for Service IPs; the cluster DNS service takes its 10th address."
  default     = "10.31.0.0/16"

  validation {
    condition     = can(cidrhost(var.services_cidr, 10))
    error_message = "services_cidr must be a CIDR block with at least 11 addresses."
  }
}

variable "control_plane_authorized_cidrs" {
  type        = list(string)
  description = "CIDR blocks allowed to reach the API server publicly. Empty (the default): a private cluster, whose API server is reachable from inside the VNet only (bastion, VPN, az aks command invoke)."
  default     = []

  validation {
    condition     = alltrue([for cidr in var.control_plane_authorized_cidrs : can(cidrhost(cidr, 0)) && cidr != "0.0.0.0/0"])
    error_message = "control_plane_authorized_cidrs must be CIDR blocks, and not 0.0.0.0/0: name the networks that may reach the API."
  }
}

variable "kubernetes_version" {
  type        = string
  description = "AKS Kubernetes version (major.minor); null takes the region's default. Patch upgrades are automatic."
  default     = null

  validation {
    condition     = var.kubernetes_version == null || can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version must look like 1.33, or be null."
  }
}

variable "sku_tier" {
  type        = string
  description = "AKS control plane tier: Free (no SLA) or Standard (financially backed SLA, recommended for long runs)."
  default     = "Standard"

  validation {
    condition     = contains(["Free", "Standard", "Premium"], var.sku_tier)
    error_message = "sku_tier must be Free, Standard or Premium."
  }
}

variable "system_pool" {
  type = object({
    machine_type = optional(string, "Standard_D2s_v5")
    min_nodes    = optional(number, 1)
    max_nodes    = optional(number, 3)
  })
  description = "AKS's mandatory system pool (CoreDNS, metrics-server, konnectivity): VM size and autoscaler bounds. Tainted CriticalAddonsOnly, so experiment pods never land there."
  default     = {}

  validation {
    condition     = var.system_pool.min_nodes >= 1 && var.system_pool.max_nodes >= var.system_pool.min_nodes
    error_message = "system_pool needs min_nodes >= 1 and max_nodes >= min_nodes."
  }
}

variable "cpu_pool" {
  type = object({
    machine_type = optional(string, "Standard_D8s_v5")
    min_nodes    = optional(number, 1)
    max_nodes    = optional(number, 10)
    spot         = optional(bool, false)
    disk_size_gb = optional(number, 100)
  })
  description = "Stable CPU user pool for replay, ps and the actors unless actor_pool is enabled: VM size, autoscaler bounds, spot VMs (then tainted kubernetes.azure.com/scalesetpriority=spot:NoSchedule, see the contract module), OS disk GB. Validated by the contract module."
  default     = {}
}

variable "gpu_pool" {
  type = object({
    machine_type      = optional(string, "Standard_NC8as_T4_v3")
    accelerator_type  = optional(string, "")
    accelerator_count = optional(number, 1)
    min_nodes         = optional(number, 0)
    max_nodes         = optional(number, 2)
    spot              = optional(bool, false)
    disk_size_gb      = optional(number, 200)
  })
  description = "GPU user pool for the learner: a GPU VM size (the GPU comes with it; accelerator_type is unused on AKS, accelerator_count is informational), autoscaler bounds (from 0), spot VMs, OS disk GB. Validated by the contract module."
  default     = {}
}

variable "actor_pool" {
  type = object({
    enabled      = optional(bool, false)
    machine_type = optional(string, "Standard_D8s_v5")
    min_nodes    = optional(number, 0)
    max_nodes    = optional(number, 20)
    spot         = optional(bool, true)
    disk_size_gb = optional(number, 100)
  })
  description = "Actor user pool: Spot priority by default (eviction Delete, max price -1: the pay-as-you-go price at most; AKS taints it kubernetes.azure.com/scalesetpriority=spot:NoSchedule), VM size, autoscaler bounds (from 0), OS disk GB. Off unless enabled; tainted surreal.dev/pool=actor:NoSchedule so only actors land there. Validated by the contract module."
  default     = {}
}

variable "host_encryption_enabled" {
  type        = bool
  description = "Encrypt temp disks, caches and OS/data flows on the VM hosts. Register the feature first: az feature register --namespace Microsoft.Compute --name EncryptionAtHost (and check the GPU size supports it)."
  default     = false
}

variable "nvidia_device_plugin_chart_version" {
  type        = string
  description = "Version of NVIDIA's nvidia-device-plugin Helm chart installed into kube-system (AKS installs the driver, not the device plugin)."
  default     = "0.20.0"
}

variable "tags" {
  type        = map(string)
  description = "Azure tags put on every resource this stack creates."
  default     = {}
}

variable "kueue" {
  type = object({
    enabled       = optional(bool, false)
    chart_version = optional(string, "0.19.2")
  })
  description = "Kueue, the job queue the chart's `scheduling: kueue` submits to: kubernetes-sigs/kueue's Helm chart from oci://registry.k8s.io/kueue/charts into kueue-system, on the CPU pool. Off unless enabled; chart_version pins the release (>= 0.15 for the kueue.x-k8s.io/v1beta2 API the chart uses; 0.19.2 is the one its labels were checked against)."
  default     = {}

  validation {
    condition     = can(regex("^0\\.(1[5-9]|[2-9][0-9])\\.[0-9]+$|^[1-9][0-9]*\\.[0-9]+\\.[0-9]+$", var.kueue.chart_version))
    error_message = "kueue.chart_version must be an exact Kueue chart version, 0.15.0 or later (the chart uses kueue.x-k8s.io/v1beta2), e.g. 0.19.2."
  }
}

variable "run_storage" {
  type = object({
    enabled         = optional(bool, true)
    bucket_name     = optional(string, "")
    namespace       = optional(string, "surreal")
    service_account = optional(string, "surreal")
    force_destroy   = optional(bool, false)
    allowed_cidrs   = optional(list(string), [])
  })
  description = "Object storage for the experiment's run folders (the chart's experiment.run_uri): a bucket bound through workload identity to the Kubernetes ServiceAccount namespace/service_account (make deploy's NAMESPACE, surreal by default), which the helm_storage_values output makes the release use. bucket_name \"\" derives a globally unique one; force_destroy lets make cluster-down delete a bucket that still holds runs, allowed_cidrs (public networks besides the node subnet that may reach the storage account, e.g. your workstation for surreal plot az://...)."
  default     = {}

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.run_storage.namespace)) && can(regex("^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$", var.run_storage.service_account))
    error_message = "run_storage.namespace and run_storage.service_account must be Kubernetes names (lowercase letters, digits, '-')."
  }
}
