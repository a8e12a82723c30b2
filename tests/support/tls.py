"""A throwaway certificate authority for the TLS tests: a CA, server and client certificates as PEM files.

Made with the ``cryptography`` package (already a dependency of the environment) so no test needs
the openssl CLI: Postgres, Apache Kafka (``ssl.keystore.type=PEM``), Python's ``ssl`` and
librdkafka all read PEM. Keys are EC P-256: generating them takes microseconds, where RSA would add
seconds to every test on a loaded 2-core machine. ``jks_trust_store`` and ``jks_key_store`` make
the same certificates into JKS files (the JDK's ``keytool``), the Java clients' default store type.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Issued:
    """One certificate's files: ``cert`` (PEM), ``key`` (PEM, PKCS#8, encrypted if a password was
    given) and ``chain`` (key followed by certificate: what a PEM keystore of Kafka expects)."""

    cert: Path
    key: Path
    chain: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


class CertificateAuthority:
    """A self-signed CA under ``directory``; ``ca_cert`` is the file clients and servers trust."""

    def __init__(self, directory: Path, name: str = "pgbridge test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_cert = directory / "ca.crt"
        self.ca_cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, common_name: str, *, hosts: tuple[str, ...] = (), client: bool = False,
              password: str | None = None) -> Issued:
        """A certificate for ``common_name``; ``hosts`` (names or IP addresses) become its SANs (a
        server certificate), ``client`` adds the client-authentication usage."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH] if client and not hosts
                else [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(host) for host in hosts]),
                                            critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = _key_pem(key, password)
        issued = Issued(self.directory / f"{stem}.crt", self.directory / f"{stem}.key",
                        self.directory / f"{stem}.chain.pem")
        issued.cert.write_bytes(cert_pem)
        issued.key.write_bytes(key_pem)
        issued.key.chmod(0o600)
        issued.chain.write_bytes(key_pem + cert_pem)
        issued.chain.chmod(0o600)
        return issued


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _keytool(*args: str) -> None:
    keytool = shutil.which("keytool")
    assert keytool is not None, "keytool (the JDK's) is not on PATH: make deps installs the JDK"
    done = subprocess.run([keytool, *args, "-noprompt"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"keytool {args[0]} failed: {done.stdout}{done.stderr}"


def jks_trust_store(ca_cert: Path, path: Path, password: str) -> Path:
    """A JKS trust store at ``path`` holding ``ca_cert`` as a trusted certificate entry."""
    _keytool("-importcert", "-alias", "ca", "-file", str(ca_cert), "-keystore", str(path), "-storetype", "JKS",
             "-storepass", password)
    return path


def jks_key_store(issued: Issued, pem_password: str | None, path: Path, password: str, key_password: str) -> Path:
    """A JKS key store at ``path``: ``issued``'s key (under ``key_password``) and certificate, by way
    of a PKCS#12 file that keytool converts."""
    key = serialization.load_pem_private_key(issued.key.read_bytes(), pem_password.encode() if pem_password else None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert = x509.load_pem_x509_certificate(issued.cert.read_bytes())
    p12 = path.with_suffix(".p12")
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"client", key, cert, None, serialization.BestAvailableEncryption(password.encode())))
    try:
        _keytool("-importkeystore", "-srckeystore", str(p12), "-srcstoretype", "PKCS12", "-srcstorepass", password,
                 "-destkeystore", str(path), "-deststoretype", "JKS", "-deststorepass", password,
                 "-destkeypass", key_password)
    finally:
        p12.unlink()
    return path


__all__ = ["CertificateAuthority", "Issued", "jks_key_store", "jks_trust_store"]
