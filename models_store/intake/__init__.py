"""How a model version comes in: uploads, validation, repository imports, ensembles."""
