"""What the serving side tells operators: Triton's statistics
(:mod:`.statistics`, :mod:`.statistics_local`, :mod:`.statistics_db`), the
charts' per-minute rollups (:mod:`.rollups`, :mod:`.rollups_db`), Prometheus
metrics and the request log line (:mod:`.metrics`), traces
(:mod:`.tracing`), payload logging (:mod:`.payload_log`) and outage log lines
(:mod:`.outage`)."""
