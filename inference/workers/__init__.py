"""Worker mode (``INFERENCE_EXECUTOR=workers``): front ends run inferences on
pinned inference workers over persistent connections.

- :mod:`.client`: the front end's side (the executor, its connections and pools);
- :mod:`.server`: the worker's side (``manage.py runworker``: its runtime, socket
  server, admission, drain and heartbeat);
- what both ends share: who may use the link (:mod:`.link`), its frames
  (:mod:`.frames`) and typed messages (:mod:`.messages`), and devices, queues
  and placement (:mod:`.placement`)."""
