import pytest

from inference.version_policy import default_version, served_versions


@pytest.mark.parametrize(
    "policy,ready,latest,specific,expected",
    [
        ("latest", [1, 2, 3], 1, (), [3]),
        ("latest", [3, 1, 2], 2, (), [3, 2]),
        ("latest", [1], 5, (), [1]),
        ("all", [2, 1, 7], 1, (), [7, 2, 1]),
        ("specific", [1, 2, 3], 1, (1, 3, 9), [3, 1]),
        ("specific", [1, 2], 1, (5,), []),
        ("latest", [], 1, (), []),
    ],
)
def test_served_versions(policy, ready, latest, specific, expected):
    assert served_versions(policy, ready, latest, specific) == expected
    assert default_version(policy, ready, latest, specific) == (expected[0] if expected else None)


def test_bad_policies():
    with pytest.raises(ValueError):
        served_versions("newest", [1])
    with pytest.raises(ValueError):
        served_versions("latest", [1], latest=0)
