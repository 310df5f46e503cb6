"""The run's own certificate authority and a server certificate per test host, made fresh at
fixture time (elliptic-curve keys: milliseconds each)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

# cryptography is always installed with stockade: mcp depends on pyjwt[crypto]
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Authority:
    """The run's own certificate authority: clients trust ``cert_path`` (PEM) and nothing else."""

    cert_path: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def issue(self, name: str, addresses: list[str], folder: Path) -> tuple[Path, Path]:
        """A server certificate for DNS ``name`` and the IP ``addresses``, with its key:
        ``(cert.pem, key.pem)`` in ``folder``."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName(name)]
        names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        cert = (
            _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key)
            .issuer_name(self.cert.subject)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_path, key_path = folder / "cert.pem", folder / "key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_pem_key(key))
        return cert_path, key_path


def make_authority(folder: Path, label: str) -> Authority:
    """A fresh CA, its certificate written to ``folder/ca.pem`` (its key never leaves memory)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Stockade test CA {label}")])
    cert = (
        _builder(subject, key)
        .issuer_name(subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path = folder / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(path, cert, key)


def _builder(subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))  # a clock a little behind is fine
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
