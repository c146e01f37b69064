"""``manage.py build_demo_repository DIR``: the demo model repository.

Trains scikit-learn classifiers on the datasets bundled with scikit-learn
(iris: LogisticRegression, 4 features, 3 classes; digits: RandomForest,
64 features = 8x8 pixels 0..16, 10 classes) and exports them with skl2onnx
(``zipmap=False``: outputs ``label`` INT64 [N] and ``probabilities`` FP32
[N, classes]). Adds ``sentence_embedding``: text in (BYTES [1]), a unit
embedding out (FP32 [1, 32]), with ONNX Runtime Extensions' tokenizer inside
the model (:mod:`models_store.management.demo_text`). Writes Triton-style
``DIR/<model>/1/model.onnx`` plus a ``config.pbtxt``. Existing models are
left as they are unless --force.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from models_store.management import demo_text

CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 64
version_policy: {{ latest: {{ num_versions: 1 }} }}
input [
  {{ name: "input", data_type: TYPE_FP32, dims: [ {features} ] }}
]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
"""


def build_models() -> dict[str, tuple[bytes, int]]:
    """{name: (ONNX bytes, feature count)} for the demo classifiers."""
    import numpy as np
    from skl2onnx import to_onnx
    from sklearn.datasets import load_digits, load_iris
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    out = {}
    for name, loader, estimator in (
        ("iris", load_iris, LogisticRegression(max_iter=1000)),
        ("digits", load_digits, RandomForestClassifier(n_estimators=30, max_depth=12, random_state=0)),
    ):
        data = loader()
        features = data.data.astype(np.float32)
        estimator.fit(features, data.target)
        onnx_model = to_onnx(
            estimator,
            features[:1],
            options={id(estimator): {"zipmap": False}},
            target_opset={"": 17, "ai.onnx.ml": 3},
        )
        onnx_model.graph.input[0].name = "input"
        for node in onnx_model.graph.node:
            node.input[:] = ["input" if i == "X" else i for i in node.input]
        onnx_model.doc_string = f"scikit-learn {type(estimator).__name__} trained on the {name} dataset"
        out[name] = (onnx_model.SerializeToString(), features.shape[1])
    return out


class Command(BaseCommand):
    help = "Build the demo model repository (iris and digits classifiers, a sentence encoder) in DIR."

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path)
        parser.add_argument("--force", action="store_true", help="rebuild models that exist")

    def handle(self, *args, directory: Path, force: bool, **options):
        try:
            models = build_models()
        except ImportError as exc:
            raise CommandError(f"{exc}: install requirements-dev.txt (scikit-learn, skl2onnx)") from None
        written = {name: (data, CONFIG.format(name=name, features=width)) for name, (data, width) in models.items()}
        written["sentence_embedding"] = (demo_text.build_sentence_encoder(), demo_text.CONFIG)
        for name, (payload, config) in written.items():
            target = directory / name / "1" / "model.onnx"
            if target.exists() and not force:
                self.stdout.write(f"kept    {target}")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(payload)
            (directory / name / "config.pbtxt").write_text(config)
            self.stdout.write(f"wrote   {target}")
