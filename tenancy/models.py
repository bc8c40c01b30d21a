from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from tenancy.permissions import Role


class Organization(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class OrganizationMember(models.Model):
    """A user's standing in an organization; admins manage everything in it."""

    class OrgRole(models.TextChoices):
        ADMIN = "admin", "Organization admin"
        MEMBER = "member", "Member"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="org_memberships")
    role = models.CharField(max_length=20, choices=OrgRole.choices, default=OrgRole.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["organization", "user"], name="uniq_org_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"


class Workspace(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ARCHIVED = "archived", "Archived"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="workspaces")
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    time_zone = models.CharField(max_length=64, default="UTC")
    # Segregation of duties: whoever started a run may not approve its actions
    # unless the workspace explicitly allows it.
    allow_self_approval = models.BooleanField(default=False)
    # Defaults for every data source in the workspace; a source may override them.
    query_row_limit = models.PositiveIntegerField(
        default=1000, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    observation_byte_limit = models.PositiveIntegerField(
        default=65536, validators=[MinValueValidator(1024), MaxValueValidator(1_048_576)]
    )
    query_timeout_seconds = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(300)]
    )
    # Calls per minute an API key of this workspace may make to invoke triggers,
    # unless the key was issued with its own limit.
    api_trigger_rate_limit_per_minute = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["organization", "slug"], name="uniq_workspace_slug")]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="uniq_workspace_member")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class AccessToken(models.Model):
    """A personal or service token. Only a SHA-256 digest of the secret is kept.

    Tokens look like ``rvr_<prefix>_<secret>``; the prefix is stored in clear so a
    lookup is one indexed query, and the digest is compared in constant time.
    """

    class Kind(models.TextChoices):
        PERSONAL = "personal", "Personal"
        SERVICE = "service", "Service"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100, default="token")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.PERSONAL)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class ServicePrincipal(models.Model):
    """A workspace identity a trigger's runs act as: a real user row (so roles,
    permission checks, action levels and approvals apply to it as to a person) that can
    never sign in (no usable password, no token), never approve, and whose workspace
    role was chosen by a person who holds at least that role."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_principal")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="service_principals")
    label = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The person answerable for what the identity does (who created or last edited its
    # trigger): its runs never hold a role above this person's current one, and the runs'
    # requester is this person (docs/security.md, "Who a run acts as"). None once that
    # person's account is deleted.
    responsible = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["label"]

    def __str__(self) -> str:
        return f"{self.label} ({self.user})"


class PersonSettings(models.Model):
    """A person's own settings that follow them across workspaces. ``time_zone`` is an
    IANA name (``zoneinfo.available_timezones()``), or empty: the browser's zone."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="person_settings")
    time_zone = models.CharField(max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Settings of {self.user}"
