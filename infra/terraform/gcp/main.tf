# GKE: a VPC with a private node subnet and Cloud NAT, and a regional private cluster with a CPU, a GPU and an
# optional (spot) actor node pool whose labels and taints come from the shared contract module.

locals {
  subnet_name         = "${var.name}-nodes"
  pods_range_name     = "${var.name}-pods"
  services_range_name = "${var.name}-services"
  # No public endpoint unless someone was given access to it.
  private_endpoint = length(var.control_plane_authorized_cidrs) == 0
  pools            = module.contract.pools

  # The actor pool, when enabled: Spot VMs by default. GKE gives a Spot node's pods 15 s of its 30 s notice
  # (graceful node shutdown), which the chart's actor terminationGracePeriodSeconds fits.
  actor_node_pools = [
    for name, pool in local.pools : {
      name            = name
      machine_type    = pool.machine_type
      autoscaling     = true
      total_min_count = pool.min_nodes
      total_max_count = pool.max_nodes
      # Spot capacity comes and goes per zone: take it wherever there is some.
      location_policy    = "ANY"
      initial_node_count = ceil(pool.min_nodes / length(var.zones))
      spot               = pool.spot
      disk_size_gb       = pool.disk_size_gb
      disk_type          = "pd-balanced"
      image_type         = "COS_CONTAINERD"
      enable_secure_boot = true
      auto_repair        = true
      auto_upgrade       = true
    } if name == "actor"
  ]
}

module "contract" {
  source = "../modules/contract"

  cloud      = "gcp"
  cpu_pool   = var.cpu_pool
  gpu_pool   = var.gpu_pool
  actor_pool = var.actor_pool
}

module "vpc" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-google-modules/network/google"
  version = "18.1.0"

  project_id   = var.project_id
  network_name = "${var.name}-network"
  routing_mode = "REGIONAL"

  subnets = [{
    subnet_name   = local.subnet_name
    subnet_ip     = var.nodes_cidr
    subnet_region = var.region
    # Private Google Access: nodes without external IPs still reach Artifact Registry and Google APIs.
    subnet_private_access = "true"
    subnet_flow_logs      = "true"
  }]

  secondary_ranges = {
    (local.subnet_name) = [
      { range_name = local.pods_range_name, ip_cidr_range = var.pods_cidr },
      { range_name = local.services_range_name, ip_cidr_range = var.services_cidr },
    ]
  }
}

# Private nodes have no external IP: Cloud NAT is their way out (images from public registries, datasets).
resource "google_compute_router" "nat" {
  name    = "${var.name}-router"
  project = var.project_id
  region  = var.region
  network = module.vpc.network_name
}

resource "google_compute_router_nat" "nat" {
  name                               = "${var.name}-nat"
  project                            = var.project_id
  region                             = var.region
  router                             = google_compute_router.nat.name
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

module "gke" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-google-modules/kubernetes-engine/google//modules/private-cluster"
  version = "44.2.0"

  project_id         = var.project_id
  name               = var.name
  regional           = true
  region             = var.region
  zones              = var.zones
  kubernetes_version = var.kubernetes_version
  release_channel    = var.release_channel

  network           = module.vpc.network_name
  subnetwork        = module.vpc.subnets_names[0]
  ip_range_pods     = local.pods_range_name
  ip_range_services = local.services_range_name

  # Nodes have private IPs only; the control plane has a private endpoint, and a public one only for the CIDRs
  # in control_plane_authorized_cidrs (never for "any Google Cloud IP").
  enable_private_nodes            = true
  enable_private_endpoint         = local.private_endpoint
  master_ipv4_cidr_block          = var.control_plane_cidr
  gcp_public_cidrs_access_enabled = false
  master_authorized_networks = [
    for cidr in var.control_plane_authorized_cidrs : { cidr_block = cidr, display_name = "authorized ${cidr}" }
  ]

  # Dataplane V2 enforces the chart's NetworkPolicy.
  datapath_provider = "ADVANCED_DATAPATH"

  # Workload Identity: pods get Google credentials through their Kubernetes service account, and nodes run as a
  # dedicated least-privilege service account instead of the default compute one with keys.
  identity_namespace     = "enabled"
  node_metadata          = "GKE_METADATA"
  create_service_account = true
  grant_registry_access  = true

  remove_default_node_pool = true
  deletion_protection      = var.deletion_protection
  cluster_resource_labels  = var.labels

  node_pools = concat([
    {
      name            = "cpu"
      machine_type    = local.pools.cpu.machine_type
      autoscaling     = true
      total_min_count = local.pools.cpu.min_nodes
      total_max_count = local.pools.cpu.max_nodes
      location_policy = "BALANCED"
      # Per zone; the autoscaler then keeps the total within the bounds.
      initial_node_count = ceil(local.pools.cpu.min_nodes / length(var.zones))
      spot               = local.pools.cpu.spot
      disk_size_gb       = local.pools.cpu.disk_size_gb
      disk_type          = "pd-balanced"
      image_type         = "COS_CONTAINERD"
      enable_secure_boot = true
      auto_repair        = true
      auto_upgrade       = true
    },
    {
      name              = "gpu"
      machine_type      = local.pools.gpu.machine_type
      accelerator_type  = local.pools.gpu.accelerator_type
      accelerator_count = local.pools.gpu.accelerator_count
      # GKE installs the NVIDIA driver and runs the device plugin itself; it also taints GPU nodes with
      # nvidia.com/gpu=present:NoSchedule, which is why the contract declares no taint for this pool on GKE.
      gpu_driver_version = var.gpu_driver_version
      autoscaling        = true
      total_min_count    = local.pools.gpu.min_nodes
      total_max_count    = local.pools.gpu.max_nodes
      # GPUs are scarce: take them from whichever zone has capacity.
      location_policy    = "ANY"
      initial_node_count = ceil(local.pools.gpu.min_nodes / length(var.zones))
      spot               = local.pools.gpu.spot
      disk_size_gb       = local.pools.gpu.disk_size_gb
      disk_type          = "pd-balanced"
      image_type         = "COS_CONTAINERD"
      enable_secure_boot = true
      auto_repair        = true
      auto_upgrade       = true
    },
  ], local.actor_node_pools)

  # Every pool's labels and declared taints come from the contract (the actor pool's only when it exists).
  node_pools_labels = merge({ all = {} }, { for name, pool in local.pools : name => pool.labels })
  node_pools_taints = merge({ all = [] }, { for name, pool in local.pools : name => pool.declared_taints_enum })
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

  depends_on = [module.gke]
}
