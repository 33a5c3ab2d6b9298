//! A fault-injecting HTTP proxy in front of the test S3 server (moto), for
//! `store_faults.rs`: it forwards every request, one request a connection, and answers the
//! ones the test's rules pick with a fault instead: a 500 `InternalError`, a 503 `SlowDown`
//! (S3's XML error bodies), a 403 `SignatureDoesNotMatch`, a 404 `NoSuchUpload`, the answer's body cut off
//! halfway (the connection closed mid-body), no answer at all (closed after the request
//! was read), the request held unanswered (a stall), or the server's answer lost
//! (forwarded, answered, then closed). It can also go down (every connection closed as soon as it is accepted, the
//! server gone for the client) and come back. It records every request it saw, with its
//! `Range` and `If-Match` headers and the fault served, so a test can show that the faults
//! were served and what the retries carried.
//!
//! A thread accepts, a thread a connection; the rules live behind a mutex the test holds
//! too. Every answer says `Connection: close`, so the client never reuses a connection the
//! proxy is about to close.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// What the proxy answers instead of the server's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `500 Internal Server Error`, S3's `InternalError` body.
    InternalError,
    /// `503 Slow Down`, S3's `SlowDown` body (throttling).
    SlowDown,
    /// `403 Forbidden`, S3's `SignatureDoesNotMatch` body (credentials refused).
    Forbidden,
    /// `404 Not Found`, S3's `NoSuchUpload` body (the multipart upload is gone).
    NoSuchUpload,
    /// The server's answer, its body cut off halfway: the connection closed mid-body.
    CutMidBody,
    /// The request read, then the connection closed with no answer (a reset).
    NoAnswer,
    /// The request forwarded and answered by the server, then the connection closed
    /// without that answer: the server did the work, the client never hears of it.
    LoseAnswer,
    /// As `NoAnswer`, and the proxy goes down: every later connection is closed at once
    /// until [`FaultProxy::set_down`] brings it back.
    GoDown,
    /// The request read, then no answer for [`STALL`]: a request on its way that the
    /// client must give up (then closed, as `NoAnswer`).
    Stall,
}

/// How long a [`Fault::Stall`] holds its request.
pub const STALL: std::time::Duration = std::time::Duration::from_secs(120);

/// A request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub range: Option<String>,
    pub if_match: Option<String>,
    /// Its `x-amz-content-sha256`: the body's SHA-256 (signed) or `UNSIGNED-PAYLOAD`.
    pub content_sha256: Option<String>,
    /// The fault it was answered with; `None`: forwarded.
    pub fault: Option<Fault>,
    /// The server's status, where it was forwarded and answered.
    pub status: Option<u16>,
}

/// A rule: the first `times` requests that `when` picks get `fault`.
struct Rule {
    when: Box<dyn Fn(&Seen) -> bool + Send>,
    fault: Fault,
    times: usize,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    down_since: Option<Instant>,
}

/// The proxy: listening on 127.0.0.1 while the test process lives.
#[derive(Clone)]
pub struct FaultProxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultProxy {
    /// A proxy in front of the server on 127.0.0.1:`upstream`.
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let state: Arc<Mutex<State>> = Default::default();
        let theirs = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if lock(&theirs).down_since.is_some() {
                    drop(client);
                    continue;
                }
                let state = theirs.clone();
                std::thread::spawn(move || {
                    let _ = serve(client, upstream, &state);
                });
            }
        });
        FaultProxy { port, state }
    }

    /// The endpoint to give corank: `endpoint=http://127.0.0.1:PORT`.
    pub fn endpoint_option(&self) -> String {
        format!("endpoint=http://127.0.0.1:{}", self.port)
    }

    /// Adds a rule: the next `times` requests that `when` picks are answered with `fault`
    /// (the rules are tried in the order added; a rule used up is skipped).
    pub fn fault(&self, times: usize, fault: Fault, when: impl Fn(&Seen) -> bool + Send + 'static) {
        lock(&self.state).rules.push(Rule { when: Box::new(when), fault, times });
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.state).seen.clone()
    }

    /// The requests answered with a fault.
    pub fn faults_served(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.fault.is_some()).collect()
    }

    /// Since when the proxy is down (`None`: up).
    pub fn down_since(&self) -> Option<Instant> {
        lock(&self.state).down_since
    }

    /// Takes the proxy down (every connection closed at once) or brings it back.
    pub fn set_down(&self, down: bool) {
        lock(&self.state).down_since = down.then(Instant::now);
    }
}

