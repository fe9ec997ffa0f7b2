"""A tenant's model endpoints as people call them: where, how, and whether they answer now.

What an endpoint is comes from Git (main's spec of the tenant, read by
``catalog.specs.desired_tenant``); whether it answers from what the cluster last said (the
fleet read model's row of its InferenceService); whether it sleeps from main again (the idle
actions flip ``asleep`` there). How to call it follows the renderers: the gateway route of
``gitops.render.gateway`` (the tenant's own host, the endpoint's path prefix, the key in the
``x-api-key`` header, vLLM's served model name) and the LiteLLM route of
``gitops.render.litellm`` (model ``<tenant>/<endpoint>``).
"""

from __future__ import annotations

import dataclasses

from catalog import idle_actions
from catalog.idle_actions import SleepState
from catalog.models import GatewayKey, Kind, Resource, ResourceRequest
from catalog.specs import desired_tenant
from fleet.models import FluxObject
from gitops.fleet import configured_fleet
from gitops.render.gateway import API_KEY_HEADER, OPENAI_PREFIX, cluster_url, public_url
from gitops.render.litellm import model_name, served_name
from gitops.specs import EndpointSpec, TenantSpec
from tenants.models import Tenant

# The shell variable the curl example reads the tenant's gateway key from: the page never
# holds the key itself (it is shown once, when it is made).
API_KEY_VARIABLE = "AI_FACTORY_API_KEY"

READY, NOT_READY, ASLEEP, UNREPORTED = "ready", "not-ready", "asleep", "unreported"
STATE_LABELS = {
    READY: "ready",
    NOT_READY: "not ready",
    ASLEEP: "asleep",
    UNREPORTED: "not reported by the cluster yet",
}
GONE = (Resource.State.DECOMMISSIONED, Resource.State.WITHDRAWN)


def how_to_call(tenant: TenantSpec, endpoint: EndpointSpec) -> dict[str, str]:
    """The public URL, the OpenAI model name, a curl example, the LiteLLM model and the address
    inside the cluster of ``endpoint``. An endpoint that is not exposed has no public URL,
    curl or LiteLLM model (no route is rendered for it)."""
    url = public_url(tenant, endpoint, configured_fleet())
    model = served_name(endpoint)  # what vLLM answers to behind the gateway
    curl = (
        f"curl {url.rstrip('/')}/v1/chat/completions \\\n"
        f'  -H "{API_KEY_HEADER}: ${API_KEY_VARIABLE}" \\\n'
        f"  -H 'Content-Type: application/json' \\\n"
        f'  -d \'{{"model": "{model}", "messages": '
        f'[{{"role": "user", "content": "Hello"}}]}}\''
    )
    # Inside the cluster: the address KServe reports (status.address.url) once the fleet sync
    # has read it, the OpenAI prefix appended; until then the one the predictor Service has.
    reported = (
        FluxObject.objects.filter(
            kind=FluxObject.Kind.INFERENCE_SERVICE, namespace=tenant.slug, name=endpoint.name
        )
        .values_list("address", flat=True)
        .first()
    )
    exposed = endpoint.expose
    return {
        "url": url if exposed else "",
        "base_url": f"{url}/v1" if exposed else "",
        "model": model,
        "litellm_model": model_name(tenant, endpoint) if exposed else "",
        "curl": curl if exposed else "",
        "cluster_url": f"{reported.rstrip('/')}{OPENAI_PREFIX}"
        if reported
        else cluster_url(tenant, endpoint),
        "key_header": API_KEY_HEADER,
        "key_variable": API_KEY_VARIABLE,
    }


@dataclasses.dataclass(frozen=True)
class EndpointPage:
    """Everything the endpoint's page shows."""

    name: str
    spec: EndpointSpec
    resource: Resource | None  # the catalog's row (its requests, wake); None if only main has it
    latest_request: ResourceRequest | None
    state: str  # READY, NOT_READY, ASLEEP or UNREPORTED
    reason: str  # the cluster's, when it is not ready
    message: str
    calling: dict[str, str]
    sleep: SleepState | None
    key: GatewayKey | None

    @property
    def state_label(self) -> str:
        return STATE_LABELS[self.state]


def _state(tenant: Tenant, endpoint: EndpointSpec) -> tuple[str, str, str]:
    """(state, reason, message): asleep as main holds it, else as KServe last reported it."""
    if endpoint.asleep:
        return ASLEEP, "", ""
    row = FluxObject.objects.filter(
        kind=FluxObject.Kind.INFERENCE_SERVICE, namespace=tenant.slug, name=endpoint.name
    ).first()
    if row is None:
        return UNREPORTED, "", ""
    if row.ready == "True":
        return READY, "", ""
    return NOT_READY, row.reason, row.message


def endpoint_page(tenant: Tenant, name: str) -> EndpointPage | None:
    """The page of the tenant's endpoint ``name``, or None when main holds no such endpoint."""
    spec = desired_tenant(tenant)
    endpoint = next((e for e in spec.endpoints if e.name == name), None)
    if endpoint is None:
        return None
    resource = (
        tenant.resources.filter(kind=Kind.ENDPOINT, name=name).exclude(state__in=GONE).first()
    )
    sleep = idle_actions.sleep_states(tenant, [resource]).get(resource.pk) if resource else None
    state, reason, message = _state(tenant, endpoint)
    return EndpointPage(
        name=name,
        spec=endpoint,
        resource=resource,
        latest_request=resource.requests.first() if resource else None,
        state=state,
        reason=reason,
        message=message,
        calling=how_to_call(spec, endpoint),
        sleep=sleep,
        key=GatewayKey.objects.filter(tenant=tenant).select_related("created_by").first(),
    )
