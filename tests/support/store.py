"""Helpers for model store tests: staged uploads, crafted ONNX files, people."""

from __future__ import annotations

import hashlib

from onnx import TensorProto, helper

from models_store import accounts, storage
from models_store.uploads import StagedFile

PASSWORD = "Correct-horse-battery-9"  # test accounts only


def stage(payload: bytes, filename: str = "model.onnx") -> StagedFile:
    """What StagingUploadHandler leaves after receiving ``payload``."""
    directory = storage.new_staging_dir("upload-")
    path = directory / storage.MODEL_FILENAME
    path.write_bytes(payload)
    return StagedFile(path, hashlib.sha256(payload).hexdigest(), len(payload), filename, "application/octet-stream")


def external_data_model(location: str) -> bytes:
    """A valid-looking ONNX model whose initializer ``w`` lives in external
    data at ``location`` (e.g. ``../../etc/passwd``)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0, 0.0, 0.0, 0.0])
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def failing_model() -> bytes:
    """Parses as ONNX but fails the checker: a node of an unknown operator."""
    graph = helper.make_graph(
        [helper.make_node("NoSuchOperator", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def person(username: str, *teams: str, superuser: bool = False):
    """A user with PASSWORD in ``teams`` (created when missing)."""
    return accounts.user_create(username, PASSWORD, teams=list(teams), superuser=superuser)
