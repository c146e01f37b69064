"""Triton's system shared-memory extension: the regions clients register
(:mod:`.regions`), reading and writing their objects (:mod:`.region_io`), and
the tensors a request names in them (:mod:`.region_tensors`)."""
