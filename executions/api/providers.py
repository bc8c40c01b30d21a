"""LLM provider endpoints (see executions.api): organization admins only.

The API key is write-only: responses carry ``has_api_key`` and never the key.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response

from executions import providers
from executions.models import LLMProvider
from rivercore import limits


class LLMProviderSerializer(serializers.ModelSerializer):
    has_api_key = serializers.SerializerMethodField()
    # Not a "uri" in the schema: empty means the provider's default endpoint.
    base_url = serializers.CharField(read_only=True, help_text="Empty for the provider's default endpoint.")
    models = serializers.DictField(
        source="tier_models", child=serializers.CharField(), read_only=True, help_text="Tier -> model id."
    )

    class Meta:
        model = LLMProvider
        fields = [
            "id",
            "organization",
            "provider_name",
            "has_api_key",
            "base_url",
            "models",
            "priority",
            "max_retries",
            "timeout_seconds",
            "rate_limit_rpm",
            "enabled",
            "created_at",
        ]
        read_only_fields = fields

    def get_has_api_key(self, provider: LLMProvider) -> bool:
        return bool(provider.api_key_encrypted)


class LLMProviderUpdateSerializer(serializers.Serializer):
    provider_name = serializers.CharField(max_length=50, required=False)
    api_key = serializers.CharField(
        max_length=limits.SECRET,
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        help_text="Write-only. An empty string removes the stored key.",
    )
    base_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    models = serializers.DictField(
        child=serializers.CharField(max_length=limits.MODEL_ID), required=False, help_text="Tier -> model id."
    )
    priority = serializers.IntegerField(
        min_value=0, max_value=limits.PROVIDER_PRIORITY, required=False, help_text="Lower is preferred."
    )
    max_retries = serializers.IntegerField(min_value=0, max_value=10, required=False)
    timeout_seconds = serializers.IntegerField(min_value=1, max_value=3600, required=False)
    rate_limit_rpm = serializers.IntegerField(min_value=1, max_value=limits.RATE_LIMIT_RPM, required=False)
    enabled = serializers.BooleanField(required=False)

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        if unknown:
            raise serializers.ValidationError({key: ["Unknown or read-only field."] for key in unknown})
        return attrs


class LLMProviderCreateSerializer(LLMProviderUpdateSerializer):
    organization = serializers.IntegerField()
    provider_name = serializers.CharField(max_length=50)


class LLMProviderList(ListAPIView):
    serializer_class = LLMProviderSerializer

    def get_queryset(self):
        return providers.llm_providers_for_admin(user=self.request.user)

    @extend_schema(request=LLMProviderCreateSerializer, responses={201: LLMProviderSerializer})
    def post(self, request):
        data = LLMProviderCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        organization = providers.organization_get_for_provider_admin(
            user=request.user, organization_id=values.pop("organization")
        )
        provider = providers.llm_provider_create(organization=organization, **values)
        return Response(LLMProviderSerializer(provider).data, status=status.HTTP_201_CREATED)


class LLMProviderDetail(GenericAPIView):
    serializer_class = LLMProviderSerializer

    def get(self, request, provider_id: int):
        provider = providers.llm_provider_get_for_admin(user=request.user, provider_id=provider_id)
        return Response(LLMProviderSerializer(provider).data)

    @extend_schema(request=LLMProviderUpdateSerializer, responses=LLMProviderSerializer)
    def patch(self, request, provider_id: int):
        provider = providers.llm_provider_get_for_admin(user=request.user, provider_id=provider_id)
        data = LLMProviderUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        provider = providers.llm_provider_update(provider=provider, **data.validated_data)
        return Response(LLMProviderSerializer(provider).data)

    @extend_schema(responses={204: None})
    def delete(self, request, provider_id: int):
        provider = providers.llm_provider_get_for_admin(user=request.user, provider_id=provider_id)
        providers.llm_provider_delete(provider=provider)
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns = [
    path("llm-providers/", LLMProviderList.as_view(), name="llm-provider-list"),
    path("llm-providers/<int:provider_id>/", LLMProviderDetail.as_view(), name="llm-provider-detail"),
]
