variable "project_id" {
  type        = string
  description = "The GCP project that holds the cluster and its network."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project ID (6-30 lowercase letters, digits and hyphens)."
  }
}

variable "name" {
  type        = string
  description = "Name of the cluster; also prefixes the network, subnet, router and node service account."
  default     = "surreal"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.name))
    error_message = "name must be 2-20 lowercase letters, digits and hyphens, starting with a letter (it prefixes other resource names)."
  }
}

variable "region" {
  type        = string
  description = "Region of the (regional) cluster, its subnet and Cloud NAT."
  default     = "us-central1"
}

variable "zones" {
  type        = list(string)
  description = "Zones the node pools span. Pick zones that offer gpu_pool.accelerator_type (gcloud compute accelerator-types list)."
  default     = ["us-central1-a", "us-central1-c"]

  validation {
    condition     = length(var.zones) >= 1
    error_message = "zones must name at least one zone."
  }
}

variable "nodes_cidr" {
  type        = string
  description = "Primary range of the node subnet."
  default     = "10.10.0.0/20"

  validation {
    condition     = can(cidrhost(var.nodes_cidr, 0))
    error_message = "nodes_cidr must be a CIDR block."
  }
}

variable "pods_cidr" {
  type        = string
  description = "Secondary range of the node subnet for pod IPs (VPC-native cluster)."
  default     = "10.16.0.0/14"

  validation {
    condition     = can(cidrhost(var.pods_cidr, 0))
    error_message = "pods_cidr must be a CIDR block."
  }
}

variable "services_cidr" {
  type        = string
  description = "Secondary range of the node subnet for Service IPs."
  default     = "10.20.0.0/20"

  validation {
    condition     = can(cidrhost(var.services_cidr, 0))
    error_message = "services_cidr must be a CIDR block."
  }
}

variable "control_plane_cidr" {
  type        = string
  description = "The /28 the GKE control plane's private endpoint lives in; must not overlap the other ranges."
  default     = "172.16.0.0/28"

  validation {
    condition     = can(cidrhost(var.control_plane_cidr, 0)) && endswith(var.control_plane_cidr, "/28")
    error_message = "control_plane_cidr must be a /28 CIDR block."
  }
}

variable "control_plane_authorized_cidrs" {
  type        = list(string)
  description = "CIDR blocks allowed to reach the control plane's public endpoint. Empty (the default): no public endpoint at all; reach the API from inside the VPC (IAP bastion, VPN, Cloud Shell with private access)."
  default     = []

  validation {
    condition     = alltrue([for cidr in var.control_plane_authorized_cidrs : can(cidrhost(cidr, 0)) && cidr != "0.0.0.0/0"])
    error_message = "control_plane_authorized_cidrs must be CIDR blocks, and not 0.0.0.0/0: name the networks that may reach the API."
  }
}

variable "kubernetes_version" {
  type        = string
  description = "Control plane version, or \"latest\" for the newest in the release channel."
  default     = "latest"
}

variable "release_channel" {
  type        = string
  description = "GKE release channel: the control plane and nodes are upgraded automatically within it."
  default     = "REGULAR"

  validation {
    condition     = contains(["RAPID", "REGULAR", "STABLE"], var.release_channel)
    error_message = "release_channel must be RAPID, REGULAR or STABLE."
  }
}

variable "cpu_pool" {
  type = object({
    machine_type = optional(string, "n2-standard-8")
    min_nodes    = optional(number, 1)
    max_nodes    = optional(number, 10)
    spot         = optional(bool, false)
    disk_size_gb = optional(number, 100)
  })
  description = "Stable CPU pool for replay, ps and the actors unless actor_pool is enabled (and the system pods): machine type, total node bounds across zones, spot VMs, boot disk GB. Validated by the contract module."
  default     = {}
}

variable "gpu_pool" {
  type = object({
    machine_type      = optional(string, "g2-standard-8")
    accelerator_type  = optional(string, "nvidia-l4")
    accelerator_count = optional(number, 1)
    min_nodes         = optional(number, 0)
    max_nodes         = optional(number, 2)
    spot              = optional(bool, false)
    disk_size_gb      = optional(number, 200)
  })
  description = "GPU pool for the learner: machine type, accelerator type and count per node, total node bounds (scales from 0), spot VMs, boot disk GB. Validated by the contract module."
  default     = {}
}

variable "actor_pool" {
  type = object({
    enabled      = optional(bool, false)
    machine_type = optional(string, "n2-standard-8")
    min_nodes    = optional(number, 0)
    max_nodes    = optional(number, 20)
    spot         = optional(bool, true)
    disk_size_gb = optional(number, 100)
  })
  description = "Actor pool: GKE Spot VMs by default (GKE labels them cloud.google.com/gke-spot=true), machine type, total node bounds across zones (from 0), boot disk GB. Off unless enabled; tainted surreal.dev/pool=actor:NoSchedule so only actors land there. Validated by the contract module."
  default     = {}
}

variable "gpu_driver_version" {
  type        = string
  description = "NVIDIA driver GKE installs on GPU nodes: DEFAULT (the version tested with the node's GKE version) or LATEST."
  default     = "DEFAULT"

  validation {
    condition     = contains(["DEFAULT", "LATEST"], var.gpu_driver_version)
    error_message = "gpu_driver_version must be DEFAULT or LATEST."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Refuse to destroy the cluster (make cluster-down fails until this is set to false and applied)."
  default     = false
}

variable "labels" {
  type        = map(string)
  description = "GCP resource labels put on the cluster (cost attribution)."
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
  })
  description = "Object storage for the experiment's run folders (the chart's experiment.run_uri): a bucket bound through workload identity to the Kubernetes ServiceAccount namespace/service_account (make deploy's NAMESPACE, surreal by default), which the helm_storage_values output makes the release use. bucket_name \"\" derives a globally unique one; force_destroy lets make cluster-down delete a bucket that still holds runs."
  default     = {}

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.run_storage.namespace)) && can(regex("^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$", var.run_storage.service_account))
    error_message = "run_storage.namespace and run_storage.service_account must be Kubernetes names (lowercase letters, digits, '-')."
  }
}
