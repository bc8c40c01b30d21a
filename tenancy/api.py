"""REST endpoints of this app (mounted under /api/v1/ by riverapp.urls)."""

from django.urls import path
from rest_framework import serializers
from rest_framework.generics import ListAPIView

from tenancy.models import Workspace
from tenancy.selectors import workspaces_for_user


class WorkspaceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Workspace
        fields = ["id", "organization", "name", "slug", "description", "status", "time_zone", "created_at"]


class WorkspaceList(ListAPIView):
    serializer_class = WorkspaceSerializer

    def get_queryset(self):
        return workspaces_for_user(user=self.request.user).order_by("id")


urlpatterns = [path("workspaces/", WorkspaceList.as_view(), name="workspace-list")]
