"""OpenAPI post-processing: every operation documents the error answers River gives.

drf-spectacular documents the success response of each view; the errors come from one
place (common.api.exception_handler, common.edge) and share one shape, so they are
added here once instead of on every view.
"""

from __future__ import annotations

from django.conf import settings

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {
                    "type": "object",
                    "additionalProperties": True,
                    "description": "For a 400: each offending field (dotted path for nested JSON) and its messages.",
                },
            },
            "required": ["code", "message", "details"],
        }
    },
    "required": ["error"],
}

_ALWAYS = {
    "400": "Invalid input: a field, a query parameter, a NUL byte, JSON nested too deep.",
    "401": "No valid credentials.",
    "403": "Not allowed in this workspace or organization.",
    "404": "Not found, or in a workspace you do not belong to.",
}
_WITH_BODY = {
    "409": "The object is in a state that does not allow this.",
    "413": "The request body is larger than RIVER_MAX_REQUEST_BYTES.",
    "415": "The body is not application/json.",
}

# Operations that reach a customer's database answer 503 when it cannot be reached and
# 504 when a statement ran past its timeout (datasources.errors): the fault is upstream.
_UPSTREAM = {
    ("/api/v1/data-sources/{data_source_id}/discover", "post"): {
        "503": "The data source could not be reached (code data_source_unavailable).",
        "504": "The data source did not answer in time (code query_timeout).",
    },
}


# Operations with a per-minute limit answer 429 with Retry-After (triggers.apikeys).
_RATE_LIMITED = {
    ("/api/v1/triggers/{trigger_id}/invoke", "post"): {
        "429": "Over the API key's or the trigger's calls per minute; Retry-After says when to try again.",
    },
}


# Query parameters whose empty value means their default. Any other empty parameter,
# an id filter above all (?workspace=, ?agent=), is a 400 naming it (common.ids).
_EMPTY_MEANS_DEFAULT = {"page", "page_size", "archived"}


def error_responses(result, generator, request, public):
    """POSTPROCESSING_HOOKS entry: add the shared Error component and the error responses."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            wanted = dict(_ALWAYS)
            if method in {"post", "put", "patch", "delete"}:
                wanted.update(_WITH_BODY)
            wanted.update(_UPSTREAM.get((path, method), {}))
            wanted.update(_RATE_LIMITED.get((path, method), {}))
            for parameter in operation.get("parameters", []):
                if parameter.get("in") != "query":
                    continue
                if parameter.get("schema", {}).get("type") == "string":
                    parameter["schema"].setdefault("maxLength", settings.RIVER_QUERY_PARAM_MAX_LENGTH)
                elif parameter["name"] in _EMPTY_MEANS_DEFAULT and not parameter.get("required"):
                    parameter["allowEmptyValue"] = True
            responses = operation.setdefault("responses", {})
            for status, description in wanted.items():
                responses.setdefault(status, {"description": description, "content": reference})
    return result
