"""DRF plumbing shared by every app's API: pagination, strict input and the error shape."""

from __future__ import annotations

import pydantic
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from common.ids import count_from_text
from rivercore.errors import InvalidInput, RiverError, pydantic_details


class Pagination(PageNumberPagination):
    """``?page_size=`` must be a whole number of at least 1 (more than 200 means 200);
    anything else is a 400 rather than silently the default."""

    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param, "")
        if raw == "":
            return self.page_size
        size = count_from_text(raw) or 0
        if size < 1:
            raise InvalidInput(
                "page_size must be a whole number of at least 1.",
                details={self.page_size_query_param: ["A whole number of at least 1 is required."]},
            )
        return min(size, self.max_page_size)

    def get_page_number(self, request, paginator):
        """``?page=`` in ASCII digits (``int()`` would read ``٣`` or ``1\u2028`` as a page);
        empty means the first page, anything else that is not a number is a 400."""
        raw = request.query_params.get(self.page_query_param, "")
        if raw == "" or raw in self.last_page_strings:
            return super().get_page_number(request, paginator)
        if count_from_text(raw) is None:
            raise InvalidInput("page must be a whole number.",
                               details={self.page_query_param: ["A page number in ASCII digits (0-9)."]})
        return raw


class StrictInput(serializers.Serializer):
    """An input serializer that refuses keys it does not know, so a typo or a read-only
    field is a 400 naming it rather than silently ignored. ``refused_fields`` gives a
    key a more helpful message than the default."""

    refused_fields: dict[str, str] = {}

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            raise serializers.ValidationError(
                {key[:100]: [self.refused_fields.get(key, "Unknown or read-only field.")] for key in unknown[:20]}
            )
        return attrs


def error_response(code: str, message: str, details=None, *, status_code: int) -> Response:
    return Response(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=status_code
    )


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "parse_error",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.NotAcceptable: "not_acceptable",
}


def exception_handler(exc, context):
    if isinstance(exc, RiverError):
        return error_response(exc.code, exc.message, exc.details, status_code=exc.status_code)
    if isinstance(exc, pydantic.ValidationError):
        return error_response(
            "validation_error", "The request is invalid.", pydantic_details(exc), status_code=400
        )
    if isinstance(exc, DjangoValidationError):
        details = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return error_response("validation_error", "The request is invalid.", details, status_code=400)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(
            "request_too_large", f"The request body is larger than {limit} bytes.",
            {"body": [f"At most {limit} bytes."]}, status_code=413,
        )
    if isinstance(exc, TooManyFieldsSent):
        return error_response("bad_request", "Too many fields in the request.", status_code=400)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = {
            "error": {"code": "validation_error", "message": "The request is invalid.", "details": details}
        }
        return response
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    message = str(exc.detail) if hasattr(exc, "detail") else str(exc)
    response.data = {"error": {"code": code, "message": message, "details": {}}}
    if response.status_code == status.HTTP_401_UNAUTHORIZED and "WWW-Authenticate" not in response:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response
