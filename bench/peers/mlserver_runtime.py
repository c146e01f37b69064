"""MLServer custom runtime around onnxruntime.InferenceSession (copied next
to the model settings by bench/peers/mlserver.py; ``parameters.uri`` is the
model.onnx path)."""

import os

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntime(MLModel):
    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("ORT_INTRA_OP_THREADS", "1"))
        options.inter_op_num_threads = int(os.environ.get("ORT_INTER_OP_THREADS", "1"))
        self.session = ort.InferenceSession(
            self.settings.parameters.uri, sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.output_names = [o.name for o in self.session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feed = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        results = self.session.run(self.output_names, feed)
        outputs = [NumpyCodec.encode_output(name, value) for name, value in zip(self.output_names, results)]
        return InferenceResponse(model_name=self.name, outputs=outputs)
