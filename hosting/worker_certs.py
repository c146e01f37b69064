"""The worker link's certificates (``manage.py make_worker_certs``): a
deployment CA, a worker certificate (serverAuth, the DNS name front ends
check) and a front-end certificate (clientAuth), ECDSA P-256, made with the
``cryptography`` package."""

from __future__ import annotations

import base64
import datetime
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key) -> None:
    data = key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _name(common_name: str) -> x509.Name:
    organization = x509.NameAttribute(NameOID.ORGANIZATION_NAME, "modelhost")
    return x509.Name([organization, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _usage(sign_certificates: bool) -> x509.KeyUsage:
    """A CA's key signs certificates (and CRLs); a leaf's signs handshakes."""
    return x509.KeyUsage(
        digital_signature=not sign_certificates, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=sign_certificates, crl_sign=sign_certificates,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _builder(subject: x509.Name, issuer: x509.Name, public_key, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def make_ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA that may sign leaf certificates only."""
    key = _key()
    name = _name("modelhost worker link CA")
    cert = (
        _builder(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign_certificates=True), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_leaf(
    ca: x509.Certificate, ca_key, common_name: str, usage, dns_names: list[str], days: int
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for one role (``usage``: serverAuth for workers,
    clientAuth for front ends) signed by ``ca``."""
    key = _key()
    builder = (
        _builder(_name(common_name), ca.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _secret(name: str, ca: bytes, cert: bytes, key: bytes) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return (
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: modelhost\n"
        f"type: kubernetes.io/tls\ndata:\n  ca.crt: {b64(ca)}\n  tls.crt: {b64(cert)}\n  tls.key: {b64(key)}\n"
    )


#: Each role's certificate: its common name, extended key usage, whether it carries the server name.
ROLES = {
    "worker": ("modelhost worker", ExtendedKeyUsageOID.SERVER_AUTH, True),
    "frontend": ("modelhost front end", ExtendedKeyUsageOID.CLIENT_AUTH, False),
}


class CertificateError(ValueError):
    """The directory holds half a CA."""


def write_set(out: Path, server_name: str, days: int = 825, ca_days: int = 3650) -> tuple[bool, dict]:
    """Write ca.crt/ca.key (unless ``out`` holds a CA, which is reused) and
    <role>.crt/<role>.key for each of :data:`ROLES` into ``out`` (keys mode
    0600). Returns whether a CA was made and {role: (cert PEM, key PEM)}."""
    out.mkdir(parents=True, exist_ok=True)
    ca_cert_path, ca_key_path = out / "ca.crt", out / "ca.key"
    if ca_cert_path.exists() != ca_key_path.exists():
        raise CertificateError(f"{out} holds one of ca.crt and ca.key but not the other")
    made = not ca_cert_path.exists()
    if made:
        ca, ca_key = make_ca(ca_days)
        ca_cert_path.write_bytes(ca.public_bytes(_PEM))
        _write_key(ca_key_path, ca_key)
    else:
        ca = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    pems = {}
    for role, (common_name, usage, named) in ROLES.items():
        cert, key = make_leaf(ca, ca_key, common_name, usage, [server_name] if named else [], days)
        (out / f"{role}.crt").write_bytes(cert.public_bytes(_PEM))
        _write_key(out / f"{role}.key", key)
        pems[role] = ((out / f"{role}.crt").read_bytes(), (out / f"{role}.key").read_bytes())
    return made, pems


def kubernetes_secrets(out: Path, pems: dict) -> str:
    """The Secrets ``modelhost-worker-tls`` and ``modelhost-frontend-tls``
    (kubernetes.io/tls with ca.crt) as YAML."""
    ca_pem = (out / "ca.crt").read_bytes()
    return (
        _secret("modelhost-worker-tls", ca_pem, *pems["worker"])
        + "---\n"
        + _secret("modelhost-frontend-tls", ca_pem, *pems["frontend"])
    )


def environment(out: Path, role: str) -> dict[str, str]:
    """The WORKER_TLS_* settings of a process of ``role`` (worker or frontend)."""
    return {
        "WORKER_TLS_CA": str(out / "ca.crt"),
        "WORKER_TLS_CERT": str(out / f"{role}.crt"),
        "WORKER_TLS_KEY": str(out / f"{role}.key"),
    }
