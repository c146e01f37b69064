"""A model with ONNX Runtime Extensions' tokenizer inside (the demo
``sentence_embedding``: text in, embedding out), called with Triton's clients
(HTTP and gRPC, in process and in worker mode). The expected embedding is
computed here: the sentence tokenized by hand (BERT's basic tokenizer and
WordPiece over the model's vocabulary), then the encoder in numpy from the
weights read out of the served ONNX file."""

from __future__ import annotations

import unicodedata

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import numpy_helper

from models_store.management import demo_text

pytestmark = pytest.mark.interop

MODEL = "sentence_embedding"
SENTENCES = [
    "Hello, World! The model's teams are serving requests.",
    "Café teams deployed walking dogs?",
    "xyzzy cats",
    " ".join(["cat"] * 100),  # longer than the 64 tokens the model keeps
    "",
]


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _basic_tokens(text: str) -> list[str]:
    """BERT's basic tokenizer: lower case, accents stripped, split on white space and punctuation."""
    text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    tokens, word = [], ""
    for char in text:
        if char.isspace() or _is_punctuation(char):
            if word:
                tokens.append(word)
            word = ""
            if not char.isspace():
                tokens.append(char)
        else:
            word += char
    return tokens + ([word] if word else [])


def _wordpiece(word: str, vocabulary: dict[str, int]) -> list[int]:
    """Greedy longest match first; a word with no piece in the vocabulary is [UNK]. (Where a
    word's first pieces match and a later one does not, BERT's reference tokenizer makes the
    whole word [UNK] while ONNX Runtime Extensions keeps the pieces: the sentences avoid it.)"""
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocabulary:
                pieces.append(vocabulary[piece])
                start = end
                break
        else:
            return [vocabulary["[UNK]"]]
    return pieces


def token_ids(text: str) -> list[int]:
    vocabulary = {token: i for i, token in enumerate(demo_text.VOCABULARY)}
    ids = [i for word in _basic_tokens(text) for i in _wordpiece(word, vocabulary)]
    ids = ids[: demo_text.MAX_TOKENS - 2]
    return [vocabulary["[CLS]"], *ids, vocabulary["[SEP]"]]


def expected_embedding(text: str, weights: dict) -> np.ndarray:
    ids = np.array(token_ids(text))
    x = weights["token_embedding"][ids] + weights["position_embedding"][: len(ids)]
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + 1e-5) * weights["norm_scale"] + weights["norm_bias"]
    encoded = normed + np.tanh(normed @ weights["ff_in"] + weights["ff_in_bias"]) @ weights["ff_out"]
    pooled = encoded.mean(0, keepdims=True)
    return pooled / np.linalg.norm(pooled)


@pytest.fixture(scope="module")
def served_weights(model_server) -> dict:
    """The initializers of the ONNX file the server serves (read from its repository)."""
    model = onnx.load(str(model_server.repository / MODEL / "1" / "model.onnx"))
    return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}


def test_the_hand_tokenizer_agrees_with_the_vocabulary():
    vocabulary = list(demo_text.VOCABULARY)
    words = [vocabulary[i] for i in token_ids(SENTENCES[1])]
    assert words == ["[CLS]", "[UNK]", "teams", "deploy", "##ed", "walk", "##ing", "dog", "##s", "?", "[SEP]"]
    assert len(token_ids(SENTENCES[3])) == demo_text.MAX_TOKENS


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_text_in_embedding_out_equals_the_encoder_on_hand_made_tokens(model_server, served_weights, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = model_server.http_url if protocol == "http" else model_server.grpc_url
    client = module.InferenceServerClient(url)
    for sentence in SENTENCES:
        text = module.InferInput("text", [1], "BYTES")
        text.set_data_from_numpy(np.array([sentence.encode()], dtype=object))
        got = client.infer(MODEL, [text]).as_numpy("embedding")
        assert got.shape == (1, demo_text.WIDTH) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected_embedding(sentence, served_weights), rtol=1e-4, atol=1e-5)


def test_metadata_and_config_name_the_text_and_the_extensions(model_server):
    client = httpclient.InferenceServerClient(model_server.http_url)
    metadata = client.get_model_metadata(MODEL)
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [1]}]
    assert metadata["outputs"] == [{"name": "embedding", "datatype": "FP32", "shape": [1, demo_text.WIDTH]}]
    config = client.get_model_config(MODEL)
    assert config["parameters"] == {"onnxruntime_extensions": {"string_value": "true"}}


def test_text_that_is_not_utf8_is_a_clear_400(model_server):
    client = httpclient.InferenceServerClient(model_server.http_url)
    text = httpclient.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"\xff\xfe"], dtype=object))
    with pytest.raises(Exception) as refused:
        client.infer(MODEL, [text])
    assert "UTF-8" in str(refused.value) or "utf-8" in str(refused.value), refused.value
