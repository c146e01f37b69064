"""The model store's layout rules, read from its source (no database):

- a model version's ``state`` (and its ``held``) is written in one module,
  the state machine (``models_store/registry/services/states.py``);
- services take keyword arguments only (Django-Styleguide);
- every module of a resource package but its services and selectors is
  protected in ``.importlinter`` (so other packages cannot reach it);
- packages stay small (at most 15 modules of their own) and so do modules
  (at most 500 lines).
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "models_store"
STATE_MACHINE = STORE / "registry" / "services" / "states.py"
RESOURCE_PACKAGES = ("registry", "accounts", "intake", "webhooks", "rollouts")
#: Query methods that write the keyword arguments they get (``state=...``).
WRITING_CALLS = {"create", "update", "update_or_create", "get_or_create"}


def product_modules(root: Path = STORE) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "migrations" not in p.parts)


def _root(node: ast.expr) -> str:
    """The name an attribute or call chain starts from (``WebhookDelivery`` of ``WebhookDelivery.objects.filter()``)."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else ""


def state_writes(source: str, field: str = "state") -> list[tuple[int, ast.expr | None, str]]:
    """(line, the value written or None when unknown, the name of the object
    written) of every write of an attribute or field called ``field`` in
    ``source``: ``x.state = v`` (also in tuple assignments),
    ``setattr(x, "state", v)``, ``state=v`` given to a query's
    create/update/update_or_create/get_or_create (or in its ``defaults``),
    and ``"state"`` in ``update_fields``."""
    writes = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                else:
                    pairs = [(target, node.value)]
                for element, value in pairs:
                    if isinstance(element, ast.Attribute) and element.attr == field:
                        writes.append((node.lineno, value, _root(element.value)))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) == 3:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value == field:
                    writes.append((node.lineno, node.args[2], _root(node.args[0])))
            if isinstance(func, ast.Attribute) and func.attr in WRITING_CALLS:
                for keyword in node.keywords:
                    if keyword.arg == field:
                        writes.append((node.lineno, keyword.value, _root(func.value)))
                    if keyword.arg == "defaults" and isinstance(keyword.value, ast.Dict):
                        for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                            if isinstance(key, ast.Constant) and key.value == field:
                                writes.append((node.lineno, value, _root(func.value)))
            for keyword in node.keywords:
                if keyword.arg == "update_fields" and isinstance(keyword.value, ast.List | ast.Tuple):
                    if any(isinstance(e, ast.Constant) and e.value == field for e in keyword.value.elts):
                        owner = _root(func.value) if isinstance(func, ast.Attribute) else ""
                        writes.append((node.lineno, None, owner))
    return writes


def _is_a_deliverys(value: ast.expr | None, owner: str) -> bool:
    """A webhook delivery's own state: a ``Delivery`` (WebhookDelivery.State)
    value, or a ``delivery`` saved with its fields."""
    delivery_state = isinstance(value, ast.Attribute) and _root(value) == "Delivery"
    return delivery_state or (value is None and owner == "delivery")


def test_the_scanner_finds_every_kind_of_state_write():
    source = """
version.state = "READY"
version.state, version.reason = State.READY, ""
setattr(version, "state", "FAILED")
ModelVersion.objects.filter(pk=1).update(state="UPLOADED")
ModelVersion.objects.create(model=m, state="READY")
VersionLabel.objects.update_or_create(model=m, defaults={"state": "READY"})
version.save(update_fields=["state", "reason"])
version.status = "READY"  # another field: not a state write
"""
    assert [line for line, _value, _owner in state_writes(source)] == [2, 3, 4, 5, 6, 7, 8]


def test_a_versions_state_is_written_by_the_state_machine_only():
    elsewhere = []
    for path in product_modules():
        if path == STATE_MACHINE:
            continue
        for line, value, owner in state_writes(path.read_text(encoding="utf-8")):
            if path.parent.name == "webhooks" and _is_a_deliverys(value, owner):
                continue  # a webhook delivery's own state field
            elsewhere.append(f"{path.relative_to(ROOT)}:{line}")
    assert elsewhere == [], "a version's state may only be written in models_store/registry/services/states.py"
    assert len(state_writes(STATE_MACHINE.read_text(encoding="utf-8"))) >= 3  # create, transition, the reaper


def test_a_versions_hold_is_written_by_the_state_machine_only():
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in product_modules()
        if path != STATE_MACHINE
        for line, _value, _owner in state_writes(path.read_text(encoding="utf-8"), field="held")
    ]
    assert elsewhere == [], "a version's hold may only be written in models_store/registry/services/states.py"
    assert len(state_writes(STATE_MACHINE.read_text(encoding="utf-8"), field="held")) >= 3  # hold, transition, promote


def _service_modules() -> list[Path]:
    return [p for p in product_modules() if p.stem == "services" or p.parent.name == "services"]


def test_services_take_keyword_arguments_only():
    assert len(_service_modules()) >= 7
    positional = []
    for path in _service_modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                if node.args.posonlyargs or node.args.args or node.args.vararg:
                    positional.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert positional == []


def _protected_modules() -> dict[str, set[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    protected: dict[str, set[str]] = {}
    for section in config.sections():
        if config[section].get("type") == "protected":
            for module in config[section]["protected_modules"].split():
                package = module.split(".")[1]
                protected.setdefault(package, set()).add(module)
    return protected


def test_the_import_contracts_protect_every_module_of_a_resource_package():
    protected = _protected_modules()
    unprotected = []
    for package in RESOURCE_PACKAGES:
        for child in sorted((STORE / package).iterdir()):
            name = child.stem if child.suffix == ".py" else child.name
            if name in ("__init__", "services", "selectors", "__pycache__"):
                continue
            if child.suffix == ".py" or (child / "__init__.py").exists():
                module = f"models_store.{package}.{name}"
                if module not in protected.get(package, set()):
                    unprotected.append(module)
    assert unprotected == [], "list these in their package's protected contract in .importlinter"


def test_packages_and_modules_stay_small():
    roots = [STORE, ROOT / "hosting"]
    crowded, long = [], []
    for root in roots:
        for package in sorted({p.parent for p in product_modules(root)}):
            own = [p for p in package.glob("*.py") if p.name != "__init__.py"]
            if len(own) > 15:
                crowded.append(f"{package.relative_to(ROOT)}: {len(own)} modules")
        for path in product_modules(root):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > 500:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert crowded == [] and long == []
