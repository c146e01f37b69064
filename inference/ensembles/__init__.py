"""Ensembles: the graph of model versions (:mod:`.plan`), its run through the
data plane (:mod:`.runs`), and consecutive steps sent to one worker as one
exchange (:mod:`.segments`)."""
