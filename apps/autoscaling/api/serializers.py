"""The shape of a stored scaling decision in the API."""

from rest_framework import serializers

from apps.autoscaling.models import ScalingDecision


class ScalingDecisionSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScalingDecision
        fields = ["id", "service", "pool", "revision", "time", "current_replicas", "desired_replicas",
                  "raw_recommendation", "stabilized", "limited", "metrics", "signals", "rule", "action", "reason",
                  "cold_start_s", "generation"]
        read_only_fields = fields
