"""model_trust: the model clients trust what httpx would, read from a hashed folder only when that is the same."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from myao2.config import AgentConfig, AgentsConfig
from myao2.infrastructure.llm.agents import ModelClients, model_errors
from myao2.infrastructure.llm.trust import default_trust_from_folder, model_trust

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _authority(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate authority: its certificate and key."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", key, "-out", cert)
    return cert, key


def _server_certificate(folder: Path, authority: tuple[Path, Path]) -> tuple[Path, Path]:
    """A certificate for localhost signed by `authority`: the certificate and its key."""
    cert, key, request, extensions = (folder / f"server.{suffix}" for suffix in ("pem", "key", "csr", "ext"))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
             "-keyout", key, "-out", request)
    extensions.write_text("subjectAltName=DNS:localhost\n", encoding="ascii")
    _openssl("x509", "-req", "-in", request, "-CA", authority[0], "-CAkey", authority[1], "-CAcreateserial",
             "-days", "2", "-extfile", extensions, "-out", cert)
    return cert, key


def _hashed_folder(folder: Path, *certificates: Path) -> Path:
    folder.mkdir()
    for certificate in certificates:
        shutil.copy(certificate, folder / certificate.name)
    _openssl("rehash", folder)
    return folder


def _paths(bundle: Path, folder: Path) -> ssl.DefaultVerifyPaths:
    return ssl.DefaultVerifyPaths(str(bundle), str(folder), "SSL_CERT_FILE", str(bundle), "SSL_CERT_DIR", str(folder))


class _TlsServer:
    """Accepts TLS connections on 127.0.0.1 with one certificate, until closed."""

    def __init__(self, cert: Path, key: Path) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed
                return
            try:
                with self._context.wrap_socket(connection, server_side=True):
                    pass
            except (OSError, ssl.SSLError):  # the client refused the certificate
                pass

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A trusted authority (in a bundle and a hashed folder), a server it signed, and a server nobody trusts."""
    trusted = _authority(tmp_path, "trusted")
    signed = _TlsServer(*_server_certificate(tmp_path, trusted))
    stranger = _TlsServer(*_authority(tmp_path, "stranger"))
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(b"# the system's list\n" + trusted[0].read_bytes())
    folder = _hashed_folder(tmp_path / "certs", trusted[0])
    yield {"tmp": tmp_path, "bundle": bundle, "folder": folder, "signed": signed, "stranger": stranger}
    signed.close()
    stranger.close()


def _handshake(context: ssl.SSLContext, port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost"):
            pass


def test_a_folder_holding_the_whole_bundle_is_read_alone_and_trusts_what_the_bundle_trusts(store) -> None:
    context = model_trust(environ={}, paths=_paths(store["bundle"], store["folder"]))
    assert context is not None
    assert context.get_ca_certs() == []  # nothing parsed up front: the folder is read at the handshake
    _handshake(context, store["signed"].port)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(context, store["stranger"].port)


def test_a_bundle_with_a_certificate_the_folder_lacks_is_left_to_the_sdk(store) -> None:
    other = _authority(store["tmp"], "other")[0]
    store["bundle"].write_bytes(store["bundle"].read_bytes() + other.read_bytes())
    assert model_trust(environ={}, paths=_paths(store["bundle"], store["folder"])) is None


def test_ssl_cert_file_is_read_from_a_folder_only_when_it_holds_exactly_the_same(store) -> None:
    environ = {"SSL_CERT_FILE": str(store["bundle"]), "SSL_CERT_DIR": str(store["folder"])}
    context = model_trust(environ=environ, paths=_paths(store["tmp"] / "none.pem", store["tmp"] / "none"))
    assert context is not None
    _handshake(context, store["signed"].port)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(context, store["stranger"].port)

    more = _hashed_folder(store["tmp"] / "more", store["tmp"] / "trusted.pem", store["tmp"] / "stranger.pem")
    assert model_trust(environ={**environ, "SSL_CERT_DIR": str(more)}, paths=_paths(store["bundle"], more)) is None


async def test_a_model_client_refuses_an_https_server_the_system_does_not_trust(store) -> None:
    """The clients' context (`model_trust` here, or the SDK's) still verifies: a self-signed certificate is refused."""
    base_url = f"https://localhost:{store['stranger'].port}/v1"
    config = AgentConfig(model_id="m", client_args={"api_key": "sk-test", "base_url": base_url}, max_retries=0)
    clients = ModelClients(AgentsConfig(response=config))
    await clients.load()
    try:
        with pytest.raises(model_errors()) as failure:
            async for _ in clients.model("response").stream([{"role": "user", "content": [{"text": "hi"}]}]):
                pass
    finally:
        await clients.close()
    causes, error = [], failure.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or error.__context__
    assert any("CERTIFICATE_VERIFY_FAILED" in str(cause) for cause in causes), causes


def test_default_certificates_are_read_from_the_folder_alone_where_it_holds_the_whole_bundle(store) -> None:
    """aiohttp's two contexts, made as it is imported, read the system's certificates so: none is parsed up front."""
    with default_trust_from_folder(environ={}, paths=_paths(store["bundle"], store["folder"])):
        verified = ssl.create_default_context()
        unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        unverified.set_default_verify_paths()
    assert verified.get_ca_certs() == [] and unverified.get_ca_certs() == []
    _handshake(verified, store["signed"].port)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(verified, store["stranger"].port)
    assert "set_default_verify_paths" not in vars(ssl.SSLContext)  # as it was once the block ends


def test_default_certificates_stay_openssls_where_the_folder_lacks_one_of_the_bundle(store, monkeypatch) -> None:
    other = _authority(store["tmp"], "other")[0]
    store["bundle"].write_bytes(store["bundle"].read_bytes() + other.read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(store["bundle"]))
    monkeypatch.setenv("SSL_CERT_DIR", str(store["folder"]))
    with default_trust_from_folder():
        context = ssl.create_default_context()
    assert len(context.get_ca_certs()) == 2  # the bundle, parsed up front as OpenSSL does
    assert "set_default_verify_paths" not in vars(ssl.SSLContext)


def test_default_certificates_read_from_the_folder_trust_the_bundle_too(store) -> None:
    """With SSL_CERT_FILE and SSL_CERT_DIR set, OpenSSL trusts both: the folder alone is enough only if it holds
    the file's certificates; one that holds more (the stranger too) is fine, as OpenSSL trusts the folder anyway."""
    more = _hashed_folder(store["tmp"] / "more", store["tmp"] / "trusted.pem", store["tmp"] / "stranger.pem")
    environ = {"SSL_CERT_FILE": str(store["bundle"]), "SSL_CERT_DIR": str(more)}
    with default_trust_from_folder(environ=environ, paths=_paths(store["tmp"] / "none.pem", store["tmp"] / "none")):
        context = ssl.create_default_context()
    assert context.get_ca_certs() == []
    _handshake(context, store["signed"].port)
