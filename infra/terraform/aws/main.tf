# EKS: a VPC with private node subnets behind NAT, an EKS cluster with a CPU, a GPU and an optional (spot) actor
# managed node group whose labels and taints come from the shared contract module, IRSA, and the cluster
# autoscaler (EKS has none built in; without it no group would scale, the GPU and actor groups never off zero).

locals {
  # /19 private subnets from the bottom of the VPC, /24 public ones from its top half.
  private_subnets = [for i in range(length(var.zones)) : cidrsubnet(var.vpc_cidr, 3, i)]
  public_subnets  = [for i in range(length(var.zones)) : cidrsubnet(var.vpc_cidr, 8, 128 + i)]

  pools = module.contract.pools

  cluster_autoscaler_service_account = "cluster-autoscaler"
}

module "contract" {
  source = "../modules/contract"

  cloud      = "aws"
  cpu_pool   = var.cpu_pool
  gpu_pool   = var.gpu_pool
  actor_pool = var.actor_pool
}

module "vpc" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-aws-modules/vpc/aws"
  version = "6.6.0"

  name = var.name
  cidr = var.vpc_cidr
  azs  = var.zones

  private_subnets = local.private_subnets
  public_subnets  = local.public_subnets

  # Nodes live in the private subnets; the NAT gateway(s) in the public ones give them egress.
  enable_nat_gateway     = true
  single_nat_gateway     = var.single_nat_gateway
  one_nat_gateway_per_az = !var.single_nat_gateway
  enable_dns_hostnames   = true

  # Where the AWS load balancer controller may place internal and internet-facing load balancers.
  private_subnet_tags = { "kubernetes.io/role/internal-elb" = "1" }
  public_subnet_tags  = { "kubernetes.io/role/elb" = "1" }

  enable_flow_log                                 = true
  create_flow_log_cloudwatch_log_group            = true
  create_flow_log_cloudwatch_iam_role             = true
  flow_log_max_aggregation_interval               = 60
  flow_log_cloudwatch_log_group_retention_in_days = 365
}

module "eks" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-aws-modules/eks/aws"
  version = "21.19.0"

  name                = var.name
  kubernetes_version  = var.kubernetes_version
  deletion_protection = var.deletion_protection

  vpc_id                   = module.vpc.vpc_id
  subnet_ids               = module.vpc.private_subnets
  control_plane_subnet_ids = module.vpc.private_subnets

  # Private endpoint always; the public one only for the CIDRs someone named.
  endpoint_private_access      = true
  endpoint_public_access       = length(var.control_plane_authorized_cidrs) > 0
  endpoint_public_access_cidrs = var.control_plane_authorized_cidrs

  # IRSA: pods get AWS credentials through their service account's role, never from node keys.
  enable_irsa = true
  # Access entries (not the aws-auth ConfigMap); whoever runs terraform becomes cluster admin.
  authentication_mode                      = "API"
  enable_cluster_creator_admin_permissions = true

  addons = {
    # enableNetworkPolicy: the VPC CNI enforces the chart's NetworkPolicy.
    vpc-cni = {
      before_compute       = true
      configuration_values = jsonencode({ enableNetworkPolicy = "true" })
    }
    eks-pod-identity-agent = { before_compute = true }
    kube-proxy             = {}
    coredns                = {}
  }

  # One managed node group per contract pool (cpu, gpu, and actor when enabled). With capacity_type SPOT (the actor
  # group's default) EKS turns on capacity rebalancing: it starts a replacement and drains a Spot node once EC2
  # says it is at elevated risk of interruption, before the 2-minute notice.
  eks_managed_node_groups = {
    for name, pool in local.pools : name => {
      # Bottlerocket: a minimal, read-only OS. Its NVIDIA variant ships the driver and runs the NVIDIA device
      # plugin as a host service, so GPU nodes advertise nvidia.com/gpu with nothing installed in the cluster.
      ami_type       = name == "gpu" ? "BOTTLEROCKET_x86_64_NVIDIA" : "BOTTLEROCKET_x86_64"
      instance_types = [pool.machine_type]
      capacity_type  = pool.spot ? "SPOT" : "ON_DEMAND"
      min_size       = pool.min_nodes
      max_size       = pool.max_nodes
      desired_size   = pool.min_nodes

      # The cluster autoscaler reads these from the EKS API (eks:DescribeNodegroup) to scale a group up from 0.
      labels = pool.labels
      taints = { for taint in pool.declared_taints_enum : taint.key => taint }

      # Bottlerocket keeps images and pod storage on its second volume.
      block_device_mappings = {
        data = {
          device_name = "/dev/xvdb"
          ebs = {
            volume_size           = pool.disk_size_gb
            volume_type           = "gp3"
            encrypted             = true
            delete_on_termination = true
          }
        }
      }
      # IMDSv2 only, one hop: pods cannot borrow the node's role (they use IRSA).
      metadata_options = {
        http_endpoint               = "enabled"
        http_tokens                 = "required"
        http_put_response_hop_limit = 1
      }
    }
  }
}

# The cluster autoscaler's IAM role, assumed through IRSA by its service account only.
module "cluster_autoscaler_irsa" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-aws-modules/iam/aws//modules/iam-role-for-service-accounts"
  version = "6.5.0"

  name                             = "${var.name}-cluster-autoscaler"
  attach_cluster_autoscaler_policy = true
  cluster_autoscaler_cluster_names = [module.eks.cluster_name]

  oidc_providers = {
    this = {
      provider_arn               = module.eks.oidc_provider_arn
      namespace_service_accounts = ["kube-system:${local.cluster_autoscaler_service_account}"]
    }
  }
}

resource "helm_release" "cluster_autoscaler" {
  name       = "cluster-autoscaler"
  namespace  = "kube-system"
  repository = "https://kubernetes.github.io/autoscaler"
  chart      = "cluster-autoscaler"
  version    = var.cluster_autoscaler_chart_version

  values = [yamlencode({
    cloudProvider = "aws"
    awsRegion     = var.region
    # Managed node groups carry the k8s.io/cluster-autoscaler/{enabled,<name>} tags this discovers.
    autoDiscovery = { clusterName = module.eks.cluster_name }
    image         = { tag = "v${var.kubernetes_version}.0" }
    rbac = {
      serviceAccount = {
        name        = local.cluster_autoscaler_service_account
        annotations = { "eks.amazonaws.com/role-arn" = module.cluster_autoscaler_irsa.arn }
      }
    }
    extraArgs = {
      expander                      = "least-waste"
      balance-similar-node-groups   = true
      skip-nodes-with-local-storage = false
    }
    # On the CPU pool: it must not run on the GPU node it is asked to remove.
    nodeSelector = local.pools.cpu.node_selector
    tolerations  = local.pools.cpu.tolerations
  })]

  # Node groups first: the chart's pod needs a node, and its role needs the OIDC provider.
  depends_on = [module.eks]
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

  depends_on = [module.eks]
}
