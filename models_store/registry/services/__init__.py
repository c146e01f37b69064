"""Writes of the model registry, one module per resource; each takes keyword arguments only.

- :mod:`.models`: registered models (create, configuration, version policy,
  instance groups, payload logging, load and unload, delete);
- :mod:`.versions`: retire, restore and delete a version, and the ensembles that forbid it;
- :mod:`.routes`: version labels and the traffic split (promote, rollback);
- :mod:`.annotations`: descriptions and tags of models and versions;
- :mod:`.shadow`: shadow traffic (the version that gets copies of a share of the requests);
- :mod:`.states`: the version state machine, the one writer of a version's
  ``state`` (creation, validation's changes, retire, restore, delete, the reaper).
"""
