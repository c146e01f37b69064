"""What the two HTTP adapters (V2 REST in ``inference/rest``, TF Serving in
``inference/tfserving``) share: reading bodies, JSON and error responses,
the base views. Neither adapter imports the other."""
