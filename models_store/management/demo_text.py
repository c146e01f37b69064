"""The demo sentence encoder: text in (BYTES), embedding out (FP32), with its
tokenizer inside the model.

A small BERT-style encoder built in code, with seeded random weights (it
shows the plumbing, not semantics): ONNX Runtime Extensions' ``BertTokenizer``
(domain ``ai.onnx.contrib``; lower-casing, accent stripping, punctuation
split, WordPiece over :data:`VOCABULARY`, ``[CLS] ... [SEP]``, at most
:data:`MAX_TOKENS` tokens), then token + position embeddings, layer
normalization, one residual feed-forward block (tanh), mean pooling over the
tokens and L2 normalization.

Signature: input ``text`` BYTES [1] (one UTF-8 sentence); output
``embedding`` FP32 [1, :data:`WIDTH`] (unit length). Its config.pbtxt asks for
the extensions' operators with the ``onnxruntime_extensions`` parameter.
"""

from __future__ import annotations

#: Special tokens first (BertTokenizer requires all five), then whole words, then WordPiece suffixes.
_WORDS = (
    "a an the this that these those i you he she it we they my your our their is are was were be been "
    "am do does did have has had will would can could should may might must not no yes and or but if "
    "then so because of in on at to from by with for about as into over under after before up down out "
    "model models version versions serve serving server request requests answer answers team teams "
    "cat dog bird fish mat sat run runs walk talk say hello world good bad fast slow new old big small "
    "data text word words sentence embedding vector number time day night light dark red blue green "
    "deploy test train learn read write call send make take give find know think see look want use"
)
VOCABULARY = (
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?", "'"),
    *_WORDS.split(),
    *("##s", "##es", "##ed", "##ing", "##ly", "##er", "##est", "##n't"),
)
WIDTH = 32
MAX_TOKENS = 64
SEED = 20261125

CONFIG = f"""name: "sentence_embedding"
platform: "onnxruntime_onnx"
max_batch_size: 0
version_policy: {{ latest: {{ num_versions: 1 }} }}
input [ {{ name: "text", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "embedding", data_type: TYPE_FP32, dims: [ 1, {WIDTH} ] }} ]
parameters {{ key: "onnxruntime_extensions" value: {{ string_value: "true" }} }}
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
"""


def weights() -> dict:
    """The encoder's weights by initializer name (float32 numpy arrays)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    width = WIDTH

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return {
        "token_embedding": normal(len(VOCABULARY), width),
        "position_embedding": normal(MAX_TOKENS, width, scale=0.1),
        "norm_scale": (1.0 + normal(width, scale=0.1)).astype(np.float32),
        "norm_bias": normal(width, scale=0.1),
        "ff_in": normal(width, 2 * width, scale=width**-0.5),
        "ff_in_bias": normal(2 * width, scale=0.1),
        "ff_out": normal(2 * width, width, scale=(2 * width) ** -0.5),
    }


def build_sentence_encoder() -> bytes:
    """The encoder as ONNX bytes (opset 18 + ``ai.onnx.contrib`` 1, IR 9)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    n = helper.make_node
    nodes = [
        n(
            "BertTokenizer",
            ["text"],
            ["input_ids", "token_type_ids", "attention_mask"],
            domain="ai.onnx.contrib",
            vocab_file="\n".join(VOCABULARY),
            do_lower_case=1,
            strip_accents=1,
            max_length=MAX_TOKENS,
        ),
        n("Gather", ["token_embedding", "input_ids"], ["tokens"]),
        n("Shape", ["input_ids"], ["count"]),
        n("Slice", ["position_embedding", "zero", "count", "zero"], ["positions"]),
        n("Add", ["tokens", "positions"], ["embedded"]),
        n("LayerNormalization", ["embedded", "norm_scale", "norm_bias"], ["normed"], axis=-1, epsilon=1e-5),
        n("MatMul", ["normed", "ff_in"], ["hidden_mm"]),
        n("Add", ["hidden_mm", "ff_in_bias"], ["hidden_pre"]),
        n("Tanh", ["hidden_pre"], ["hidden"]),
        n("MatMul", ["hidden", "ff_out"], ["ff"]),
        n("Add", ["normed", "ff"], ["encoded"]),
        n("ReduceMean", ["encoded", "zero"], ["pooled"], keepdims=1),
        n("LpNormalization", ["pooled"], ["embedding"], axis=-1, p=2),
    ]
    initializers = [numpy_helper.from_array(array, name) for name, array in weights().items()]
    initializers.append(numpy_helper.from_array(np.array([0], np.int64), "zero"))
    graph = helper.make_graph(
        nodes,
        "sentence_encoder",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, WIDTH])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.contrib", 1)],
        ir_version=9,
        producer_name="modelhost demo",
    )
    model.doc_string = "a demo BERT-style sentence encoder (random weights) with ONNX Runtime Extensions' tokenizer"
    return model.SerializeToString()
