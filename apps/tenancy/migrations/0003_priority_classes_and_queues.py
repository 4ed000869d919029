"""Priority classes (the platform's defaults seeded) and tenant queues. Each tenant's former GPU quota becomes
its queue on every cluster, nominal GPUs of any type ("*"), neither lent nor borrowed: existing tenants keep
exactly the bound they had until staff change it."""

import django.core.validators
import django.db.models.deletion
import re
from django.db import migrations, models

from apps.tenancy.choices import ANY_GPU_TYPE, DEFAULT_PRIORITY_CLASSES


def quota_into_queues(apps, schema_editor):
    PriorityClass = apps.get_model("tenancy", "PriorityClass")
    Tenant, TenantQueue = apps.get_model("tenancy", "Tenant"), apps.get_model("tenancy", "TenantQueue")
    for name, value, description in DEFAULT_PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(name=name, defaults={"value": value, "description": description})
    TenantQueue.objects.bulk_create([
        TenantQueue(tenant_id=pk, cluster=None, nominal={ANY_GPU_TYPE: quota}, borrowing_limit={ANY_GPU_TYPE: 0},
                    lending_limit={ANY_GPU_TYPE: 0})
        for pk, quota in Tenant.objects.values_list("pk", "gpu_quota")
    ])


def queues_into_quota(apps, schema_editor):
    Tenant, TenantQueue = apps.get_model("tenancy", "Tenant"), apps.get_model("tenancy", "TenantQueue")
    for queue in TenantQueue.objects.filter(cluster__isnull=True):
        Tenant.objects.filter(pk=queue.tenant_id).update(gpu_quota=int(queue.nominal.get(ANY_GPU_TYPE, 0)))


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0008_cluster_kueue_installed'),
        ('tenancy', '0002_token_expiry_required'),
    ]

    operations = [
        migrations.CreateModel(
            name='PriorityClass',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('updated', models.DateTimeField(auto_now=True)),
                ('name', models.CharField(max_length=63, unique=True, validators=[django.core.validators.RegexValidator(re.compile('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'), code='invalid_dns1123', message="Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters.")])),
                ('value', models.IntegerField(help_text="Higher runs first and may preempt lower; at most one billion (Kubernetes' user range).", validators=[django.core.validators.MinValueValidator(-2147483648), django.core.validators.MaxValueValidator(1000000000)])),
                ('preemption_policy', models.CharField(choices=[('LowerPriority', 'Preempt lower priority'), ('Never', 'Never preempt')], default='LowerPriority', help_text="Whether this class's workloads preempt lower-priority ones of their own tenant's queue.", max_length=16)),
                ('description', models.TextField(blank=True)),
            ],
            options={
                'verbose_name_plural': 'priority classes',
                'ordering': ['-value', 'name'],
            },
        ),
        migrations.AddField(
            model_name='tenant',
            name='default_priority_class',
            field=models.ForeignKey(blank=True, help_text='The class of services that name none; empty: standard.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='defaulted_tenants', to='tenancy.priorityclass'),
        ),
        migrations.AddField(
            model_name='tenant',
            name='max_priority_class',
            field=models.ForeignKey(blank=True, help_text="The highest class the tenant's services may run at; empty: any class.", null=True, on_delete=django.db.models.deletion.PROTECT, related_name='capped_tenants', to='tenancy.priorityclass'),
        ),
        migrations.CreateModel(
            name='TenantQueue',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('updated', models.DateTimeField(auto_now=True)),
                ('cohort', models.CharField(blank=True, help_text="Queues of one cohort lend each other unused quota. Empty: the cluster's own cohort.", max_length=63, validators=[django.core.validators.RegexValidator(re.compile('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'), code='invalid_dns1123', message="Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters.")])),
                ('nominal', models.JSONField(blank=True, default=dict, help_text='GPUs per GPU type, e.g. {"l4-24gb": 6}; "*" counts every type without its own entry.')),
                ('borrowing_limit', models.JSONField(blank=True, default=dict, help_text='Most GPUs per type borrowed beyond the nominal quota; a type left out (or null) borrows whatever the cohort lends.')),
                ('lending_limit', models.JSONField(blank=True, default=dict, help_text='Most unused GPUs per type lent to the cohort; a type left out (or null) lends all of them.')),
                ('weight', models.DecimalField(decimal_places=2, default=1, help_text="Fair sharing: borrowers get the cohort's spare GPUs in proportion to their weights.", max_digits=6, validators=[django.core.validators.MinValueValidator(0)])),
                ('cluster', models.ForeignKey(blank=True, help_text="Empty: the tenant's queue on every cluster that has no queue of its own for it.", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='tenant_queues', to='clusters.cluster')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='queues', to='tenancy.tenant')),
            ],
            options={
                'ordering': ['tenant__slug', 'cluster__name'],
                'constraints': [
                    models.UniqueConstraint(fields=('tenant', 'cluster'), name='tenancy_queue_unique_cluster', violation_error_code='unique', violation_error_message='The tenant already has a queue on this cluster (or, without a cluster, on every cluster).'),
                    models.UniqueConstraint(condition=models.Q(('cluster__isnull', True)), fields=('tenant',), name='tenancy_queue_unique_default', violation_error_code='unique', violation_error_message='The tenant already has a queue on this cluster (or, without a cluster, on every cluster).'),
                ],
            },
        ),
        migrations.RunPython(quota_into_queues, queues_into_quota),
        migrations.RemoveField(
            model_name='tenant',
            name='gpu_quota',
        ),
    ]
