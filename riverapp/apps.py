from django.apps import AppConfig


class RiverappConfig(AppConfig):
    name = "riverapp"
    verbose_name = "River"

    def ready(self) -> None:
        _metric_series_known_at_zero()


def _metric_series_known_at_zero() -> None:
    """Series whose label values the apps below own (the tool registry, firing and
    approval enums) start at 0 in every process, so a scrape sees the first event as an
    increase. River's own enums are zeroed by ``telemetry.metrics`` at import; these
    are wired here because ``telemetry`` sits below the apps that own them."""
    from governance.models import ApprovalRequest
    from rivercore.contracts import TriggerType
    from rivercore.tools import all_tools
    from telemetry import metrics
    from triggers.models import TriggerFiring

    metrics.tool_series_zero(all_tools().values())
    metrics.metrics_series_zero(metrics.approval_decision_seconds, [
        status.value for status in ApprovalRequest.Status if status != ApprovalRequest.Status.PENDING])
    types = [trigger_type.value for trigger_type in TriggerType]
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, [TriggerFiring.Outcome.STARTED.value], ["none"])
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, [TriggerFiring.Outcome.SKIPPED.value],
                                [reason.value for reason in TriggerFiring.Reason])
    # A key's invocation refused before any firing row (triggers.apikeys).
    metrics.metrics_series_zero(metrics.trigger_firings_total, types, ["refused"],
                                [TriggerFiring.Reason.DISABLED.value, TriggerFiring.Reason.RATE_LIMITED.value])
