# The experiment's run folders in object storage (the chart's experiment.run_uri): a GCS bucket, and a Google service
# account that may read and write its objects, bound to the release's Kubernetes ServiceAccount through GKE Workload
# Identity (the pods get its credentials from the GKE metadata server; no key anywhere).

locals {
  run_bucket_name = var.run_storage.bucket_name != "" ? var.run_storage.bucket_name : "${var.name}-runs-${var.project_id}"
  run_storage_ksa = "${var.run_storage.namespace}/${var.run_storage.service_account}"
}

resource "google_storage_bucket" "runs" {
  # checkov:skip=CKV_GCP_62:Access logs would go to a second bucket for a bucket only the experiment's own service account can reach; Cloud Audit Logs record its admin activity already.
  count = var.run_storage.enabled ? 1 : 0

  name                        = local.run_bucket_name
  project                     = var.project_id
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.run_storage.force_destroy
  labels                      = var.labels

  # A checkpoint or metrics file overwritten by mistake comes back for a week; older versions then go.
  versioning {
    enabled = true
  }
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 7
    }
    action {
      type = "Delete"
    }
  }
}

resource "google_service_account" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  project      = var.project_id
  account_id   = "${var.name}-runs"
  display_name = "Surreal run folders (${var.name})"
}

# Object read, write, list and delete on this bucket only (mirroring deletes rotated checkpoints and snapshots).
resource "google_storage_bucket_iam_member" "runs" {
  count = var.run_storage.enabled ? 1 : 0

  bucket = google_storage_bucket.runs[0].name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.runs[0].email}"
}

# Workload Identity: the release's ServiceAccount (annotated iam.gke.io/gcp-service-account) acts as that account.
resource "google_service_account_iam_member" "runs_workload_identity" {
  count = var.run_storage.enabled ? 1 : 0

  service_account_id = google_service_account.runs[0].name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${module.gke.identity_namespace}[${local.run_storage_ksa}]"
}