/// An HTTP message's head (start line and headers) and body, read off `r`; the body by
/// `Content-Length`, chunks, or (`to_eof`, an answer) to the end.
fn read_message(r: &mut impl BufRead, to_eof: bool, head_only_body: bool) -> std::io::Result<Option<(Vec<String>, Vec<u8>)>> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return if head.is_empty() { Ok(None) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    let header = |name: &str| header_of(&head, name);
    let mut body = Vec::new();
    if head_only_body {
        // A HEAD request's answer: no body, whatever its Content-Length says.
    } else if let Some(n) = header("content-length") {
        body.resize(n.trim().parse().unwrap_or(0), 0);
        r.read_exact(&mut body)?;
    } else if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if to_eof {
        r.read_to_end(&mut body)?;
    }
    Ok(Some((head, body)))
}

fn header_of<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    head.iter().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// S3's error answer.
fn error_answer(status: &str, code: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the test proxy</Message><RequestId>0</RequestId></Error>"
    );
    format!("HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
        .into_bytes()
}

/// Serves one request of `client`.
fn serve(client: TcpStream, upstream: u16, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let Some((head, body)) = read_message(&mut reader, false, false)? else { return Ok(()) };
    let mut words = head[0].split(' ');
    let (method, target) = (words.next().unwrap_or("").to_string(), words.next().unwrap_or("").to_string());
    let mut seen = Seen {
        method: method.clone(),
        target,
        range: header_of(&head, "range").map(str::to_string),
        if_match: header_of(&head, "if-match").map(str::to_string),
        content_sha256: header_of(&head, "x-amz-content-sha256").map(str::to_string),
        fault: None,
        status: None,
    };
    let index;
    {
        let mut s = lock(state);
        if s.down_since.is_some() {
            return Ok(());
        }
        if let Some(rule) = s.rules.iter_mut().find(|r| r.times > 0 && (r.when)(&seen)) {
            rule.times -= 1;
            seen.fault = Some(rule.fault);
        }
        if seen.fault == Some(Fault::GoDown) {
            s.down_since = Some(Instant::now());
        }
        index = s.seen.len();
        s.seen.push(seen.clone());
    }
    match seen.fault {
        Some(Fault::InternalError) => return client.write_all(&error_answer("500 Internal Server Error", "InternalError")),
        Some(Fault::SlowDown) => return client.write_all(&error_answer("503 Slow Down", "SlowDown")),
        Some(Fault::Forbidden) => return client.write_all(&error_answer("403 Forbidden", "SignatureDoesNotMatch")),
        Some(Fault::NoSuchUpload) => return client.write_all(&error_answer("404 Not Found", "NoSuchUpload")),
        Some(Fault::NoAnswer | Fault::GoDown) => return client.shutdown(std::net::Shutdown::Both),
        Some(Fault::Stall) => {
            std::thread::sleep(STALL);
            return client.shutdown(std::net::Shutdown::Both);
        }
        Some(Fault::CutMidBody | Fault::LoseAnswer) | None => {}
    }
    // Forward, one request a connection, and read the whole answer.
    let mut server = TcpStream::connect(("127.0.0.1", upstream))?;
    let mut request = Vec::new();
    for line in head.iter().filter(|l| !l.to_ascii_lowercase().starts_with("connection:")) {
        request.extend_from_slice(line.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    request.extend_from_slice(&body);
    server.write_all(&request)?;
    let mut from_server = BufReader::new(server);
    let Some((answer, answer_body)) = read_message(&mut from_server, true, method == "HEAD")? else { return Ok(()) };
    lock(state).seen[index].status = answer[0].split(' ').nth(1).and_then(|c| c.parse().ok());
    if seen.fault == Some(Fault::LoseAnswer) {
        return client.shutdown(std::net::Shutdown::Both);
    }
    // The answer as it came, but for its framing: the body whole, and the connection closed.
    let mut out = Vec::new();
    out.extend_from_slice(answer[0].as_bytes());
    out.extend_from_slice(b"\r\n");
    for line in answer.iter().skip(1) {
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("connection:") || lower.starts_with("transfer-encoding:") || lower.starts_with("content-length:") {
            continue;
        }
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let length = match (method.as_str(), header_of(&answer, "content-length")) {
        ("HEAD", Some(n)) => n.to_string(),
        _ => answer_body.len().to_string(),
    };
    out.extend_from_slice(format!("Content-Length: {length}\r\nConnection: close\r\n\r\n").as_bytes());
    let keep = match seen.fault {
        Some(Fault::CutMidBody) => answer_body.len() / 2,
        _ => answer_body.len(),
    };
    out.extend_from_slice(&answer_body[..keep]);
    client.write_all(&out)?;
    client.flush()?;
    client.shutdown(std::net::Shutdown::Both)
}
