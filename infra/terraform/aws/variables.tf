variable "name" {
  type        = string
  description = "Name of the EKS cluster; also names the VPC and prefixes IAM roles."
  default     = "surreal"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.name))
    error_message = "name must be 2-20 lowercase letters, digits and hyphens, starting with a letter (it prefixes IAM role names)."
  }
}

variable "region" {
  type        = string
  description = "AWS region of the cluster and its VPC."
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region must be an AWS region name such as us-east-1."
  }
}

variable "zones" {
  type        = list(string)
  description = "Availability zones the VPC (one private and one public subnet each) and the node groups span. Named, not looked up, so a zone AWS adds later never reshuffles the subnets. Pick zones that offer gpu_pool.machine_type."
  default     = ["us-east-1a", "us-east-1b", "us-east-1c"]

  validation {
    condition     = length(var.zones) >= 2 && length(var.zones) <= 4 && length(distinct(var.zones)) == length(var.zones)
    error_message = "zones must name 2 to 4 distinct availability zones (EKS needs subnets in at least two)."
  }
  validation {
    condition     = alltrue([for zone in var.zones : startswith(zone, var.region)])
    error_message = "every zone must be in region (e.g. us-east-1a for us-east-1)."
  }
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR of the cluster's VPC; split into one /19 private (nodes and pods) and one /24 public (NAT, load balancers) subnet per zone."
  default     = "10.0.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 16
    error_message = "vpc_cidr must be a CIDR block of /16 or larger."
  }
}

variable "single_nat_gateway" {
  type        = bool
  description = "One NAT gateway for the whole VPC (cheaper) instead of one per zone (survives a zone outage)."
  default     = true
}

variable "control_plane_authorized_cidrs" {
  type        = list(string)
  description = "CIDR blocks allowed to reach the API server's public endpoint. Empty (the default): the endpoint is private only; run terraform, kubectl and helm from inside the VPC (SSM bastion, VPN)."
  default     = []

  validation {
    condition     = alltrue([for cidr in var.control_plane_authorized_cidrs : can(cidrhost(cidr, 0)) && cidr != "0.0.0.0/0"])
    error_message = "control_plane_authorized_cidrs must be CIDR blocks, and not 0.0.0.0/0: name the networks that may reach the API."
  }
}

variable "kubernetes_version" {
  type        = string
  description = "EKS Kubernetes version (major.minor). The cluster autoscaler image follows it (v<version>.0)."
  default     = "1.35"

  validation {
    condition     = can(regex("^1\\.[0-9]{2}$", var.kubernetes_version))
    error_message = "kubernetes_version must look like 1.35."
  }
}

variable "cpu_pool" {
  type = object({
    machine_type = optional(string, "m6i.2xlarge")
    min_nodes    = optional(number, 1)
    max_nodes    = optional(number, 10)
    spot         = optional(bool, false)
    disk_size_gb = optional(number, 100)
  })
  description = "Stable CPU node group for replay, ps and the actors unless actor_pool is enabled (and the system pods): instance type, size bounds, spot capacity, data volume GB. Validated by the contract module."
  default     = {}
}

variable "gpu_pool" {
  type = object({
    machine_type      = optional(string, "g6.2xlarge")
    accelerator_type  = optional(string, "")
    accelerator_count = optional(number, 1)
    min_nodes         = optional(number, 0)
    max_nodes         = optional(number, 2)
    spot              = optional(bool, false)
    disk_size_gb      = optional(number, 200)
  })
  description = "GPU node group for the learner: a GPU instance type (the GPU comes with it; accelerator_type is unused on EKS, accelerator_count is informational), size bounds (scales from 0 through the cluster autoscaler), spot capacity, data volume GB. Validated by the contract module."
  default     = {}
}

variable "actor_pool" {
  type = object({
    enabled      = optional(bool, false)
    machine_type = optional(string, "m6i.2xlarge")
    min_nodes    = optional(number, 0)
    max_nodes    = optional(number, 20)
    spot         = optional(bool, true)
    disk_size_gb = optional(number, 100)
  })
  description = "Actor node group: capacity_type SPOT by default, instance type, size bounds (from 0, through the cluster autoscaler), data volume GB. Off unless enabled; tainted surreal.dev/pool=actor:NoSchedule so only actors land there. Validated by the contract module."
  default     = {}
}

variable "cluster_autoscaler_chart_version" {
  type        = string
  description = "Version of the kubernetes/autoscaler cluster-autoscaler Helm chart installed into kube-system."
  default     = "9.59.0"
}

variable "deletion_protection" {
  type        = bool
  description = "EKS deletion protection: make cluster-down fails until this is set to false and applied."
  default     = false
}

variable "tags" {
  type        = map(string)
  description = "Tags put on every AWS resource (provider default_tags)."
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
