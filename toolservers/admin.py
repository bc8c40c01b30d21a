from django.contrib import admin

from toolservers.models import McpTool, ToolServer


class McpToolInline(admin.TabularInline):
    model = McpTool
    extra = 0
    can_delete = False
    fields = ["name", "action_class", "enabled", "present", "digest", "reviewed_digest", "reviewed_at"]
    readonly_fields = fields  # reviews go through the API or the page (audited, hints checked)


@admin.register(ToolServer)
class ToolServerAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "transport", "health", "discovered_at"]
    list_filter = ["transport", "health"]
    search_fields = ["name"]
    # The secrets are never shown, not even as ciphertext; registration goes through the
    # API or the page, which check the command allow-list and the host allow-list.
    fields = [
        "workspace",
        "name",
        "transport",
        "command",
        "args",
        "url",
        "secret_names",
        "health",
        "health_message",
        "health_checked_at",
        "discovered_at",
        "created_at",
    ]
    readonly_fields = fields
    inlines = [McpToolInline]

    def has_add_permission(self, request) -> bool:
        return False
