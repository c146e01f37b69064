"""The server processes' plumbing: ``serve``'s and ``rungrpc``'s supervision
of their children (supervisor), where each process's threads run
(affinity), granian's log configuration (granian_logging) and the metrics
port (metrics_port)."""
