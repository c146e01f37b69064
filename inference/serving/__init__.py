"""The serving registry: the snapshot of every model and model version the
serving side reads (:mod:`.registry`, :mod:`.snapshot`), which versions serve
(:mod:`.state`), how the processes of a machine learn of a change
(:mod:`.changes`), instance groups (:mod:`.instance_groups`) and the model
configuration extension's answer (:mod:`.model_config`)."""
