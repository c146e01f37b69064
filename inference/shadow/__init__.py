"""Shadow traffic: a copy of a share of a model's requests run on a shadow
version after the live answer, off the request's path (:mod:`.traffic`),
its outputs compared with the live ones (:mod:`.comparison`), the
comparisons kept per minute (:mod:`.rollups`, :mod:`.rollups_db`)."""
