"""Certificates made at test time with the `openssl` command: a CA of the
test's own, and leaves it signs for 127.0.0.1 and localhost, a server's
(serverAuth) or a client's (clientAuth).

What each needs, so that rustls (the server) and OpenSSL (this client,
with Python 3.13's strict checks too) accept them: the CA a CommonName,
basicConstraints CA:TRUE and keyCertSign; a leaf a CommonName, both names
as subjectAltName, its extended key usage, and the key identifiers.
"""

import shutil
import ssl
import subprocess
from pathlib import Path
from typing import List, NamedTuple

import pytest

_LEAF_EXTENSIONS = """\
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = {usage}
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""

_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


def openssl(*args: str) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        pytest.fail("the TLS tests make their certificates with `openssl`: install it")
    done = subprocess.run([tool, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


class Pair(NamedTuple):
    """A certificate's PEM file and its key's."""

    cert: str
    key: str

    def serve_flags(self) -> List[str]:
        """`holdline serve`'s flags to serve TLS with this pair."""
        return ["--tls-cert", self.cert, "--tls-key", self.key]


class Ca:
    """A certificate authority of one test, its files in `folder`."""

    def __init__(self, folder: Path, name: str = "ca") -> None:
        self.folder = folder
        self.name = name
        self.cert = str(folder / f"{name}.pem")
        self.key = str(folder / f"{name}.key")
        self._serial = 0
        openssl(
            "req",
            "-x509",
            *_NEW_KEY,
            "-keyout",
            self.key,
            "-out",
            self.cert,
            "-days",
            "2",
            "-subj",
            f"/CN=holdline test {name}",
            "-addext",
            "basicConstraints = critical, CA:TRUE",
            "-addext",
            "keyUsage = critical, keyCertSign, cRLSign",
        )

    def leaf(self, client: bool = False) -> Pair:
        """A new leaf for 127.0.0.1 and localhost: a server's, or a client's."""
        self._serial += 1
        base = self.folder / f"{self.name}-{'client' if client else 'server'}-{self._serial}"
        extensions = base.with_suffix(".ext")
        usage = "clientAuth" if client else "serverAuth"
        extensions.write_text(_LEAF_EXTENSIONS.format(usage=usage), encoding="ascii")
        key, request, cert = (str(base.with_suffix(s)) for s in (".key", ".csr", ".pem"))
        openssl("req", *_NEW_KEY, "-keyout", key, "-out", request, "-subj", "/CN=localhost")
        openssl(
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            self.cert,
            "-CAkey",
            self.key,
            "-set_serial",
            str(self._serial),
            "-days",
            "2",
            "-extfile",
            str(extensions),
            "-out",
            cert,
        )
        return Pair(cert, key)

    def trusting(self, client: bool = False) -> ssl.SSLContext:
        """A client context that trusts this CA only; with a client leaf of
        this CA's when `client`."""
        context = ssl.create_default_context(cafile=self.cert)
        if client:
            pair = self.leaf(client=True)
            context.load_cert_chain(pair.cert, pair.key)
        return context
