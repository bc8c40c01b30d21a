"""The Django admin, scoped by organization.

Who sees what (docs/admin.md):

- A **superuser** sees and edits everything, as in plain Django.
- A **staff user** who is an *organization admin* (``OrganizationMember.OrgRole.ADMIN``)
  sees and edits only the objects of the organizations they administer, and only the
  kinds of objects their Django permissions allow. Being a plain member of an
  organization gives no admin access: the admin can change anything in an
  organization, which is the organization admin's power in the API too.
- A staff user who administers no organization sees nothing.
- Objects that belong to no organization (Django's groups, celery-beat's raw schedule
  rows, rate-limit counters, access tokens, which belong to a person who may work in
  several organizations) are for superusers only: ``tenant_path = None``.

Every registered ModelAdmin inherits ``TenantScopedAdmin`` (or the mixin), naming the
lookup from its model to the organization in ``tenant_path``. The mixin then scopes, for
non-superusers: the change list (and so search, date drill-down, actions and facets),
every object URL (an object of another organization is a 404, exactly like one that
does not exist), the choices of every foreign key and many-to-many field (select boxes,
autocomplete and raw-id inputs), the list filters' choices, and the saved object itself
(a form that would put it in another organization, or in none, is refused with a
message on the field).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.filters import AllValuesFieldListFilter, RelatedOnlyFieldListFilter
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q, QuerySet
from django.http import Http404

from tenancy.models import Membership, OrganizationMember
from tenancy.selectors import organizations_administered

_REQUEST_CACHE = "_river_admin_organization_ids"
_OBJECT_CACHE = "_river_admin_objects_in_scope"

NOT_YOURS = "Choose one that belongs to an organization you administer."
NOT_YOURS_FORM = "This belongs to an organization you do not administer. Only a superuser can save it."


def admin_organization_ids(request) -> frozenset[int]:
    """Ids of the organizations the signed-in staff user administers (once per request)."""
    cached = getattr(request, _REQUEST_CACHE, None)
    if cached is None:
        user = request.user
        if user.is_active and user.is_staff:
            cached = frozenset(organizations_administered(user=user).values_list("pk", flat=True))
        else:
            cached = frozenset()
        setattr(request, _REQUEST_CACHE, cached)
    return cached


def users_of_organizations(organization_ids) -> QuerySet:
    """People who belong to one of the organizations, directly or through a workspace."""
    return get_user_model().objects.filter(
        Q(pk__in=OrganizationMember.objects.filter(organization__in=organization_ids).values("user"))
        | Q(pk__in=Membership.objects.filter(workspace__organization__in=organization_ids).values("user"))
    )


def organization_id_of(obj, path: str) -> int | None:
    """The organization id reached from ``obj`` (saved or not) along ``path``."""
    if path == "pk":
        return obj.pk
    *heads, last = path.split("__")
    for name in heads:
        obj = getattr(obj, name, None)  # an unset relation raises a subclass of AttributeError
        if obj is None:
            return None
    try:
        field = obj._meta.get_field(last)
    except FieldDoesNotExist:
        return None
    return getattr(obj, field.attname, None)


class ScopedAllValuesFieldListFilter(AllValuesFieldListFilter):
    """Django takes the values of a field behind a relation from every row of the related
    table; this one takes them from the rows the admin shows."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        self.lookup_choices = (
            model_admin.get_queryset(request).distinct().order_by(field_path).values_list(field_path, flat=True)
        )


def _related_queryset_scoped(admin_site, request, model, queryset: QuerySet) -> QuerySet:
    """The choices a staff user may pick for a relation to ``model``: what its own admin
    would show them, people of their organizations, or nothing (fail closed)."""
    if model is get_user_model():
        return queryset.filter(pk__in=users_of_organizations(admin_organization_ids(request)).values("pk"))
    related_admin = admin_site._registry.get(model)
    if isinstance(related_admin, TenantScopedAdminMixin):
        return related_admin.scope_queryset(request, queryset)
    return queryset.none()


class ScopedChoicesMixin:
    """Foreign-key and many-to-many choices limited to the staff user's organizations
    (select boxes, raw-id inputs: the posted id is checked against the same queryset)."""

    def get_field_queryset(self, db, db_field, request):
        queryset = super().get_field_queryset(db, db_field, request)  # type: ignore[misc]
        if request.user.is_superuser:
            return queryset
        model = db_field.remote_field.model
        if queryset is None:
            queryset = model._default_manager.using(db).all()
        return _related_queryset_scoped(self.admin_site, request, model, queryset)  # type: ignore[attr-defined]


