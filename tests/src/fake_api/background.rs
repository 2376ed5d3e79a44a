//! The stand-in API server on a thread of its own, optionally inside a network namespace.

use serde_json::Value;

use super::server::FakeApi;

/// A [`FakeApi`] served from its own thread and runtime (inside a network namespace when
/// `netns` is given, so processes in that namespace reach it on their 127.0.0.1). Stops on drop.
pub struct BackgroundApi {
    /// The server.
    pub api: FakeApi,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundApi {
    /// Starts the server; `netns` names a namespace under /run/netns.
    pub fn start(netns: Option<&str>) -> BackgroundApi {
        BackgroundApi::start_at(netns, std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Starts the server on `bind` (see [`FakeApi::start_at`]), inside `netns` when given.
    pub fn start_at(netns: Option<&str>, bind: std::net::SocketAddr) -> BackgroundApi {
        let path = netns.map(|n| format!("/run/netns/{n}"));
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Some(path) = path {
                let fd = std::fs::File::open(&path).expect("namespace file");
                nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            }
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                tx.send(FakeApi::start_at(bind).await).expect("hand over");
                let _ = stopped.await;
            });
        });
        let api = rx.recv().expect("fake API started");
        BackgroundApi { api, stop: Some(stop), thread: Some(thread) }
    }

    /// Loads every object of a multi-document YAML manifest (no watch events).
    pub fn preload_yaml(&self, text: &str) {
        let docs = text.split("\n---").filter(|d| !d.trim().is_empty());
        let objects = docs.map(|d| serde_saphyr::from_str::<Value>(d).expect("manifest document"));
        self.api.preload(objects);
    }
}

impl Drop for BackgroundApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
