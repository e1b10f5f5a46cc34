# Provider-free on purpose: the contract is pure data, so `terraform init` and `terraform test` work offline and
# every stack (and the chart's test) evaluates the same HCL.
terraform {
  # 1.9: a variable's validation may refer to other variables (accelerator_type is required on GKE only).
  required_version = ">= 1.9, < 2.0"
}