class TenantScopedAdminMixin(ScopedChoicesMixin):
    """See the module docstring. ``tenant_path`` is the lookup from the model to its
    organization (``"workspace__organization"``), ``"pk"`` for the organization itself,
    or None for objects only superusers manage."""

    tenant_path: str | None = None

    # --- which rows ------------------------------------------------------------------
    def superuser_only(self) -> bool:
        return self.tenant_path is None

    def scope_queryset(self, request, queryset: QuerySet) -> QuerySet:
        """``queryset`` narrowed to the staff user's organizations (not for superusers)."""
        if self.tenant_path is None:
            return queryset.none()
        return queryset.filter(**{f"{self.tenant_path}__in": admin_organization_ids(request)})

    def get_queryset(self, request):
        queryset = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return queryset
        return self.scope_queryset(request, queryset)

    def _in_scope(self, request, obj) -> bool:
        if request.user.is_superuser:
            return True
        if self.superuser_only() or not admin_organization_ids(request):
            return False
        if obj is None or obj.pk is None:
            return True
        cache = getattr(request, _OBJECT_CACHE, None)
        if cache is None:
            cache = {}
            setattr(request, _OBJECT_CACHE, cache)
        key = (obj._meta.label, obj.pk)
        if key not in cache:
            cache[key] = self.get_queryset(request).filter(pk=obj.pk).exists()
        return cache[key]

    # --- permissions: Django's model permissions, and then the organization ----------
    def has_module_permission(self, request):
        return self._in_scope(request, None) and super().has_module_permission(request)  # type: ignore[misc]

    def has_view_permission(self, request, obj=None):
        return self._in_scope(request, obj) and super().has_view_permission(request, obj)  # type: ignore[misc]

    def has_change_permission(self, request, obj=None):
        return self._in_scope(request, obj) and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request, obj=None):
        return self._in_scope(request, obj) and super().has_delete_permission(request, obj)  # type: ignore[misc]

    def has_add_permission(self, request, *args):
        return self._in_scope(request, None) and super().has_add_permission(request, *args)  # type: ignore[misc]

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        # Django redirects to the index with "… doesn't exist"; River answers 404, the
        # same for another organization's object as for a missing one.
        raise Http404(f"No {opts.verbose_name} with this id.")

    # --- filters and forms ------------------------------------------------------------
    def get_list_filter(self, request):
        filters = super().get_list_filter(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return filters
        return [self._filter_scoped(spec) for spec in filters]

    def _filter_scoped(self, spec):
        if not isinstance(spec, str):
            return spec
        field = get_fields_from_path(self.model, spec)[-1]  # type: ignore[attr-defined]
        if field.is_relation:
            return (spec, RelatedOnlyFieldListFilter)
        if "__" in spec and not field.choices and field.get_internal_type() != "BooleanField":
            return (spec, ScopedAllValuesFieldListFilter)
        return spec

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        if request.user.is_superuser or self.tenant_path in (None, "pk"):
            return form
        return _tenant_checked(form, path=self.tenant_path, organization_ids=admin_organization_ids(request))


def _tenant_checked(form_class, *, path: str, organization_ids: frozenset[int]):
    """``form_class`` refusing an object that would land outside ``organization_ids``.

    The relation choices are already scoped; this also catches an empty optional
    organization (which would make the object global) and relations set elsewhere.
    """
    head = path.split("__", 1)[0]

    class TenantCheckedForm(form_class):
        def _post_clean(self):
            super()._post_clean()
            if head in self.errors:
                return  # the field already says what is wrong
            if organization_id_of(self.instance, path) in organization_ids:
                return
            if head in self.fields:
                self.add_error(head, NOT_YOURS)
            else:
                self.add_error(None, NOT_YOURS_FORM)

    TenantCheckedForm.__name__ = form_class.__name__
    return TenantCheckedForm


class TenantScopedAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """A ModelAdmin scoped by organization; set ``tenant_path``."""


class ViewAndDeleteTenantScopedAdmin(TenantScopedAdmin):
    """Scoped; rows are written by River (a run, a service), never added or edited
    here, but may be deleted here (with Django's delete permission)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ViewOnlyTenantScopedAdmin(ViewAndDeleteTenantScopedAdmin):
    """Scoped, and only viewed here: rows are added, changed and deleted by River's
    services (which check who may and audit it), never in the admin."""

    def has_delete_permission(self, request, obj=None):
        return False


class ScopedInlineMixin(ScopedChoicesMixin):
    """For inlines: their rows hang off a parent the admin already scoped; their own
    relation choices are scoped here."""
