"""The management API of the registry (DRF), one module per resource
(:mod:`.models`, :mod:`.versions`, :mod:`.routes`; :mod:`.base`: what they share): models, model versions,
uploads, version labels, traffic splits, version policies and the audit log.

Authentication and the one error shape are the management API's
(:mod:`models_store.web.api`). Statuses: 400 malformed (the request does not
match the schema, or an upload that is not an ONNX model with exactly its data files);
401; 403 (not your team's model); 404 (no such model, version, label or
team; with INFERENCE_REQUIRE_TOKEN also a model the caller may not see);
409 (refused by the registry's current state: the same bytes twice, a
version policy that would serve nothing, a label on a version that is not
READY, retiring a labelled version, deleting what a traffic split uses,
...); 413 (above MAX_UPLOAD_BYTES); 415; 422 (the upload failed validation:
the error and the FAILED version, which is kept); 503 with ``Retry-After``
(the database, the storage backend or the broker is down: nothing was
changed, try again); 507 (no space left on the server for an upload).

What a caller sees: every model while INFERENCE_REQUIRE_TOKEN is off (as
the web UI shows every signed-in user); with it on, only the models of the
caller's teams (the token's team for a team token), as the data plane:
other models answer 404 on every route, and are missing from the list;
operators see every model (:mod:`models_store.accounts.selectors`).
Each view calls one action (:mod:`models_store.registry.actions`; an
upload: :func:`models_store.intake.services.upload`).
"""
