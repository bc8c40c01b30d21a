"""Triggers take the shape issue 14 gives them (workspace, type, prompt template, typed
config, run-as identity) and every firing attempt is logged.

Triggers had no API before this, so the rows that exist are test data made in the admin:
the old table is dropped with them (DeleteModel) and created anew, which applies the
same on a database with rows as on an empty one."""

import django.db.models.deletion
import django.utils.timezone
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('triggers', '0001_initial'),
        ('agents', '0001_initial'),
        ('executions', '0005_provider_call_window'),
        ('tenancy', '0003_service_principal_api_rate_limit'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.DeleteModel(name='Trigger'),
        migrations.CreateModel(
            name='Trigger',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=80)),
                ('type', models.CharField(choices=[('manual', 'Manual'), ('scheduled', 'Schedule'), ('event', 'Event'), ('api', 'Api'), ('threshold', 'Threshold'), ('workflow', 'Workflow')], max_length=20)),
                ('prompt', models.TextField(blank=True)),
                ('config', models.JSONField(default=dict)),
                ('enabled', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='triggers', to='agents.agent')),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('run_as', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='trigger', to='tenancy.serviceprincipal')),
                ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='triggers', to='tenancy.workspace')),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.CreateModel(
            name='TriggerFiring',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('fired_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('source', models.CharField(max_length=100)),
                ('outcome', models.CharField(choices=[('started', 'Run started'), ('skipped', 'Skipped')], max_length=10)),
                ('reason', models.CharField(blank=True, choices=[('filtered', 'Condition did not match'), ('rate_limited', 'Rate limited'), ('cooldown', 'In cooldown'), ('agent_inactive', 'Agent not active'), ('duplicate', 'Duplicate delivery'), ('schema_invalid', 'Payload failed the input schema'), ('cycle', 'Pipeline cycle'), ('depth', 'Pipeline too deep'), ('disabled', 'Trigger disabled'), ('error', 'Error')], max_length=20)),
                ('detail', models.CharField(blank=True, max_length=500)),
                ('dedupe_key', models.CharField(blank=True, max_length=200, null=True)),
                ('payload_bytes', models.PositiveIntegerField(default=0)),
                ('execution', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='executions.execution')),
                ('trigger', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='firings', to='triggers.trigger')),
            ],
            options={
                'ordering': ['-fired_at', '-id'],
            },
        ),
        migrations.AddIndex(
            model_name='trigger',
            index=models.Index(fields=['workspace', 'type', 'enabled'], name='trigger_ws_type_enabled'),
        ),
        migrations.AddConstraint(
            model_name='trigger',
            constraint=models.UniqueConstraint(fields=('workspace', 'name'), name='uniq_trigger_name_per_workspace'),
        ),
        migrations.AddIndex(
            model_name='triggerfiring',
            index=models.Index(fields=['trigger', '-fired_at', '-id'], name='firing_trigger_latest'),
        ),
        migrations.AddConstraint(
            model_name='triggerfiring',
            constraint=models.UniqueConstraint(fields=('trigger', 'dedupe_key'), name='uniq_firing_dedupe_key'),
        ),
        migrations.AddConstraint(
            model_name='triggerfiring',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('outcome', 'started'), ('reason', '')), models.Q(('outcome', 'skipped'), models.Q(('reason', ''), _negated=True)), _connector='OR'), name='firing_reason_iff_skipped'),
        ),
    ]
