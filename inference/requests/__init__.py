"""One inference request inside the data plane: its checks against the
version's signature (:mod:`.checks`), the checked request on its way
(:class:`~inference.requests.jobs.Job`), and Triton's classification of its
outputs (:mod:`.classification`)."""
