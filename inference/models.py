"""Inference statistics shared by every server process (Triton's statistics
extension). Each process adds its counts here in batches (see
inference/statistics.py); durations are in nanoseconds."""

from django.db import models


class ModelStatisticsRow(models.Model):
    """Cumulative counts for one (model, version) since the registry was created."""

    model_name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    inference_count = models.BigIntegerField(default=0)
    execution_count = models.BigIntegerField(default=0)
    last_inference_ms = models.BigIntegerField(default=0)
    success_count = models.BigIntegerField(default=0)
    success_ns = models.BigIntegerField(default=0)
    fail_count = models.BigIntegerField(default=0)
    fail_ns = models.BigIntegerField(default=0)
    queue_count = models.BigIntegerField(default=0)
    queue_ns = models.BigIntegerField(default=0)
    compute_input_count = models.BigIntegerField(default=0)
    compute_input_ns = models.BigIntegerField(default=0)
    compute_infer_count = models.BigIntegerField(default=0)
    compute_infer_ns = models.BigIntegerField(default=0)
    compute_output_count = models.BigIntegerField(default=0)
    compute_output_ns = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model_name", "version"], name="unique_stats_version")]


class BatchStatisticsRow(models.Model):
    """Compute counts and times per batch size for one (model, version)."""

    model_name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    batch_size = models.PositiveIntegerField()
    compute_input_count = models.BigIntegerField(default=0)
    compute_input_ns = models.BigIntegerField(default=0)
    compute_infer_count = models.BigIntegerField(default=0)
    compute_infer_ns = models.BigIntegerField(default=0)
    compute_output_count = models.BigIntegerField(default=0)
    compute_output_ns = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model_name", "version", "batch_size"], name="unique_batch_stats")
        ]
