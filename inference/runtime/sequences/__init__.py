"""Sequence batching (Triton's ``sequence_batching``): its configuration read
and checked (:mod:`.config`), the policy and a request's sequence parameters
(:mod:`.policy`), and the scheduler of one model version (:mod:`.batcher`)."""
