//! The object-store servers of the tests, on 127.0.0.1: moto's S3 (and a second one that
//! checks credentials) and a static HTTP server answering range requests, started once per
//! test binary by `tests/common/object_store_servers.py` (`moto[server]`, which .ci/run
//! installs), and requests to them. Every test uses a bucket of its own, so tests run in
//! parallel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The servers' ports, and the directory the HTTP server serves.
pub struct Servers {
    pub s3: u16,
    /// An S3 that checks credentials (every key is unknown to it).
    pub s3_auth: u16,
    pub http: u16,
    pub http_root: PathBuf,
    /// Held open: the servers stop when it closes (this process ended).
    _stdin: Mutex<ChildStdin>,
    /// The servers' process (it ends by itself, see `_stdin`).
    _child: Mutex<Child>,
}

pub fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/object_store_servers.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the test servers (moto[server]: .ci/run installs it)");
        let stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut next = |name: &str| -> String {
            let line =
                lines.next().and_then(|l| l.ok()).unwrap_or_else(|| panic!("the test servers did not start (is moto[server] installed?)"));
            line.strip_prefix(&format!("{name} ")).unwrap_or_else(|| panic!("'{name} ...' expected, got '{line}'")).to_string()
        };
        let (s3, s3_auth, http, root) = (next("s3"), next("s3auth"), next("http"), next("root"));
        Servers {
            s3: s3.parse().unwrap(),
            s3_auth: s3_auth.parse().unwrap(),
            http: http.parse().unwrap(),
            http_root: PathBuf::from(root),
            _stdin: Mutex::new(stdin),
            _child: Mutex::new(child),
        }
    })
}

/// One request to a server on 127.0.0.1: status and body. moto checks no signature, but
/// answers a request without an `Authorization` header as an anonymous one (private
/// objects refused): it gets one, unsigned.
pub fn http(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let auth = "AWS4-HMAC-SHA256 Credential=test/20261207/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0";
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a header");
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let mut body = response[split + 4..].to_vec();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = &rest[eol + 2 + n + 2..];
        }
        body = out;
    }
    (status, body)
}

/// A bucket of the S3 server, made empty.
pub fn bucket(name: &str) -> String {
    let (status, body) = http(servers().s3, "PUT", &format!("/{name}"), b"");
    assert_eq!(status, 200, "creating bucket {name}: {}", String::from_utf8_lossy(&body));
    name.to_string()
}

pub fn put(bucket: &str, key: &str, bytes: &[u8]) {
    let (status, body) = http(servers().s3, "PUT", &format!("/{bucket}/{key}"), bytes);
    assert_eq!(status, 200, "putting {key}: {}", String::from_utf8_lossy(&body));
}

pub fn get(bucket: &str, key: &str) -> Vec<u8> {
    let (status, body) = http(servers().s3, "GET", &format!("/{bucket}/{key}"), b"");
    assert_eq!(status, 200, "getting {key}: {}", String::from_utf8_lossy(&body));
    body
}
