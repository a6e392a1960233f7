"""Compile a ``.proto`` into a serialized ``FileDescriptorSet`` with whatever protoc there is.

Standard library only: ``setup.py`` loads this file by path at build time (Note [Where the
Caffe classes come from] in :mod:`ucudnn.caffe.proto`), before ucudnn or its dependencies are
importable. The compilers tried, in order: ``$PROTOC``, ``protoc`` on ``PATH``, the
``grpc_tools`` package (grpcio-tools, a build requirement of the wheel). A descriptor set does
not depend on the compiler's or the runtime's protobuf version.

A descriptor set written for a package goes with :func:`digest_text` of the ``.proto`` it was
compiled from, in a file beside it (:data:`DIGEST_SUFFIX`): the run time uses the shipped
descriptor when the digest matches the ``.proto`` beside it, by content, whatever the files'
modification times say (Note [Where the Caffe classes come from] in ucudnn/caffe/proto.py).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["ProtocError", "find_protoc", "grpc_protoc", "descriptor_set", "digest_text",
           "DIGEST_SUFFIX"]

#: the file beside a descriptor set (``caffe_net.desc.sha256``) that holds the digest of the
#: ``.proto`` it was compiled from
DIGEST_SUFFIX = ".sha256"


def digest_text(proto):
    """``sha256:<hex>`` of the bytes of the ``.proto`` file at ``proto``."""
    with open(os.fspath(proto), "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


class ProtocError(RuntimeError):
    """No protobuf compiler, or it failed on the file."""


def find_protoc():
    """The command line prefix of a protobuf compiler, or None."""
    if os.environ.get("PROTOC"):
        return [os.environ["PROTOC"]]
    exe = shutil.which("protoc")
    if exe:
        return [exe]
    return grpc_protoc()


def grpc_protoc():
    """The command line prefix of grpcio-tools' protoc in this interpreter, or None."""
    try:
        import grpc_tools.protoc  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "grpc_tools.protoc"]


def descriptor_set(proto, cmd=None):
    """The serialized FileDescriptorSet of the .proto file at ``proto`` (bytes), compiled by
    ``cmd`` (a command line prefix; None: :func:`find_protoc`'s)."""
    proto = os.path.abspath(os.fspath(proto))
    cmd = cmd or find_protoc()
    if cmd is None:
        raise ProtocError("no protobuf compiler: install protoc (apt-get install "
                          "protobuf-compiler) or the grpcio-tools package")
    with tempfile.TemporaryDirectory(prefix="ucudnn-protoc-") as tmp:
        out = os.path.join(tmp, "set.desc")
        res = subprocess.run(cmd + [f"--proto_path={os.path.dirname(proto)}",
                                    f"--descriptor_set_out={out}", proto],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if res.returncode != 0 or not os.path.isfile(out):
            raise ProtocError(f"{' '.join(cmd)} failed on {proto}: {res.stdout.strip()}")
        with open(out, "rb") as f:
            return f.read()
