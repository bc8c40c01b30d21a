"""The API's JSON renderer: a lone surrogate in stored text never turns a read into a 500."""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer as DRFJSONRenderer


class JSONRenderer(DRFJSONRenderer):
    """DRF's renderer, which writes UTF-8; when a value holds a lone surrogate (text
    stored before the parser refused them, or made by code), it writes that response
    with every non-ASCII character escaped instead (``"\\ud800"``: valid JSON, the same
    string back in any JSON reader) rather than failing to encode it."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            escaping = DRFJSONRenderer()
            escaping.ensure_ascii = True
            return escaping.render(data, accepted_media_type, renderer_context)
