//! A fault-injecting TCP proxy between one client and a real server (the API server): what a
//! real server cannot be asked to do on cue. `cut` closes every connection open through it (a
//! dropped connection); `hold` makes new connections hang, accepted and never answered, until
//! released (a network that swallows packets). Everything else is the real server's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The proxy; stops with the runtime that started it.
pub struct FaultProxy {
    /// The address to give the client.
    pub addr: SocketAddr,
    cut: watch::Sender<u64>,
    held: watch::Sender<bool>,
    arrived_held: AtomicUsize,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 and forwards each connection to `target`.
    pub async fn start(target: SocketAddr) -> Arc<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port on 127.0.0.1");
        FaultProxy::serve(listener, target)
    }

    /// Forwards each connection `listener` accepts to `target`: a listener opened inside a
    /// network namespace ([`crate::netns::Netns::run`]) carries that namespace's clients to a
    /// server this process reaches (the relay a node's agent reaches the API server through).
    pub fn start_on(listener: std::net::TcpListener, target: SocketAddr) -> Arc<FaultProxy> {
        listener.set_nonblocking(true).expect("a non-blocking listener");
        FaultProxy::serve(TcpListener::from_std(listener).expect("a listener on this runtime"), target)
    }

    fn serve(listener: TcpListener, target: SocketAddr) -> Arc<FaultProxy> {
        let (cut, _) = watch::channel(0);
        let (held, _) = watch::channel(false);
        let addr = listener.local_addr().expect("bound");
        let proxy = Arc::new(FaultProxy { addr, cut, held, arrived_held: AtomicUsize::new(0) });
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if *p.held.borrow() {
                    p.arrived_held.fetch_add(1, Ordering::Relaxed);
                }
                tokio::spawn(carry(inbound, target, p.cut.subscribe(), p.held.subscribe()));
            }
        });
        proxy
    }

    /// Closes every connection open now.
    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Makes new connections hang (`true`) or go through again (`false`, also for the ones held).
    pub fn hold(&self, on: bool) {
        self.held.send_replace(on);
    }

    /// How many connections arrived while new ones were held (the client kept trying).
    pub fn arrived_held(&self) -> usize {
        self.arrived_held.load(Ordering::Relaxed)
    }
}

async fn carry(
    mut inbound: TcpStream,
    target: SocketAddr,
    mut cut: watch::Receiver<u64>,
    mut held: watch::Receiver<bool>,
) {
    cut.borrow_and_update();
    if held.wait_for(|on| !on).await.is_err() {
        return;
    }
    let Ok(mut out) = TcpStream::connect(target).await else { return };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
        _ = cut.changed() => {}
    }
}
