"""The peers bench/ compares with, each run from its own virtualenv under
bench/work/peers/ (built from PyPI once, then reused):

* ``triton.py``: Triton Inference Server (the ``tritonserver`` binary of the
  ``nvidia-pytriton`` wheel) serving a Python-backend model
  (``triton_model.py``) that runs ONNX Runtime;
* ``mlserver.py``: MLServer with a small custom runtime
  (``mlserver_runtime.py``) around ``onnxruntime.InferenceSession``.

``venvs.py`` builds and caches the virtualenvs.
"""
