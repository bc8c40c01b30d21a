from django.contrib import admin

from triggers.models import Trigger


@admin.register(Trigger)
class TriggerAdmin(admin.ModelAdmin):
    """Secrets stay out of the admin: the webhook secret and the API key digest are never shown."""

    list_display = ["name", "agent", "trigger_type", "enabled", "has_webhook_secret", "api_key_prefix", "last_fired_at"]
    list_filter = ["trigger_type", "enabled", "agent__workspace"]
    search_fields = ["name", "agent__name", "api_key_prefix"]
    fields = ["agent", "name", "trigger_type", "config", "enabled", "api_key_prefix", "last_fired_at", "created_at"]
    readonly_fields = ["api_key_prefix", "last_fired_at", "created_at"]
    autocomplete_fields = ["agent"]

    @admin.display(boolean=True, description="Webhook secret set")
    def has_webhook_secret(self, obj) -> bool:
        return bool(obj.webhook_secret_encrypted)
