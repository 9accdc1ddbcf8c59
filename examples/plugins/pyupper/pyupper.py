#!/usr/bin/python3
"""pyupper: a flowrun plugin flowlet in Python, written from proto/flowlet.proto
alone (specs/plugins.md, "A plugin in another language").

It upper-cases each input line and emits it on "out", counts the lines in the
counters "lines" (key "n"), and dead-letters lines that start with "bad" (or
fails the step with a permanent error when the host's context cannot
dead-letter). It serves only the unary calls (no Steps stream: the host falls
back to ProcessBatch) and answers with plain (unpacked) emits. Each emit
carries the key "count": the counter's value after the step's own add, read
back from the host (Host.CounterGet over go-plugin's GRPCBroker, with the add
sent along as a buffered write, so the read sees the step's transaction).

It speaks go-plugin's handshake itself: magic cookie, protocol version 1, a
gRPC server on a Unix socket, and AutoMTLS (the host's certificate is in
PLUGIN_CLIENT_CERT; the plugin makes its own self-signed one, serves TLS with
it, requires the host's, and sends its DER in base64 in the handshake line),
and go-plugin's GRPCBroker stream, on which the host announces the socket of
its Host service (dialed with the same certificates, both ways verified).

Needs Debian's python3-grpcio, python3-protobuf and python3-cryptography.
flowlet_pb2.py is generated: go generate ./examples/plugins/pyupper.
"""

import base64
import datetime
import json
import os
import sys
import tempfile
import threading
import time
from concurrent import futures

MAGIC_KEY, MAGIC_VALUE = "FLOWRUN_PLUGIN", "flowlet-5c1d0a3e"
CORE_PROTOCOL, APP_PROTOCOL = 1, 1


def log(level, msg, **attrs):
    """One JSON line on stderr: the host logs it at its level, tagged."""
    attrs.update({"@level": level, "@message": msg})
    sys.stderr.write(json.dumps(attrs) + "\n")
    sys.stderr.flush()


def fail(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
    sys.exit(1)


# The handshake's checks come first, before the imports that may be missing,
# so that running the script by hand says what it is.
if os.environ.get(MAGIC_KEY) != MAGIC_VALUE:
    fail("This binary is a flowrun plugin. It is not meant to be run directly: "
         "flowrun starts it (plugin: in an app's YAML).")
versions = [v.strip() for v in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "").split(",") if v.strip()]
if versions and str(APP_PROTOCOL) not in versions:
    fail("pyupper speaks protocol version %d; the host offers %s" % (APP_PROTOCOL, ",".join(versions)))
client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "")
if not client_cert:
    fail("PLUGIN_CLIENT_CERT is not set: pyupper needs the host's AutoMTLS")

import grpc  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import flowlet_pb2 as pb  # noqa: E402

SERVICE = "flowrun.flowlet.v1.Flowlet"


def self_signed():
    """A fresh certificate for localhost, as go-plugin's own (mtls.go):
    ECDSA, a CA of itself, for server and client auth."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "flowrun")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=30))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=True, key_cert_sign=True, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.DER)


def conn_info_class():
    """go-plugin's plugin.ConnInfo (internal/plugin/grpc_broker.proto), built
    at run time: service_id, network, address (the knock field is not used)."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="pyupper/grpc_broker.proto", package="plugin", syntax="proto3")
    m = fdp.message_type.add(name="ConnInfo")
    for name, num, typ in (("service_id", 1, f.TYPE_UINT32), ("network", 2, f.TYPE_STRING), ("address", 3, f.TYPE_STRING)):
        m.field.add(name=name, number=num, type=typ, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("plugin.ConnInfo")
    get = getattr(message_factory, "GetMessageClass", None)
    return get(desc) if get else message_factory.MessageFactory(pool).GetPrototype(desc)


ConnInfo = conn_info_class()


class Broker:
    """The plugin's end of go-plugin's GRPCBroker: the host sends, on one
    stream, where it serves each broker id; Host() dials the Host service."""

    def __init__(self, creds):
        self.creds = creds
        self.cond = threading.Condition()
        self.conns = {}
        self.channels = {}

    def start_stream(self, requests, ctx):
        for info in requests:
            with self.cond:
                self.conns[info.service_id] = info
                self.cond.notify_all()
        return
        yield  # a stream that sends nothing

    def host(self, broker_id):
        """Host service stubs (unary callables) for broker_id."""
        with self.cond:
            if broker_id not in self.channels:
                if not self.cond.wait_for(lambda: broker_id in self.conns, timeout=5):
                    raise RuntimeError("no connection info for broker id %d from the host" % broker_id)
                info = self.conns[broker_id]
                if info.network != "unix":
                    raise RuntimeError("host service on %s, not a unix socket" % info.network)
                self.channels[broker_id] = grpc.secure_channel(
                    "unix:" + info.address, self.creds,
                    options=[("grpc.ssl_target_name_override", "localhost"), ("grpc.default_authority", "localhost")])
            ch = self.channels[broker_id]
        return ch.unary_unary("/flowrun.flowlet.v1.Host/CounterGet",
                              request_serializer=pb.CounterGetRequest.SerializeToString,
                              response_deserializer=pb.CounterGetResponse.FromString)


class Flowlet:
    """The flowlet: Describe, Init, ProcessBatch, Close."""

    def __init__(self, broker):
        self.broker = broker

    info = pb.TypeInfo(outputs=["out"], process=True, doc="upper-cases lines (Python)")

    def describe(self, req, ctx):
        return self.info

    def init(self, req, ctx):
        self.name, self.instance = req.name, req.instance
        self.config = json.loads(req.config_json or "{}")
        self.host_id = req.host_broker_id
        log("info", "pyupper ready", instance=req.instance, config=self.config)
        return pb.InitResponse(info=self.info)

    def process_batch(self, req, ctx):
        events = [(e.id, e.payload) for e in req.events]
        p = req.packed
        start = id_start = 0
        for i, end in enumerate(p.payload_ends):
            id_end = p.id_ends[i] if i < len(p.id_ends) else id_start
            events.append((p.ids[id_start:id_end].decode(), p.payloads[start:end]))
            start, id_start = end, id_end
        resp = pb.StepResponse()
        n = 0
        out = []
        for i, (_, payload) in enumerate(events):
            if payload.startswith(b"bad"):
                if req.step.dead_letter_event:
                    resp.dead_letters.add(has_event=True, event=i, reason="bad line")
                elif req.step.dead_letter:
                    resp.dead_letters.add(payload=payload, reason="bad line")
                else:
                    return pb.StepResponse(error=pb.Error(kind=pb.Error.FAILED, message="bad line",
                                                          permanent=True, events=[i]))
                continue
            n += 1
            out.append(payload.upper())
        if n:
            # The add goes with the read (the host applies it first); the
            # step's response then has no writes left to send.
            counter_get = self.broker.host(self.host_id)
            add = pb.StateOp(kind=pb.StateOp.ADD, name="lines", key=b"n", delta=n)
            count = counter_get(pb.CounterGetRequest(call_id=req.step.call_id, writes=[add],
                                                     counters="lines", key=b"n"), timeout=10).count
            for payload in out:
                resp.emits.add(output="out", payload=payload, keys=[pb.KeyValue(name="count", value=str(count))])
        return resp

    def close(self, req, ctx):
        return pb.CloseResponse()


def unary(fn, req_type, resp_type):
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req_type.FromString,
                                               response_serializer=resp_type.SerializeToString)


