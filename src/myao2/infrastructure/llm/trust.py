"""The certificates the model clients trust: those the SDK's HTTP stack (httpx) trusts, read lazily when that
changes nothing; and OpenSSL's default certificates, read so while aiohttp is imported (`default_trust_from_folder`).

httpx loads a bundle file of certificates (SSL_CERT_FILE, else the system's, beside the system's hashed folder):
every certificate in it (~140) is parsed as a client is made, ~240 M instructions (~0.1 s of CPU) on the way to
the bot's first answer. A hashed folder is read a certificate at a time instead, as a handshake asks for one.
Where a hashed folder holds the same certificates (Debian's update-ca-certificates writes the system's bundle and
folder from one list), `model_trust` gives a context that reads the folder alone and trusts exactly what httpx's
would; otherwise (the bundle has a certificate the folder lacks, or with SSL_CERT_FILE the folder has one the
bundle lacks; a system whose store is not files) it gives None, and the SDK makes its own context as before.
"""

from __future__ import annotations

import os
import platform
import re
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

_PEM = re.compile(rb"-----BEGIN[^-]+-----[^-]+-----END[^-]+-----")
"""A PEM block with its white space taken out (base64 holds no dash)."""
_HASHED = re.compile(r"[0-9a-f]{8}\.\d+")
"""The names OpenSSL looks certificates up by in a folder (subject hash, then a sequence number)."""


def model_trust(
    environ: Mapping[str, str] | None = None, paths: ssl.DefaultVerifyPaths | None = None
) -> ssl.SSLContext | None:
    """A client TLS context trusting what httpx's default one trusts, from a hashed folder alone; None where that
    could differ (see the module). `environ` and `paths` default to the process's and the system's."""
    environ = os.environ if environ is None else environ
    if platform.system() in ("Windows", "Darwin"):  # httpx asks the system's store (truststore)
        return None
    paths = paths or ssl.get_default_verify_paths()
    chosen = environ.get("SSL_CERT_FILE")
    if chosen:  # httpx trusts this file alone
        folder = Path(environ.get("SSL_CERT_DIR") or paths.openssl_capath)
        wanted, held = _blocks_of_file(Path(chosen)), _blocks_of_folder(folder)
        if wanted is None or wanted != held:
            return None
        return ssl.create_default_context(capath=str(folder))
    if environ.get("SSL_CERT_DIR"):  # httpx reads that folder lazily already
        return None
    folder = Path(paths.openssl_capath)
    wanted, held = _blocks_of_file(Path(paths.openssl_cafile)), _blocks_of_folder(folder)
    if wanted is None or held is None or not wanted <= held:  # httpx trusts the bundle and the folder
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
    context.load_verify_locations(capath=str(folder))
    return context


@contextmanager
def default_trust_from_folder(
    environ: Mapping[str, str] | None = None, paths: ssl.DefaultVerifyPaths | None = None
) -> Iterator[None]:
    """While open, a TLS context given OpenSSL's default certificates (`ssl.create_default_context`,
    `SSLContext.set_default_verify_paths`) reads them from OpenSSL's hashed folder alone, where that folder holds
    every certificate of OpenSSL's bundle file: the same trust (the bundle and the folder), read a certificate at a
    time as a handshake asks for one. Elsewhere (or on Windows and macOS) nothing changes.

    aiohttp makes two such contexts as it is imported, ~240 M instructions each for the ~140 certificates of the
    system's bundle; its sessions given no context of their own (Slack's) verify with the first, the second
    verifies nothing. Not for use by two threads at once.
    """
    folder = _default_folder(os.environ if environ is None else environ, paths or ssl.get_default_verify_paths())
    if folder is None:
        yield
        return
    own = vars(ssl.SSLContext).get("set_default_verify_paths")

    def from_folder(context: ssl.SSLContext) -> None:
        context.load_verify_locations(capath=folder)

    ssl.SSLContext.set_default_verify_paths = from_folder  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        if own is None:
            del ssl.SSLContext.set_default_verify_paths
        else:
            ssl.SSLContext.set_default_verify_paths = own  # type: ignore[method-assign]


def _default_folder(environ: Mapping[str, str], paths: ssl.DefaultVerifyPaths) -> str | None:
    """OpenSSL's default hashed folder, if it holds every certificate of OpenSSL's default bundle file (which may
    be missing); else None."""
    if platform.system() in ("Windows", "Darwin") or "SSL_CERT_URI" in environ:
        return None
    chosen, folder = environ.get("SSL_CERT_FILE"), environ.get("SSL_CERT_DIR")
    if chosen == "" or folder == "" or (folder and os.pathsep in folder):  # OpenSSL reads those its own way
        return None
    folder = folder or paths.openssl_capath
    wanted, held = _blocks_of_file(Path(chosen or paths.openssl_cafile)), _blocks_of_folder(Path(folder))
    if held is None or not (wanted or set()) <= held:
        return None
    return folder


def _blocks_of_file(path: Path) -> set[bytes] | None:
    """The PEM blocks (certificates, CRLs) of a file; None if it cannot be read or holds none."""
    try:
        return _blocks(path.read_bytes()) or None
    except OSError:
        return None


def _blocks_of_folder(folder: Path) -> set[bytes] | None:
    """The PEM blocks of a folder's hashed files; None if it cannot be read or holds none."""
    held: set[bytes] = set()
    try:
        for name in os.listdir(folder):
            if _HASHED.fullmatch(name):
                with open(folder / name, "rb", buffering=0) as file:
                    held |= _blocks(file.read())
    except OSError:
        return None
    return held or None


def _blocks(data: bytes) -> set[bytes]:
    return set(_PEM.findall(b"".join(data.split())))
