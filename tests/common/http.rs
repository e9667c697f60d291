//! Loopback HTTP for the tests: free ports to start servers on, and a plain
//! `GET` of what they serve.

/// A port that was free a moment ago on 127.0.0.1, and never handed out
/// before by this test binary: the kernel may give a port back as soon as
/// its listener is dropped, so two calls for one process (Jaeger takes six)
/// could otherwise get the same one, and the second bind fails.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// `GET http://127.0.0.1:{port}{path}`: the body of a 200 answer; `None`
/// when nothing answers or the status is another.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    match get(port, path) {
        Ok((200, body)) => Some(body),
        _ => None,
    }
}

/// `GET http://127.0.0.1:{port}{path}`: the status and body, whatever the
/// status, or why there is no answer.
pub fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect to :{port}: {e}"))?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("read from :{port}: {e}"))?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok((status, dechunk(body)));
    }
    Ok((status, body.to_owned()))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
