//! Loopback HTTP for the tests: free ports to start servers on, and a plain
//! `GET` of what they serve.

/// A port that binds now on 127.0.0.1, below the kernel's ephemeral range,
/// and never handed out before by this test binary.
///
/// A port the kernel hands out for port 0 is in its ephemeral range, where
/// it can hand it out again before the server the test starts binds it: to
/// any other socket's bind to port 0 or outgoing connection (a Collector's
/// export, a Prometheus scrape, another test's client), and the server then
/// exits "address in use". Below the range only an explicit bind can take
/// it (`tests/vllm/ports.py` picks its ports the same way). Kept in a set
/// because one process may take several ports (Jaeger takes six) before it
/// binds any.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let low = ephemeral_low();
    let floor = low.saturating_sub(12_000).max(1024);
    assert!(
        low > floor,
        "no port below the ephemeral range, which starts at {low}"
    );
    loop {
        // A fresh `RandomState` has random keys: a random number from std.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = floor + (random % u64::from(low - floor)) as u16;
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_low() -> u16 {
    const RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
    let range = std::fs::read_to_string(RANGE).unwrap_or_else(|e| panic!("{RANGE}: {e}"));
    range
        .split_whitespace()
        .next()
        .and_then(|low| low.parse().ok())
        .unwrap_or_else(|| panic!("{RANGE}: no first port in {range:?}"))
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
