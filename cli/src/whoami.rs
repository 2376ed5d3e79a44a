//! `tideway whoami`: the tiny server the lab and the dataplane tests run in pods. It answers
//! every TCP line and every UDP datagram with its name and the peer it saw, and an HTTP GET the
//! way traefik/whoami does (`Hostname:`, `IP:`, `RemoteAddr:`, the request), so a client can
//! tell which endpoint served it and whether its source was masqueraded. HTTP/1.1 connections
//! stay open for further requests, as traefik/whoami's do.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};

use clap::Args;

/// Serve `NAME PEER` on TCP and UDP.
#[derive(Debug, Args)]
pub(crate) struct WhoamiArgs {
    /// The name to answer with (usually the pod name).
    #[arg(long)]
    name: String,
    /// Address to listen on (TCP and UDP).
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// A file to create once both sockets listen (the lab's readiness signal, as a started
    /// container is kubelet's).
    #[arg(long)]
    ready_file: Option<std::path::PathBuf>,
}

fn reply(name: &str, peer: SocketAddr) -> String {
    format!("{name} {peer}\n")
}

/// The HTTP answer, as traefik/whoami gives it: who answered, its addresses, who asked (after
/// any NAT), and the request as received.
fn http_reply(name: &str, local: Option<SocketAddr>, peer: SocketAddr, request: &str) -> String {
    let mut body = format!("Hostname: {name}\nIP: 127.0.0.1\n");
    if let Some(l) = local {
        body.push_str(&format!("IP: {}\n", l.ip()));
    }
    body.push_str(&format!("RemoteAddr: {peer}\n"));
    for line in request.lines().filter(|l| !l.trim().is_empty()) {
        body.push_str(line.trim_end());
        body.push('\n');
    }
    body
}

/// One HTTP request read off the connection: its text (request line and headers) and whether
/// the client wants the connection kept for another (HTTP/1.1 unless `Connection: close`;
/// HTTP/1.0 only with `Connection: keep-alive`), as traefik/whoami's Go server decides.
struct Request {
    text: String,
    keep_alive: bool,
}

fn read_request(first_line: &str, reader: &mut impl BufRead) -> Request {
    let mut text = first_line.to_string();
    let mut connection = None;
    let mut header = String::new();
    while reader.read_line(&mut header).map(|n| n > 0).unwrap_or(false) && !header.trim().is_empty() {
        if let Some((name, value)) = header.split_once(':')
            && name.trim().eq_ignore_ascii_case("connection")
        {
            connection = Some(value.trim().to_ascii_lowercase());
        }
        text.push_str(&header);
        header.clear();
    }
    let http11 = first_line.trim_end().ends_with("HTTP/1.1");
    let keep_alive = match connection.as_deref() {
        Some("close") => false,
        Some("keep-alive") => true,
        _ => http11,
    };
    Request { text, keep_alive }
}

fn serve_tcp(name: String, stream: TcpStream) {
    let Ok(peer) = stream.peer_addr() else { return };
    let local = stream.local_addr().ok();
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line.starts_with("GET ") {
            // An HTTP client (curl): answer each request on the connection, keeping it open
            // as long as the client asks, so a long-lived flow can be held across changes.
            let req = read_request(&line, &mut reader);
            let body = http_reply(&name, local, peer, &req.text);
            let connection = if req.keep_alive { "keep-alive" } else { "close" };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
                body.len()
            );
            if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(body.as_bytes())).is_err()
                || !req.keep_alive
            {
                return;
            }
        } else if writer.write_all(reply(&name, peer).as_bytes()).is_err() {
            return;
        }
        line.clear();
    }
}

/// Runs until killed.
pub(crate) fn run(args: &WhoamiArgs) -> anyhow::Result<i32> {
    let tcp = TcpListener::bind(args.listen)?;
    let udp = UdpSocket::bind(args.listen)?;
    if let Some(f) = &args.ready_file {
        std::fs::write(f, format!("{}\n", std::process::id()))?;
    }
    let name = args.name.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((_, peer)) = udp.recv_from(&mut buf) {
            let _ = udp.send_to(reply(&name, peer).as_bytes(), peer);
        }
    });
    for stream in tcp.incoming().flatten() {
        let name = args.name.clone();
        std::thread::spawn(move || serve_tcp(name, stream));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Duration;

    use super::*;

    /// A server on loopback answering one connection; returns its address.
    fn serve_once() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((s, _)) = listener.accept() {
                serve_tcp("web".into(), s);
            }
        });
        addr
    }

    /// Reads one response (head and a body of Content-Length bytes).
    fn response(r: &mut BufReader<TcpStream>) -> (String, String) {
        let mut head = String::new();
        let mut line = String::new();
        while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
            head.push_str(&line);
            line.clear();
        }
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|n| n.trim().parse().ok())
            .expect("a Content-Length");
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        (head, String::from_utf8(body).unwrap())
    }

    fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        (s, r)
    }

    #[test]
    fn http11_connections_serve_several_requests() {
        let (mut s, mut r) = connect(serve_once());
        for path in ["/a", "/b", "/c"] {
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let (head, body) = response(&mut r);
            assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
            assert!(head.contains("Connection: keep-alive"), "{head}");
            assert!(body.starts_with("Hostname: web\n"), "{body}");
            assert!(body.contains(&format!("GET {path} HTTP/1.1")), "{body}");
        }
        write!(s, "GET /last HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        let (head, _) = response(&mut r);
        assert!(head.contains("Connection: close"), "{head}");
        let mut rest = String::new();
        assert_eq!(r.read_to_string(&mut rest).unwrap(), 0, "closed after Connection: close");
    }

    #[test]
    fn http10_is_answered_once_and_closed() {
        let (mut s, mut r) = connect(serve_once());
        write!(s, "GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let (head, body) = response(&mut r);
        assert!(head.contains("Connection: close"), "{head}");
        assert!(body.contains("RemoteAddr: 127.0.0.1:"), "{body}");
        let mut rest = String::new();
        assert_eq!(r.read_to_string(&mut rest).unwrap(), 0);
    }

    #[test]
    fn lines_that_are_not_http_get_the_name_and_peer() {
        let (mut s, mut r) = connect(serve_once());
        s.write_all(b"hello\n").unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("web 127.0.0.1:"), "{line}");
    }
}
