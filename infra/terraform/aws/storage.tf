# The experiment's run folders in object storage (the chart's experiment.run_uri): an S3 bucket (private, encrypted,
# versioned), and an IAM role that may read and write its objects, assumed through IRSA by the release's Kubernetes
# ServiceAccount only (annotated eks.amazonaws.com/role-arn; the pods get a web identity token, no key anywhere).

data "aws_caller_identity" "current" {}

locals {
  run_bucket_name = var.run_storage.bucket_name != "" ? var.run_storage.bucket_name : "${var.name}-runs-${data.aws_caller_identity.current.account_id}-${var.region}"
}

resource "aws_s3_bucket" "runs" {
  # checkov:skip=CKV_AWS_18:Server access logs would go to a second bucket for a bucket only the experiment's role can reach; CloudTrail records its API calls.
  # checkov:skip=CKV_AWS_144:Cross-region replication doubles storage for run folders a run can write again; versioning keeps overwritten objects.
  # checkov:skip=CKV2_AWS_62:Nothing consumes object events: the roles read the manifests they wrote.
  count = var.run_storage.enabled ? 1 : 0

  bucket        = local.run_bucket_name
  force_destroy = var.run_storage.force_destroy
}

resource "aws_s3_bucket_public_access_block" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket                  = aws_s3_bucket.runs[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket = aws_s3_bucket.runs[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket = aws_s3_bucket.runs[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "aws:kms"
    }
    bucket_key_enabled = true
  }
}

# A checkpoint or metrics file overwritten by mistake comes back for a week; older versions then go.
resource "aws_s3_bucket_versioning" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket = aws_s3_bucket.runs[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket = aws_s3_bucket.runs[0].id
  rule {
    id     = "old-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = 7
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
  depends_on = [aws_s3_bucket_versioning.runs]
}

# List the bucket; read, write and delete its objects (mirroring deletes rotated checkpoints and snapshots).
data "aws_iam_policy_document" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  statement {
    sid       = "List"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.runs[0].arn]
  }
  statement {
    sid       = "Objects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.runs[0].arn}/*"]
  }
}

resource "aws_iam_policy" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  name   = "${var.name}-runs"
  policy = data.aws_iam_policy_document.runs[0].json
}

module "runs_irsa" {
  # checkov:skip=CKV_TF_1:Registry module pinned to an exact release (version below), the form terraform init, the lock file and tflint's terraform_module_version rule understand; a commit hash needs a git:: source instead.
  source  = "terraform-aws-modules/iam/aws//modules/iam-role-for-service-accounts"
  version = "6.5.0"

  create   = var.run_storage.enabled
  name     = "${var.name}-runs"
  policies = var.run_storage.enabled ? { runs = aws_iam_policy.runs[0].arn } : {}

  oidc_providers = {
    this = {
      provider_arn               = module.eks.oidc_provider_arn
      namespace_service_accounts = ["${var.run_storage.namespace}:${var.run_storage.service_account}"]
    }
  }
}
