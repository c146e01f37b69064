"""Worker mode, the front end's side: :class:`~inference.workers.client.executor.RemoteExecutor`
runs a request on a worker (:mod:`.executor`), over pooled connections
(:mod:`.pool`, :mod:`.connections`); an ensemble's segment (:mod:`.segments`),
the worker holding a sequence (:mod:`.sequence_routes`), and what an answer
frame means (:mod:`.answers`)."""
