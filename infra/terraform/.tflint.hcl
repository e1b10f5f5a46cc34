# tflint for every stack under infra/terraform (make tflint; the GitHub workflow runs it after `tflint --init`).
# One file for all three stacks: a cloud's ruleset only inspects that cloud's resources.
config {
  # Lint what the stacks pass into the local contract module too.
  call_module_type = "local"
}

# Bundled with tflint: unused declarations, missing types and descriptions, unpinned modules and providers.
plugin "terraform" {
  enabled = true
  preset  = "all"
}

plugin "google" {
  enabled = true
  version = "0.39.0"
  source  = "github.com/terraform-linters/tflint-ruleset-google"
}

plugin "aws" {
  enabled = true
  version = "0.48.0"
  source  = "github.com/terraform-linters/tflint-ruleset-aws"
}

plugin "azurerm" {
  enabled = true
  version = "0.32.0"
  source  = "github.com/terraform-linters/tflint-ruleset-azurerm"
}