def remove(sock, sock_dir):
    try:
        os.unlink(sock)
        os.rmdir(sock_dir)
    except OSError:
        pass


def watch_parent(sock, sock_dir):
    """Exit when the host is gone (a host killed with SIGKILL cannot stop us)."""
    parent = os.getppid()
    while True:
        time.sleep(0.25)
        if os.getppid() != parent:
            remove(sock, sock_dir)
            os._exit(0)


def main():
    key_pem, cert_pem, cert_der = self_signed()
    broker = Broker(grpc.ssl_channel_credentials(root_certificates=client_cert.encode(),
                                                 private_key=key_pem, certificate_chain=cert_pem))
    f = Flowlet(broker)
    handlers = grpc.method_handlers_generic_handler(SERVICE, {
        "Describe": unary(f.describe, pb.DescribeRequest, pb.TypeInfo),
        "Init": unary(f.init, pb.InitRequest, pb.InitResponse),
        "ProcessBatch": unary(f.process_batch, pb.BatchRequest, pb.StepResponse),
        "Close": unary(f.close, pb.CloseRequest, pb.CloseResponse),
        # Generate, Tick and Steps are left out: gRPC answers UNIMPLEMENTED.
    })

    def shutdown(req, ctx):
        # go-plugin's GRPCController.Shutdown (the host's graceful stop):
        # answer, then exit.
        def exit_now():
            remove(sock, sock_dir)
            os._exit(0)
        threading.Timer(0.05, exit_now).start()
        return b""

    ident = lambda b: b  # plugin.Empty has no fields: nothing to decode
    controller = grpc.method_handlers_generic_handler("plugin.GRPCController", {
        "Shutdown": grpc.unary_unary_rpc_method_handler(shutdown, request_deserializer=ident,
                                                        response_serializer=ident),
    })
    broker_service = grpc.method_handlers_generic_handler("plugin.GRPCBroker", {
        "StartStream": grpc.stream_stream_rpc_method_handler(broker.start_stream,
                                                             request_deserializer=ConnInfo.FromString,
                                                             response_serializer=ConnInfo.SerializeToString),
    })
    max_msg = 64 << 20
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handlers, controller, broker_service],
                         options=[("grpc.max_receive_message_length", max_msg),
                                  ("grpc.max_send_message_length", max_msg)])
    creds = grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=client_cert.encode(),
                                        require_client_auth=True)
    # A process killed with SIGKILL leaves its socket's directory behind (as
    # a Go plugin's): PLUGIN_UNIX_SOCKET_DIR puts them somewhere else.
    sock_dir = tempfile.mkdtemp(prefix="pyupper-", dir=os.environ.get("PLUGIN_UNIX_SOCKET_DIR") or None)
    sock = os.path.join(sock_dir, "plugin.sock")
    if server.add_secure_port("unix:" + sock, creds) == 0:
        fail("cannot listen on " + sock)
    server.start()
    threading.Thread(target=watch_parent, args=(sock, sock_dir), daemon=True).start()
    cert64 = base64.b64encode(cert_der).decode().rstrip("=")  # RawStdEncoding: no padding
    sys.stdout.write("%d|%d|unix|%s|grpc|%s\n" % (CORE_PROTOCOL, APP_PROTOCOL, sock, cert64))
    sys.stdout.flush()
    try:
        server.wait_for_termination()
    finally:
        remove(sock, sock_dir)


if __name__ == "__main__":
    main()
