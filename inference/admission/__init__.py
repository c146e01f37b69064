"""Who may run an inference, and when: the caller's token (:mod:`.auth`),
its rate limits and in-flight caps (:mod:`.ratelimit`), its team's fair share
of a model version (:mod:`.fair_share`), and the admission the data plane
takes (:mod:`.caller`)."""
