"""Triton Python-backend model running ONNX Runtime (copied to
<triton repository>/<model>/1/model.py by bench/peers/triton.py).

The backend stub embeds the machine's Python, which does not see the
virtualenv: the import of onnxruntime fails, or, with a global numpy on the
machine, that numpy is imported instead of the virtualenv's and the model
answers 200 with empty outputs. So the virtualenv's site-packages
(BENCH_SITE_PACKAGES) goes first on sys.path before anything imports numpy,
and initialize() refuses to load when numpy or onnxruntime come from
elsewhere."""

import os
import sys

SITE_PACKAGES = os.environ.get("BENCH_SITE_PACKAGES", "")
if SITE_PACKAGES and sys.path[:1] != [SITE_PACKAGES]:
    sys.path.insert(0, SITE_PACKAGES)

import json  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


class TritonPythonModel:
    def initialize(self, args):
        for module in (np, ort):
            if SITE_PACKAGES and not module.__file__.startswith(SITE_PACKAGES):
                raise RuntimeError(f"{module.__name__} imported from {module.__file__}, not {SITE_PACKAGES}")
        config = json.loads(args["model_config"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ORT_INTRA_OP_THREADS", "1"))
        options.inter_op_num_threads = int(os.environ.get("ORT_INTER_OP_THREADS", "1"))
        path = config["parameters"]["onnx_path"]["string_value"]
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        responses = []
        for request in requests:
            feed = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            results = self.session.run(self.outputs, feed)
            tensors = [pb_utils.Tensor(name, value) for name, value in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
