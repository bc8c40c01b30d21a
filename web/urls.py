"""Every server-rendered page of River: the frame (sign-in, overview, notifications,
workspace switch) first, then one module per section."""

from django.urls import include, path

urlpatterns = [
    path("", include("web.frame")),
    path("", include("web.approval_scopes")),
    path("", include("web.approvals")),
    path("", include("web.approval_card")),
    path("", include("web.approval_card_outcome")),  # issue 31 §1: unknown-outcome card
    path("", include("web.approval_preview")),  # issue 29 §1: effect previews on the card
    path("", include("web.start_run")),
    path("", include("web.approval_links")),
    path("", include("web.slack_settings")),
    path("", include("web.runs")),
    path("", include("web.run")),
    path("", include("web.sessions")),
    path("", include("web.agent_canary")),  # issue 30 §3: the canary panel
    path("", include("web.agents")),
    path("", include("web.triggers")),
    path("", include("web.data")),
    path("", include("web.audit")),
    path("", include("web.policies")),
    path("", include("web.preferences")),
    path("", include("web.search")),
    path("", include("web.api_keys")),
    path("", include("web.results")),
    path("", include("web.policy_backtest")),  # issue 30 §1: the policy form's Backtest panel
    path("", include("web.version_backtest")),  # issue 30 §1: auto-approve conditions
    path("", include("web.evaluations")),  # issue 30 §2: evaluations, promotion gate, test set
    path("", include("web.tool_servers")),  # issue 31: MCP tool servers
]
