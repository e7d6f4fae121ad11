"""TLS and node-authentication material: a consortium's CA, certificates and node keys.

``fedpriv coordinator init`` makes the consortium's CA and the SuperLink's
certificate (365 days), ``fedpriv node keygen`` a node's key pair, the loopback
launcher throwaway ones (30 days); a consortium may use its own PKI instead.
Everything is generated with ``cryptography``:

* a CA (EC P-384, self-signed) and a SuperLink server certificate signed by it,
  valid for ``localhost``, ``127.0.0.1``, ``::1`` and any extra host names
  (the coordinator's ``--host`` names);
* one authentication key pair per SuperNode, EC P-384, in OpenSSH format: the
  private key for ``flower-supernode --auth-supernode-private-key``, the public
  key for ``flwr supernode register`` (Flower 1.42 keeps the allow-list in the
  SuperLink's state and accepts only NIST EC keys).

Private keys are written with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedpriv import logs

log = logs.get_logger(__name__)

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the SuperLink's TLS material."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class NodeKey:
    """Paths of one SuperNode's authentication key pair."""

    private: Path
    public: Path


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def write_tls(out: Path, *, extra_hosts: tuple[str, ...] = (), days: int = 30) -> TlsFiles:
    """A fresh CA and a server certificate for the loopback hosts plus ``extra_hosts``
    (a coordinator's: ``days=365``, its host names)."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days))
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedpriv throwaway CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
        .add_extension(_san((*LOOPBACK_HOSTS, *extra_hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    # The CA key is not written: nothing else is ever signed with it.
    return TlsFiles(
        ca_cert=_write(out / "ca.crt", ca_cert.public_bytes(pem)),
        server_cert=_write(out / "server.pem", cert.public_bytes(pem)),
        server_key=_write(out / "server.key", key.private_bytes(pem, pkcs8, plain), private=True),
    )


def write_node_key(out: Path, name: str, *, stem: str | None = None) -> NodeKey:
    """A SuperNode authentication key pair ``<stem>`` / ``<stem>.pub`` (OpenSSH, EC P-384;
    ``stem`` defaults to ``name``, the public key's comment). An existing private key is
    never overwritten (``FileExistsError``)."""
    stem = stem or name
    out.mkdir(parents=True, exist_ok=True)
    if (out / stem).exists():
        raise FileExistsError(f"{out / stem} exists: a node key is never overwritten")
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return NodeKey(
        private=_write(out / stem, private, private=True),
        public=_write(out / f"{stem}.pub", public + f" {name}\n".encode()),
    )


def fingerprint(public_key: str) -> str:
    """``SHA256:<base64>`` of an OpenSSH public key line, as ``ssh-keygen -l`` prints it:
    what a node operator reads to the coordinator to confirm the key arrived intact."""
    import base64
    import hashlib

    fields = public_key.split()
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except (IndexError, ValueError):
        raise ValueError("not an OpenSSH public key line ('<type> <base64> [comment]')") from None
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def check_public_key(text: str) -> str:
    """The OpenSSH public key line of ``text`` if it is a NIST EC key Flower accepts,
    else ``ValueError`` saying what it is."""
    line = text.strip()
    try:
        key = serialization.load_ssh_public_key(line.encode())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an OpenSSH public key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError(f"a {type(key).__name__}: Flower accepts NIST EC keys only")
    return line


def main(argv: list[str] | None = None) -> int:
    """``python -m fedpriv.server.tls OUT --nodes K [--host NAME]``: a CA, a server
    certificate and K node keys in one folder (tests and demos)."""
    import argparse

    ap = argparse.ArgumentParser(description="throwaway TLS CA, server certificate, node keys")
    ap.add_argument("out", type=Path)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--host", action="append", default=[], help="extra server host name")
    args = ap.parse_args(argv)
    logs.configure(tag="tls")
    if args.nodes < 1:
        raise SystemExit(f"--nodes must be >= 1; got {args.nodes}")
    tls = write_tls(args.out, extra_hosts=tuple(args.host))
    keys = [write_node_key(args.out / "keys", f"node-{i}") for i in range(args.nodes)]
    log.info("wrote %s, %s and %d node keys", tls.ca_cert, tls.server_cert, len(keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
