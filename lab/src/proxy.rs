//! Reaching the components' HTTP APIs from the host: a listener on the host's 127.0.0.1 per
//! API, each connection carried into the component's namespace (the socket is opened by a
//! thread that entered it) and copied both ways.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

fn connect_in(ns: &str, target: SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let path = format!("/run/netns/{ns}");
    // A thread of its own: setns changes the calling thread for good.
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path)?;
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)?;
        let s = std::net::TcpStream::connect_timeout(&target, std::time::Duration::from_secs(2))?;
        s.set_nonblocking(true)?;
        Ok(s)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("connect thread panicked")))
}

/// Listens on an ephemeral port of the host's 127.0.0.1 and forwards to `target` inside
/// namespace `ns`; returns the host address. Runs until the runtime stops.
pub async fn forward(ns: String, target: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let ns = ns.clone();
            tokio::spawn(async move {
                let Ok(Ok(out)) = tokio::task::spawn_blocking(move || connect_in(&ns, target)).await else {
                    return;
                };
                let Ok(mut out) = TcpStream::from_std(out) else { return };
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
            });
        }
    });
    Ok(addr)
}
