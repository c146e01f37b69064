"""The model registry: models, versions, version labels, traffic splits."""
