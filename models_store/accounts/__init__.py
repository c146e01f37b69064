"""Teams, people, API tokens and who may do what (see the modules)."""
