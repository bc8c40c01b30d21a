"""OPTIONS on every API endpoint (settings: DEFAULT_PERMISSION_CLASSES, DEFAULT_METADATA_CLASS).

Kept apart from common.api because DRF imports these while rest_framework.views is
still loading, and common.api needs rest_framework.views.
"""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.metadata import BaseMetadata


class IsAuthenticatedOrOptions(permissions.IsAuthenticated):
    """Authentication is required for everything except OPTIONS.

    OPTIONS answers only what the public OpenAPI document already says (the methods
    allowed, what the endpoint parses and renders) and looks nothing up, so it reveals
    nothing about any workspace.
    """

    def has_permission(self, request, view):
        return request.method == "OPTIONS" or super().has_permission(request, view)


class Metadata(BaseMetadata):
    """What OPTIONS answers: the allowed methods (also in the Allow header) and formats.

    DRF's SimpleMetadata would also describe a serializer per method, but River's views
    read and write through different serializers, so that description would mislead.
    """

    def determine_metadata(self, request, view):
        return {
            "name": view.get_view_name(),
            "allowed_methods": list(view.allowed_methods),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
        }
