"""Instance groups (inference/serving/instance_groups.py): one set of defaults for
every reader, the writers' checks, and the form Triton's configuration
reports (core NormalizeInstanceGroup: KIND_AUTO resolved, groups named)."""

import pytest

from inference.serving.instance_groups import (
    InstanceGroupError,
    describe,
    read,
    total_instances,
    triton_form,
    validate,
)


def test_defaults_are_the_same_for_every_reader():
    (group,) = read([{}])
    assert (group.name, group.kind, group.count, group.gpus) == ("", "KIND_AUTO", 1, ())
    assert read([{"kind": "", "count": 0, "gpus": None}]) == read([{}]) and read(None) == ()
    assert validate([{}]) == [{"name": "", "kind": "KIND_AUTO", "count": 1, "gpus": []}]
    assert total_instances(()) == 1 and total_instances([{}]) == 1
    assert total_instances([{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}, {"kind": "KIND_CPU"}]) == 5
    assert describe(()) == describe([{}]) == "any device"
    assert describe([{"kind": "KIND_GPU", "gpus": [1]}, {"kind": "KIND_CPU"}]) == "cuda:1; cpu"


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([{"kind": "KIND_TPU"}], "instance group 0: kind must be one of KIND_AUTO, KIND_GPU, KIND_CPU"),
        ([{}, {"count": 0}], "instance group 1: count must be a positive integer"),
        ([{"count": True}], "count must be a positive integer"),
        ([{"kind": "KIND_GPU", "gpus": [-1]}], "gpus must be a list of GPU numbers"),
        ([{"kind": "KIND_CPU", "gpus": [0]}], "gpus are only for KIND_GPU"),
    ],
)
def test_writers_refuse(groups, message):
    with pytest.raises(InstanceGroupError, match=message):
        validate(groups)


def test_triton_form_on_a_cpu_server():
    assert triton_form("m", ()) == [{"name": "m", "kind": "KIND_CPU", "count": 1, "gpus": []}]
    assert triton_form("m", [{"count": 3}, {"name": "g", "kind": "KIND_GPU", "gpus": [1]}]) == [
        {"name": "m_0", "kind": "KIND_CPU", "count": 3, "gpus": []},
        {"name": "g", "kind": "KIND_GPU", "count": 1, "gpus": [1]},
    ]


def test_triton_form_on_a_gpu_server():
    assert triton_form("m", (), gpus=[1, 0]) == [{"name": "m", "kind": "KIND_GPU", "count": 1, "gpus": [0, 1]}]
    groups = [{"kind": "KIND_GPU"}, {"kind": "KIND_CPU", "count": 2}, {"kind": "KIND_MODEL"}]
    assert triton_form("m", groups, gpus=[0]) == [
        {"name": "m_0", "kind": "KIND_GPU", "count": 1, "gpus": [0]},
        {"name": "m_1", "kind": "KIND_CPU", "count": 2, "gpus": []},
        {"name": "m_2", "kind": "KIND_MODEL", "count": 1, "gpus": []},
    ]
