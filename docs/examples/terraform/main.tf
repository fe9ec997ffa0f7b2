# A tenant's GPU share and model endpoint declared in Terraform, through the portal's REST API
# with the generic REST provider (Mastercard/restapi). Each resource is one declarative
# document: `terraform apply` PUTs it (the portal answers "unchanged", or opens a request
# that goes through the usual approval and pull request), `terraform destroy` DELETEs it
# (a decommission request). See docs/tenant-guide.md, "Automation: portalctl, Terraform, CI".
#
#   export TF_VAR_portal_token=afp_...   # a robot token of the tenant, scope "request"
#   terraform init && terraform apply

terraform {
  required_providers {
    restapi = {
      source  = "Mastercard/restapi"
      version = ">= 1.20"
    }
  }
}

variable "portal_url" {
  type    = string
  default = "https://portal.example.com"
}

variable "portal_token" {
  type      = string
  sensitive = true
}

variable "tenant" {
  type    = string
  default = "alpha"
}

provider "restapi" {
  uri                  = var.portal_url
  bearer_token         = var.portal_token
  id_attribute         = "metadata/name"
  create_method        = "PUT" # a PUT of the whole document creates or changes it
  update_method        = "PUT"
  destroy_method       = "DELETE"
  # A PUT answers {outcome, request, diff, document}: the provider reads the object back
  # with GET instead (the document and its status).
  write_returns_object = false
  headers = {
    "Content-Type" = "application/json"
  }
}

locals {
  api = "/api/v1/tenants/${var.tenant}"
}

resource "restapi_object" "training_share" {
  path         = "${local.api}/gpushares"
  create_path  = "${local.api}/gpushares/{id}/"
  read_path    = "${local.api}/gpushares/{id}/"
  update_path  = "${local.api}/gpushares/{id}/"
  destroy_path = "${local.api}/gpushares/{id}/"
  data = jsonencode({
    apiVersion = "portal.ai-factory.dev/v1"
    kind       = "GpuShare"
    metadata   = { tenant = var.tenant, name = "train-a" }
    spec       = { flavor = "h200", kind = "whole", count = 2 }
  })
}

resource "restapi_object" "chat_endpoint" {
  path         = "${local.api}/endpoints"
  create_path  = "${local.api}/endpoints/{id}/"
  read_path    = "${local.api}/endpoints/{id}/"
  update_path  = "${local.api}/endpoints/{id}/"
  destroy_path = "${local.api}/endpoints/{id}/"
  data = jsonencode({
    apiVersion = "portal.ai-factory.dev/v1"
    kind       = "ModelEndpoint"
    metadata   = { tenant = var.tenant, name = "chat" }
    spec = {
      model_uri    = "hf://meta-llama/Llama-3.1-8B-Instruct"
      share        = "train-a" # the GPU share it runs on
      min_replicas = 1
      max_replicas = 2
    }
  })
  depends_on = [restapi_object.training_share]
}
