#!/usr/bin/env python3
"""A small OTLP trace receiver for jetsink's tests.

It serves both OTLP transports on free loopback ports -- HTTP/protobuf (POST /v1/traces)
and gRPC (TraceService/Export) -- decodes every request with the upstream
`opentelemetry-proto` messages, and appends one JSON line per span to --out. When both
listeners are up it prints `listening http=<port> grpc=<port>` on stdout.

It is a real receiver, not a mock of the exporter: what jetsink sends must be valid OTLP
for the upstream decoder to read it.
"""

import argparse
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

LOCK = threading.Lock()


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def record(request, transport, out):
    lines = []
    for rs in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for span in ss.spans:
                lines.append(json.dumps({
                    "transport": transport,
                    "service": resource.get("service.name"),
                    "scope": ss.scope.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": {a.key: value_of(a.value) for a in span.attributes},
                    "links": [{"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()}
                              for l in span.links],
                    "status": {"code": span.status.code, "message": span.status.message},
                }))
    with LOCK:
        out.write("".join(line + "\n" for line in lines))
        out.flush()


def http_handler(out):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            except Exception as e:  # noqa: BLE001 - a bad body is the sender's bug: say so
                self.send_error(400, f"not an ExportTraceServiceRequest: {e}")
                return
            record(request, "http", out)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    return Handler


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out):
        self.out = out

    def Export(self, request, context):
        record(request, "grpc", self.out)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="file the spans are appended to")
    args = parser.parse_args()
    out = open(args.out, "a", encoding="utf-8")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), http_handler(out))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(out), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    print(f"listening http={httpd.server_address[1]} grpc={grpc_port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
