"""Serializers of rollouts and their decisions (read-only: the controller and the actions write them)."""

from __future__ import annotations

from rest_framework import serializers

from apps.rollouts.models import Rollout, RolloutDecision


class RolloutDecisionSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_repr", help_text="Who acted; rollout:controller for the analysis.")

    class Meta:
        model = RolloutDecision
        fields = ["id", "time", "step", "weight", "window_start", "window_end", "verdict", "action", "reason",
                  "metrics", "canary_requests", "stable_requests", "actor"]
        read_only_fields = fields


class RolloutSerializer(serializers.ModelSerializer):
    weight = serializers.IntegerField(read_only=True, help_text="The canary's share of the requests now, in %.")
    decisions = RolloutDecisionSerializer(many=True, read_only=True, help_text="Newest first.")

    class Meta:
        model = Rollout
        fields = ["id", "from_revision", "to_revision", "phase", "step", "weight", "strategy", "step_started_at",
                  "extensions", "reason", "created", "finished_at", "decisions"]
        read_only_fields = fields
