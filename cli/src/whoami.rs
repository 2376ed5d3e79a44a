//! `tideway whoami`: the tiny server the lab and the dataplane tests run in pods. It answers
//! every TCP line and every UDP datagram with its name and the peer it saw, and an HTTP GET the
//! way traefik/whoami does (`Hostname:`, `IP:`, `RemoteAddr:`, the request), so a client can
//! tell which endpoint served it and whether its source was masqueraded.

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

fn serve_tcp(name: String, stream: TcpStream) {
    let Ok(peer) = stream.peer_addr() else { return };
    let local = stream.local_addr().ok();
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line.starts_with("GET ") {
            // An HTTP client (curl): read the headers, answer once, close.
            let mut request = line.clone();
            let mut header = String::new();
            while reader.read_line(&mut header).map(|n| n > 2).unwrap_or(false) {
                request.push_str(&header);
                header.clear();
            }
            let body = http_reply(&name, local, peer, &request);
            let _ = write!(
                writer,
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            return;
        }
        if writer.write_all(reply(&name, peer).as_bytes()).is_err() {
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
