"""Worker mode, the worker's side (``manage.py runworker``): its runtime (the
model runner behind the link, :mod:`.runtime`) and ensemble segments
(:mod:`.segments`), the socket server (:mod:`.socket_server`) and who may hold
its connections (:mod:`.admission`), its heartbeat (:mod:`.heartbeat`) and how
it drains (:mod:`.drain`)."""
