"""Inference statistics shared by every machine (Triton's statistics
extension). Each process adds its counts here in batches, to its machine's
rows (see inference/observability/statistics.py); durations are in nanoseconds."""

from django.db import models


class ModelStatisticsRow(models.Model):
    """Cumulative counts of one machine for one (model, version) since the registry was created."""

    machine = models.CharField(max_length=32, default="")  # "": counted before machines were told apart
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
    cache_hit_count = models.BigIntegerField(default=0)
    cache_hit_ns = models.BigIntegerField(default=0)
    cache_miss_count = models.BigIntegerField(default=0)
    cache_miss_ns = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["machine", "model_name", "version"], name="unique_stats_machine_version")
        ]


class BatchStatisticsRow(models.Model):
    """Compute counts and times of one machine per batch size for one (model, version)."""

    machine = models.CharField(max_length=32, default="")
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
            models.UniqueConstraint(
                fields=["machine", "model_name", "version", "batch_size"], name="unique_machine_batch_stats"
            )
        ]


class MinuteRollupRow(models.Model):
    """What one server process answered in one minute for one (model, version,
    transport), for the charts (inference/observability/rollups.py). Histograms are JSON
    objects {bucket index: count} over inference.observability.rollups.bucket's fixed buckets
    (queue and compute times of answered requests, ns) and {batch size:
    executions}; the process rewrites its row until the minute closes."""

    minute = models.BigIntegerField()  # whole minutes since the Unix epoch (UTC)
    model_name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()
    transport = models.CharField(max_length=16)  # rest, tfserving, grpc, other
    writer = models.CharField(max_length=48)  # machine id and pid of the process
    successes = models.BigIntegerField(default=0)  # requests answered
    errors = models.BigIntegerField(default=0)
    inferences = models.BigIntegerField(default=0)
    executions = models.BigIntegerField(default=0)
    queue_ns = models.BigIntegerField(default=0)
    compute_ns = models.BigIntegerField(default=0)
    queue_histogram = models.JSONField(default=dict)
    compute_histogram = models.JSONField(default=dict)
    batch_sizes = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["model_name", "minute", "version", "transport", "writer"], name="unique_minute_rollup"
            )
        ]
        indexes = [models.Index(fields=["minute"], name="minute_rollup_age")]


class ShadowRollupRow(models.Model):
    """What one server process's shadow traffic of one model compared in one
    minute on one shadow version (inference/shadow/rollups.py): copies run,
    failed and not run, and per output name the comparison's sums as JSON
    ({output: OutputComparison.as_dict()}, inference/shadow/comparison.py);
    the process rewrites its row until the minute closes."""

    minute = models.BigIntegerField()  # whole minutes since the Unix epoch (UTC)
    model_name = models.CharField(max_length=128)
    version = models.PositiveIntegerField()  # the shadow version
    writer = models.CharField(max_length=48)  # machine id and pid of the process
    requests = models.BigIntegerField(default=0)  # copies run (compared or failed)
    errors = models.BigIntegerField(default=0)
    dropped = models.BigIntegerField(default=0)  # the shadow queue was full
    busy = models.BigIntegerField(default=0)  # a version had requests waiting for its seats
    outputs = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model_name", "version", "minute", "writer"], name="unique_shadow_rollup")
        ]
        indexes = [models.Index(fields=["minute"], name="shadow_rollup_age")]
