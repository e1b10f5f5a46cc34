variable "cloud" {
  type        = string
  description = "Which cloud the pools run on: gcp, aws or azure. Decides which taints the cloud adds by itself and which the stack must declare."

  validation {
    condition     = contains(["gcp", "aws", "azure"], var.cloud)
    error_message = "cloud must be one of gcp, aws, azure."
  }
}

variable "cpu_pool" {
  type = object({
    machine_type = string
    min_nodes    = optional(number, 1)
    max_nodes    = optional(number, 10)
    spot         = optional(bool, false)
    disk_size_gb = optional(number, 100)
  })
  description = "The stable CPU pool (replay, ps, and the actors unless there is an actor pool; on GKE and EKS also the cluster's system pods): machine type, autoscaling bounds, spot/preemptible capacity (which would put the replay shards on preemptible nodes too: use actor_pool for spot actors) and boot disk size."

  validation {
    condition     = trimspace(var.cpu_pool.machine_type) != ""
    error_message = "cpu_pool.machine_type must not be empty."
  }
  validation {
    # The CPU pool also hosts kube-dns/CoreDNS and the cluster autoscaler on GKE and EKS, so it never scales to zero.
    condition     = var.cpu_pool.min_nodes >= 1 && floor(var.cpu_pool.min_nodes) == var.cpu_pool.min_nodes
    error_message = "cpu_pool.min_nodes must be a whole number >= 1 (the CPU pool also runs the cluster's system pods)."
  }
  validation {
    condition     = var.cpu_pool.max_nodes >= var.cpu_pool.min_nodes && var.cpu_pool.max_nodes <= 1000 && floor(var.cpu_pool.max_nodes) == var.cpu_pool.max_nodes
    error_message = "cpu_pool.max_nodes must be a whole number between min_nodes and 1000."
  }
  validation {
    condition     = var.cpu_pool.disk_size_gb >= 30
    error_message = "cpu_pool.disk_size_gb must be at least 30 (images for the actor role are several GB)."
  }
}

variable "gpu_pool" {
  type = object({
    machine_type      = string
    accelerator_type  = optional(string, "")
    accelerator_count = optional(number, 1)
    min_nodes         = optional(number, 0)
    max_nodes         = optional(number, 2)
    spot              = optional(bool, false)
    disk_size_gb      = optional(number, 200)
  })
  description = "The GPU pool (the learner): machine type, accelerator type (GKE only: the GPU is attached to a general machine type; on EKS and AKS the instance type implies it) and count per node, autoscaling bounds (from 0), spot capacity and boot disk size."

  validation {
    condition     = trimspace(var.gpu_pool.machine_type) != ""
    error_message = "gpu_pool.machine_type must not be empty."
  }
  validation {
    condition     = var.gpu_pool.min_nodes >= 0 && floor(var.gpu_pool.min_nodes) == var.gpu_pool.min_nodes
    error_message = "gpu_pool.min_nodes must be a whole number >= 0."
  }
  validation {
    condition     = var.gpu_pool.max_nodes >= 1 && var.gpu_pool.max_nodes >= var.gpu_pool.min_nodes && var.gpu_pool.max_nodes <= 1000 && floor(var.gpu_pool.max_nodes) == var.gpu_pool.max_nodes
    error_message = "gpu_pool.max_nodes must be a whole number between max(1, min_nodes) and 1000."
  }
  validation {
    condition     = var.gpu_pool.accelerator_count >= 1 && floor(var.gpu_pool.accelerator_count) == var.gpu_pool.accelerator_count
    error_message = "gpu_pool.accelerator_count must be a whole number >= 1."
  }
  validation {
    condition     = var.cloud != "gcp" || trimspace(var.gpu_pool.accelerator_type) != ""
    error_message = "gpu_pool.accelerator_type is required on gcp (e.g. nvidia-l4): GKE attaches the GPU to the machine type."
  }
  validation {
    condition     = var.gpu_pool.disk_size_gb >= 50
    error_message = "gpu_pool.disk_size_gb must be at least 50 (the learner image carries CUDA)."
  }
}

variable "actor_pool" {
  type = object({
    enabled      = optional(bool, false)
    machine_type = optional(string, "")
    min_nodes    = optional(number, 0)
    max_nodes    = optional(number, 20)
    spot         = optional(bool, true)
    disk_size_gb = optional(number, 100)
  })
  description = "The optional actor pool (actors only; tainted surreal.dev/pool=actor:NoSchedule so nothing else lands there): off unless enabled; spot/preemptible capacity by default; machine type, autoscaling bounds (from 0) and boot disk size."
  default     = {}

  validation {
    condition     = !var.actor_pool.enabled || trimspace(var.actor_pool.machine_type) != ""
    error_message = "actor_pool.machine_type must not be empty when actor_pool.enabled."
  }
  validation {
    condition     = var.actor_pool.min_nodes >= 0 && floor(var.actor_pool.min_nodes) == var.actor_pool.min_nodes
    error_message = "actor_pool.min_nodes must be a whole number >= 0."
  }
  validation {
    condition     = var.actor_pool.max_nodes >= 1 && var.actor_pool.max_nodes >= var.actor_pool.min_nodes && var.actor_pool.max_nodes <= 1000 && floor(var.actor_pool.max_nodes) == var.actor_pool.max_nodes
    error_message = "actor_pool.max_nodes must be a whole number between max(1, min_nodes) and 1000."
  }
  validation {
    condition     = var.actor_pool.disk_size_gb >= 30
    error_message = "actor_pool.disk_size_gb must be at least 30 (images for the actor role are several GB)."
  }
}
