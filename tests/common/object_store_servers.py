"""The servers of corank's object-store tests (tests/cli/store.rs, tests/datafusion/store.rs), all on 127.0.0.1:

- moto's S3 in server mode (no authentication: any key is accepted);
- a second moto S3 that checks credentials (a process of its own: moto's switch is global),
  where every key is unknown;
- a static HTTP server over a temporary directory, answering range requests (Python's own
  http.server ignores the Range header, and object_store reads by ranges).

Prints "s3 PORT", "s3auth PORT", "http PORT" and "root DIR" (the HTTP server's directory),
one a line, then serves until its standard input closes: the test process ended, however it
ended; the directory is removed then.

Needs `moto[server]` (.ci/run installs it).
"""

import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading

# Parts of any size but the last (S3 wants 5 MiB): the tests upload small files in parts.
os.environ.setdefault("S3_UPLOAD_PART_MIN_SIZE", "1024")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def moto(port):
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def range_server(root):
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=root, **kwargs)

        def log_message(self, *args):
            pass

        def end_headers(self):
            self.send_header("Accept-Ranges", "bytes")
            super().end_headers()

        def do_GET(self):
            spec = self.headers.get("Range")
            path = self.translate_path(self.path)
            if not spec or not os.path.isfile(path):
                return super().do_GET()
            size = os.path.getsize(path)
            first, _, last = spec.removeprefix("bytes=").partition("-")
            if first == "":
                start, end = max(0, size - int(last)), size - 1
            else:
                start, end = int(first), min(size - 1, int(last) if last else size - 1)
            if start > end or start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1)
            self.send_response(206)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def main():
    if sys.argv[1:2] == ["--auth"]:
        # Credentials checked from the first request on: every key is unknown here.
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        port = free_port()
        moto(port)
        print(port, flush=True)
        sys.stdin.read()
        return
    root_dir = tempfile.TemporaryDirectory(prefix="corank-http-")
    root = root_dir.name
    auth = subprocess.Popen([sys.executable, __file__, "--auth"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = free_port()
    moto(port)
    http_port = range_server(root)
    auth_port = auth.stdout.readline().strip()
    print(f"s3 {port}\ns3auth {auth_port}\nhttp {http_port}\nroot {root}", flush=True)
    sys.stdin.read()
    auth.stdin.close()
    auth.wait(timeout=10)
    root_dir.cleanup()


if __name__ == "__main__":
    main()
